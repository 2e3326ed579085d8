#include "io/hf_config.hpp"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

#include "io/catalog.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/yaml_util.hpp"

namespace tpsim {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// PretrainedConfig's own attributes (transformers/configuration_utils.py) and the generation
// settings older configs carry: known to every model_type and irrelevant to a training step.
// The first four are bookkeeping and not even listed as ignored.
const std::set<std::string> kSilent = {"architectures", "model_type", "transformers_version", "_name_or_path"};
const std::set<std::string> kGeneric = {"architectures",
                                        "model_type",
                                        "transformers_version",
                                        "_name_or_path",
                                        "torch_dtype",
                                        "dtype",
                                        "use_cache",
                                        "bos_token_id",
                                        "eos_token_id",
                                        "pad_token_id",
                                        "sep_token_id",
                                        "decoder_start_token_id",
                                        "tokenizer_class",
                                        "auto_map",
                                        "return_dict",
                                        "output_hidden_states",
                                        "output_attentions",
                                        "torchscript",
                                        "use_bfloat16",
                                        "tf_legacy_loss",
                                        "pruned_heads",
                                        "chunk_size_feed_forward",
                                        "id2label",
                                        "label2id",
                                        "problem_type",
                                        "prefix",
                                        "task_specific_params",
                                        "finetuning_task",
                                        "max_length",
                                        "min_length",
                                        "do_sample",
                                        "early_stopping",
                                        "num_beams",
                                        "num_beam_groups",
                                        "diversity_penalty",
                                        "temperature",
                                        "top_k",
                                        "top_p",
                                        "typical_p",
                                        "repetition_penalty",
                                        "length_penalty",
                                        "no_repeat_ngram_size",
                                        "encoder_no_repeat_ngram_size",
                                        "bad_words_ids",
                                        "num_return_sequences",
                                        "output_scores",
                                        "return_dict_in_generate",
                                        "forced_bos_token_id",
                                        "forced_eos_token_id",
                                        "remove_invalid_values",
                                        "exponential_decay_length_penalty",
                                        "suppress_tokens",
                                        "begin_suppress_tokens",
                                        "_attn_implementation",
                                        "attn_implementation",
                                        "initializer_range",
                                        "tie_encoder_decoder",
                                        "is_decoder",
                                        "cross_attention_hidden_size",
                                        "is_encoder_decoder",
                                        "add_cross_attention",
                                        "quantization_config"};

// Strict JSON: a duplicate key (which nlohmann would keep silently, the last one winning) is an error.
json parse_json(const std::string& text, const std::string& origin) {
  std::vector<std::set<std::string>> open;
  std::string duplicate;
  const json::parser_callback_t check = [&](int, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open.emplace_back();
    else if (event == json::parse_event_t::object_end && !open.empty()) open.pop_back();
    else if (event == json::parse_event_t::key && !open.empty() &&
             !open.back().insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json j;
  try {
    j = json::parse(text, check);
  } catch (const json::exception& e) {
    throw Error(origin + ": not valid JSON: " + e.what());
  }
  if (!duplicate.empty()) throw Error(origin + ": duplicate key '" + duplicate + "'");
  if (!j.is_object()) throw Error(origin + ": a config.json must be a JSON object");
  return j;
}

// What a reader needs to name a key: the text (nlohmann keeps no line numbers: the key's line is
// found in the text) and where each config_overrides entry was written.
struct Source {
  const std::string& text;
  const std::string& origin;
  std::map<std::string, std::string> override_where;  // top-level key -> "train.yaml:12"
  HfConfig& out;

  // "origin:LINE" of "a.b" (the first `"a"` key, then the first `"b"` key after it), or an override's place.
  std::string where(const std::string& path) const {
    const std::string top = path.substr(0, path.find('.'));
    if (auto it = override_where.find(top); it != override_where.end()) return it->second;
    size_t pos = 0, start = 0;
    while (start <= path.size()) {
      const size_t dot = path.find('.', start);
      const std::string key =
          "\"" + path.substr(start, dot == std::string::npos ? std::string::npos : dot - start) + "\"";
      size_t at = text.find(key, pos);
      while (at != std::string::npos) {
        size_t after = at + key.size();
        while (after < text.size() &&
               (text[after] == ' ' || text[after] == '\t' || text[after] == '\n' || text[after] == '\r'))
          ++after;
        if (after < text.size() && text[after] == ':') break;
        at = text.find(key, at + 1);
      }
      if (at == std::string::npos) return origin;
      pos = at + key.size();
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return origin + ":" +
           std::to_string(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(pos), '\n') + 1);
  }
};

// One JSON object of a config (the top level, or DBRX's attn_config and ffn_config): each key read
// is registered as known, and finish() refuses the keys nobody read.
class Section {
 public:
  Section(const json& obj, std::string prefix, const Source& src) : obj_(obj), prefix_(std::move(prefix)), src_(src) {}

  std::string path(const std::string& key) const { return prefix_ + key; }

  // The value of a key, or nullptr when absent; a JSON null is returned (some keys mean "off" by null).
  const json* raw(const char* key) {
    known_.emplace_back(key);
    const auto it = obj_.find(key);
    return it == obj_.end() ? nullptr : &*it;
  }
  // Absent or null: transformers' default.
  const json* value(const char* key) {
    const json* v = raw(key);
    return v && !v->is_null() ? v : nullptr;
  }

  // A whole number from `min` to 2^40 (check_architecture bounds the fields more tightly).
  int64_t count(const char* key, int64_t if_absent, int64_t min = 1) {
    const json* v = value(key);
    return v ? as_count(*v, key, min) : if_absent;
  }
  int64_t as_count(const json& v, const std::string& key, int64_t min = 1) const {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > (uint64_t{1} << 40)) ||
        v.get<int64_t>() < min || v.get<int64_t>() > (int64_t{1} << 40))
      bad(key, "must be a whole number from " + std::to_string(min) + " to 2^40");
    return v.get<int64_t>();
  }
  double fraction(const char* key, double if_absent) {
    const json* v = value(key);
    if (v && (!v->is_number() || !(v->get<double>() >= 0 && v->get<double>() <= 1)))
      bad(key, "must be a number from 0 to 1");
    return v ? v->get<double>() : if_absent;
  }
  bool flag(const char* key, bool if_absent) {
    const json* v = value(key);
    if (v && !v->is_boolean()) bad(key, "must be true or false");
    return v ? v->get<bool>() : if_absent;
  }
  std::string text(const char* key, const char* if_absent) {
    const json* v = value(key);
    if (v && !v->is_string()) bad(key, "must be a string");
    return v ? v->get<std::string>() : if_absent;
  }
  // Known keys that do not change a step's cost or memory.
  void irrelevant(std::initializer_list<const char*> keys) {
    for (const char* k : keys) irrelevant_.insert(k), known_.emplace_back(k);
  }

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    const auto it = obj_.find(key);
    throw Error(src_.where(path(key)) + ": " + path(key) + ": " + (it != obj_.end() ? it->dump() : "") + " " + what);
  }
  [[noreturn]] void refuse(const std::string& key, const std::string& what) const {
    const auto it = obj_.find(key);
    throw Error(src_.where(path(key)) + ": " + path(key) + ": " + (it != obj_.end() ? it->dump() : "(default)") +
                " -- " + what + ": tpsim cannot model it yet");
  }

  // Every key is known (read, or irrelevant, or PretrainedConfig's at the top level); the
  // irrelevant ones present are listed in `out.ignored`.
  void finish(HfConfig& out, bool top_level) const {
    std::vector<std::string> known = known_;
    if (top_level) known.insert(known.end(), kGeneric.begin(), kGeneric.end());
    for (const auto& [key, v] : obj_.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end())
        throw Error(
            src_.where(path(key)) + ": unknown key '" + path(key) + "' for model_type " + out.model_type +
            yaml::did_you_mean(key, known_));  // the hint among the model's own keys, not the generation settings
      if (irrelevant_.count(key) || (top_level && kGeneric.count(key) && !kSilent.count(key)))
        out.ignored.push_back(path(key));
    }
  }

  const json& obj() const { return obj_; }
  const Source& src() const { return src_; }

 private:
  const json& obj_;
  std::string prefix_;
  const Source& src_;
  std::vector<std::string> known_;
  std::set<std::string> irrelevant_;
};

