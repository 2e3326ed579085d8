#include "model/architecture.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "model/enum_names.hpp"
#include "model/units.hpp"

namespace tpsim {

std::string_view to_string(NormKind n) { return n == NormKind::kLayerNorm ? "layernorm" : "rmsnorm"; }
std::string_view to_string(FfnKind f) { return f == FfnKind::kMlp ? "mlp" : "glu"; }
std::string_view to_string(Activation a) {
  constexpr std::array<std::string_view, 4> kNames = {"gelu", "silu", "relu", "relu2"};
  return name_of(a, kNames);
}
std::string_view to_string(Mixer m) {
  constexpr std::array<std::string_view, 4> kNames = {"attention", "mamba2", "none", "gated_delta_net"};
  return name_of(m, kNames);
}
std::string_view to_string(PositionKind p) {
  constexpr std::array<std::string_view, 4> kNames = {"learned", "alibi", "rope", "none"};
  return name_of(p, kNames);
}

int64_t ModelConfig::d_ffn() const {
  if (ffn_hidden > 0) return ffn_hidden;
  // Rounded to nearest; check_architecture keeps the product positive and small.
  return round_count(expansion_ratio * static_cast<double>(d_model));
}

std::vector<std::pair<std::string, int64_t>> unaligned_gemm_widths(const ModelConfig& m, bool vocab_padded) {
  std::vector<std::pair<std::string, int64_t>> widths;
  const auto check = [&](const char* what, int64_t w) {
    if (w > 0 && w % 8 != 0) widths.emplace_back(what, w);
  };
  if (!vocab_padded) check("output layer", m.vocab_size);
  check("hidden size", m.d_model);
  check("query width", m.q_dim());
  if (m.mla.active()) {
    check("query rank", m.mla.q_lora_rank);
    check("key/value rank", m.mla.kv_lora_rank + m.mla.qk_rope_head_dim);
    check("value width", m.o_dim());
  }
  if (m.kv_dim() != m.q_dim()) check("key/value width", m.kv_dim());
  if (m.mamba.active()) {
    check("Mamba in projection", m.mamba.in_width());
    check("Mamba inner width", m.mamba.d_inner());
  }
  if (m.moe.active()) {
    check("expert width", m.moe.d_expert);
    if (m.moe.latent > 0) check("expert latent width", m.moe.latent);
    if (m.moe.shared_experts > 0) check("shared expert width", m.moe.d_shared);
  } else {
    check("feed-forward width", m.d_ffn());
  }
  return widths;
}

void set_layer_kinds(ModelConfig& m, const std::vector<LayerKind>& kinds) {
  const bool one_kind = std::all_of(kinds.begin(), kinds.end(), [&](const LayerKind& k) { return k == kinds.front(); });
  if (kinds.empty() || !one_kind || !m.mtp_kinds.empty()) {  // MTP kinds name kinds of `layers`
    m.layers = kinds;
    return;
  }
  m = layer_model(m, kinds.front());
}

ModelConfig layer_model(const ModelConfig& m, const LayerKind& k) {
  ModelConfig out = m;
  out.layers.clear();
  out.mtp_kinds.clear();
  if (!k.sliding) out.sliding_window = 0;
  if (!k.chunked) out.attention_chunk = 0;
  if (k.nope) {
    out.positions = PositionKind::kNone;
    if (out.qk_norm == QkNorm::kPerHeadNoWeight) out.qk_norm = QkNorm::kNone;
  }
  if (k.dense_ffn || k.no_ffn) out.moe = MoeConfig{};
  out.mixer = k.mixer;
  out.no_ffn = k.no_ffn;
  if (k.mixer != Mixer::kAttention) out.sliding_window = out.attention_chunk = 0;
  if (k.mixer != Mixer::kMamba2) out.mamba = Mamba2Config{};
  if (k.mixer != Mixer::kGatedDeltaNet) out.gdn = GdnConfig{};
  if (k.mixer != Mixer::kAttention) out.attention_output_gate = false;
  return out;
}

LayerPattern layer_pattern(const ModelConfig& m) {
  LayerPattern p;
  if (m.layers.empty()) {
    p.groups.push_back({m, m.n_layers});
    p.runs.push_back({0, m.n_layers});
    return p;
  }
  std::vector<LayerKind> kinds;
  for (const LayerKind& k : m.layers) {
    const auto it = std::find(kinds.begin(), kinds.end(), k);
    const int g = static_cast<int>(it - kinds.begin());
    if (it == kinds.end()) {
      kinds.push_back(k);
      p.groups.push_back({layer_model(m, k), 0});
    }
    ++p.groups[static_cast<size_t>(g)].layers;
    if (!p.runs.empty() && p.runs.back().group == g) ++p.runs.back().layers;
    else p.runs.push_back({g, 1});
  }
  return p;
}

std::vector<int64_t> LayerPattern::count_in(int64_t first, int64_t count) const {
  std::vector<int64_t> out(groups.size(), 0);
  int64_t at = 0;
  const int64_t end = first + count;
  for (const LayerRun& r : runs) {
    const int64_t from = std::max(at, first), to = std::min(at + r.layers, end);
    if (to > from) out[static_cast<size_t>(r.group)] += to - from;
    at += r.layers;
    if (at >= end) break;
  }
  return out;
}

bool ModelConfig::is_mpt_default() const {
  return kv_heads() == n_heads && d_head() * n_heads == d_model && norm == NormKind::kLayerNorm && norm_bias &&
         qkv_bias && linear_bias && ffn == FfnKind::kMlp && activation == Activation::kGelu && tie_embeddings &&
         positions == PositionKind::kLearned && max_positions == 0 && sliding_window == 0 && attention_chunk == 0 &&
         qk_norm == QkNorm::kNone && !moe.active() && !unfused_attention && layers.empty() &&
         mixer == Mixer::kAttention && !no_ffn;
}

int64_t attention_layer_count(const ModelConfig& m) {
  if (m.uniform()) return m.mixer == Mixer::kAttention ? m.n_layers : 0;
  return std::count_if(m.layers.begin(), m.layers.end(),
                       [](const LayerKind& k) { return k.mixer == Mixer::kAttention; });
}

namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string check_moe(const MoeConfig& e) {
  if (!e.active()) {
    if (e.top_k != 0 || e.d_expert != 0 || e.shared_experts != 0 || e.d_shared != 0 || e.shared_gate ||
        e.capacity_factor != 0 || e.output_bias || e.router_bias || e.expert_bias || e.latent != 0 || e.groups != 0 ||
        e.group_top_k != 0)
      return "mixture-of-experts settings without experts";
    return {};
  }
  if (e.experts > 4096) return "experts (" + str(e.experts) + ") beyond what the simulator models (4096)";
  if (e.top_k <= 0 || e.top_k > e.experts)
    return "top_k (" + str(e.top_k) + ") must be between 1 and the number of experts (" + str(e.experts) + ")";
  if (e.d_expert <= 0 || e.d_expert > (1 << 22)) return "the expert FFN width must be positive and at most 2^22";
  if (e.shared_experts < 0 || e.shared_experts > 64) return "shared experts must be 0 to 64";
  if (e.shared_experts > 0 && (e.d_shared <= 0 || e.d_shared > (1 << 22)))
    return "the shared experts' FFN width must be positive and at most 2^22";
  if (e.shared_experts == 0 && (e.d_shared != 0 || e.shared_gate))
    return "a shared-expert width or gate without shared experts";
  if (e.latent < 0 || e.latent > (1 << 20)) return "the experts' latent width must be positive and at most 2^20";
  if (!(e.capacity_factor >= 0) || !std::isfinite(e.capacity_factor) || e.capacity_factor > 64)
    return "capacity_factor must be 0 (dropless) or a positive number no larger than 64";
  if (e.groups != 0 || e.group_top_k != 0) {
    if (e.groups <= 0 || e.experts % e.groups != 0)
      return "expert groups (" + str(e.groups) + ") must divide the experts (" + str(e.experts) + ")";
    if (e.group_top_k <= 0 || e.group_top_k > e.groups)
      return "the groups each token chooses (" + str(e.group_top_k) + ") must be between 1 and the groups (" +
             str(e.groups) + ")";
    if (e.top_k > e.group_top_k * (e.experts / e.groups))
      return "top_k (" + str(e.top_k) + ") exceeds the experts of the groups a token chooses (" +
             str(e.group_top_k * (e.experts / e.groups)) + ")";
  }
  return {};
}

}  // namespace

