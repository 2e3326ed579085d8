#include "io/catalog.hpp"

#include <algorithm>
#include <cctype>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>

#include "io/error.hpp"
#include "io/names.hpp"
#include "io/files.hpp"
#include "io/hf_config.hpp"
#include "io/yaml_util.hpp"
#include "model/training.hpp"

namespace tpsim {
namespace {

// The keys llm-foundry knows in each part of a model block, for the membership tests and the
// "did you mean" hint. Sources: MPTConfig.__init__ and its docstring (configuration_mpt.py), its
// defaults (llmfoundry/models/utils/config_defaults.py), and the keys MPTConfig deletes (name, loss_fn).
const auto kTopKeys = {"name",
                       "d_model",
                       "n_heads",
                       "n_layers",
                       "head_dim",
                       "expansion_ratio",
                       "max_seq_len",
                       "vocab_size",
                       "resid_pdrop",
                       "emb_pdrop",
                       "learned_pos_emb",
                       "attn_config",
                       "ffn_config",
                       "init_device",
                       "logit_scale",
                       "no_bias",
                       "attention_bias",
                       "embedding_fraction",
                       "norm_type",
                       "norm_eps",
                       "use_cache",
                       "init_config",
                       "fc_type",
                       "tie_word_embeddings",
                       "use_pad_tok_in_ffn",
                       "block_overrides",
                       "final_logit_softcapping",
                       "loss_fn",
                       "activation_checkpointing_target"};
const auto kAttnKeys = {"attn_type",
                        "attn_pdrop",
                        "attn_impl",
                        "qk_ln",
                        "qk_gn",
                        "fused_qkv",
                        "clip_qkv",
                        "softmax_scale",
                        "attn_uses_sequence_id",
                        "sliding_window_size",
                        "attn_logit_softcapping",
                        "alibi",
                        "alibi_bias_max",
                        "rope",
                        "nope",
                        "rope_theta",
                        "rope_impl",
                        "rope_dail_config",
                        "rope_hf_config",
                        "attn_temperature_tuning",
                        "kv_n_heads",
                        "kv_dim",
                        "prefix_lm",
                        "reuse_kv_layer_idx",
                        "seq_parallel_world_size"};
// ffn_config: MPTMLP's and MPTGLU's arguments, and MegaBlocks' (llm-foundry's ffns_with_megablocks).
const auto kFfnKeys = {"ffn_type",
                       "ffn_act_fn",
                       "ffn_hidden_size",
                       "expansion_ratio",
                       "fc_type",
                       "bias",
                       "moe_num_experts",
                       "moe_top_k",
                       "moe_world_size",
                       "moe_loss_weight",
                       "moe_lbl_in_fp32",
                       "moe_jitter_eps",
                       "moe_normalize_expert_weights",
                       "moe_capacity_factor",
                       "moe_weight_parallelism",
                       "moe_expert_model_parallelism",
                       "memory_optimized_mlp",
                       "mlp_impl",
                       "mlp_type",
                       "uniform_expert_assignment",
                       "shared_expert"};
const auto kInitKeys = {"name",
                        "fan_mode",
                        "init_nonlinearity",
                        "init_div_is_residual",
                        "emb_init_std",
                        "emb_init_uniform_lim",
                        "init_std",
                        "init_gain",
                        "verbose"};
// Known keys that do not change the cost of a step: dropout, initialisation, logit scaling,
// numerics and attention options that are elementwise or free (clip_qkv, softmax_scale, ALiBi's
// slope bound, RoPE's base and implementation).
const auto kTopIrrelevant = {"resid_pdrop", "emb_pdrop", "logit_scale",        "embedding_fraction",
                             "norm_eps",    "use_cache", "use_pad_tok_in_ffn", "final_logit_softcapping",
                             "loss_fn"};
const auto kAttnIrrelevant = {"attn_pdrop",
                              "fused_qkv",
                              "clip_qkv",
                              "softmax_scale",
                              "alibi_bias_max",
                              "rope_theta",
                              "rope_impl",
                              "rope_dail_config",
                              "rope_hf_config",
                              "attn_logit_softcapping",
                              "attn_temperature_tuning"};
// The ffn_config keys MPTMLP and MPTGLU take; the others of kFfnKeys only a mixture of experts takes
// (MegaBlocks' Arguments, llm-foundry's build_torch_dmoe), and MPTMLP and MPTGLU refuse them as
// unexpected arguments.
const auto kDenseFfnKeys = {"ffn_type", "ffn_act_fn", "ffn_hidden_size", "expansion_ratio", "fc_type", "bias"};
// Of those, the ones that do not change the cost tpsim models: the load-balancing loss and its
// precision, router jitter, the normalisation of the expert weights, a debugging switch that deals
// tokens out evenly, and the kernel choices (grouped or block-sparse GEMMs, MegaBlocks'
// memory-optimised MLP); the expert GEMMs are costed as grouped GEMMs whichever runs them.
const auto kMoeIrrelevant = {
    "moe_loss_weight",           "moe_lbl_in_fp32", "moe_jitter_eps",      "moe_normalize_expert_weights",
    "uniform_expert_assignment", "mlp_impl",        "memory_optimized_mlp"};
// llm-foundry's build_torch_dmoe (llmfoundry/models/layers/ffn.py) pops these without a default and
// refuses any other MoE key ("Invalid arguments to torch dmoe").
const auto kTorchDmoeKeys = {
    "moe_num_experts",          "moe_top_k", "mlp_type", "moe_jitter_eps", "moe_normalize_expert_weights",
    "uniform_expert_assignment"};
// The attention classes of llm-foundry's attention_classes registry (attention.py).
const auto kAttnTypes = {"multihead_attention", "multiquery_attention", "grouped_query_attention"};
// llm-foundry's norms registry (llmfoundry/models/layers/norm.py): torch's LayerNorm and RMSNorm, the
// low-precision variants that run them in the autocast dtype, and flash-attn's Triton RMSNorm.
const auto kLayerNorms = {"layernorm", "low_precision_layernorm"};
const auto kRmsNorms = {"rmsnorm", "low_precision_rmsnorm", "triton_rmsnorm"};
const auto kFfnTypes = {"mptmlp", "mptglu", "te_ln_mlp", "mb_moe", "mb_dmoe", "torch_dmoe"};

bool one_of(const std::string& key, std::initializer_list<const char*> keys) {
  return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; });
}