// PretrainedConfig flags that would make the model something else than a decoder-only LM.
// Group-limited routing (n_group groups of the routed experts, topk_group of them chosen per token;
// MoeConfig::groups): which ranks a token reaches, so what the flex dispatcher sends. One group, or
// every group chosen, limits nothing.
void read_route_groups(Section& s, MoeConfig& e, int64_t groups_if_absent, int64_t chosen_if_absent) {
  const int64_t groups = s.count("n_group", groups_if_absent);
  const int64_t chosen = s.count("topk_group", chosen_if_absent);
  if (chosen > groups) s.bad("topk_group", "exceeds n_group (" + std::to_string(groups) + ")");
  if (groups <= 1 || chosen == groups) return;
  if (e.experts % groups != 0) s.bad("n_group", "does not divide the " + std::to_string(e.experts) + " routed experts");
  if (e.top_k > chosen * (e.experts / groups))
    s.bad("topk_group", "leaves fewer experts than num_experts_per_tok (" + std::to_string(e.top_k) + ")");
  e.groups = groups;
  e.group_top_k = chosen;
}

void refuse_generic(Section& s) {
  if (s.flag("is_encoder_decoder", false)) s.refuse("is_encoder_decoder", "an encoder-decoder model");
  if (s.flag("add_cross_attention", false)) s.refuse("add_cross_attention", "cross-attention");
  if (s.value("quantization_config")) s.refuse("quantization_config", "quantized weights");
}

Activation activation(Section& s, const char* key, const char* if_absent) {
  const std::string a = s.text(key, if_absent);
  if (a == "silu" || a == "swish") return Activation::kSilu;
  if (a == "relu") return Activation::kRelu;
  if (a == "relu2") return Activation::kRelu2;  // squared ReLU (Nemotron-H)
  // transformers' ACT2FN: the exact and tanh-approximated GELUs cost alike (elementwise).
  if (a == "gelu" || a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast" || a == "gelu_python" ||
      a == "gelu_accurate")
    return Activation::kGelu;
  s.refuse(key, "an activation other than SiLU, GELU, ReLU and squared ReLU");
}

// A size a config gives under its model_type's key, and transformers' default for it.
struct SizeKey {
  const char* key;
  int64_t if_absent;
};

// The sizes every decoder config gives, each under its model_type's own key.
ModelConfig core_sizes(Section& s, SizeKey vocab, SizeKey hidden, SizeKey layers, SizeKey heads) {
  ModelConfig m;
  m.vocab_size = s.count(vocab.key, vocab.if_absent);
  m.d_model = s.count(hidden.key, hidden.if_absent);
  m.n_layers = s.count(layers.key, layers.if_absent);
  m.n_heads = s.count(heads.key, heads.if_absent);
  return m;
}

// transformers' defaults for one model_type of the Llama family (configuration_<type>.py).
struct Defaults {
  int64_t vocab, hidden, intermediate, layers, heads;
  int64_t kv_heads;  // 0: num_attention_heads
  int64_t head_dim;  // 0: hidden_size / num_attention_heads
};

// Llama and its descendants: RMSNorm (a weight, no bias), RoPE, a gated feed-forward (SwiGLU with
// hidden_act silu), untied embeddings unless said, no biases unless said.
ModelConfig llama_family(Section& s, const Defaults& d) {
  ModelConfig m = core_sizes(s, {"vocab_size", d.vocab}, {"hidden_size", d.hidden}, {"num_hidden_layers", d.layers},
                             {"num_attention_heads", d.heads});
  m.ffn_hidden = s.count("intermediate_size", d.intermediate);
  m.n_kv_heads = s.count("num_key_value_heads", d.kv_heads);
  m.head_dim = s.count("head_dim", d.head_dim);
  m.tie_embeddings = s.flag("tie_word_embeddings", false);
  m.activation = activation(s, "hidden_act", "silu");
  m.positions = PositionKind::kRope;
  m.norm = NormKind::kRmsNorm;
  m.norm_bias = m.qkv_bias = m.linear_bias = false;
  m.ffn = FfnKind::kGlu;
  // The learned table's size does not exist here (RoPE); epsilons, RoPE's base and scaling and
  // dropout do not change a step's cost.
  s.irrelevant({"max_position_embeddings", "rms_norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
                "attention_dropout", "pretraining_tp"});
  return m;
}

// m's per-layer kinds (ModelConfig::layers), made one per layer from its uniform fields on first
// use; read_hf_config collapses them back when they come out all alike (set_layer_kinds).
std::vector<LayerKind>& per_layer(Section& s, ModelConfig& m) {
  if (m.n_layers > (1 << 16))  // check_architecture's bound, before one kind per layer is made
    s.bad("num_hidden_layers", "is beyond what the simulator models (2^16 layers)");
  if (m.layers.empty()) m.layers.assign(static_cast<size_t>(m.n_layers), LayerKind{m.sliding_window > 0, false});
  return m.layers;
}

// transformers' layer_types list, one name per layer: `set(name, kind)` applies a name it knows to
// the layer's kind and returns false for one it does not (refused, naming the layer).
template <class Set>
void read_layer_types(Section& s, ModelConfig& m, Set set) {
  const json* v = s.value("layer_types");
  if (!v) return;
  if (!v->is_array() || static_cast<int64_t>(v->size()) != m.n_layers)
    s.bad("layer_types", "must list one type per layer (" + std::to_string(m.n_layers) + ")");
  std::vector<LayerKind>& kinds = per_layer(s, m);
  for (size_t i = 0; i < v->size(); ++i) {
    const json& t = (*v)[i];
    if (!t.is_string()) s.bad("layer_types", "must list layer type names");
    if (!set(t.get<std::string>(), kinds[i]))
      s.refuse("layer_types", "layer type " + t.dump() + " (layer " + std::to_string(i) + ")");
  }
}

// transformers' layer_types (newer configs): per layer "full_attention" or "sliding_attention"
// (a window of `window` keys).
void layer_types(Section& s, ModelConfig& m, int64_t window) {
  read_layer_types(s, m, [](const std::string& t, LayerKind& k) {
    if (t != "full_attention" && t != "sliding_attention") return false;
    k.sliding = t == "sliding_attention";
    return true;
  });
  const bool slides = std::any_of(m.layers.begin(), m.layers.end(), [](const LayerKind& k) { return k.sliding; });
  if (slides && window <= 0) s.bad("layer_types", "lists sliding_attention layers without a sliding_window");
  if (slides) m.sliding_window = window;
}

// Mistral and Mixtral: sliding_window applies to every layer; null turns it off.
void mistral_window(Section& s, ModelConfig& m, int64_t if_absent) {
  const json* w = s.raw("sliding_window");
  m.sliding_window = !w ? if_absent : w->is_null() ? 0 : s.as_count(*w, "sliding_window");
  layer_types(s, m, m.sliding_window);
}

// Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE: with use_sliding_window, the layers from max_window_layers on
// slide (configuration_qwen2.py's layer_types: "sliding_attention" where i >= max_window_layers).
void qwen_window(Section& s, ModelConfig& m, int64_t max_window_layers) {
  const bool use = s.flag("use_sliding_window", false);
  const int64_t window = s.count("sliding_window", 4096);
  const int64_t first = s.count("max_window_layers", max_window_layers, 0);
  if (use && first < m.n_layers) {
    m.sliding_window = window;
    std::vector<LayerKind>& kinds = per_layer(s, m);
    for (int64_t i = 0; i < m.n_layers; ++i) kinds[static_cast<size_t>(i)].sliding = i >= first;
  }
  layer_types(s, m, window);
}

