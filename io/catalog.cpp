#include "io/catalog.hpp"

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <set>

#include "io/error.hpp"
#include "io/files.hpp"
#include "io/hf_config.hpp"
#include "io/yaml_util.hpp"
#include "model/training.hpp"

namespace tpsim {
namespace {

// The keys llm-foundry knows in each part of a model block, for the membership tests and the
// "did you mean" hint. Sources: MPTConfig.__init__ and its docstring (configuration_mpt.py), its
// defaults (llmfoundry/models/utils/config_defaults.py), and the keys MPTConfig deletes (name, loss_fn).
const auto kTopKeys = {"name", "d_model", "n_heads", "n_layers", "head_dim", "expansion_ratio", "max_seq_len",
                       "vocab_size", "resid_pdrop", "emb_pdrop", "learned_pos_emb", "attn_config", "ffn_config",
                       "init_device", "logit_scale", "no_bias", "attention_bias", "embedding_fraction", "norm_type",
                       "norm_eps", "use_cache", "init_config", "fc_type", "tie_word_embeddings", "use_pad_tok_in_ffn",
                       "block_overrides", "final_logit_softcapping", "loss_fn", "activation_checkpointing_target"};
const auto kAttnKeys = {"attn_type", "attn_pdrop", "attn_impl", "qk_ln", "qk_gn", "fused_qkv", "clip_qkv",
                        "softmax_scale", "attn_uses_sequence_id", "sliding_window_size", "attn_logit_softcapping",
                        "alibi", "alibi_bias_max", "rope", "nope", "rope_theta", "rope_impl", "rope_dail_config",
                        "rope_hf_config", "attn_temperature_tuning", "kv_n_heads", "kv_dim", "prefix_lm",
                        "reuse_kv_layer_idx", "seq_parallel_world_size"};
// ffn_config: MPTMLP's and MPTGLU's arguments, and MegaBlocks' (llm-foundry's ffns_with_megablocks).
const auto kFfnKeys = {"ffn_type", "ffn_act_fn", "ffn_hidden_size", "expansion_ratio", "fc_type", "bias",
                       "moe_num_experts", "moe_top_k", "moe_world_size", "moe_loss_weight", "moe_lbl_in_fp32",
                       "moe_jitter_eps", "moe_normalize_expert_weights", "moe_capacity_factor",
                       "moe_weight_parallelism", "moe_expert_model_parallelism", "memory_optimized_mlp", "mlp_impl",
                       "mlp_type", "uniform_expert_assignment", "shared_expert"};
const auto kInitKeys = {"name", "fan_mode", "init_nonlinearity", "init_div_is_residual", "emb_init_std",
                        "emb_init_uniform_lim", "init_std", "init_gain", "verbose"};
// Known keys that do not change the cost of a step: dropout, initialisation, logit scaling,
// numerics and attention options that are elementwise or free (clip_qkv, softmax_scale, ALiBi's
// slope bound, RoPE's base and implementation).
const auto kTopIrrelevant = {"resid_pdrop", "emb_pdrop", "logit_scale", "embedding_fraction", "norm_eps",
                             "use_cache", "use_pad_tok_in_ffn", "final_logit_softcapping", "loss_fn"};
const auto kAttnIrrelevant = {"attn_pdrop", "fused_qkv", "clip_qkv", "softmax_scale", "alibi_bias_max", "rope_theta",
                              "rope_impl", "rope_dail_config", "rope_hf_config", "attn_logit_softcapping",
                              "attn_temperature_tuning"};

bool one_of(const std::string& key, std::initializer_list<const char*> keys) {
  return std::any_of(keys.begin(), keys.end(), [&](const char* k) { return key == k; });
}

std::string shown(const YAML::Node& v) {
  if (v.IsScalar()) return v.Scalar();
  return v.IsMap() ? "a map" : v.IsSequence() ? "a list" : "null";
}

// Reads one block; the checks that relate two keys wait until every key is read.
class BlockReader {
 public:
  BlockReader(const std::string& origin, std::string owner, char separator)
      : origin_(origin), owner_(std::move(owner)), separator_(separator) {}