bool moe_key(const std::string& key) { return one_of(key, kFfnKeys) && !one_of(key, kDenseFfnKeys); }

std::string shown(const YAML::Node& v) {
  if (v.IsScalar()) return v.Scalar();
  return v.IsMap() ? "a map" : v.IsSequence() ? "a list" : "null";
}

// A value as YAML flow text ("[mptmlp, grouped_query_attention]", "{MPTBlock: first-4}"), for errors
// that must name a list or map whole.
std::string flow(const YAML::Node& v) {
  YAML::Emitter e;
  e.SetMapFormat(YAML::Flow);
  e.SetSeqFormat(YAML::Flow);
  e << v;
  return one_line(e.c_str());
}

// Reads one block: every key first (unknown keys refused as they come), then the settings that
// relate keys to one another (attention, norms and biases, feed-forward), then the architecture.
class BlockReader {
 public:
  BlockReader(const std::string& origin, std::string owner, char separator)
      : origin_(origin), owner_(std::move(owner)), separator_(separator) {}

  ModelBlock read(const YAML::Node& block) {
    if (!block.IsMap())
      throw Error(yaml::where(origin_, block) + ": " + owner_ + " must be a map of llm-foundry model keys");
    out_.model.vocab_size = 50368;  // MPT's default vocabulary (the GPT-NeoX-20B tokenizer, padded)
    std::set<std::string> seen;
    for (const auto& kv : block) {
      const std::string key = yaml::key(kv.first, origin_);
      if (!seen.insert(key).second)
        throw Error(yaml::where(origin_, kv.second) + ": " + owner_ + ": duplicate key " + key);
      read_top(kv.first, key, kv.second);
    }
    for (const char* required : {"d_model", "n_heads", "n_layers"})
      if (!seen.count(required))
        throw Error(yaml::where(origin_, block) + ": " + owner_ + " is missing the required key " + required);
    const ModelConfig& m = out_.model;
    // MPTConfig._validate_config: "d_model must be divisible by n_heads", whatever head_dim says.
    if (m.head_dim > 0 && m.n_heads > 0 && m.d_model % m.n_heads != 0)
      throw Error(yaml::where(origin_, block) + ": " + owner_ + ": n_heads (" + std::to_string(m.n_heads) +
                  ") does not divide d_model (" + std::to_string(m.d_model) +
                  "), which llm-foundry requires also with head_dim");
    resolve_attention(block);
    resolve_norm_and_biases();
    resolve_ffn(block);
    if (std::string why = check_architecture(out_.model); !why.empty())
      throw Error(yaml::where(origin_, block) + ": " + owner_ + ": " + why);
    return out_;
  }

 private:
  using Section = std::map<std::string, YAML::Node>;

  std::string label(const std::string& path) const { return owner_ + separator_ + path; }
  std::string at(const YAML::Node& v) const { return yaml::where(origin_, v); }

  // A setting tpsim cannot model: the key, its value and what it means.
  [[noreturn]] void refuse(const YAML::Node& v, const std::string& path, const std::string& what) const {
    throw Error(one_line(at(v) + ": " + label(path) + ": " + shown(v) + " -- " + what + ": tpsim cannot model it yet"));
  }
  // A setting llm-foundry itself refuses: the key, its value and llm-foundry's reason.
  [[noreturn]] void invalid(const YAML::Node& v, const std::string& path, const std::string& why) const {
    throw Error(one_line(at(v) + ": " + label(path) + ": " + shown(v) + " -- " + why));
  }