// Qwen-MoE: a layer is sparse unless listed in mlp_only_layers or off the decoder_sparse_step
// (modeling_qwen2_moe.py: sparse when layer_idx is not in mlp_only_layers and (layer_idx + 1) %
// decoder_sparse_step == 0); its dense layers have an MLP of intermediate_size.
void qwen_sparse_layers(Section& s, ModelConfig& m) {
  const int64_t step = s.count("decoder_sparse_step", 1);
  std::vector<bool> dense(static_cast<size_t>(m.n_layers), false);
  for (int64_t i = 0; i < m.n_layers; ++i) dense[static_cast<size_t>(i)] = (i + 1) % step != 0;
  if (const json* only = s.value("mlp_only_layers")) {
    if (!only->is_array()) s.bad("mlp_only_layers", "must be a list of layer indices");
    for (const json& i : *only) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= m.n_layers)
        s.bad("mlp_only_layers", "must list layer indices from 0 to " + std::to_string(m.n_layers - 1));
      dense[static_cast<size_t>(i.get<int64_t>())] = true;
    }
  }
  if (std::find(dense.begin(), dense.end(), true) != dense.end()) {
    std::vector<LayerKind>& kinds = per_layer(s, m);
    for (size_t i = 0; i < dense.size(); ++i) kinds[i].dense_ffn = dense[i];
  }
  s.irrelevant({"norm_topk_prob", "output_router_logits", "router_aux_loss_coef"});
}

ModelConfig read_llama(Section& s) {
  ModelConfig m = llama_family(s, {32000, 4096, 11008, 32, 32, 0, 0});
  // LlamaAttention: q, k, v and o_proj biases follow attention_bias; LlamaMLP's follow mlp_bias.
  // The out projection's bias shares linear_bias with the feed-forward's.
  const bool attention_bias = s.flag("attention_bias", false), mlp_bias = s.flag("mlp_bias", false);
  if (attention_bias != mlp_bias)
    s.refuse(attention_bias ? "attention_bias" : "mlp_bias",
             "a bias on the attention's out projection apart from the feed-forward's");
  m.qkv_bias = m.linear_bias = attention_bias;
  return m;
}

ModelConfig read_mistral(Section& s) {
  ModelConfig m = llama_family(s, {32000, 4096, 14336, 32, 32, 8, 0});
  mistral_window(s, m, 4096);
  return m;
}

ModelConfig read_mixtral(Section& s) {
  ModelConfig m = llama_family(s, {32000, 4096, 14336, 32, 32, 8, 0});
  mistral_window(s, m, 0);
  // MixtralSparseMoeBlock: a router (hidden x experts, no bias), experts of intermediate_size, top-k, dropless.
  m.moe.experts = s.count("num_local_experts", 8);
  m.moe.top_k = s.count("num_experts_per_tok", 2);
  m.moe.d_expert = m.ffn_hidden;
  s.irrelevant({"router_aux_loss_coef", "output_router_logits", "router_jitter_noise"});
  return m;
}

ModelConfig read_qwen2(Section& s) {
  ModelConfig m = llama_family(s, {151936, 4096, 22016, 32, 32, 32, 0});
  m.qkv_bias = true;  // Qwen2Attention: biases on q, k and v, none on o_proj or the MLP
  qwen_window(s, m, 28);
  return m;
}

ModelConfig read_qwen2_moe(Section& s) {
  ModelConfig m = llama_family(s, {151936, 2048, 5632, 24, 16, 16, 0});
  m.qkv_bias = true;
  qwen_window(s, m, 28);
  qwen_sparse_layers(s, m);
  // Qwen2MoeSparseMoeBlock: router, experts of moe_intermediate_size, one shared expert of
  // shared_expert_intermediate_size behind a sigmoid gate (a hidden x 1 weight).
  m.moe.experts = s.count("num_experts", 60);
  m.moe.top_k = s.count("num_experts_per_tok", 4);
  m.moe.d_expert = s.count("moe_intermediate_size", 1408);
  m.moe.shared_experts = 1;
  m.moe.d_shared = s.count("shared_expert_intermediate_size", 5632);
  m.moe.shared_gate = true;
  return m;
}

// Qwen3 and OLMo 2: attention_bias puts biases on q, k, v and o_proj; the MLP has none.
void attention_bias_unmodelled(Section& s) {
  if (s.flag("attention_bias", false))
    s.refuse("attention_bias", "a bias on the attention's out projection without the feed-forward's");
}

ModelConfig read_qwen3(Section& s) {
  ModelConfig m = llama_family(s, {151936, 4096, 22016, 32, 32, 32, 128});
  attention_bias_unmodelled(s);
  m.qk_norm = QkNorm::kPerHead;  // Qwen3Attention: q_norm and k_norm, RMSNorm(head_dim)
  qwen_window(s, m, 28);
  return m;
}

ModelConfig read_qwen3_moe(Section& s) {
  ModelConfig m = llama_family(s, {151936, 2048, 6144, 24, 32, 4, 0});
  attention_bias_unmodelled(s);
  m.qk_norm = QkNorm::kPerHead;
  qwen_window(s, m, 28);
  qwen_sparse_layers(s, m);
  m.moe.experts = s.count("num_experts", 128);
  m.moe.top_k = s.count("num_experts_per_tok", 8);
  m.moe.d_expert = s.count("moe_intermediate_size", 768);
  return m;
}

// DeepSeek-V3 (configuration_deepseek_v3.py's defaults) and Kimi-K2 (model_type kimi_k2, the same
// DeepseekV3ForCausalLM): latent attention; routed experts of moe_intermediate_size with one shared
// MLP of n_shared_experts x moe_intermediate_size; layers before first_k_dense_replace, and with
// moe_layer_freq those off its multiple (DeepSeek's modeling_deepseek.py), a dense MLP of
// intermediate_size; topk_method noaux_tc's per-expert score bias (e_score_correction_bias).
ModelConfig read_deepseek_v3(Section& s) {
  ModelConfig m = llama_family(s, {129280, 7168, 18432, 61, 128, 128, 0});
  if (s.flag("attention_bias", false)) s.refuse("attention_bias", "biases on latent attention's projections");
  if (m.n_kv_heads != m.n_heads)
    s.bad("num_key_value_heads", "must equal num_attention_heads (latent attention: a key and value per head)");
  MlaConfig& a = m.mla;
  a.q_lora_rank = s.count("q_lora_rank", 1536);
  a.kv_lora_rank = s.count("kv_lora_rank", 512);
  a.qk_nope_head_dim = s.count("qk_nope_head_dim", 128, 0);
  a.qk_rope_head_dim = s.count("qk_rope_head_dim", 64);
  a.v_head_dim = s.count("v_head_dim", 128);
  m.head_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
  const int64_t experts = s.count("n_routed_experts", 256);
  const int64_t d_expert = s.count("moe_intermediate_size", 2048);
  m.moe.experts = experts;
  m.moe.top_k = s.count("num_experts_per_tok", 8);
  m.moe.d_expert = d_expert;
  if (const int64_t shared = s.count("n_shared_experts", 1, 0); shared > 0) {
    m.moe.shared_experts = 1;
    m.moe.d_shared = shared * d_expert;
  }
  const std::string method = s.text("topk_method", "noaux_tc");
  if (method != "noaux_tc" && method != "greedy" && method != "group_limited_greedy")
    s.refuse("topk_method", "a routing method other than noaux_tc, greedy and group_limited_greedy");
  m.moe.router_bias = method == "noaux_tc";
  if (method == "greedy")  // no group limit
    s.irrelevant({"n_group", "topk_group"});
  else read_route_groups(s, m.moe, 8, 4);  // configuration_deepseek_v3.py's defaults
  if (const std::string f = s.text("scoring_func", "sigmoid"); f != "sigmoid" && f != "softmax")
    s.refuse("scoring_func", "router scores other than sigmoid and softmax");
  const int64_t dense_first = s.count("first_k_dense_replace", 3, 0);
  const int64_t freq = s.count("moe_layer_freq", 1);
  std::vector<LayerKind>& kinds = per_layer(s, m);
  for (int64_t i = 0; i < m.n_layers; ++i) kinds[static_cast<size_t>(i)].dense_ffn = i < dense_first || i % freq != 0;
  // The score's scaling and normalisation change a router of t x experts scores by elementwise work
  // only; the balancing loss's weights change no op.
  s.irrelevant({"norm_topk_prob", "routed_scaling_factor", "aux_loss_alpha", "seq_aux", "ep_size", "rope_interleave"});
  // The multi-token prediction module a checkpoint carries: Hugging Face's model does not build it,
  // and a run trains it only when the framework is asked to (Megatron-LM's --mtp-num-layers).
  if (const int64_t mtp = s.count("num_nextn_predict_layers", 0, 0); mtp > 0)
    s.src().out.notes.push_back("num_nextn_predict_layers " + std::to_string(mtp) +
                                ": the checkpoint's multi-token prediction module is not part of the model costed "
                                "(Hugging Face's model does not build it); --framework megatron --mtp-layers " +
                                std::to_string(mtp) + " trains it");
  return m;
}