  ModelBlock read(const YAML::Node& block) {
    if (!block.IsMap()) throw Error(yaml::where(origin_, block) + ": " + owner_ + " must be a map of llm-foundry model keys");
    out_.model.vocab_size = 50368;  // MPT's default vocabulary (the GPT-NeoX-20B tokenizer, padded)
    std::set<std::string> seen;
    for (const auto& kv : block) {
      const std::string key = yaml::key(kv.first, origin_);
      if (!seen.insert(key).second) throw Error(yaml::where(origin_, kv.second) + ": " + owner_ + ": duplicate key " + key);
      read_top(kv.first, key, kv.second);
    }
    for (const char* required : {"d_model", "n_heads", "n_layers"})
      if (!seen.count(required))
        throw Error(yaml::where(origin_, block) + ": " + owner_ + " is missing the required key " + required);
    // llm-foundry: "alibi or rope is turned on, setting `learned_pos_emb` to `False`" (MPTConfig.__init__).
    ModelConfig& m = out_.model;
    m.positions = alibi_ ? PositionKind::kAlibi
                  : rope_ ? PositionKind::kRope
                  : learned_pos_emb_ ? PositionKind::kLearned
                                     : PositionKind::kNone;
    m.norm_bias = m.qkv_bias = m.linear_bias = !no_bias_;
    if (std::string why = check_architecture(out_.model); !why.empty())
      throw Error(yaml::where(origin_, block) + ": " + owner_ + ": " + why);
    check_defaults();
    return out_;
  }

 private:
  std::string label(const std::string& path) const { return owner_ + separator_ + path; }

  [[noreturn]] void refuse(const YAML::Node& v, const std::string& path, const std::string& what) const {
    throw Error(one_line(yaml::where(origin_, v) + ": " + label(path) + ": " + shown(v) + " -- " + what +
                         ": tpsim cannot model it yet"));
  }

  [[noreturn]] void unknown(const YAML::Node& k, const std::string& path, const std::string& key,
                            std::initializer_list<const char*> known) const {
    throw Error(one_line(yaml::where(origin_, k) + ": " + owner_ + ": unknown key '" + path + "'" +
                         yaml::did_you_mean(key, known)));
  }

  // A key modelled only at its default (a false flag, a null or -1 setting): other values are refused.
  void expect_default(const YAML::Node& v, const std::string& path, const std::string& what) const {
    if (v.IsNull()) return;
    const std::string s = v.IsScalar() ? v.Scalar() : "";
    if (s == "false" || s == "False" || s == "-1") return;
    refuse(v, path, what);
  }

  void read_top(const YAML::Node& k, const std::string& key, const YAML::Node& v);
  void read_attn(const YAML::Node& k, const std::string& key, const YAML::Node& v);
  void read_ffn(const YAML::Node& k, const std::string& key, const YAML::Node& v);
  template <typename F>
  void read_section(const YAML::Node& v, const std::string& section, F read_one);
  void check_defaults() const;