  [[noreturn]] void unknown(const YAML::Node& k, const std::string& path, const std::string& key,
                            std::initializer_list<const char*> known) const {
    throw Error(one_line(at(k) + ": " + owner_ + ": unknown key '" + path + "'" + yaml::did_you_mean(key, known)));
  }

  // A key modelled only at its default (a false flag, a null or -1 setting): other values are refused.
  void expect_default(const YAML::Node& v, const std::string& path, const std::string& what) const {
    if (v.IsNull()) return;
    const std::string s = v.IsScalar() ? v.Scalar() : "";
    if (s == "false" || s == "False" || s == "-1") return;
    refuse(v, path, what);
  }

  // A key of attn_config or ffn_config as written; absent or null: llm-foundry's default.
  static std::optional<YAML::Node> get(const Section& s, const std::string& key) {
    const auto it = s.find(key);
    if (it == s.end() || it->second.IsNull()) return std::nullopt;
    return it->second;
  }
  bool flag(const Section& s, const std::string& section, const std::string& key) const {
    const auto v = get(s, key);
    return v && yaml::as_bool(*v, origin_, label(section + "." + key));
  }
  std::optional<int64_t> count(const Section& s, const std::string& section, const std::string& key) const {
    const auto v = get(s, key);
    if (!v) return std::nullopt;
    const int64_t n = yaml::as_int(*v, origin_, label(section + "." + key));
    if (n <= 0) throw Error(at(*v) + ": " + label(section + "." + key) + " must be positive");
    return n;
  }

  void read_top(const YAML::Node& k, const std::string& key, const YAML::Node& v);
  void read_section(const YAML::Node& v, const std::string& section, Section& into,
                    std::initializer_list<const char*> known, std::initializer_list<const char*> irrelevant);
  void read_checkpointing_target(const YAML::Node& v, const std::string& key);
  void resolve_attention(const YAML::Node& block);
  void resolve_norm_and_biases();
  void resolve_ffn(const YAML::Node& block);
  void resolve_moe(const std::string& type, const YAML::Node& where, std::optional<int64_t> hidden, bool bias);
  Activation read_activation(const YAML::Node& v) const;

  const std::string& origin_;
  std::string owner_;
  char separator_;
  ModelBlock out_;
  Section attn_, ffn_;
  bool learned_pos_emb_ = true, no_bias_ = false;
  std::optional<bool> attention_bias_;
  std::optional<YAML::Node> norm_type_;
};

void BlockReader::read_section(const YAML::Node& v, const std::string& section, Section& into,
                               std::initializer_list<const char*> known,
                               std::initializer_list<const char*> irrelevant) {
  if (v.IsNull()) return;  // llm-foundry takes the defaults
  if (!v.IsMap()) throw Error(at(v) + ": " + label(section) + " must be a map");
  for (const auto& kv : v) {
    const std::string key = yaml::key(kv.first, origin_);
    if (into.count(key)) throw Error(at(kv.second) + ": " + owner_ + ": duplicate key " + section + "." + key);
    if (!one_of(key, known)) unknown(kv.first, section + "." + key, key, known);
    if (one_of(key, irrelevant)) out_.ignored.push_back(label(section + "." + key));
    into.emplace(key, kv.second);
  }
}

void BlockReader::read_top(const YAML::Node& k, const std::string& key, const YAML::Node& v) {
  ModelConfig& m = out_.model;
  const std::string l = label(key);
  if (key == "d_model") m.d_model = yaml::as_int(v, origin_, l);
  else if (key == "n_heads") m.n_heads = yaml::as_int(v, origin_, l);
  else if (key == "n_layers") m.n_layers = yaml::as_int(v, origin_, l);
  else if (key == "expansion_ratio") m.expansion_ratio = yaml::as_double(v, origin_, l);
  else if (key == "vocab_size") m.vocab_size = yaml::as_int(v, origin_, l);
  else if (key == "learned_pos_emb") learned_pos_emb_ = yaml::as_bool(v, origin_, l);
  else if (key == "no_bias") no_bias_ = yaml::as_bool(v, origin_, l);
  else if (key == "attention_bias") {
    if (!v.IsNull()) attention_bias_ = yaml::as_bool(v, origin_, l);
  } else if (key == "head_dim") {
    if (!v.IsNull() && (m.head_dim = yaml::as_int(v, origin_, l)) <= 0)
      throw Error(at(v) + ": " + l + " must be positive");
  } else if (key == "max_seq_len") out_.max_seq_len = yaml::as_count(v, origin_, l, kMaxSeqLen);
  else if (key == "attn_config") read_section(v, key, attn_, kAttnKeys, kAttnIrrelevant);
  else if (key == "ffn_config") read_section(v, key, ffn_, kFfnKeys, {});
  else if (key == "init_config") {
    Section init;  // initialisation does not change a step's cost: every key listed as ignored
    read_section(v, key, init, kInitKeys, kInitKeys);
  } else if (key == "name") {
    if (yaml::as_string(v, origin_, l) != "mpt_causal_lm")
      refuse(v, key, "a model other than llm-foundry's mpt_causal_lm");
  } else if (key == "init_device") {
    yaml::as_string(v, origin_, l);  // where the weights are first made; accepted without a note, as before
  } else if (key == "tie_word_embeddings") m.tie_embeddings = yaml::as_bool(v, origin_, l);
  else if (key == "norm_type") norm_type_ = v;
  else if (key == "fc_type") {
    // torch.nn.Linear or TransformerEngine's te.Linear: the same matrices and biases.
    const YAML::Node name = v.IsMap() ? v["name"] : v;
    const std::string n = name ? yaml::as_string(name, origin_, l + ".name") : "";
    if (n != "torch" && n != "te") refuse(v, key, "linear layers other than torch's and TransformerEngine's");
  } else if (key == "block_overrides") {
    if (!v.IsNull()) refuse(v, key, "per-layer overrides of the attention");
  } else if (key == "activation_checkpointing_target") read_checkpointing_target(v, key);
  else if (one_of(key, kTopIrrelevant)) out_.ignored.push_back(l);
  else if (one_of(key, kAttnKeys) || one_of(key, kFfnKeys))
    out_.notes.push_back({at(v), "'" + key + "' belongs in " + (one_of(key, kAttnKeys) ? "attn_config" : "ffn_config") +
                                     "; at the top of the model block llm-foundry keeps it unread, and so does tpsim"});
  else unknown(k, key, key, kTopKeys);
}