// GPT-OSS (configuration_gpt_oss.py's defaults; OpenAI's gpt-oss model card): biases on q, k, v and
// o_proj (attention_bias), a learned sink logit per head, layer_types alternating a window of
// sliding_window with full attention (sliding first when absent), num_local_experts experts of
// intermediate_size with biases on their linears, top num_experts_per_tok, a router with a bias, no
// dense feed-forward. Its SwiGLU clamps the gate and up values (swiglu_limit) and adds 1 to up:
// elementwise work the same bytes as SiLU's GLU, costed so.
ModelConfig read_gpt_oss(Section& s) {
  ModelConfig m = llama_family(s, {201088, 2880, 2880, 36, 64, 8, 64});
  m.qkv_bias = m.linear_bias = s.flag("attention_bias", true);
  m.attention_sinks = true;
  m.moe.experts = s.count("num_local_experts", 128);
  m.moe.top_k = s.count("num_experts_per_tok", 4);
  // The original release's name for the same count.
  if (const int64_t k = s.count("experts_per_token", m.moe.top_k); k != m.moe.top_k)
    s.bad("experts_per_token", "differs from num_experts_per_tok (" + std::to_string(m.moe.top_k) + ")");
  m.moe.d_expert = m.ffn_hidden;
  m.moe.router_bias = m.moe.expert_bias = true;
  m.sliding_window = s.count("sliding_window", 128);
  if (!s.value("layer_types")) {
    std::vector<LayerKind>& kinds = per_layer(s, m);
    for (size_t i = 0; i < kinds.size(); ++i) kinds[i].sliding = (i + 1) % 2 != 0;
  }
  layer_types(s, m, m.sliding_window);
  s.irrelevant(
      {"swiglu_limit", "swiglu_alpha", "initial_context_length", "router_aux_loss_coef", "output_router_logits"});
  return m;
}

// Gemma 3's text model (configuration_gemma3.py's Gemma3TextConfig defaults): GeGLU
// (hidden_activation), head_dim 256, QK-norm per head, four RMSNorms per block (before and after
// the attention and the MLP), tied embeddings, windowed layers but every sliding_window_pattern-th
// (modeling_gemma3.py: sliding unless (i + 1) % pattern == 0) unless layer_types says. The
// embedding's scaling by sqrt(hidden_size) runs inside the lookup; query_pre_attn_scalar only
// scales the scores. Logit soft-capping (Gemma 2's) is refused until costed.
ModelConfig read_gemma3_text(Section& s) {
  ModelConfig m = llama_family(s, {262208, 2304, 9216, 26, 8, 4, 256});
  attention_bias_unmodelled(s);
  m.activation = activation(s, "hidden_activation", "gelu_pytorch_tanh");
  m.tie_embeddings = s.flag("tie_word_embeddings", true);
  m.qk_norm = QkNorm::kPerHead;
  m.post_norms = true;
  for (const char* cap : {"final_logit_softcapping", "attn_logit_softcapping"})
    if (s.value(cap)) s.refuse(cap, "logit soft-capping");
  m.sliding_window = s.count("sliding_window", 4096);
  const int64_t pattern = s.count("sliding_window_pattern", 6);
  if (!s.value("layer_types")) {
    std::vector<LayerKind>& kinds = per_layer(s, m);
    for (size_t i = 0; i < kinds.size(); ++i) kinds[i].sliding = (static_cast<int64_t>(i) + 1) % pattern != 0;
  }
  layer_types(s, m, m.sliding_window);
  if (s.flag("use_bidirectional_attention", false))
    s.refuse("use_bidirectional_attention", "attention over the whole sequence, not causal");
  s.irrelevant({"query_pre_attn_scalar", "rope_local_base_freq", "cache_implementation"});
  return m;
}

using Reader = ModelConfig (*)(Section&);

// An image-text model's language model (Gemma 3's gemma3 and Llama 4's llama4: a text_config of
// `text_type` beside a vision_config): the text_config read as that model_type's own config, the
// vision encoder and projector left out with a note. A text step runs the language model only; a
// step with images also runs the vision tower, which tpsim does not cost.
ModelConfig read_text_model(Section& s, const char* text_type, Reader reader, const std::string& vision) {
  const json* t = s.value("text_config");
  if (!t) s.bad("text_config", "is missing: an image-text config's language model is its text_config");
  if (!t->is_object()) s.bad("text_config", "must be an object");
  Section text(*t, "text_config.", s.src());
  if (const std::string type = text.text("model_type", text_type); type != text_type)
    text.bad("model_type",
             std::string("must be ") + text_type + " (the language model of " + s.src().out.model_type + ")");
  ModelConfig m = reader(text);
  refuse_generic(text);
  text.finish(s.src().out, true);
  if (s.flag("tie_word_embeddings", m.tie_embeddings) != m.tie_embeddings)
    s.refuse("tie_word_embeddings", "a top-level tie of the embeddings unlike text_config's");
  if (const json* v = s.value("vision_config"); v && !v->is_object()) s.bad("vision_config", "must be an object");
  s.irrelevant({"vision_config", "image_token_index", "image_token_id", "boi_token_index", "eoi_token_index"});
  s.src().out.notes.push_back("vision_config: not costed and not counted (" + vision +
                              "): the model costed is the text_config's language model, as a step over text alone "
                              "runs it");
  return m;
}

// Llama 4's text model (configuration_llama4.py's Llama4TextConfig defaults, modeling_llama4.py;
// Meta's llama-models models/llama4/model.py agrees): a mixture of experts in the layers of moe_layers
// (absent: every interleave_moe_layer_step-th from step - 1), num_local_experts routed experts and
// one shared expert, each a SwiGLU of intermediate_size, a dense SwiGLU of intermediate_size_mlp in
// the other layers, top num_experts_per_tok (a sigmoid of the top logit); RoPE in the layers
// no_rope_layers marks 1 (absent or empty: all but every no_rope_layer_interval-th), and those layers
// alone attend within chunks of attention_chunk_size ("chunked_attention" of layer_types) and, with
// use_qk_norm, normalise q and k per head without a weight (Llama4TextL2Norm); the NoPE layers attend
// to the whole causal prefix. attn_temperature_tuning scales the NoPE layers' queries by a factor of
// the position (an elementwise pass over q, uncosted); the router scales the experts' input instead
// of their output (the same bytes).
ModelConfig read_llama4_text(Section& s) {
  ModelConfig m = llama_family(s, {202048, 5120, 8192, 48, 40, 8, 128});
  attention_bias_unmodelled(s);
  const int64_t expert_width = m.ffn_hidden;  // intermediate_size
  m.ffn_hidden = s.count("intermediate_size_mlp", 16384);
  m.moe.experts = s.count("num_local_experts", 16);
  m.moe.top_k = s.count("num_experts_per_tok", 1);
  m.moe.d_expert = expert_width;
  m.moe.shared_experts = 1;
  m.moe.d_shared = expert_width;
  if (s.flag("use_qk_norm", true)) m.qk_norm = QkNorm::kPerHeadNoWeight;
  m.attention_chunk = s.count("attention_chunk_size", 8192);
  const auto n = static_cast<size_t>(m.n_layers);
  std::vector<LayerKind>& kinds = per_layer(s, m);
  const int64_t step = s.count("interleave_moe_layer_step", 1);
  std::vector<bool> moe(n, false);
  if (const json* v = s.value("moe_layers")) {
    if (!v->is_array()) s.bad("moe_layers", "must be a list of layer indices");
    for (const json& i : *v) {
      if (!i.is_number_integer() || i.get<int64_t>() < 0 || i.get<int64_t>() >= m.n_layers)
        s.bad("moe_layers", "must list layer indices from 0 to " + std::to_string(m.n_layers - 1));
      moe[static_cast<size_t>(i.get<int64_t>())] = true;
    }
  } else {
    for (int64_t i = step - 1; i < m.n_layers; i += step) moe[static_cast<size_t>(i)] = true;
  }
  const int64_t interval = s.count("no_rope_layer_interval", 4);
  std::vector<bool> rope(n, false);
  for (size_t i = 0; i < n; ++i) rope[i] = static_cast<int64_t>(i + 1) % interval != 0;
  if (const json* v = s.value("no_rope_layers"); v && !(v->is_array() && v->empty())) {
    if (!v->is_array() || v->size() != n)
      s.bad("no_rope_layers", "must list 1 (RoPE) or 0 (no RoPE) for each of the " + std::to_string(n) + " layers");
    for (size_t i = 0; i < n; ++i) {
      const json& f = (*v)[i];
      if (!f.is_number_integer() || (f.get<int64_t>() != 0 && f.get<int64_t>() != 1))
        s.bad("no_rope_layers", "must list 1 (RoPE) or 0 (no RoPE) for each layer");
      rope[i] = f.get<int64_t>() == 1;
    }
  }
  for (size_t i = 0; i < n; ++i) kinds[i] = LayerKind{false, !moe[i], rope[i], !rope[i]};
  read_layer_types(s, m, [](const std::string& t, LayerKind& k) {
    if (t != "full_attention" && t != "chunked_attention") return false;
    k.chunked = t == "chunked_attention";
    return true;
  });
  s.irrelevant({"attn_temperature_tuning", "floor_scale", "attn_scale", "router_aux_loss_coef", "router_jitter_noise",
                "output_router_logits", "for_llm_compressor", "cache_implementation"});
  return m;
}