  const std::string& origin_;
  std::string owner_;
  char separator_;
  ModelBlock out_;
  bool learned_pos_emb_ = true, alibi_ = false, rope_ = false, no_bias_ = false;
  std::optional<YAML::Node> kv_n_heads_, head_dim_, attention_bias_, ffn_hidden_size_;  // checked by check_defaults
};

template <typename F>
void BlockReader::read_section(const YAML::Node& v, const std::string& section, F read_one) {
  if (v.IsNull()) return;  // llm-foundry takes the defaults
  if (!v.IsMap()) throw Error(yaml::where(origin_, v) + ": " + label(section) + " must be a map");
  std::set<std::string> seen;
  for (const auto& kv : v) {
    const std::string key = yaml::key(kv.first, origin_);
    if (!seen.insert(key).second)
      throw Error(yaml::where(origin_, kv.second) + ": " + owner_ + ": duplicate key " + section + "." + key);
    read_one(kv.first, key, kv.second);
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
  else if (key == "max_seq_len") out_.max_seq_len = yaml::as_count(v, origin_, l, kMaxSeqLen);
  else if (key == "attn_config")
    read_section(v, key, [&](const YAML::Node& k2, const std::string& key2, const YAML::Node& v2) { read_attn(k2, key2, v2); });
  else if (key == "ffn_config")
    read_section(v, key, [&](const YAML::Node& k2, const std::string& key2, const YAML::Node& v2) { read_ffn(k2, key2, v2); });
  else if (key == "init_config")
    read_section(v, key, [&](const YAML::Node& k2, const std::string& key2, const YAML::Node&) {
      if (!one_of(key2, kInitKeys)) unknown(k2, key + "." + key2, key2, kInitKeys);
      out_.ignored.push_back(label(key + "." + key2));  // initialisation does not change a step's cost
    });
  else if (key == "name") {
    if (yaml::as_string(v, origin_, l) != "mpt_causal_lm") refuse(v, key, "a model other than llm-foundry's mpt_causal_lm");
  } else if (key == "init_device") {
    yaml::as_string(v, origin_, l);  // where the weights are first made; accepted without a note, as before
  } else if (key == "tie_word_embeddings") {
    if (!yaml::as_bool(v, origin_, l)) refuse(v, key, "untied input and output embeddings");
  } else if (key == "norm_type") {
    const std::string n = yaml::as_string(v, origin_, l);
    if (n != "low_precision_layernorm" && n != "layernorm") refuse(v, key, "a norm other than LayerNorm");
  } else if (key == "fc_type") {
    const YAML::Node name = v.IsMap() ? v["name"] : v;
    const std::string n = name ? yaml::as_string(name, origin_, l + ".name") : "";
    if (n != "torch" && n != "te") refuse(v, key, "linear layers other than torch's and TransformerEngine's");
  } else if (key == "block_overrides") {
    if (!v.IsNull()) refuse(v, key, "per-layer overrides of the attention");
  } else if (key == "activation_checkpointing_target") {
    expect_default(v, key, "activation checkpointing of chosen modules rather than whole blocks");
  } else if (key == "head_dim") head_dim_ = v;
  else if (key == "attention_bias") attention_bias_ = v;
  else if (one_of(key, kTopIrrelevant)) out_.ignored.push_back(l);
  else if (one_of(key, kAttnKeys) || one_of(key, kFfnKeys))
    out_.notes.push_back({yaml::where(origin_, v), "'" + key + "' belongs in " + (one_of(key, kAttnKeys) ? "attn_config" : "ffn_config") +
                                                       "; at the top of the model block llm-foundry keeps it unread, and so does tpsim"});
  else unknown(k, key, key, kTopKeys);
}

void BlockReader::read_attn(const YAML::Node& k, const std::string& key, const YAML::Node& v) {
  const std::string path = "attn_config." + key;
  const std::string l = label(path);
  if (key == "attn_impl") out_.attn_impl = yaml::as_string(v, origin_, l);
  else if (key == "alibi") alibi_ = yaml::as_bool(v, origin_, l);
  else if (key == "rope") rope_ = yaml::as_bool(v, origin_, l);
  else if (key == "attn_type") {
    const std::string t = yaml::as_string(v, origin_, l);
    if (t == "grouped_query_attention" || t == "multiquery_attention")
      refuse(v, path, "grouped-query and multi-query attention (fewer K and V heads than query heads)");
    if (t != "multihead_attention") refuse(v, path, "an attention other than multihead_attention");
  } else if (key == "kv_n_heads") kv_n_heads_ = v;
  else if (key == "sliding_window_size") expect_default(v, path, "sliding-window attention");
  else if (key == "prefix_lm") expect_default(v, path, "prefix-LM (partly bidirectional) attention");
  else if (key == "qk_ln" || key == "qk_gn") expect_default(v, path, "normalised queries and keys");
  else if (key == "kv_dim") expect_default(v, path, "cross-attention");
  else if (key == "attn_uses_sequence_id") expect_default(v, path, "attention restricted to each packed sequence");
  else if (key == "nope") expect_default(v, path, "attention without positional encoding");
  else if (key == "reuse_kv_layer_idx") expect_default(v, path, "K and V shared across layers");
  else if (key == "seq_parallel_world_size") {
    if (!v.IsNull() && yaml::as_int(v, origin_, l) != 1) refuse(v, path, "sequence parallelism");
  } else if (one_of(key, kAttnIrrelevant)) out_.ignored.push_back(l);
  else unknown(k, path, key, kAttnKeys);
}

void BlockReader::read_ffn(const YAML::Node& k, const std::string& key, const YAML::Node& v) {
  const std::string path = "ffn_config." + key;
  const std::string l = label(path);
  if (key == "expansion_ratio") out_.model.expansion_ratio = yaml::as_double(v, origin_, l);
  else if (key == "ffn_type") {
    const std::string t = yaml::as_string(v, origin_, l);
    if (t == "mptglu" || t == "mptgeglu") refuse(v, path, "a GLU feed-forward (three matrices)");
    if (t == "mb_moe" || t == "mb_dmoe" || t == "torch_dmoe") refuse(v, path, "a mixture-of-experts feed-forward");
    if (t != "mptmlp" && t != "te_ln_mlp") refuse(v, path, "a feed-forward other than mptmlp and te_ln_mlp");
  } else if (key == "ffn_act_fn") {
    if (v.IsNull()) return;
    if (!v.IsMap() || !v["name"] || yaml::as_string(v["name"], origin_, l + ".name") != "gelu")
      refuse(v, path, "an activation other than GELU");
  } else if (key == "ffn_hidden_size") ffn_hidden_size_ = v;
  else if (key == "fc_type" || key == "bias") out_.ignored.push_back(l);  // MPTConfig sets both itself
  else if (one_of(key, kFfnKeys)) refuse(v, path, "mixture-of-experts settings");
  else unknown(k, path, key, kFfnKeys);
}

// The settings accepted only where they describe the model tpsim costs: as many K and V heads as
// query heads, d_model / n_heads per head, QKV biases exactly when the other biases, and
// expansion_ratio * d_model as the feed-forward width.
void BlockReader::check_defaults() const {
  const ModelConfig& m = out_.model;
  if (kv_n_heads_ && !kv_n_heads_->IsNull() &&
      yaml::as_int(*kv_n_heads_, origin_, label("attn_config.kv_n_heads")) != m.n_heads)
    refuse(*kv_n_heads_, "attn_config.kv_n_heads", "grouped-query attention (kv_n_heads apart from n_heads)");
  if (head_dim_ && !head_dim_->IsNull() && yaml::as_int(*head_dim_, origin_, label("head_dim")) != m.d_head())
    refuse(*head_dim_, "head_dim", "a head size apart from d_model / n_heads");
  if (attention_bias_ && !attention_bias_->IsNull() &&
      yaml::as_bool(*attention_bias_, origin_, label("attention_bias")) == no_bias_)
    refuse(*attention_bias_, "attention_bias", "QKV biases apart from no_bias");
  if (ffn_hidden_size_ && !ffn_hidden_size_->IsNull() &&
      yaml::as_int(*ffn_hidden_size_, origin_, label("ffn_config.ffn_hidden_size")) != m.d_ffn())
    refuse(*ffn_hidden_size_, "ffn_config.ffn_hidden_size", "a feed-forward width apart from expansion_ratio * d_model");
}

}  // namespace

ModelBlock read_model_block(const YAML::Node& block, const std::string& origin, const std::string& owner, char separator) {
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
  for (const auto& path : hf) c.add_hf_config(path, warnings);
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
    throw Error(file + ": model name '" + m.name + "' (from the file or folder name) may not be empty or contain spaces, commas or '..'");
  add_model(m);
}

void ModelCatalog::add_model(const ModelConfig& m) {
  auto it = std::find_if(models_.begin(), models_.end(), [&](const ModelConfig& x) { return x.name == m.name; });
  if (it != models_.end()) *it = m;
  else models_.push_back(m);
}

void ModelCatalog::add_yaml(const std::string& text, const std::string& origin, std::vector<std::string>& warnings) {
  yaml::guard(origin, [&] { add_yaml_unguarded(text, origin, warnings); });
}

void ModelCatalog::add_yaml_unguarded(const std::string& text, const std::string& origin, std::vector<std::string>& warnings) {
  const YAML::Node root = yaml::parse(text, origin);
  if (!root.IsMap() || root.size() == 0)
    throw Error(origin + ": a models file must be a map from model names to llm-foundry model blocks");
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) throw Error(yaml::where(origin, kv.first) + ": model names must be strings");
    const std::string name = yaml::key(kv.first, origin);
    if (name.empty() || name.find_first_of(" ,.\t") != std::string::npos)
      throw Error(yaml::where(origin, kv.first) + ": model name '" + name + "' may not be empty or contain spaces, commas or dots");
    ModelBlock b = read_model_block(kv.second, origin, "model '" + name + "'", ' ');
    for (const auto& n : b.notes) warnings.push_back(one_line(n.where + ": model '" + name + "': " + n.text));
    ModelConfig m = b.model;
    m.name = name;
    add_model(m);
  }
}