// llm-foundry's activation_checkpointing_target (llmfoundry/models/utils/act_ckpt.py,
// build_act_ckpt_mod_to_blocks): null or [] checkpoints every MPTBlock; a name, or a list of names,
// checkpoints those modules in every block (MPTBlock, an attention class, norm_attn_norm, an ffn_type,
// a norm); a map from names to block indices or ranges ("first-4", "range-2-6") checkpoints them in
// the chosen blocks only. tpsim models whole blocks (full) and the attention core (selective), which
// no target names: the rest is kept as the error of a run that checkpoints.
void BlockReader::read_checkpointing_target(const YAML::Node& v, const std::string& key) {
  const auto is_block = [](const YAML::Node& n) { return n.IsScalar() && to_lower(n.Scalar()) == "mptblock"; };
  if (v.IsNull() || is_block(v)) return;
  std::string name;
  if (v.IsSequence()) {
    for (const auto& e : v)
      if (!is_block(e)) {
        name = e.IsScalar() ? e.Scalar() : flow(e);
        break;
      }
    if (name.empty()) return;  // [] or [MPTBlock]: whole blocks
  } else if (v.IsScalar()) {
    name = v.Scalar();
  }
  std::string nearest;
  if (v.IsMap())
    nearest =
        "llm-foundry checkpoints the modules it names in the chosen blocks only; tpsim checkpoints every block or none";
  else if (one_of(name, kAttnTypes))
    nearest = name +
              " checkpoints the whole attention module, its Q, K, V and out projections with the core; "
              "selective recomputes only the core";
  else if (name == "norm_attn_norm")
    nearest = "norm_attn_norm checkpoints the two norms and the attention module; full checkpoints the block";
  else if (one_of(name, kFfnTypes)) nearest = name + " checkpoints the feed-forward alone";
  else if (one_of(name, kLayerNorms) || one_of(name, kRmsNorms)) nearest = name + " checkpoints the norms alone";
  else
    nearest =
        name +
        " is not a module llm-foundry checkpoints (MPTBlock, an attention class, norm_attn_norm, an ffn_type or a norm)";
  out_.checkpointing_target_refusal = one_line(at(v) + ": " + label(key) + ": " + flow(v) +
                                               " -- tpsim models checkpointing of whole blocks (full) or of the "
                                               "attention core (selective); checkpointing " +
                                               flow(v) + " is neither (" + nearest + ")");
}