// Llama 4's image-text config (Llama4Config): the text_config's language model.
ModelConfig read_llama4(Section& s) {
  return read_text_model(s, "llama4_text", read_llama4_text,
                         "the vision encoder (34 layers), its pixel-shuffle adapter and the projector");
}

// Nemotron-H's layers, one symbol each ('M', '*', '-', 'E'), from the pattern string `pattern_key`
// or the list of names `list_key` (legacy names too); `fallback` where neither is given.
std::string nemotron_pattern(Section& s, const char* list_key, const char* pattern_key, const char* fallback) {
  std::string pattern;
  if (const json* v = s.value(list_key)) {
    if (!v->is_array()) s.bad(list_key, "must be a list of layer types");
    for (const json& t : *v) {
      if (t == "mamba" || t == "linear_attention") pattern += 'M';
      else if (t == "attention" || t == "full_attention") pattern += '*';
      else if (t == "mlp") pattern += '-';
      else if (t == "moe") pattern += 'E';
      else s.refuse(list_key, "layer type " + t.dump());
    }
  }
  if (const json* v = s.value(pattern_key)) {
    if (!v->is_string()) s.bad(pattern_key, "must be a string of M, *, - and E");
    if (!pattern.empty() && v->get<std::string>() != pattern)
      s.bad(pattern_key, std::string("differs from ") + list_key);
    pattern = v->get<std::string>();
  }
  if (pattern.empty()) pattern = fallback;
  for (const char c : pattern)
    if (c != 'M' && c != '*' && c != '-' && c != 'E')
      s.refuse(pattern_key, std::string("layer symbol '") + c + "' (M, *, - and E are modelled)");
  return pattern;
}

// A Nemotron-H layer of pattern symbol c, in a model that has experts or not.
LayerKind nemotron_kind(char c, bool moe) {
  LayerKind k;
  switch (c) {
    case 'M': k.mixer = Mixer::kMamba2, k.no_ffn = true; break;
    case '*': k.no_ffn = true; break;
    case '-': k.mixer = Mixer::kNone, k.dense_ffn = moe; break;
    default: k.mixer = Mixer::kNone; break;  // 'E'
  }
  return k;
}

// Nemotron-H's Mamba-2 mixer (legacy mamba_* names as the defaults of the current ones).
Mamba2Config nemotron_mamba(Section& s) {
  Mamba2Config b;
  b.heads = s.count("mamba_num_heads", 128);
  b.head_dim = s.count("mamba_head_dim", 64);
  b.d_state = s.count("ssm_state_size", 128);
  b.groups = s.count("n_groups", s.count("mamba_n_groups", 8));
  b.conv_kernel = s.count("conv_kernel", s.count("mamba_d_conv", 4));
  b.chunk = s.count("chunk_size", s.count("mamba_chunk_size", 128));
  b.conv_bias = s.flag("use_conv_bias", s.flag("mamba_conv_bias", true));
  if (const std::string act = s.text("mamba_hidden_act", "silu"); act != "silu")
    s.refuse("mamba_hidden_act", "a Mamba-2 activation other than SiLU");
  return b;
}

// Nemotron-H and Nemotron 3 (configuration_nemotron_h.py's defaults, modeling_nemotron_h.py): a
// hybrid whose every layer is one of a Mamba-2 mixer ('M'), attention without positions ('*'), an
// MLP ('-') or a mixture of experts ('E'), each behind its own RMSNorm and residual, as
// hybrid_override_pattern (or layers_block_type, or the legacy layer names) lists them; the MLP and
// the experts non-gated (down(relu2(up(x)))), the experts routed by sigmoid scores with a score bias
// (e_score_correction_bias) to num_experts_per_tok of n_routed_experts, with one shared expert of
// moe_shared_expert_intermediate_size, working at moe_latent_size where it is given (Nemotron 3
// Super and Ultra's latent experts); the Mamba-2 mixer of mamba_num_heads x mamba_head_dim (expand
// sizes nothing), ssm_state_size, n_groups, conv_kernel, chunk_size. The multi-token prediction
// layers a checkpoint carries are noted, as DeepSeek-V3's.
ModelConfig read_nemotron_h(Section& s) {
  ModelConfig m;
  m.vocab_size = s.count("vocab_size", 131072);
  m.d_model = s.count("hidden_size", 4096);
  m.n_heads = s.count("num_attention_heads", 32);
  m.n_kv_heads = s.count("num_key_value_heads", 8);
  m.head_dim = s.count("head_dim", s.count("attention_head_dim", 128));
  m.ffn_hidden = s.count("intermediate_size", 21504);
  m.tie_embeddings = s.flag("tie_word_embeddings", false);
  m.positions = PositionKind::kNone;  // NemotronHAttention applies no rotary embedding
  m.norm = NormKind::kRmsNorm;
  m.norm_bias = m.qkv_bias = m.linear_bias = false;
  m.ffn = FfnKind::kMlp;
  m.activation = activation(s, "mlp_hidden_act", "relu2");
  for (const char* bias : {"attention_bias", "mlp_bias", "use_bias", "mamba_proj_bias"})
    if (s.flag(bias, false)) s.refuse(bias, "biases on the projections of a Nemotron-H layer");
  if (s.value("sliding_window")) s.refuse("sliding_window", "a sliding window in Nemotron-H's attention");
  const std::string pattern = nemotron_pattern(s, "layers_block_type", "hybrid_override_pattern", "ME*-");
  m.n_layers = s.count("num_hidden_layers", static_cast<int64_t>(pattern.size()));
  if (m.n_layers != static_cast<int64_t>(pattern.size()))
    s.bad("num_hidden_layers", "differs from the " + std::to_string(pattern.size()) + " layers of the pattern");
  if (pattern.find('M') != std::string::npos) m.mamba = nemotron_mamba(s);
  if (pattern.find('E') != std::string::npos) {
    m.moe.latent = s.count("moe_latent_size", 0);  // null or absent: experts at hidden_size
    m.moe.experts = s.count("n_routed_experts", 8);
    m.moe.top_k = s.count("num_experts_per_tok", 2);
    m.moe.d_expert = s.count("moe_intermediate_size", 7688);
    if (s.count("n_shared_experts", 1, 0) > 0) {
      m.moe.shared_experts = 1;
      m.moe.d_shared = s.count("moe_shared_expert_intermediate_size", 7688);
    }
    m.moe.router_bias = true;  // e_score_correction_bias
    read_route_groups(s, m.moe, 1, 1);
  }
  std::vector<LayerKind>& kinds = per_layer(s, m);
  for (size_t i = 0; i < pattern.size(); ++i) kinds[i] = nemotron_kind(pattern[i], m.moe.active());
  // One multi-token prediction depth's layers (mtp_hybrid_override_pattern, or mtp_layers_block_type):
  // Megatron-Core builds each depth as a hybrid stack of them (multi_token_prediction.py,
  // MultiTokenPredictionLayer); they must be kinds the model's own layers have.
  if (s.value("mtp_hybrid_override_pattern") || s.value("mtp_layers_block_type")) {
    const std::string mtp = nemotron_pattern(s, "mtp_layers_block_type", "mtp_hybrid_override_pattern", "");
    if (mtp.empty() || mtp.size() > 64) s.bad("mtp_hybrid_override_pattern", "must name 1 to 64 layers");
    for (const char c : mtp) {
      m.mtp_kinds.push_back(nemotron_kind(c, m.moe.active()));
      if (pattern.find(c) == std::string::npos)
        s.refuse("mtp_hybrid_override_pattern",
                 std::string("a multi-token prediction layer '") + c + "' of a kind the model's layers lack");
    }
  }
  if (const int64_t mtp = s.count("num_nextn_predict_layers", 0, 0); mtp > 0)
    s.src().out.notes.push_back(
        "num_nextn_predict_layers " + std::to_string(mtp) +
        ": the checkpoint's multi-token prediction layers are not part of the model costed (Hugging Face's model "
        "does not build them); --framework megatron --mtp-layers " +
        std::to_string(mtp) + " trains them");
  // Initialisation, epsilons, the step's limits, the residual's format, the router's scaling and
  // group limits, the cache: none changes a step's ops or bytes.
  s.irrelevant({"expand",
                "mamba_expand",
                "time_step_min",
                "time_step_max",
                "time_step_limit",
                "time_step_floor",
                "time_step_rank",
                "mamba_dt_min",
                "mamba_dt_max",
                "mamba_dt_limit",
                "mamba_dt_init_floor",
                "use_mamba_kernels",
                "mamba_ssm_cache_dtype",
                "residual_in_fp32",
                "rescale_prenorm_residual",
                "layer_norm_epsilon",
                "rms_norm_eps",
                "norm_eps",
                "hidden_dropout",
                "attention_dropout",
                "max_position_embeddings",
                "num_logits_to_keep",
                "rope_theta",
                "partial_rotary_factor",
                "routed_scaling_factor",
                "norm_topk_prob",
                "moe_shared_expert_overlap",
                "router_aux_loss_coef",
                "output_router_logits"});
  // The sizes of a kind of layer the pattern does not have.
  if (!m.mamba.active())
    s.irrelevant({"mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "mamba_n_groups", "conv_kernel",
                  "mamba_d_conv", "chunk_size", "mamba_chunk_size", "use_conv_bias", "mamba_conv_bias",
                  "mamba_hidden_act"});
  if (!m.moe.active())
    s.irrelevant({"moe_latent_size", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                  "moe_shared_expert_intermediate_size", "n_shared_experts", "n_group", "topk_group"});
  if (pattern.find('-') == std::string::npos) s.irrelevant({"intermediate_size"});
  if (pattern.find_first_of("-E") == std::string::npos) s.irrelevant({"mlp_hidden_act"});
  if (pattern.find('*') == std::string::npos)
    s.irrelevant({"num_attention_heads", "num_key_value_heads", "head_dim", "attention_head_dim"});
  return m;
}