std::string check_architecture(const ModelConfig& m) {
  if (m.d_model <= 0) return "d_model must be positive";
  if (m.n_heads <= 0) return "n_heads must be positive";
  if (m.n_layers <= 0) return "n_layers must be positive";
  if (m.vocab_size <= 0) return "vocab_size must be positive";
  if (m.n_kv_heads < 0) return "the number of key/value heads must be positive";
  if (m.head_dim < 0) return "head_dim must be positive";
  if (m.ffn_hidden < 0) return "the feed-forward width must be positive";
  if (m.max_positions < 0) return "the number of learned positions must be positive";
  if (m.sliding_window < 0) return "the sliding window must be positive";
  if (m.attention_chunk < 0 || m.attention_chunk > (1 << 24))
    return "the attention chunk must be positive and at most 2^24";
  if (!(m.expansion_ratio > 0) || !std::isfinite(m.expansion_ratio) || m.expansion_ratio > 1024)
    return "expansion_ratio must be a positive number no larger than 1024";
  // Keep every count well inside int64 and every byte count well inside double precision.
  if (m.d_model > (1 << 20) || m.n_layers > (1 << 16) || m.vocab_size > (1LL << 32) || m.n_heads > (1 << 16) ||
      m.head_dim > (1 << 16) || m.ffn_hidden > (1 << 22) || m.max_positions > (1 << 24))
    return "dimensions beyond what the simulator models (d_model <= 2^20, n_layers <= 2^16, vocab_size <= 2^32, "
           "n_heads and head_dim <= 2^16, feed-forward width <= 2^22)";
  if (m.head_dim == 0 && m.d_model % m.n_heads != 0)
    return "n_heads (" + str(m.n_heads) + ") does not divide d_model (" + str(m.d_model) + ")";
  if (m.n_kv_heads > m.n_heads || m.n_heads % m.kv_heads() != 0)
    return "the key/value heads (" + str(m.kv_heads()) + ") must divide the query heads (" + str(m.n_heads) + ")";
  if (m.d_ffn() <= 0) return "expansion_ratio * d_model rounds to zero";
  if (m.max_positions > 0 && !m.learned_positions()) return "a learned position table without learned positions";
  if (m.mamba != Mamba2Config{}) {
    const Mamba2Config& b = m.mamba;
    if (b.heads <= 0 || b.head_dim <= 0 || b.d_state <= 0 || b.groups <= 0 || b.conv_kernel <= 0 || b.chunk <= 0 ||
        b.heads > (1 << 16) || b.head_dim > 4096 || b.d_state > 4096 || b.conv_kernel > 64 || b.chunk > (1 << 16))
      return "the Mamba-2 mixer needs positive heads (at most 2^16), head_dim and d_state (at most 4096), groups, "
             "conv_kernel (at most 64) and chunk (at most 2^16)";
    if (b.heads % b.groups != 0)
      return "the Mamba-2 groups (" + str(b.groups) + ") must divide its heads (" + str(b.heads) + ")";
  }
  if (m.layers.empty() && m.mixer == Mixer::kMamba2 && !m.mamba.active()) return "a Mamba-2 model without its sizes";
  if (m.gdn != GdnConfig{}) {
    const GdnConfig& g = m.gdn;
    if (g.key_heads <= 0 || g.value_heads <= 0 || g.key_head_dim <= 0 || g.value_head_dim <= 0 || g.conv_kernel <= 0 ||
        g.chunk <= 0 || g.key_heads > (1 << 16) || g.value_heads > (1 << 16) || g.key_head_dim > 4096 ||
        g.value_head_dim > 4096 || g.conv_kernel > 64 || g.chunk > 4096)
      return "the Gated DeltaNet needs positive key and value heads (at most 2^16), head dims (at most 4096), "
             "conv_kernel (at most 64) and chunk (at most 4096)";
    if (g.value_heads % g.key_heads != 0)
      return "the Gated DeltaNet's key heads (" + str(g.key_heads) + ") must divide its value heads (" +
             str(g.value_heads) + ")";
  }
  if ((m.layers.empty() ? m.mixer == Mixer::kGatedDeltaNet
                        : std::any_of(m.layers.begin(), m.layers.end(),
                                      [](const LayerKind& k) { return k.mixer == Mixer::kGatedDeltaNet; })) &&
      !m.gdn.active())
    return "Gated DeltaNet layers without the mixer's sizes";
  if (m.layers.empty() && m.mixer == Mixer::kNone && m.no_ffn)
    return "a layer with neither a token mixer nor a feed-forward";
  if (m.layers.empty() && m.sliding_window > 0 && m.attention_chunk > 0)
    return "a sliding window and chunked attention in the same layers";
  if (m.mla.active() || m.mla != MlaConfig{}) {
    const MlaConfig& a = m.mla;
    if (!m.mla.active()) return "latent attention settings without kv_lora_rank";
    if (a.q_lora_rank < 0 || a.kv_lora_rank > (1 << 16) || a.q_lora_rank > (1 << 16) || a.qk_nope_head_dim < 0 ||
        a.qk_rope_head_dim <= 0 || a.qk_rope_head_dim % 2 != 0 || a.v_head_dim <= 0 || a.qk_nope_head_dim > 4096 ||
        a.qk_rope_head_dim > 4096 || a.v_head_dim > 4096)
      return "latent attention needs ranks up to 2^16 and a positive, even qk_rope_head_dim and a positive v_head_dim "
             "(each at most 4096)";
    if (m.d_head() != a.qk_nope_head_dim + a.qk_rope_head_dim || m.kv_heads() != m.n_heads)
      return "latent attention's heads are qk_nope_head_dim + qk_rope_head_dim wide, one key and value per head";
    if (m.positions != PositionKind::kRope || m.qkv_bias || m.qk_norm != QkNorm::kNone || m.unfused_attention)
      return "latent attention with RoPE, no projection biases, no QK-norm and fused attention only";
  }
  if (!m.layers.empty()) {
    if (static_cast<int64_t>(m.layers.size()) != m.n_layers)
      return "the per-layer kinds (" + str(static_cast<int64_t>(m.layers.size())) + ") are not one per layer (" +
             str(m.n_layers) + ")";
    const auto any = [&](bool LayerKind::*f) {
      return std::any_of(m.layers.begin(), m.layers.end(), [&](const LayerKind& k) { return k.*f; });
    };
    if (any(&LayerKind::sliding) && m.sliding_window <= 0) return "sliding-window layers without a window";
    if (any(&LayerKind::chunked) && m.attention_chunk <= 0) return "chunked-attention layers without a chunk size";
    if (std::any_of(m.layers.begin(), m.layers.end(), [](const LayerKind& k) { return k.sliding && k.chunked; }))
      return "a layer both sliding and chunked";
    if (std::any_of(m.layers.begin(), m.layers.end(), [](const LayerKind& k) { return k.mixer == Mixer::kMamba2; }) &&
        !m.mamba.active())
      return "Mamba-2 layers without the Mamba-2 mixer's sizes";
    if (std::any_of(m.layers.begin(), m.layers.end(),
                    [](const LayerKind& k) { return k.mixer == Mixer::kNone && k.no_ffn; }))
      return "a layer with neither a token mixer nor a feed-forward";
    if (m.mixer != Mixer::kAttention || m.no_ffn)
      return "per-layer kinds in a model whose own block is not attention and a feed-forward";
    if (any(&LayerKind::nope) && m.positions != PositionKind::kRope)
      return "layers without RoPE in a model whose other layers have no RoPE either";
    if (any(&LayerKind::dense_ffn) && !m.moe.active()) return "dense feed-forward layers in a model without experts";
  }
  if (m.mtp_kinds.size() > 64) return "more than 64 layers in a multi-token prediction depth";
  for (const LayerKind& k : m.mtp_kinds)
    if (std::find(m.layers.begin(), m.layers.end(), k) == m.layers.end())
      return "a multi-token prediction layer of a kind none of the model's layers is";
  return check_moe(m.moe);
}