// Positions, the attention's heads and window, and the attention settings modelled only at their
// defaults.
void BlockReader::resolve_attention(const YAML::Node& block) {
  ModelConfig& m = out_.model;
  const std::string s = "attn_config";
  if (const auto nope = get(attn_, "nope"); nope && flag(attn_, s, "nope"))
    invalid(
        *nope, s + ".nope",
        "llm-foundry refuses nope as the default position encoding (MPTConfig: only a block_overrides override may use it)");
  const bool alibi = flag(attn_, s, "alibi"), rope = flag(attn_, s, "rope");
  if (alibi && rope)
    invalid(*get(attn_, "rope"), s + ".rope",
            "ALiBi and RoPE together: llm-foundry's MPT takes one of them, and refuses both");
  // llm-foundry: "alibi or rope is turned on, setting `learned_pos_emb` to `False`" (MPTConfig.__init__);
  // with none of the three the model has no positional information (a warning there).
  m.positions = alibi              ? PositionKind::kAlibi
                : rope             ? PositionKind::kRope
                : learned_pos_emb_ ? PositionKind::kLearned
                                   : PositionKind::kNone;

  const auto type_node = get(attn_, "attn_type");
  const std::string type =
      type_node ? yaml::as_string(*type_node, origin_, label(s + ".attn_type")) : "multihead_attention";
  const auto kv_node = get(attn_, "kv_n_heads");
  const std::optional<int64_t> kv = count(attn_, s, "kv_n_heads");
  if (type == "grouped_query_attention") {
    if (!kv)
      throw Error(at(type_node ? *type_node : block) + ": " + label(s) +
                  ": grouped_query_attention needs kv_n_heads (llm-foundry's GroupedQueryAttention has no default)");
    m.n_kv_heads = *kv;
  } else if (type == "multiquery_attention") {
    if (kv && *kv != 1)
      invalid(*kv_node, s + ".kv_n_heads",
              "multiquery_attention has one K and V head; grouped_query_attention takes kv_n_heads");
    m.n_kv_heads = 1;
  } else if (type == "multihead_attention") {
    if (kv && *kv != m.n_heads)
      invalid(*kv_node, s + ".kv_n_heads",
              "multihead_attention has as many K and V heads as query heads; grouped_query_attention takes kv_n_heads");
  } else {
    refuse(
        *type_node, s + ".attn_type",
        "an attention llm-foundry does not register (multihead_attention, multiquery_attention, grouped_query_attention)");
  }
  if (const auto w = get(attn_, "sliding_window_size")) {
    const int64_t window = yaml::as_int(*w, origin_, label(s + ".sliding_window_size"));
    if (window == 0 || window < -1)
      throw Error(at(*w) + ": " + label(s + ".sliding_window_size") + " must be -1 (no window) or positive");
    if (window > 0) m.sliding_window = window;
  }
  if (const auto impl = get(attn_, "attn_impl")) {
    out_.attn_impl = yaml::as_string(*impl, origin_, label(s + ".attn_impl"));
    // flash and triton are fused kernels, costed as causal flash attention; torch materialises the
    // scores (ModelConfig::torch_attention), and its dropout (attn_pdrop) runs as its own kernel.
    if (*out_.attn_impl == "torch") {
      m.unfused_attention = true;
      m.torch_attention = true;
      if (const auto p = get(attn_, "attn_pdrop")) {
        m.attention_dropout = yaml::as_double(*p, origin_, label(s + ".attn_pdrop"));
        if (!(m.attention_dropout >= 0 && m.attention_dropout < 1))
          throw Error(at(*p) + ": " + label(s + ".attn_pdrop") + " must be in [0, 1)");
        std::erase(out_.ignored, label(s + ".attn_pdrop"));  // modelled here, not ignored
      }
    } else if (*out_.attn_impl != "flash" && *out_.attn_impl != "triton") {
      invalid(*impl, s + ".attn_impl", "llm-foundry's MPT attention implementations are flash, triton and torch");
    }
  }
  const std::pair<const char*, const char*> at_default[] = {
      {"prefix_lm", "prefix-LM (partly bidirectional) attention"},
      {"qk_ln", "normalised queries and keys"},
      {"qk_gn", "normalised queries and keys"},
      {"kv_dim", "cross-attention"},
      {"attn_uses_sequence_id", "attention restricted to each packed sequence"},
      {"reuse_kv_layer_idx", "K and V shared across layers"}};
  for (const auto& [key, what] : at_default)
    if (const auto v = get(attn_, key)) expect_default(*v, s + "." + key, what);
  if (const auto sp = get(attn_, "seq_parallel_world_size"))
    if (yaml::as_int(*sp, origin_, label(s + ".seq_parallel_world_size")) != 1)
      refuse(*sp, s + ".seq_parallel_world_size", "sequence parallelism");
}

// norm_type, no_bias and attention_bias. MPTModel removes every bias when no_bias is set, the
// LayerNorms' included; attention_bias "takes precedence over the no_bias flag" for the Q, K and V
// projections alone (MPTConfig's docstring), and defaults to not no_bias.
void BlockReader::resolve_norm_and_biases() {
  ModelConfig& m = out_.model;
  if (norm_type_) {
    const std::string n = yaml::as_string(*norm_type_, origin_, label("norm_type"));
    if (one_of(n, kRmsNorms)) m.norm = NormKind::kRmsNorm;
    else if (!one_of(n, kLayerNorms))
      refuse(*norm_type_, "norm_type",
             "a norm llm-foundry does not register (layernorm, low_precision_layernorm, rmsnorm, "
             "low_precision_rmsnorm, triton_rmsnorm)");
  }
  m.norm_bias = m.linear_bias = !no_bias_;
  m.qkv_bias = attention_bias_.value_or(!no_bias_);
}