// Qwen3-Next (configuration_qwen3_next.py's defaults, modeling_qwen3_next.py): layers of a Gated
// DeltaNet ("linear_attention") and, every full_attention_interval-th, gated attention
// ("full_attention": q_proj twice the query width, the output gated by sigmoid of its second half,
// QK-norm per head, RoPE on partial_rotary_factor of each head: costed as a pass over the whole
// head), each followed by Qwen-MoE's experts (num_experts of moe_intermediate_size, top
// num_experts_per_tok, a shared expert of shared_expert_intermediate_size behind a sigmoid gate) or,
// where decoder_sparse_step and mlp_only_layers say, a dense SwiGLU of intermediate_size. Its norms
// are zero-centred RMSNorms (a weight w applied as 1 + w): the same bytes. The checkpoint's
// multi-token prediction weights (mtp.*) are not part of Hugging Face's model or of the model costed.
ModelConfig read_qwen3_next(Section& s) {
  ModelConfig m = llama_family(s, {151936, 2048, 5632, 48, 16, 2, 256});
  attention_bias_unmodelled(s);
  m.qk_norm = QkNorm::kPerHead;
  m.attention_output_gate = true;
  GdnConfig& g = m.gdn;
  g.key_heads = s.count("linear_num_key_heads", 16);
  g.value_heads = s.count("linear_num_value_heads", 32);
  g.key_head_dim = s.count("linear_key_head_dim", 128);
  g.value_head_dim = s.count("linear_value_head_dim", 128);
  g.conv_kernel = s.count("linear_conv_kernel_dim", 4);
  g.chunk = 64;  // flash-linear-attention's chunk_gated_delta_rule
  qwen_sparse_layers(s, m);
  m.moe.experts = s.count("num_experts", 512);
  m.moe.top_k = s.count("num_experts_per_tok", 10);
  m.moe.d_expert = s.count("moe_intermediate_size", 512);
  m.moe.shared_experts = 1;
  m.moe.d_shared = s.count("shared_expert_intermediate_size", 512);
  m.moe.shared_gate = true;
  const int64_t interval = s.count("full_attention_interval", 4);
  std::vector<LayerKind>& kinds = per_layer(s, m);
  for (size_t i = 0; i < kinds.size(); ++i)
    kinds[i].mixer = static_cast<int64_t>(i + 1) % interval == 0 ? Mixer::kAttention : Mixer::kGatedDeltaNet;
  read_layer_types(s, m, [](const std::string& t, LayerKind& k) {
    if (t != "full_attention" && t != "linear_attention") return false;
    k.mixer = t == "full_attention" ? Mixer::kAttention : Mixer::kGatedDeltaNet;
    return true;
  });
  s.irrelevant({"partial_rotary_factor", "mtp_num_hidden_layers", "mtp_use_dedicated_embeddings"});
  return m;
}

ModelConfig read_olmo(Section& s) {
  ModelConfig m = llama_family(s, {50304, 4096, 11008, 32, 32, 0, 0});
  attention_bias_unmodelled(s);
  s.irrelevant({"clip_qkv"});
  // OlmoLayerNorm has neither weight nor bias; ModelConfig's norms have at least a weight.
  s.refuse("model_type", "OLMo's non-parametric LayerNorm (no weight, no bias)");
  return m;
}

ModelConfig read_olmo2(Section& s) {
  ModelConfig m = llama_family(s, {50304, 4096, 11008, 32, 32, 0, 0});
  attention_bias_unmodelled(s);
  // Olmo2Attention: q_norm = RMSNorm(heads * head_dim), k_norm = RMSNorm(kv_heads * head_dim). Its
  // norms follow the attention and the MLP (post-norm): the same parameters and elementwise work.
  m.qk_norm = QkNorm::kWhole;
  return m;
}

const json kEmptyObject = json::object();

// A nested object of the config (DBRX's attn_config and ffn_config), absent or null: its defaults.
const json& nested(Section& s, const char* key) {
  const json* v = s.value(key);
  if (v && !v->is_object()) s.bad(key, "must be an object");
  return v ? *v : kEmptyObject;
}

ModelConfig read_dbrx(Section& s, const Source& src) {
  ModelConfig m;
  m.d_model = s.count("d_model", 2048);
  m.n_heads = s.count("n_heads", 16);
  m.n_layers = s.count("n_layers", 24);
  m.vocab_size = s.count("vocab_size", 32000);
  m.tie_embeddings = s.flag("tie_word_embeddings", false);
  s.irrelevant({"max_seq_len", "resid_pdrop", "emb_pdrop", "output_router_logits", "router_aux_loss_coef"});
  // modeling_dbrx.py: LayerNorm without bias, no biases in Wqkv, out_proj or the experts, RoPE,
  // GLU experts (w1, v1, w2) of ffn_hidden_size, a router without bias, dropless top-k.
  m.positions = PositionKind::kRope;
  m.norm_bias = m.qkv_bias = m.linear_bias = false;
  m.ffn = FfnKind::kGlu;
  Section attn(nested(s, "attn_config"), "attn_config.", src);
  m.n_kv_heads = attn.count("kv_n_heads", 1);
  attn.irrelevant({"attn_pdrop", "clip_qkv", "rope_theta", "model_type"});
  attn.finish(src.out, false);
  Section ffn(nested(s, "ffn_config"), "ffn_config.", src);
  Section act(nested(ffn, "ffn_act_fn"), "ffn_config.ffn_act_fn.", src);
  m.activation = activation(act, "name", "silu");
  act.finish(src.out, false);
  m.ffn_hidden = ffn.count("ffn_hidden_size", 3584);
  m.moe.experts = ffn.count("moe_num_experts", 4);
  m.moe.top_k = ffn.count("moe_top_k", 1);
  m.moe.d_expert = m.ffn_hidden;
  ffn.irrelevant(
      {"moe_jitter_eps", "moe_loss_weight", "moe_normalize_expert_weights", "uniform_expert_assignment", "model_type"});
  ffn.finish(src.out, false);
  return m;
}

