#include "io/train_yaml.hpp"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <optional>
#include <set>

#include "io/catalog.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/hf_config.hpp"
#include "io/yaml_util.hpp"

namespace tpsim {
namespace {

bool one_of(const std::string& key, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (key == k) return true;
  return false;
}

// Resolves ${...} references in place, depth-first, with cycle detection.
class Interpolator {
 public:
  Interpolator(YAML::Node root, std::string origin) : root_(std::move(root)), origin_(std::move(origin)) {}

  void resolve_all() { resolve(root_, ""); }

 private:
  void resolve(YAML::Node node, const std::string& path) {
    if (node.IsMap()) {
      for (auto kv : node) resolve(kv.second, join(path, yaml::key(kv.first, origin_)));
    } else if (node.IsSequence()) {
      for (size_t i = 0; i < node.size(); ++i) resolve(node[i], path + "[" + std::to_string(i) + "]");
    } else if (node.IsScalar()) {
      const std::string v = node.Scalar();
      if (v.find("${") == std::string::npos) return;
      if (!active_.insert(path).second)
        throw Error(yaml::where(origin_, node) + ": circular reference through '" + path + "'");
      node = substitute(node, v);
      active_.erase(path);
    }
  }

  static std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

  // The value of one reference: a dotted key path from the root, or an environment variable.
  YAML::Node lookup(const YAML::Node& at, const std::string& ref) {
    if (ref.rfind("oc.env:", 0) == 0) {
      const std::string spec = ref.substr(7);
      const size_t comma = spec.find(',');
      const std::string var = spec.substr(0, comma);
      if (const char* env = std::getenv(var.c_str())) return YAML::Node(std::string(env));
      if (comma != std::string::npos) return YAML::Node(spec.substr(comma + 1));
      throw Error(yaml::where(origin_, at) + ": ${" + ref + "}: environment variable " + var + " is not set");
    }
    if (ref.find(':') != std::string::npos)
      throw Error(yaml::where(origin_, at) + ": ${" + ref + "}: resolver not supported (only key paths and oc.env)");
    YAML::Node cur = root_;
    std::string walked;
    size_t start = 0;
    while (true) {
      const size_t dot = ref.find('.', start);
      const std::string key = ref.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      walked = join(walked, key);
      if (!cur.IsMap() || !cur[key])
        throw Error(yaml::where(origin_, at) + ": ${" + ref + "}: no key '" + walked + "'");
      cur.reset(cur[key]);  // rebind the handle; `cur = ...` would overwrite the node it points to
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    resolve(cur, ref);  // a reference to a reference
    return cur;
  }

  YAML::Node substitute(YAML::Node node, const std::string& v) {
    // A value that is exactly one reference takes the referenced node (and its type).
    if (v.rfind("${", 0) == 0 && v.find('}') == v.size() - 1 && v.find("${", 2) == std::string::npos) {
      const YAML::Node target = lookup(node, v.substr(2, v.size() - 3));
      if (!target.IsScalar()) return YAML::Clone(target);
      return YAML::Node(target.Scalar());
    }
    std::string out;
    size_t i = 0;
    while (i < v.size()) {
      const size_t open = v.find("${", i);
      if (open == std::string::npos) {
        out += v.substr(i);
        break;
      }
      const size_t close = v.find('}', open);
      if (close == std::string::npos) throw Error(yaml::where(origin_, node) + ": unterminated ${ in '" + v + "'");
      out += v.substr(i, open - i);
      const YAML::Node target = lookup(node, v.substr(open + 2, close - open - 2));
      if (!target.IsScalar()) throw Error(yaml::where(origin_, node) + ": '" + v + "' embeds a non-scalar value");
      out += target.Scalar();
      i = close + 1;
    }
    return YAML::Node(out);
  }

  YAML::Node root_;
  std::string origin_;
  std::set<std::string> active_;
};

using yaml::as_count;

// Composer's FSDP settings (composer/utils/parallelism.py, FSDPConfig) that do not change the cost
// of a step: checkpoint formats, wrapping, prefetch order, logging. Listed as ignored.
const auto kFsdpIrrelevant = {"activation_checkpointing_reentrant",
                              "auto_wrap",
                              "te_checkpoint_wrapper",
                              "backward_prefetch",
                              "backward_prefetch_limit",
                              "forward_prefetch",
                              "forward_prefetch_limit",
                              "ignored_modules",
                              "load_monolith_rank0_only",
                              "load_planner",
                              "process_group",
                              "save_planner",
                              "sharded_ckpt_prefix_dir",
                              "state_dict_type",
                              "sync_module_states",
                              "use_orig_params",
                              "verbose"};
// Every key of FSDPConfig, for the "did you mean" hint.
const auto kFsdpKeys = {"activation_checkpointing",
                        "activation_checkpointing_reentrant",
                        "activation_cpu_offload",
                        "auto_wrap",
                        "te_checkpoint_wrapper",
                        "te_shard_fp8_weight",
                        "backward_prefetch",
                        "backward_prefetch_limit",
                        "cpu_offload",
                        "data_parallel_shard_degree",
                        "data_parallel_replicate_degree",
                        "forward_prefetch",
                        "forward_prefetch_limit",
                        "ignored_modules",
                        "keep_low_precision_grads",
                        "limit_all_gathers",
                        "load_monolith_rank0_only",
                        "load_planner",
                        "mixed_precision",
                        "process_group",
                        "save_planner",
                        "sharded_ckpt_prefix_dir",
                        "sharding_strategy",
                        "state_dict_type",
                        "sync_module_states",
                        "use_orig_params",
                        "verbose"};

// The top-level keys of a training YAML: the fields of llm-foundry's TrainConfig dataclass
// (llmfoundry/utils/config_utils.py; train.py refuses any other key: "Unused parameter ... Please
// place any variables under the `variables` key"), with the fields later releases added
// (only_hf_checkpoint, only_composer_checkpoint, spin_dataloaders, accumulate_train_batch_on_tokens,
// tp_config, parallelism_config). Modelled: model, max_seq_len, global_train_batch_size,
// device_train_microbatch_size, precision, fsdp_config.
// Known and irrelevant to the speed and memory of a training step: data, tokenizer, optimizer
// hyperparameters and schedule, evaluation, logging, callbacks, checkpoints, seeds, the CUDA
// allocator's settings, and the fields llm-foundry derives itself (n_gpus, device_train_batch_size,
// device_train_grad_accum). `algorithms` (in every shipped YAML: gradient_clipping) is listed here.
const auto kTrainIrrelevant = {"variables",
                               "tokenizer",
                               "optimizer",
                               "scheduler",
                               "train_loader",
                               "eval_loader",
                               "eval_loaders",
                               "device_train_batch_size",
                               "device_eval_batch_size",
                               "max_duration",
                               "eval_interval",
                               "seed",
                               "code_paths",
                               "max_split_size_mb",
                               "expandable_segments",
                               "cuda_load_lazy",
                               "dist_timeout",
                               "icl_tasks",
                               "icl_tasks_str",
                               "eval_gauntlet",
                               "eval_gauntlet_str",
                               "icl_subset_num_batches",
                               "icl_seq_len",
                               "loggers",
                               "progress_bar",
                               "log_to_console",
                               "python_log_level",
                               "console_log_interval",
                               "log_config",
                               "callbacks",
                               "algorithms",
                               "save_folder",
                               "save_latest_filename",
                               "save_overwrite",
                               "save_weights_only",
                               "save_filename",
                               "save_interval",
                               "save_num_checkpoints_to_keep",
                               "load_path",
                               "load_weights_only",
                               "load_strict_model_weights",
                               "load_ignore_keys",
                               "save_ignore_keys",
                               "only_hf_checkpoint",
                               "only_composer_checkpoint",
                               "eval_subset_num_batches",
                               "eval_first",
                               "metadata",
                               "run_name",
                               "autoresume",
                               "profiler",
                               "n_gpus",
                               "device_train_grad_accum",
                               "accumulate_train_batch_on_tokens",
                               "spin_dataloaders"};
// Known and changing the speed of a step, not modelled: refused unless null or empty.
const auto kTrainRefused = {"tp_config", "parallelism_config"};
// The keys modelled where the run is resolved (parse_train_yaml).
const auto kTrainModelled = {"model",     "max_seq_len", "global_train_batch_size", "device_train_microbatch_size",
                             "precision", "fsdp_config", "compile_config"};

// Every key llm-foundry's TrainConfig knows: modelled, irrelevant or refused.
bool known_train_key(const std::string& key) {
  return one_of(key, kTrainModelled) || one_of(key, kTrainIrrelevant) || one_of(key, kTrainRefused);
}

std::string nearest_train_key(const std::string& key) {
  std::vector<std::string> known;
  for (auto keys : {kTrainModelled, kTrainIrrelevant, kTrainRefused})
    known.insert(known.end(), keys.begin(), keys.end());
  return yaml::did_you_mean(key, known);
}

}  // namespace

namespace {
TrainYaml parse_train_yaml_unguarded(const std::string& text, const std::string& origin);
}

TrainYaml parse_train_yaml(const std::string& text, const std::string& origin) {
  return yaml::guard(origin, [&] { return parse_train_yaml_unguarded(text, origin); });
}

namespace {

void need_map(const YAML::Node& n, const std::string& origin, const std::string& key) {
  if (!n.IsMap()) throw Error(yaml::where(origin, n) + ": " + key + " must be a map");
}

// llm-foundry's hf_causal_lm keys (llmfoundry/models/hf/hf_base.py, BaseHuggingFaceModel.__init__,
// and hf_causal_lm.py: z_loss, attention_patch_type), and those that do not change a step's cost.
const auto kHfKeys = {"name",
                      "pretrained_model_name_or_path",
                      "config_overrides",
                      "pretrained",
                      "pretrained_lora_id_or_path",
                      "trust_remote_code",
                      "use_auth_token",
                      "use_flash_attention_2",
                      "load_in_8bit",
                      "init_device",
                      "use_logits",
                      "shift_labels",
                      "peft_config",
                      "allow_embedding_resizing",
                      "use_train_metrics",
                      "additional_train_metrics",
                      "additional_eval_metrics",
                      "should_save_peft_only",
                      "z_loss",
                      "attention_patch_type"};
const auto kHfIrrelevant = {"pretrained",
                            "trust_remote_code",
                            "use_auth_token",
                            "init_device",
                            "use_logits",
                            "shift_labels",
                            "allow_embedding_resizing",
                            "use_train_metrics",
                            "additional_train_metrics",
                            "additional_eval_metrics",
                            "should_save_peft_only",
                            "z_loss"};

// A YAML value as the JSON value OmegaConf would hand to the config: plain scalars typed (bool,
// null, whole number, number), quoted ones strings.
nlohmann::json to_json(const YAML::Node& n, const std::string& origin) {
  if (n.IsMap()) {
    nlohmann::json o = nlohmann::json::object();
    for (const auto& kv : n) o[yaml::key(kv.first, origin)] = to_json(kv.second, origin);
    return o;
  }
  if (n.IsSequence()) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& x : n) a.push_back(to_json(x, origin));
    return a;
  }
  if (!n.IsScalar()) return nullptr;
  const std::string v = n.Scalar();
  if (n.Tag() == "!") return v;
  if (v == "true" || v == "True") return true;
  if (v == "false" || v == "False") return false;
  if (v == "null" || v == "~" || v == "None") return nullptr;
  const char* end = v.c_str() + v.size();
  char* stop = nullptr;
  errno = 0;
  const long long i = std::strtoll(v.c_str(), &stop, 10);
  if (!v.empty() && stop == end && errno == 0) return static_cast<int64_t>(i);
  const double d = std::strtod(v.c_str(), &stop);
  if (!v.empty() && stop == end && std::isfinite(d)) return d;
  return v;
}

// Hugging Face PEFT's LoraConfig keys (peft/tuners/lora/config.py) as llm-foundry passes
// model.peft_config to it (hf_causal_lm.py _get_peft_config: peft_type LORA and task_type CAUSAL_LM
// only): those tpsim models, those that change nothing a step costs, and the rest refused by name.
const auto kPeftKeys = {"peft_type",
                        "task_type",
                        "r",
                        "lora_alpha",
                        "lora_dropout",
                        "target_modules",
                        "bias",
                        "fan_in_fan_out",
                        "init_lora_weights",
                        "use_rslora",
                        "use_dora",
                        "modules_to_save",
                        "layers_to_transform",
                        "layers_pattern",
                        "rank_pattern",
                        "alpha_pattern",
                        "inference_mode",
                        "base_model_name_or_path",
                        "revision",
                        "exclude_modules",
                        "lora_bias",
                        "layer_replication",
                        "target_parameters",
                        "loftq_config",
                        "megatron_config",
                        "megatron_core",
                        "eva_config",
                        "corda_config",
                        "runtime_config",
                        "auto_mapping"};
// Initialisation, the adapters' scale and bookkeeping: no effect on a step's cost.
const auto kPeftIrrelevant = {
    "fan_in_fan_out", "init_lora_weights", "use_rslora", "inference_mode", "base_model_name_or_path",
    "revision",       "loftq_config",      "eva_config", "corda_config",   "runtime_config",
    "auto_mapping"};

// model.peft_config (LoRA only). target_modules is a list of module names (or PEFT's "all-linear");
// a string other than all-linear is a regular expression PEFT matches against full module names,
// which tpsim does not evaluate: refused. `fused_qkv_model`: the model's Q, K and V are one linear
// (MPT's and DBRX's Wqkv, GPT-NeoX's query_key_value), which PEFT's all-linear adapts as one.
Lora read_peft_config(const YAML::Node& peft, const std::string& origin, bool fused_qkv_model, TrainYaml& t) {
  need_map(peft, origin, "model.peft_config");
  Lora l;
  l.rank = 8;  // LoraConfig's defaults
  l.alpha = 8;
  bool targets = false;
  std::set<std::string> seen;
  for (const auto& kv : peft) {
    const std::string key = yaml::key(kv.first, origin);
    const YAML::Node& v = kv.second;
    const std::string label = "model.peft_config." + key;
    if (!seen.insert(key).second) throw Error(yaml::where(origin, v) + ": model.peft_config: duplicate key " + key);
    const auto refuse = [&](const std::string& what) {
      throw Error(yaml::where(origin, v) + ": " + label + ": " + what + " -- tpsim cannot model it yet");
    };
    if (key == "peft_type") {
      const std::string type = yaml::as_string(v, origin, label);
      std::string upper;
      for (char c : type) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (upper != "LORA")
        throw Error(yaml::where(origin, v) + ": " + label + ": " + type +
                    " -- llm-foundry takes only LORA (hf_causal_lm.py _get_peft_config)");
    } else if (key == "task_type") {
      const std::string type = yaml::as_string(v, origin, label);
      std::string upper;
      for (char c : type) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      if (upper != "CAUSAL_LM")
        throw Error(yaml::where(origin, v) + ": " + label + ": " + type +
                    " -- llm-foundry takes only CAUSAL_LM (hf_causal_lm.py _get_peft_config)");
    } else if (key == "r") {
      l.rank = yaml::as_count(v, origin, label, kMaxLoraRank);
    } else if (key == "lora_alpha") {
      l.alpha = yaml::as_double(v, origin, label);
      if (!(l.alpha > 0 && l.alpha < 1e9))
        throw Error(yaml::where(origin, v) + ": " + label + ": not a positive number");
    } else if (key == "lora_dropout") {
      const double p = yaml::as_double(v, origin, label);
      if (!(p >= 0 && p < 1)) throw Error(yaml::where(origin, v) + ": " + label + ": not a probability in [0, 1)");
      l.dropout_per_mille = std::llround(1000.0 * p);
    } else if (key == "target_modules") {
      std::string names;
      if (v.IsSequence()) {
        for (const auto& x : v) names += (names.empty() ? "" : ",") + yaml::as_string(x, origin, label);
      } else {
        names = yaml::as_string(v, origin, label);
        if (names != "all-linear")
          refuse("'" + names + "' is a regular expression PEFT matches against module names; give a list of names");
      }
      if (const std::string why = parse_lora_targets(names, l); !why.empty())
        throw Error(yaml::where(origin, v) + ": " + label + ": " + why);
      if (names == "all-linear" && fused_qkv_model) l.fused_qkv = true;
      targets = true;
    } else if (key == "bias") {
      if (yaml::as_string(v, origin, label) != "none") refuse("biases trained beside the adapters");
    } else if (key == "use_dora") {
      if (yaml::as_bool(v, origin, label)) refuse("true (DoRA: a weight-decomposed adapter)");
    } else if (key == "lora_bias") {
      if (yaml::as_bool(v, origin, label)) refuse("true (a bias on each adapter's B)");
    } else if (one_of(key, {"modules_to_save", "layers_to_transform", "layers_pattern", "exclude_modules",
                            "layer_replication", "target_parameters", "megatron_config", "megatron_core"})) {
      if (!v.IsNull() && !(v.IsSequence() && v.size() == 0) && !(key == "megatron_core" && v.IsScalar()))
        refuse("modules trained or adapted beyond target_modules");
    } else if (one_of(key, {"rank_pattern", "alpha_pattern"})) {
      if (!v.IsNull() && !(v.IsMap() && v.size() == 0)) refuse("a rank or alpha per module");
    } else if (one_of(key, kPeftIrrelevant)) {
      t.ignored.push_back(label);
    } else {
      throw Error(yaml::where(origin, kv.first) + ": model.peft_config: unknown key '" + key + "'" +
                  yaml::did_you_mean(key, kPeftKeys) + " (Hugging Face PEFT's LoraConfig)");
    }
  }
  if (!targets)
    throw Error(yaml::where(origin, peft) +
                ": model.peft_config: no target_modules -- PEFT then picks them by model type; name them "
                "(q_proj, v_proj, ..., or all-linear)");
  return l;
}

// model: {name: hf_causal_lm, pretrained_model_name_or_path: X, config_overrides: {...}, ...}: the
// model is X's config.json (resolve_pretrained_config: a local folder, the Hugging Face cache, the
// shipped configs; never the network) with the overrides applied as llm-foundry applies them.
void read_hf_causal_lm(const YAML::Node& model, const std::string& origin, TrainYaml& t) {
  std::optional<std::string> name;
  std::vector<HfOverride> overrides;
  std::set<std::string> seen;
  std::optional<YAML::Node> peft;
  for (const auto& kv : model) {
    const std::string key = yaml::key(kv.first, origin);
    const YAML::Node& v = kv.second;
    const std::string label = "model." + key;
    if (!seen.insert(key).second) throw Error(yaml::where(origin, v) + ": model: duplicate key " + key);
    if (key == "name") continue;
    if (key == "pretrained_model_name_or_path") name = yaml::as_string(v, origin, label);
    else if (key == "config_overrides") {
      if (v.IsNull()) continue;
      need_map(v, origin, label);
      for (const auto& o : v)
        overrides.push_back({yaml::key(o.first, origin), to_json(o.second, origin), yaml::where(origin, o.first)});
    } else if (key == "use_flash_attention_2") {
      t.notes.push_back(label + ": " + (yaml::as_bool(v, origin, label) ? "true" : "false") +
                        " -- tpsim costs attention as the profile's causal flash attention either way");
    } else if (key == "attention_patch_type") {
      if (!v.IsNull())
        t.notes.push_back(label + ": " + yaml::as_string(v, origin, label) +
                          " -- attention is costed as the profile's causal flash attention");
    } else if (key == "load_in_8bit") {
      if (yaml::as_bool(v, origin, label))
        throw Error(yaml::where(origin, v) + ": " + label + ": true -- 8-bit weights: tpsim cannot model them yet");
    } else if (key == "peft_config") {
      if (!v.IsNull()) peft.emplace(v);
    } else if (key == "pretrained_lora_id_or_path") {
      if (!v.IsNull())
        throw Error(yaml::where(origin, v) + ": " + label +
                    " -- a trained LoRA adapter whose rank and targets are in its own adapter_config.json, which "
                    "tpsim does not read; give them as model.peft_config or --lora-rank/--lora-targets");
    } else if (one_of(key, kHfIrrelevant)) t.ignored.push_back(label);
    else
      throw Error(yaml::where(origin, kv.first) + ": model: unknown key '" + key + "'" +
                  yaml::did_you_mean(key, kHfKeys) + " (llm-foundry's hf_causal_lm)");
  }
  if (!name)
    throw Error(yaml::where(origin, model) +
                ": model: hf_causal_lm is missing the required key pretrained_model_name_or_path");
  std::filesystem::path config;
  try {
    config = resolve_pretrained_config(*name);
  } catch (const Error& e) {
    throw Error(yaml::where(origin, model["pretrained_model_name_or_path"]) + ": model." + e.what());
  }
  const HfConfig h = read_hf_config_file(config, overrides);
  t.model = h.model;
  t.model.name = std::filesystem::path(origin).stem().string();
  if (h.max_seq_len) t.seq_len = h.max_seq_len;
  t.notes.push_back("model.pretrained_model_name_or_path: " + *name + " -- the config.json read is " + config.string());
  for (const auto& k : h.ignored) t.ignored.push_back("config." + k);
  for (const auto& n : h.notes) t.notes.push_back("model: " + n);
  if (peft) {
    const bool fused_qkv = h.model_type == "mpt" || h.model_type == "dbrx" || h.model_type == "gpt_neox";
    t.lora = read_peft_config(*peft, origin, fused_qkv, t);
    t.notes.push_back("model.peft_config: fine-tuned with LoRA rank " + std::to_string(t.lora.rank) + " on " +
                      lora_targets_name(t.lora) + ", every base weight frozen");
  }
}

// The model block, read strictly as a --models entry is (read_model_block); the model is named
// after the file, and a note says how its attn_impl is costed (flash and triton: causal flash
// attention; torch: PyTorch's unfused attention, ModelConfig::torch_attention). Returns the
// refusal of an activation_checkpointing_target other than whole blocks, for the run to raise if
// it checkpoints.
std::optional<std::string> read_mpt_causal_lm(const YAML::Node& model, const std::string& origin, TrainYaml& t) {
  ModelBlock b = read_model_block(model, origin, "model", '.');
  t.model = b.model;
  t.model.name = std::filesystem::path(origin).stem().string();
  if (b.max_seq_len) t.seq_len = b.max_seq_len;
  t.ignored.insert(t.ignored.end(), b.ignored.begin(), b.ignored.end());
  if (b.attn_impl) t.notes.push_back("model.attn_config.attn_impl: " + *b.attn_impl + attn_impl_costing(b));
  for (const auto& n : b.notes) t.notes.push_back("model: " + n.text);
  return b.checkpointing_target_refusal;
}

// The model block by its name, as llm-foundry's models registry builds it: mpt_causal_lm (also when
// no name is written) and hf_causal_lm are decoder-only transformers; hf_t5 is an encoder-decoder.
std::optional<std::string> read_model(const YAML::Node& model, const std::string& origin, TrainYaml& t) {
  const YAML::Node name = model.IsMap() ? model["name"] : YAML::Node();
  const std::string kind = name && name.IsScalar() ? name.Scalar() : "mpt_causal_lm";
  if (kind == "hf_causal_lm") {
    read_hf_causal_lm(model, origin, t);
    return std::nullopt;
  }
  if (kind == "hf_t5")
    throw Error(yaml::where(origin, name) +
                ": model.name: hf_t5 -- an encoder-decoder model (T5): tpsim models "
                "decoder-only transformers (mpt_causal_lm, hf_causal_lm)");
  return read_mpt_causal_lm(model, origin, t);
}

// A degree of Composer's HSDP device mesh (composer/core/state.py _create_device_mesh): -1 (the rest
// of the GPUs) or a GPU count; null is Composer's default (shard -1, replicate None) and leaves it
// unset. Whether the degrees multiply to the GPU count is checked once the GPU count is known.
void read_mesh_degree(const YAML::Node& v, const std::string& origin, const std::string& label,
                      std::optional<int64_t>& out) {
  if (v.IsNull()) return;
  const int64_t d = yaml::as_int(v, origin, label);
  if (d != -1 && (d < 1 || d > kMaxGpus))
    throw Error(yaml::where(origin, v) + ": " + label + ": " + v.Scalar() + " is not -1 (the rest of the GPUs) or 1.." +
                std::to_string(kMaxGpus));
  out = d;
}

// fsdp_config: sharding strategy, mixed precision, activation checkpointing and HSDP's mesh degrees;
// the settings the costs assume (limit_all_gathers on, no offload) noted or refused when written
// otherwise; the others listed as ignored, and a key Composer does not know an error.
void read_fsdp_config(const YAML::Node& v, const std::string& origin, TrainYaml& t) {
  need_map(v, origin, "fsdp_config");
  for (const auto& f : v) {
    const std::string fk = yaml::key(f.first, origin);
    const YAML::Node& fv = f.second;
    const std::string label = "fsdp_config." + fk;
    if (fk == "sharding_strategy") {
      const std::string s = yaml::as_string(fv, origin, label);
      const auto parsed = parse_sharding(s);
      if (!parsed)
        throw Error(yaml::where(origin, fv) + ": " + label + " '" + s +
                    "' is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD");
      t.sharding = *parsed;
    } else if (fk == "mixed_precision" && fv.IsMap()) {
      TrainYaml::MixedPrecisionMap m{.where = yaml::where(origin, fv)};
      for (const auto& d : fv) {
        const std::string dk = yaml::key(d.first, origin);
        std::string* dtype = dk == "param_dtype"    ? &m.param
                             : dk == "reduce_dtype" ? &m.reduce
                             : dk == "buffer_dtype" ? &m.buffer
                                                    : nullptr;
        if (!dtype)
          throw Error(yaml::where(origin, d.first) + ": unknown key '" + label + "." + dk +
                      "' (Composer reads param_dtype, reduce_dtype and buffer_dtype)");
        if (!d.second.IsNull()) *dtype = yaml::as_string(d.second, origin, label + "." + dk);
      }
      t.mixed_precision_map = m;
    } else if (fk == "mixed_precision") {
      const std::string s = yaml::as_string(fv, origin, label);
      const auto parsed = parse_mp_mode(s);
      if (!parsed)
        throw Error(yaml::where(origin, fv) + ": " + label + " '" + s + "' is not one of DEFAULT, PURE, FULL");
      t.mp_mode = *parsed;
    } else if (fk == "activation_checkpointing") {
      t.checkpointing = yaml::as_bool(fv, origin, label) ? Checkpointing::kFull : Checkpointing::kNone;
    } else if (fk == "limit_all_gathers") {
      if (!yaml::as_bool(fv, origin, label)) t.notes.push_back(label + ": false -- costed with limit_all_gathers on");
    } else if (fk == "activation_cpu_offload" || fk == "cpu_offload" || fk == "keep_low_precision_grads" ||
               fk == "te_shard_fp8_weight") {
      if (yaml::as_bool(fv, origin, label))
        throw Error(yaml::where(origin, fv) + ": " + label + ": true is not modelled");
    } else if (fk == "data_parallel_shard_degree" || fk == "data_parallel_replicate_degree") {
      read_mesh_degree(fv, origin, label, fk == "data_parallel_shard_degree" ? t.shard_degree : t.replicate_degree);
    } else if (one_of(fk, kFsdpIrrelevant)) {
      t.ignored.push_back(label);
    } else {
      throw Error(yaml::where(origin, f.first) + ": unknown key '" + label + "'" + yaml::did_you_mean(fk, kFsdpKeys) +
                  " (Composer's FSDPConfig)");
    }
  }
}

// Every top-level key is one of TrainConfig's, as llm-foundry's train.py requires; those that change
// the speed of a step and are not modelled are refused unless null or empty.
void check_top_level_keys(const YAML::Node& root, const std::string& origin) {
  for (const auto& kv : root) {
    const std::string key = yaml::key(kv.first, origin);
    if (!known_train_key(key))
      throw Error(
          yaml::where(origin, kv.first) + ": unknown top-level key '" + key + "'" + nearest_train_key(key) +
          ": llm-foundry's train.py refuses keys outside its TrainConfig (values of your own go under variables)");
    const YAML::Node& v = kv.second;
    const bool empty = (v.IsMap() || v.IsSequence()) && v.size() == 0;
    if (!one_of(key, kTrainRefused) || v.IsNull() || empty) continue;
    const std::string what = key == "tp_config" ? "tensor parallelism"
                                                : "parallelism settings beyond fsdp_config (tensor parallelism, or "
                                                  "FSDP written there)";
    throw Error(yaml::where(origin, v) + ": " + key + " -- " + what + ": tpsim cannot model it yet");
  }
}

// compile_config: Composer's Trainer compiles the model whenever it is not None (an empty map is
// torch.compile with its defaults; composer/trainer/trainer.py passes the map to torch.compile).
// What it models is Inductor's fusions with the default mode; a mode or backend that changes the
// kernels otherwise (CUDA graphs under reduce-overhead, autotuned GEMM templates under
// max-autotune) is refused by name; dynamic and fullgraph do not change the kernels of a
// fixed-shape step.
void read_compile_config(const YAML::Node& v, const std::string& origin, TrainYaml& t) {
  if (v.IsNull()) return;
  if (!v.IsMap()) throw Error(yaml::where(origin, v) + ": compile_config must be a map of torch.compile's arguments");
  for (const auto& kv : v) {
    const std::string key = yaml::key(kv.first, origin);
    const std::string label = "compile_config." + key;
    if (key == "dynamic" || key == "fullgraph") continue;
    const bool modelled = (key == "mode" && yaml::as_string(kv.second, origin, label) == "default") ||
                          (key == "backend" && yaml::as_string(kv.second, origin, label) == "inductor");
    if (key == "mode" || key == "backend") {
      if (!modelled)
        throw Error(yaml::where(origin, kv.second) + ": " + label + " '" + yaml::as_string(kv.second, origin, label) +
                    "' -- tpsim models torch.compile's default mode with Inductor only");
      continue;
    }
    throw Error(yaml::where(origin, kv.first) + ": " + label +
                " -- not modelled (tpsim models torch.compile's mode, backend, dynamic and fullgraph)");
  }
  t.torch_compile = true;
}

// The top-level keys after the model block (a top-level max_seq_len overrides model.max_seq_len).
void read_run_keys(const YAML::Node& root, const std::string& origin, TrainYaml& t) {
  for (const auto& kv : root) {
    const std::string key = yaml::key(kv.first, origin);
    const YAML::Node& v = kv.second;
    if (key == "compile_config") read_compile_config(v, origin, t);
    else if (key == "max_seq_len") t.seq_len = as_count(v, origin, key, kMaxSeqLen);
    else if (key == "global_train_batch_size") t.global_batch = as_count(v, origin, key, kMaxBatch);
    else if (key == "device_train_microbatch_size") {
      if (v.IsScalar() && v.Scalar() == "auto") t.micro_batch_auto = true;
      else t.micro_batch = as_count(v, origin, key, kMaxBatch);
    } else if (key == "precision") {
      const std::string p = yaml::as_string(v, origin, key);
      const auto parsed = parse_precision(p);
      if (!parsed)
        throw Error(yaml::where(origin, v) + ": precision '" + p +
                    "' is not one of amp_bf16, amp_fp16, amp_fp8, bf16, fp32");
      t.precision = *parsed;
    } else if (key == "fsdp_config") {
      if (!v.IsNull()) read_fsdp_config(v, origin, t);
    } else if (one_of(key, kTrainIrrelevant)) {
      t.ignored.push_back(key);
    }
  }
}

// A dtype as Composer's _get_torch_dtype reads it (composer/distributed/mosaic_parallelism.py):
// "fp32", "bf16" or "fp16"; fp8 names are bf16 there (PyTorch has no fp8 dtype for FSDP); "" (not
// given) keeps the parameters' fp32. Empty optional: a name Composer refuses.
std::optional<std::string> composer_dtype(const std::string& name) {
  if (name.empty() || one_of(name, {"float32", "torch.float32", "fp32"})) return "fp32";
  if (one_of(name, {"float16", "torch.float16", "half", "fp16", "amp", "amp_fp16"})) return "fp16";
  if (one_of(name,
             {"bfloat16", "bfloat", "torch.bfloat16", "bf16", "amp_bf16", "float8", "torch.float8", "fp8", "amp_fp8"}))
    return "bf16";
  return std::nullopt;
}

// fsdp_config.mixed_precision as a map, once the precision is known: the FSDP mixed precision it
// equals, by Composer's own three (get_mixed_precision: FULL casts nothing, DEFAULT casts the
// parameters to the precision's dtype and reduces in fp32, PURE casts both), or an error naming the
// pair tpsim does not model. buffer_dtype casts buffers only (no parameters, no gradients): not
// costed, listed as ignored.
void resolve_mixed_precision_map(TrainYaml& t) {
  if (!t.mixed_precision_map) return;
  const TrainYaml::MixedPrecisionMap& m = *t.mixed_precision_map;
  const std::string label = "fsdp_config.mixed_precision";
  std::string dtypes[2];
  for (int i = 0; i < 2; ++i) {
    const std::string& written = i == 0 ? m.param : m.reduce;
    const std::optional<std::string> d = composer_dtype(written);
    if (!d)
      throw Error(m.where + ": " + label + (i == 0 ? ".param_dtype" : ".reduce_dtype") + " '" + written +
                  "' is not a dtype Composer reads (fp32, bf16, fp16 and their torch names)");
    dtypes[i] = *d;
  }
  if (!m.buffer.empty() && !composer_dtype(m.buffer))
    throw Error(m.where + ": " + label + ".buffer_dtype '" + m.buffer +
                "' is not a dtype Composer reads (fp32, bf16, fp16 and their torch names)");
  const Precision precision = t.precision.value_or(Precision::kAmpBf16);  // TrainConfig's default
  // The YAML's precisions (amp_bf16, amp_fp16, amp_fp8, bf16, fp32) are all names Composer reads.
  const std::string compute = composer_dtype(std::string(to_string(precision))).value_or("bf16");
  const std::string& param = dtypes[0];
  const std::string& reduce = dtypes[1];
  if (param == "fp32" && reduce == "fp32") t.mp_mode = MpMode::kFull;
  else if (param == compute && reduce == "fp32") t.mp_mode = MpMode::kDefault;
  else if (param == compute && reduce == compute) t.mp_mode = MpMode::kPure;
  else
    throw Error(m.where + ": " + label + ": param_dtype " + param + " with reduce_dtype " + reduce + " under " +
                std::string(to_string(precision)) +
                " is none of Composer's FULL (fp32, fp32), DEFAULT (the precision's, fp32) or PURE (the precision's, "
                "the precision's): tpsim cannot model it yet");
  t.notes.push_back(label + ": read as " + std::string(to_string(*t.mp_mode)) + " (param_dtype " + param +
                    ", reduce_dtype " + reduce + ")");
  if (!m.buffer.empty()) t.ignored.push_back(label + ".buffer_dtype");
}

// model.activation_checkpointing_target beside fsdp_config.activation_checkpointing: whole blocks are
// full checkpointing; another target is an error unless the run does not checkpoint at all
// (activation_checkpointing: false), where llm-foundry never reads it.
void check_checkpointing_target(const std::optional<std::string>& refusal, TrainYaml& t) {
  if (!refusal) return;
  if (t.checkpointing != Checkpointing::kNone) throw Error(*refusal);
  t.ignored.push_back("model.activation_checkpointing_target");
}

TrainYaml parse_train_yaml_unguarded(const std::string& text, const std::string& origin) {
  YAML::Node root = yaml::parse(text, origin);
  if (!root.IsMap()) throw Error(origin + ": a training YAML must be a map (llm-foundry's train.yaml)");
  Interpolator(root, origin).resolve_all();
  TrainYaml t;
  t.origin = origin;
  const YAML::Node model = root["model"];
  if (!model) throw Error(origin + ": missing the model: block");
  const std::optional<std::string> target_refusal = read_model(model, origin, t);
  read_run_keys(root, origin, t);
  check_top_level_keys(root, origin);
  resolve_mixed_precision_map(t);
  // TrainConfig's default for device_train_microbatch_size is "auto".
  if (!t.micro_batch && !t.micro_batch_auto) {
    t.micro_batch_auto = true;
    t.notes.push_back("device_train_microbatch_size not written: auto, llm-foundry's default");
  }
  // Without one, llm-foundry's train.py hands the Trainer no FSDP config, and Composer's Trainer wraps
  // the model in DistributedDataParallel ("if not self.state.fsdp_enabled and dist.get_world_size() > 1:
  // ... prepare_ddp_module", composer/trainer/trainer.py).
  t.has_fsdp_config = root["fsdp_config"] && !root["fsdp_config"].IsNull();
  check_checkpointing_target(target_refusal, t);
  for (auto& k : t.ignored) k = one_line(k);
  return t;
}

}  // namespace

TrainYaml read_train_yaml(const std::filesystem::path& path) {
  return parse_train_yaml(read_text_file(path, "training YAML"), path.string());
}

}  // namespace tpsim