// torch.nn.functional's GELU (either approximation), SiLU and ReLU, as llm-foundry's
// resolve_ffn_act_fn binds them: {name: gelu, approximate: tanh}.
Activation BlockReader::read_activation(const YAML::Node& v) const {
  const std::string path = "ffn_config.ffn_act_fn";
  if (!v.IsMap() || !v["name"])
    throw Error(at(v) + ": " + label(path) + " must be a map with a name (a torch.nn.functional activation)");
  const std::string name = yaml::as_string(v["name"], origin_, label(path + ".name"));
  for (const auto& kv : v) {
    const std::string key = yaml::key(kv.first, origin_);
    if (key == "name") continue;
    if (key == "approximate" && name == "gelu") {
      const std::string a = yaml::as_string(kv.second, origin_, label(path + ".approximate"));
      if (a != "none" && a != "tanh")
        invalid(kv.second, path + ".approximate", "torch's gelu takes approximate none or tanh");
    } else if (key == "inplace") {
      yaml::as_bool(kv.second, origin_, label(path + ".inplace"));
    } else {
      invalid(kv.second, path + "." + key, "an argument torch.nn.functional." + name + " does not take");
    }
  }
  if (name == "gelu") return Activation::kGelu;
  if (name == "silu") return Activation::kSilu;
  if (name == "relu") return Activation::kRelu;
  refuse(v["name"], path + ".name", "an activation other than GELU, SiLU and ReLU");
}

// ffn_config: the dense feed-forward (llm-foundry's build_mptmlp, build_mptglu, TransformerEngine's
// LayerNormMLP) or a mixture of experts (resolve_moe). Its width is ffn_hidden_size when given, else
// expansion_ratio * d_model (resolve_ffn_hidden_size); ffn_config.expansion_ratio wins over the
// top-level one, as the later of the merged arguments. Its biases: ffn_config.bias, else not no_bias
// (layer_builders.build_ffn), and none at all under no_bias.
void BlockReader::resolve_ffn(const YAML::Node& block) {
  ModelConfig& m = out_.model;
  const std::string s = "ffn_config";
  const auto type_node = get(ffn_, "ffn_type");
  const std::string type = type_node ? yaml::as_string(*type_node, origin_, label(s + ".ffn_type")) : "mptmlp";
  if (type == "mptgeglu")
    invalid(*type_node, s + ".ffn_type",
            "llm-foundry renamed it mptglu (with ffn_act_fn {name: gelu}) and refuses the old name");
  if (!one_of(type, kFfnTypes))
    refuse(*type_node, s + ".ffn_type",
           "a feed-forward llm-foundry does not register (mptmlp, mptglu, te_ln_mlp, mb_moe, mb_dmoe, torch_dmoe)");
  if (const auto r = get(ffn_, "expansion_ratio"))
    m.expansion_ratio = yaml::as_double(*r, origin_, label(s + ".expansion_ratio"));
  const std::optional<int64_t> hidden = count(ffn_, s, "ffn_hidden_size");
  if (const auto act = get(ffn_, "ffn_act_fn")) {
    if (type == "te_ln_mlp")
      invalid(*act, s + ".ffn_act_fn",
              "llm-foundry refuses custom activations for te_ln_mlp (TransformerEngine's LayerNormMLP)");
    m.activation = read_activation(*act);
  }
  if (ffn_.count("fc_type"))
    out_.ignored.push_back(label(s + ".fc_type"));  // MPTConfig replaces it with the model's fc_type
  const auto bias_node = get(ffn_, "bias");
  const bool bias_written = bias_node && yaml::as_bool(*bias_node, origin_, label(s + ".bias"));
  const bool bias = !no_bias_ && (!bias_node || bias_written);
  if (one_of(type, {"mb_moe", "mb_dmoe", "torch_dmoe"}))
    return resolve_moe(type, type_node ? *type_node : block, hidden, bias);
  for (const auto& [key, v] : ffn_)
    if (moe_key(key))
      invalid(v, s + "." + key, "a mixture-of-experts setting beside ffn_type " + type + ", which takes no " + key);
  m.ffn = type == "mptglu" ? FfnKind::kGlu : FfnKind::kMlp;
  if (hidden) m.ffn_hidden = *hidden;
  if (type == "te_ln_mlp") {
    // MPTConfig sets its bias from no_bias; its own LayerNorm keeps a bias that no_bias does not reach.
    if (bias_node) out_.ignored.push_back(label(s + ".bias"));
    if (no_bias_ || m.norm != NormKind::kLayerNorm)
      refuse(*type_node, s + ".ffn_type",
             "TransformerEngine's LayerNormMLP beside no_bias or an RMSNorm (its own LayerNorm keeps its bias)");
  } else if (bias_node && !bias && !no_bias_) {
    refuse(*bias_node, s + ".bias", "a feed-forward without biases in a model whose other linears keep theirs");
  }
}