ModelConfig read_gpt2(Section& s) {
  // LayerNorm and linears with biases, a GELU MLP, tied embeddings: MPT's defaults
  ModelConfig m = core_sizes(s, {"vocab_size", 50257}, {"n_embd", 768}, {"n_layer", 12}, {"n_head", 12});
  m.max_positions = s.count("n_positions", 1024);  // wpe: a learned table of n_positions rows
  m.ffn_hidden = s.count("n_inner", 4 * m.d_model);
  m.activation = activation(s, "activation_function", "gelu_new");
  m.tie_embeddings = s.flag("tie_word_embeddings", true);
  s.irrelevant({"n_ctx", "resid_pdrop", "embd_pdrop", "attn_pdrop", "layer_norm_epsilon", "summary_type",
                "summary_use_proj", "summary_activation", "summary_proj_to_labels", "summary_first_dropout",
                "scale_attn_weights", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn",
                "gradient_checkpointing"});
  return m;
}

ModelConfig read_opt(Section& s) {
  ModelConfig m = core_sizes(s, {"vocab_size", 50272}, {"hidden_size", 768}, {"num_hidden_layers", 12},
                             {"num_attention_heads", 12});
  m.ffn_hidden = s.count("ffn_dim", 3072);
  // OPTLearnedPositionalEmbedding keeps 2 rows more than max_position_embeddings (its offset).
  m.max_positions = s.count("max_position_embeddings", 2048) + 2;
  m.activation = activation(s, "activation_function", "relu");
  m.tie_embeddings = s.flag("tie_word_embeddings", true);
  m.qkv_bias = m.linear_bias = s.flag("enable_bias", true);
  if (!s.flag("do_layer_norm_before", true))
    s.refuse("do_layer_norm_before", "OPT's post-norm blocks without a final norm (OPT-350m)");
  if (s.flag("_remove_final_layer_norm", false)) s.refuse("_remove_final_layer_norm", "a model without its final norm");
  if (!s.flag("layer_norm_elementwise_affine", true))
    s.refuse("layer_norm_elementwise_affine", "LayerNorm without weight or bias");
  if (s.count("word_embed_proj_dim", m.d_model) != m.d_model)
    s.refuse("word_embed_proj_dim", "embeddings narrower than hidden_size, projected in and out");
  s.irrelevant({"dropout", "attention_dropout", "activation_dropout", "layerdrop", "init_std"});
  return m;
}

ModelConfig read_gpt_neox(Section& s) {
  ModelConfig m = core_sizes(s, {"vocab_size", 50432}, {"hidden_size", 6144}, {"num_hidden_layers", 44},
                             {"num_attention_heads", 64});
  m.ffn_hidden = s.count("intermediate_size", 24576);
  m.activation = activation(s, "hidden_act", "gelu");
  m.tie_embeddings = s.flag("tie_word_embeddings", false);
  // GPTNeoXAttention: query_key_value and dense biases follow attention_bias; the MLP always has them.
  if (!s.flag("attention_bias", true))
    s.refuse("attention_bias", "an attention without biases beside a feed-forward with them");
  const double rotary =
      s.raw("partial_rotary_factor") ? s.fraction("partial_rotary_factor", 0.25) : s.fraction("rotary_pct", 0.25);
  m.positions = rotary > 0 ? PositionKind::kRope : PositionKind::kNone;
  if (rotary > 0 && rotary < 1)
    s.src().out.notes.push_back("rotary_pct " + json(rotary).dump() +
                                ": RoPE on that share of each head, costed on the whole head (an elementwise op)");
  // use_parallel_residual: x + attn(ln1(x)) + mlp(ln2(x)): the same parameters, ops and saved
  // activations as the sequential block; only their order differs.
  if (s.flag("use_parallel_residual", true))
    s.src().out.notes.push_back("use_parallel_residual: costed as the sequential block (the same parameters and ops)");
  s.irrelevant({"rotary_emb_base", "attention_dropout", "hidden_dropout", "classifier_dropout",
                "max_position_embeddings", "layer_norm_eps", "rope_scaling", "rope_theta", "rope_parameters"});
  return m;
}

ModelConfig read_gpt_neo(Section& s) {
  ModelConfig m = core_sizes(s, {"vocab_size", 50257}, {"hidden_size", 2048}, {"num_layers", 24}, {"num_heads", 16});
  m.max_positions = s.count("max_position_embeddings", 2048);
  m.ffn_hidden = s.count("intermediate_size", 4 * m.d_model);
  m.activation = activation(s, "activation_function", "gelu_new");
  m.tie_embeddings = s.flag("tie_word_embeddings", true);
  m.qkv_bias = false;  // GPTNeoSelfAttention: q, k, v without bias; out_proj with one
  const int64_t window = s.count("window_size", 256);
  // attention_types: [[["global", "local"], 12]] -> 24 layers alternating global and local
  // (configuration_gpt_neo.py expand_attention_types_params: each entry's types, repeated).
  std::vector<LayerKind> kinds;
  const json* types = s.value("attention_types");
  const json spec = types ? *types : json::parse(R"([[["global", "local"], 12]])");
  for (const json& group : spec) {
    if (!group.is_array() || group.size() != 2 || !group[0].is_array() || !group[1].is_number_integer() ||
        group[1].get<int64_t>() < 0 || group[1].get<int64_t>() > (1 << 16))
      s.bad("attention_types", "must be a list of [[types...], repeats]");
    for (const json& t : group[0])
      if (t != "global" && t != "local") s.bad("attention_types", "names types other than global and local");
    for (int64_t r = 0; r < group[1].get<int64_t>() && static_cast<int64_t>(kinds.size()) <= m.n_layers; ++r)
      for (const json& t : group[0]) kinds.push_back({t == "local", false});
  }
  if (static_cast<int64_t>(kinds.size()) != m.n_layers)
    s.bad("attention_types", "does not describe num_layers (" + std::to_string(m.n_layers) + ") layers");
  m.sliding_window = window;
  m.layers = kinds;
  s.irrelevant({"attention_layers", "resid_dropout", "embed_dropout", "attention_dropout", "classifier_dropout",
                "layer_norm_epsilon", "gradient_checkpointing", "summary_type", "summary_use_proj",
                "summary_activation", "summary_proj_to_labels", "summary_first_dropout"});
  return m;
}

ModelConfig read_gemma3(Section& s) {
  // Gemma3Config (configuration_gemma3.py): 256 image tokens per image after the projector.
  s.irrelevant({"mm_tokens_per_image"});
  return read_text_model(s, "gemma3_text", read_gemma3_text, "the SigLIP vision encoder and its projector");
}

const std::map<std::string, Reader> kReaders = {{"llama", read_llama},
                                                {"deepseek_v3", read_deepseek_v3},
                                                {"kimi_k2", read_deepseek_v3},
                                                {"gpt_oss", read_gpt_oss},
                                                {"gemma3", read_gemma3},
                                                {"llama4", read_llama4},
                                                {"llama4_text", read_llama4_text},
                                                {"nemotron_h", read_nemotron_h},
                                                {"qwen3_next", read_qwen3_next},
                                                {"gemma3_text", read_gemma3_text},
                                                {"mistral", read_mistral},
                                                {"mixtral", read_mixtral},
                                                {"qwen2", read_qwen2},
                                                {"qwen2_moe", read_qwen2_moe},
                                                {"qwen3", read_qwen3},
                                                {"qwen3_moe", read_qwen3_moe},
                                                {"olmo", read_olmo},
                                                {"olmo2", read_olmo2},
                                                {"gpt2", read_gpt2},
                                                {"opt", read_opt},
                                                {"gpt_neox", read_gpt_neox},
                                                {"gpt_neo", read_gpt_neo}};