namespace {

int64_t norm_params(const ModelConfig& m) {
  return m.d_model * (m.norm == NormKind::kLayerNorm && m.norm_bias ? 2 : 1);
}

// The matrices and biases of one FFN of width f: MLP d*f + f*d, GLU one more d*f.
int64_t ffn_weights(const ModelConfig& m, int64_t f) { return (m.ffn == FfnKind::kGlu ? 3 : 2) * m.d_model * f; }

int64_t attention_params(const ModelConfig& m) {
  if (m.mla.active()) {  // down projections and their norms, up projections, out projection; no biases
    const MlaConfig& a = m.mla;
    const int64_t d = m.d_model, h = m.n_heads;
    const int64_t query =
        a.q_lora_rank > 0 ? d * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * m.q_dim() : d * m.q_dim();
    const int64_t key_value = d * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank +
                              a.kv_lora_rank * h * (a.qk_nope_head_dim + a.v_head_dim);
    return query + key_value + m.o_dim() * d;
  }
  const int64_t d = m.d_model, q = m.q_dim(), kv = m.kv_dim();
  const int64_t weights = d * q * (m.attention_output_gate ? 2 : 1) + 2 * d * kv + q * d;
  const int64_t biases = (m.qkv_bias ? q + 2 * kv : 0) + (m.linear_bias ? d : 0);
  const int64_t qk_norm = m.qk_norm == QkNorm::kPerHead ? 2 * m.d_head()
                          : m.qk_norm == QkNorm::kWhole ? q + kv
                                                        : 0;  // kPerHeadNoWeight: none
  return weights + biases + qk_norm + (m.attention_sinks ? m.n_heads : 0);
}

// The Mamba-2 mixer: in projection, the convolution (and its bias), dt_bias, A_log and D per head,
// the gated norm's weight, the out projection.
int64_t mamba_params(const ModelConfig& m) {
  const Mamba2Config& b = m.mamba;
  return m.d_model * b.in_width() + (b.conv_kernel + (b.conv_bias ? 1 : 0)) * b.conv_channels() + 3 * b.heads +
         b.d_inner() + b.d_inner() * m.d_model;
}

// The Gated DeltaNet: in projections, the convolution (no bias), dt_bias and A_log per value head,
// the gated norm's value_head_dim weight, the out projection.
int64_t gdn_params(const ModelConfig& m) {
  const GdnConfig& g = m.gdn;
  return m.d_model * g.in_width() + g.conv_kernel * g.conv_channels() + 2 * g.value_heads + g.value_head_dim +
         g.value_dim() * m.d_model;
}

int64_t mixer_params(const ModelConfig& m) {
  switch (m.mixer) {
    case Mixer::kAttention: return attention_params(m);
    case Mixer::kMamba2: return mamba_params(m);
    case Mixer::kGatedDeltaNet: return gdn_params(m);
    case Mixer::kNone: return 0;
  }
  return 0;
}

// The norms before (and with post_norms, after) each of the layer's sublayers.
int64_t layer_norm_params(const ModelConfig& m) {
  const int64_t sublayers = (m.mixer != Mixer::kNone ? 1 : 0) + (m.no_ffn ? 0 : 1);
  return sublayers * (m.post_norms ? 2 : 1) * norm_params(m);
}

// The feed-forward with `routed_experts` of the routed experts' weights counted.
int64_t ffn_params(const ModelConfig& m, int64_t routed_experts) {
  const int64_t d = m.d_model;
  if (m.no_ffn) return 0;
  if (!m.moe.active()) {
    const int64_t f = m.d_ffn();
    const int64_t biases = m.linear_bias ? (m.ffn == FfnKind::kGlu ? 2 * f : f) + d : 0;
    return ffn_weights(m, f) + biases;
  }
  const MoeConfig& e = m.moe;
  const int64_t router = d * e.experts + (e.router_bias ? e.experts : 0);
  const int64_t w = e.routed_width(d);  // the routed experts' model width
  const int64_t expert_biases = e.expert_bias ? (m.ffn == FfnKind::kGlu ? 2 : 1) * e.d_expert + w : 0;
  const int64_t routed =
      ((m.ffn == FfnKind::kGlu ? 3 : 2) * w * e.d_expert + expert_biases) * routed_experts + 2 * d * e.latent;
  const int64_t shared = e.shared_experts * ffn_weights(m, e.d_shared) + (e.shared_gate ? d : 0);
  return router + routed + shared + (e.output_bias ? d : 0);
}

}  // namespace