// A mixture of experts in every block: MegaBlocks' MoE (mb_moe: capacity factor, tokens beyond it
// dropped) and dMoE (mb_dmoe: dropless), and llm-foundry's own dropless torch_dmoe (dmoe.py). A
// router (d_model x experts, no bias), experts of ffn_hidden_size (or expansion_ratio * d_model)
// as MLPs or GLUs (mlp_type), and one d_model bias after them unless no_bias or bias: false.
// Defaults: MegaBlocks' Arguments (megablocks/layers/arguments.py: one expert, top-1, an MLP, capacity
// factor 1, GELU) and llm-foundry's moe_world_size of 1 (config_utils).
void BlockReader::resolve_moe(const std::string& type, const YAML::Node& where, std::optional<int64_t> hidden,
                              bool bias) {
  ModelConfig& m = out_.model;
  MoeConfig& e = m.moe;
  const std::string s = "ffn_config";
  if (type == "torch_dmoe") {
    for (const char* key : kTorchDmoeKeys)
      if (!ffn_.count(key))
        throw Error(at(where) + ": " + label(s) + ": torch_dmoe needs " + key +
                    " (llm-foundry's build_torch_dmoe has no default for it)");
    for (const auto& [key, v] : ffn_)
      if (moe_key(key) && !one_of(key, kTorchDmoeKeys))
        invalid(v, s + "." + key,
                "llm-foundry's build_torch_dmoe takes no " + key + " (\"Invalid arguments to torch dmoe\")");
  }
  e.experts = count(ffn_, s, "moe_num_experts").value_or(1);
  e.top_k = count(ffn_, s, "moe_top_k").value_or(1);
  e.d_expert = hidden.value_or(m.d_ffn());
  e.output_bias = bias;
  if (const auto t = get(ffn_, "mlp_type")) {
    const std::string mlp = yaml::as_string(*t, origin_, label(s + ".mlp_type"));
    if (mlp != "mlp" && mlp != "glu") invalid(*t, s + ".mlp_type", "experts are an mlp or a glu");
    if (mlp == "glu") m.ffn = FfnKind::kGlu;
  }
  if (const auto c = get(ffn_, "moe_capacity_factor")) {
    const double factor = yaml::as_double(*c, origin_, label(s + ".moe_capacity_factor"));
    if (type == "mb_moe") e.capacity_factor = factor;
    else out_.ignored.push_back(label(s + ".moe_capacity_factor"));  // dropless: no capacity
  } else if (type == "mb_moe") {
    e.capacity_factor = 1.0;
  }
  if (const auto w = get(ffn_, "moe_world_size")) {
    const int64_t n = yaml::as_int(*w, origin_, label(s + ".moe_world_size"));
    if (n != 1)
      throw Error(one_line(at(*w) + ": " + label(s + ".moe_world_size") + ": " + w->Scalar() +
                           " -- tpsim cannot model expert "
                           "parallelism yet (experts spread over " +
                           w->Scalar() + " GPUs); with moe_world_size: 1 every GPU holds every expert"));
  }
  if (const auto p = get(ffn_, "moe_expert_model_parallelism"); p && flag(ffn_, s, "moe_expert_model_parallelism"))
    throw Error(at(*p) + ": " + label(s + ".moe_expert_model_parallelism") +
                ": true -- tpsim cannot model expert parallelism yet");
  if (const auto p = get(ffn_, "moe_weight_parallelism"); p && flag(ffn_, s, "moe_weight_parallelism"))
    refuse(*p, s + ".moe_weight_parallelism", "MegaBlocks' weight parallelism (expert weights sharded within a node)");
  if (const auto x = get(ffn_, "shared_expert"); x && flag(ffn_, s, "shared_expert"))
    refuse(*x, s + ".shared_expert",
           "MegaBlocks' shared expert (an MLP of its own width and biases beside the routed experts)");
  for (const auto& [key, v] : ffn_)
    if (one_of(key, kMoeIrrelevant)) out_.ignored.push_back(label(s + "." + key));
}

}  // namespace

std::string attn_impl_costing(const ModelBlock& b) {
  if (!b.attn_impl) return "";
  return b.model.torch_attention
             ? " -- attention is costed as llm-foundry's PyTorch attention: the scores materialised, "
               "scaled, masked, softmaxed in fp32 and cast back, each its own kernel"
             : " -- attention is costed as the profile's causal flash attention";
}

ModelBlock read_model_block(const YAML::Node& block, const std::string& origin, const std::string& owner,
                            char separator) {
  return BlockReader(origin, owner, separator).read(block);
}

ModelCatalog ModelCatalog::load_default() {
  ModelCatalog c;
  std::vector<std::string> warnings;
  c.add_file(data_dir() / "models" / "mpt.yaml", warnings);
  std::vector<std::filesystem::path> hf;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir() / "models" / "hf"))
    if (entry.path().extension() == ".json") hf.push_back(entry.path());
  std::sort(hf.begin(), hf.end());
  for (const auto& path : hf) {
    ModelConfig named;
    named.name = hf_model_name(path);
    c.add_model(named, path);
  }
  return c;
}

void ModelCatalog::add_file(const std::filesystem::path& path, std::vector<std::string>& warnings) {
  if (is_hf_config_path(path.string())) return add_hf_config(path, warnings);
  add_yaml(read_text_file(path, "models file"), path.string(), warnings);
}