std::string supported_types() {
  std::string all;
  for (const auto& [type, reader] : kReaders) all += type + ", ";
  return all + "dbrx, mpt";
}

// config_overrides as llm-foundry applies them: a nested map updates only keys the config has
// (its "attempt to disallow typos in nested configs"); anything else replaces the value. Whether a
// top-level key exists for the model_type is checked with the config's own keys, after the merge.
json apply_overrides(json j, const std::vector<HfOverride>& overrides) {
  for (const auto& o : overrides) {
    json& target = j[o.key];
    if (target.is_object() && o.value.is_object()) {
      for (const auto& [k, v] : o.value.items()) {
        if (!target.contains(k)) {
          std::string expected;
          for (const auto& [have, unused] : target.items()) expected += (expected.empty() ? "" : ", ") + have;
          throw Error(o.where + ": config_overrides." + o.key + ": unknown key '" + k + "' (the config's " + o.key +
                      " has " + expected + ")");
        }
        target[k] = v;
      }
    } else {
      target = o.value;
    }
  }
  return j;
}

// model_type mpt: mosaicml's config.json holds MPTConfig's keys, read as an llm-foundry model block
// (read_model_block) once PretrainedConfig's own keys are set aside. Parsed again as YAML (JSON is
// YAML) so that messages keep their lines.
void read_mpt(const std::string& text, const std::string& origin, const std::vector<HfOverride>& overrides,
              HfConfig& out) {
  yaml::guard(origin, [&] {
    YAML::Node root = yaml::parse(text, origin);
    std::vector<std::string> generic;
    for (const auto& kv : root) {
      const std::string key = yaml::key(kv.first, origin);
      if (kGeneric.count(key) || key == "tokenizer_name" || key == "verbose") generic.push_back(key);
    }
    for (const auto& key : generic) {
      root.remove(key);
      if (!kSilent.count(key)) out.ignored.push_back(key);
    }
    for (const auto& o : overrides) {
      const YAML::Node value = YAML::Load(o.value.dump());
      if (root[o.key] && root[o.key].IsMap() && value.IsMap()) {
        for (const auto& kv : value) root[o.key][kv.first.Scalar()] = kv.second;
      } else {
        root[o.key] = value;
      }
    }
    ModelBlock b = read_model_block(root, origin, "config", '.');
    out.model = b.model;
    out.max_seq_len = b.max_seq_len;
    out.ignored.insert(out.ignored.end(), b.ignored.begin(), b.ignored.end());
    if (b.attn_impl) out.notes.push_back("attn_config.attn_impl: " + *b.attn_impl + attn_impl_costing(b));
    for (const auto& n : b.notes) out.notes.push_back(n.where + ": " + n.text);
  });
}

}  // namespace

HfConfig read_hf_config(const std::string& text, const std::string& origin, const std::vector<HfOverride>& overrides) {
  const json file = parse_json(text, origin);
  HfConfig out;
  const auto type = file.find("model_type");
  if (type == file.end() || !type->is_string())
    throw Error(origin + ": no model_type (a Hugging Face config.json names its model_type: " + supported_types() +
                ")");
  out.model_type = type->get<std::string>();
  for (const auto& o : overrides)
    if (o.key == "model_type")
      throw Error(o.where + ": config_overrides.model_type: the model_type cannot be overridden");
  if (out.model_type == "mpt") {
    read_mpt(text, origin, overrides, out);
    return out;
  }
  const json j = apply_overrides(file, overrides);
  Source src{text, origin, {}, out};
  for (const auto& o : overrides) src.override_where[o.key] = o.where;
  Section s(j, "", src);
  const auto reader = kReaders.find(out.model_type);
  if (out.model_type == "dbrx") out.model = read_dbrx(s, src);
  else if (reader != kReaders.end()) out.model = reader->second(s);
  else
    throw Error(src.where("model_type") + ": model_type '" + out.model_type +
                "' is not one tpsim models (supported: " + supported_types() + ")");
  refuse_generic(s);
  s.finish(out, true);
  if (!out.model.layers.empty()) {
    const std::vector<LayerKind> kinds = out.model.layers;
    set_layer_kinds(out.model, kinds);
  }
  if (std::string why = check_architecture(out.model); !why.empty())
    throw Error(origin + ": model_type " + out.model_type + ": " + why);
  return out;
}

std::filesystem::path hf_config_file(const std::filesystem::path& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) ? path / "config.json" : path;
}

HfConfig read_hf_config_file(const std::filesystem::path& path, const std::vector<HfOverride>& overrides) {
  const fs::path file = hf_config_file(path);
  return read_hf_config(read_text_file(file, "Hugging Face config.json"), file.string(), overrides);
}

bool is_hf_config_path(const std::string& spec) {
  std::error_code ec;
  const fs::path p(spec);
  if (p.extension() == ".json") return true;
  return fs::is_directory(p, ec) && fs::is_regular_file(p / "config.json", ec);
}

std::string hf_model_name(const std::filesystem::path& path) {
  const fs::path file = hf_config_file(path);
  if (file.filename() != "config.json") return file.stem().string();
  const fs::path folder = fs::absolute(file).parent_path();
  return folder.filename().string();
}

namespace {

// The user's Hugging Face hub cache, as huggingface_hub resolves it (constants.py).
fs::path hub_cache() {
  if (const char* v = std::getenv("HF_HUB_CACHE"); v && *v) return v;
  if (const char* v = std::getenv("HF_HOME"); v && *v) return fs::path(v) / "hub";
  if (const char* v = std::getenv("HOME"); v && *v) return fs::path(v) / ".cache" / "huggingface" / "hub";
  return {};
}

// models--ORG--NAME/snapshots/<revision>/config.json: the newest snapshot that has one.
std::optional<fs::path> from_cache(const std::string& repo, const fs::path& cache) {
  std::error_code ec;
  std::string folder = "models--" + repo;
  for (size_t at = folder.find('/'); at != std::string::npos; at = folder.find('/', at + 2))
    folder.replace(at, 1, "--");
  const fs::path snapshots = cache / folder / "snapshots";
  if (cache.empty() || !fs::is_directory(snapshots, ec)) return std::nullopt;
  std::optional<fs::path> newest;
  fs::file_time_type newest_time{};
  for (const auto& entry : fs::directory_iterator(snapshots, ec)) {
    const fs::path config = entry.path() / "config.json";
    if (!fs::is_regular_file(config, ec)) continue;
    const auto t = fs::last_write_time(entry.path(), ec);
    if (!ec && (!newest || t > newest_time)) newest = config, newest_time = t;
  }
  return newest;
}

// data/models/hf/index.yaml: repo id -> shipped file (Hub repo ids match without regard to case).
std::optional<fs::path> shipped(const std::string& repo) {
  const fs::path dir = data_dir() / "models" / "hf";
  const std::string origin = (dir / "index.yaml").string();
  const YAML::Node index =
      yaml::guard(origin, [&] { return yaml::parse(read_text_file(dir / "index.yaml", "index"), origin); });
  const auto lower = [](std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
  };
  for (const auto& kv : index)
    if (lower(kv.first.Scalar()) == lower(repo)) return dir / kv.second.Scalar();
  return std::nullopt;
}

}  // namespace

std::filesystem::path resolve_pretrained_config(const std::string& name_or_path) {
  std::error_code ec;
  if (fs::is_regular_file(name_or_path, ec)) return name_or_path;
  if (fs::is_regular_file(fs::path(name_or_path) / "config.json", ec)) return fs::path(name_or_path) / "config.json";
  const fs::path cache = hub_cache();
  if (auto p = from_cache(name_or_path, cache)) return *p;
  if (auto p = shipped(name_or_path)) return *p;
  throw Error("pretrained_model_name_or_path '" + name_or_path +
              "': no config.json in a local folder of that name, in the " + "Hugging Face cache (" +
              (cache.empty() ? std::string("no HF_HUB_CACHE, HF_HOME or HOME") : cache.string()) +
              ") or among the configs shipped in " + (data_dir() / "models" / "hf").string() +
              " (index.yaml); tpsim never downloads");
}

}  // namespace tpsim