void require_uniform(const ModelConfig& m, const char* what) {
  if (!m.uniform())
    throw std::logic_error(std::string(what) + ": " + m.name + " has layers of several kinds (use layer_pattern)");
}

int64_t layer_parameter_count(const ModelConfig& m) {
  require_uniform(m, "layer_parameter_count");
  return mixer_params(m) + layer_norm_params(m) + ffn_params(m, m.moe.experts);
}

int64_t layer_active_parameter_count(const ModelConfig& m) {
  require_uniform(m, "layer_active_parameter_count");
  if (!m.moe.active()) return layer_parameter_count(m);
  return mixer_params(m) + layer_norm_params(m) + ffn_params(m, m.moe.top_k);
}

int64_t embedding_parameter_count(const ModelConfig& m, int64_t seq_len) {
  const int64_t d = m.d_model;
  const int64_t token = m.vocab_size * d;
  const int64_t output = m.tie_embeddings ? 0 : m.vocab_size * d;
  const int64_t position = m.learned_positions() ? (m.max_positions > 0 ? m.max_positions : seq_len) * d : 0;
  return token + output + position + norm_params(m);
}

int64_t blocks_parameter_count(const ModelConfig& m) {
  if (m.uniform()) return m.n_layers * layer_parameter_count(m);  // no pattern to build (the hot path)
  int64_t n = 0;
  for (const LayerGroup& g : layer_pattern(m).groups) n += g.layers * layer_parameter_count(g.model);
  return n;
}