void ModelCatalog::add_hf_config(const std::filesystem::path& path, std::vector<std::string>& warnings) {
  const HfConfig h = read_hf_config_file(path);
  const std::string file = hf_config_file(path).string();
  if (!h.ignored.empty()) {
    std::string list;
    for (const auto& k : h.ignored) list += (list.empty() ? "" : ", ") + k;
    warnings.push_back(one_line(file + ": not modelled, ignored: " + list));
  }
  for (const auto& n : h.notes) warnings.push_back(one_line(file + ": " + n));
  ModelConfig m = h.model;
  m.name = hf_model_name(path);
  if (m.name.empty() || m.name.find_first_of(" ,\t") != std::string::npos || m.name.find("..") != std::string::npos)
    throw Error(file + ": model name '" + m.name +
                "' (from the file or folder name) may not be empty or contain spaces, commas or '..'");
  add_model(m);
}

void ModelCatalog::add_model(const ModelConfig& m, std::filesystem::path unread) {
  auto it = std::find_if(models_.begin(), models_.end(), [&](const ModelConfig& x) { return x.name == m.name; });
  if (it != models_.end()) {
    *it = m;
    unread_[static_cast<size_t>(it - models_.begin())] = std::move(unread);
  } else {
    models_.push_back(m);
    unread_.push_back(std::move(unread));
  }
}

const ModelConfig& ModelCatalog::read(size_t i) const {
  if (!unread_[i].empty()) {
    // A shipped config's notes and ignored keys are the catalogue's own, checked by the tests.
    ModelCatalog one;
    std::vector<std::string> warnings;
    one.add_hf_config(unread_[i], warnings);
    models_[i] = one.models_.front();
    unread_[i].clear();
  }
  return models_[i];
}

const std::vector<ModelConfig>& ModelCatalog::models() const {
  for (size_t i = 0; i < models_.size(); ++i) read(i);
  return models_;
}

void ModelCatalog::add_yaml(const std::string& text, const std::string& origin, std::vector<std::string>& warnings) {
  yaml::guard(origin, [&] { add_yaml_unguarded(text, origin, warnings); });
}

void ModelCatalog::add_yaml_unguarded(const std::string& text, const std::string& origin,
                                      std::vector<std::string>& warnings) {
  const YAML::Node root = yaml::parse(text, origin);
  if (!root.IsMap() || root.size() == 0)
    throw Error(origin + ": a models file must be a map from model names to llm-foundry model blocks");
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) throw Error(yaml::where(origin, kv.first) + ": model names must be strings");
    const std::string name = yaml::key(kv.first, origin);
    if (name.empty() || name.find_first_of(" ,.\t") != std::string::npos)
      throw Error(yaml::where(origin, kv.first) + ": model name '" + name +
                  "' may not be empty or contain spaces, commas or dots");
    ModelBlock b = read_model_block(kv.second, origin, "model '" + name + "'", ' ');
    if (b.checkpointing_target_refusal) throw Error(*b.checkpointing_target_refusal);  // any run may checkpoint
    for (const auto& n : b.notes) warnings.push_back(one_line(n.where + ": model '" + name + "': " + n.text));
    ModelConfig m = b.model;
    m.name = name;
    add_model(m);
  }
}

// A name as written, else the one name that matches it ignoring case (7B is 7b; a --models file
// that holds both MyModel and mymodel needs the exact spelling).
const ModelConfig* ModelCatalog::find(std::string_view name) const {
  for (size_t i = 0; i < models_.size(); ++i)
    if (models_[i].name == name) return &read(i);
  const std::string wanted = to_lower(std::string(name));
  std::optional<size_t> found;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (to_lower(models_[i].name) != wanted) continue;
    if (found) return nullptr;
    found = i;
  }
  return found ? &read(*found) : nullptr;
}

const ModelConfig& ModelCatalog::get(std::string_view name) const {
  if (const ModelConfig* m = find(name)) return *m;
  std::vector<std::string> names;
  std::string known;
  for (const auto& m : models_) {
    names.push_back(m.name);
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw Error("unknown model '" + std::string(name) + "'" + did_you_mean_phrase(std::string(name), names) +
              " (known: " + known + "; add others with --models FILE)");
}

std::vector<std::string> ModelCatalog::expand(std::string_view spec, const std::string& flag) const {
  if (spec.empty()) throw Error(flag + ": empty model list");
  const size_t dots = spec.find("..");
  std::vector<std::string> out;
  if (dots != std::string_view::npos) {
    const std::string a(spec.substr(0, dots)), b(spec.substr(dots + 2));
    const auto index = [&](const std::string& n) {
      return static_cast<size_t>(&get(n) - models_.data());  // get throws with the list of known models
    };
    if (a.empty() || b.empty())
      throw Error(flag + " '" + std::string(spec) + "': a range needs both ends, as in 125m..70b");
    const size_t i = index(a), j = index(b);
    if (i > j)
      throw Error(flag + " '" + std::string(spec) + "': reversed range (" + b + " comes before " + a +
                  " in the catalogue)");
    for (size_t k = i; k <= j; ++k) out.push_back(models_[k].name);
    return out;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string item(
        spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (item.empty()) throw Error(flag + " '" + std::string(spec) + "': empty item in the list");
    out.push_back(get(item).name);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace tpsim