const ModelConfig* ModelCatalog::find(std::string_view name) const {
  for (const auto& m : models_)
    if (m.name == name) return &m;
  return nullptr;
}

const ModelConfig& ModelCatalog::get(std::string_view name) const {
  if (const ModelConfig* m = find(name)) return *m;
  std::string known;
  for (const auto& m : models_) known += (known.empty() ? "" : ", ") + m.name;
  throw Error("unknown model '" + std::string(name) + "' (known: " + known + "; add others with --models FILE)");
}

std::vector<std::string> ModelCatalog::expand(std::string_view spec, const std::string& flag) const {
  if (spec.empty()) throw Error(flag + ": empty model list");
  const size_t dots = spec.find("..");
  std::vector<std::string> out;
  if (dots != std::string_view::npos) {
    const std::string a(spec.substr(0, dots)), b(spec.substr(dots + 2));
    const auto index = [&](const std::string& n) {
      for (size_t i = 0; i < models_.size(); ++i)
        if (models_[i].name == n) return i;
      get(n);  // throws with the list of known models
      return size_t{0};
    };
    if (a.empty() || b.empty()) throw Error(flag + " '" + std::string(spec) + "': a range needs both ends, as in 125m..70b");
    const size_t i = index(a), j = index(b);
    if (i > j) throw Error(flag + " '" + std::string(spec) + "': reversed range (" + b + " comes before " + a + " in the catalogue)");
    for (size_t k = i; k <= j; ++k) out.push_back(models_[k].name);
    return out;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string item(spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (item.empty()) throw Error(flag + " '" + std::string(spec) + "': empty item in the list");
    get(item);
    out.push_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace tpsim