int64_t blocks_active_parameter_count(const ModelConfig& m) {
  if (m.uniform()) return m.n_layers * layer_active_parameter_count(m);
  int64_t n = 0;
  for (const LayerGroup& g : layer_pattern(m).groups) n += g.layers * layer_active_parameter_count(g.model);
  return n;
}

int64_t parameter_count(const ModelConfig& m, int64_t seq_len) {
  return blocks_parameter_count(m) + embedding_parameter_count(m, seq_len);
}

int64_t active_parameter_count(const ModelConfig& m, int64_t seq_len) {
  const int64_t embedding = embedding_parameter_count(m, seq_len) - (m.tie_embeddings ? 0 : m.vocab_size * m.d_model);
  return blocks_active_parameter_count(m) + embedding;
}

ModelConfig vtrain_gpt_model(int64_t hidden, int64_t heads, int64_t layers) {
  ModelConfig m;
  m.name = "gpt-h" + std::to_string(hidden) + "-a" + std::to_string(heads) + "-l" + std::to_string(layers);
  m.d_model = hidden;
  m.n_heads = heads;
  m.n_layers = layers;
  m.vocab_size = 50257;
  m.expansion_ratio = 4.0;
  m.positions = PositionKind::kLearned;
  m.max_positions = 0;  // the run's sequence length
  m.norm = NormKind::kLayerNorm;
  m.norm_bias = m.qkv_bias = m.linear_bias = true;
  m.ffn = FfnKind::kMlp;
  m.activation = Activation::kGelu;
  m.tie_embeddings = true;
  // Megatron-DeepSpeed's core attention unless --use-flash-attn is given (it is opt-in there). The
  // residuals say so too: with flash attention costed, the 1,024-wide models (where attention is
  // the larger share) come out 7% fast and the 2,048-wide 1% slow (docs/accuracy.md, "Megatron:
  // vTrain's 1,440 single-node runs").
  use_megatron_core_attention(m);
  return m;
}

void use_megatron_core_attention(ModelConfig& m) {
  m.unfused_attention = true;
  m.attention_dropout = 0.1;
}

}  // namespace tpsim
