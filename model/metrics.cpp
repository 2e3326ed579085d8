#include "model/metrics.hpp"

#include <cstdio>

#include "model/architecture.hpp"
#include "model/device.hpp"

namespace tpsim {

double megatron_flops_per_sequence(const ModelConfig& m, int64_t seq_len, int64_t padded_vocab, int64_t mtp_layers) {
  const double h = static_cast<double>(m.d_model), s = static_cast<double>(seq_len);
  const double vocab = static_cast<double>(padded_vocab), n = static_cast<double>(m.n_heads);
  const double g = static_cast<double>(m.kv_heads()), kv_channels = static_cast<double>(m.d_head());
  const bool swiglu = m.ffn == FfnKind::kGlu;
  const MoeConfig& e = m.moe;
  const double topk = static_cast<double>(e.top_k), moe_ffn = static_cast<double>(e.d_expert);
  const double shared = static_cast<double>(e.shared_experts * e.d_shared), latent = static_cast<double>(e.latent);
  const LayerPattern pattern = layer_pattern(m);
  const auto count = [&](auto&& is) {
    double layers = 0;
    for (const LayerGroup& grp : pattern.groups)
      if (is(grp.model)) layers += static_cast<double>(grp.layers);
    return layers;
  };
  // Megatron's hybrid model (MambaModel) holds Mamba-2 layers and layers of one sublayer; a
  // transformer with Gated DeltaNet layers is its GPT model with a linear-attention variant.
  const bool hybrid = count([](const ModelConfig& l) {
                        return l.mixer == Mixer::kMamba2 || l.mixer == Mixer::kNone || l.no_ffn;
                      }) > 0 ||
                      m.mamba.active();
  if (hybrid) {  // hybrid_flops, per sequence (T = s tokens)
    const double t = s, scale = swiglu ? 1.5 : 1.0;
    const double p = kv_channels * n / h;
    const double attn = 4.0 * t * h * p * (h + h * g / n) + 2.0 * s * s * h * p;
    const double mlp = 4.0 * static_cast<double>(m.d_ffn()) * scale * t * h;
    double moe = 0;
    if (e.active()) {
      moe = latent > 0 ? 4.0 * t * latent * moe_ffn * topk * scale + 4.0 * t * h * latent
                       : 4.0 * t * h * moe_ffn * topk * scale;
      moe += 4.0 * t * h * shared * scale;
    }
    const Mamba2Config& b = m.mamba;
    const double d_in = 2.0 * h, state = static_cast<double>(b.d_state);
    const double mamba =
        2.0 * t * h * (2.0 * d_in + 2.0 * static_cast<double>(b.groups) * state + static_cast<double>(b.heads)) +
        7.0 * t * d_in * state + 2.0 * t * d_in * h;
    // With multi-token prediction, get_hybrid_layer_counts counts each depth's layers of the MTP
    // pattern (hybrid_layer_allocation.py) and the logits once more per depth; the depths' own
    // projections go uncounted.
    const double mtp = static_cast<double>(mtp_layers);
    const auto layers = [&](auto&& is) {
      double n = count([&](const ModelConfig& l) { return is(l.mixer, l.no_ffn, l.moe.active()); });
      for (const LayerKind& k : m.mtp_kinds)
        if (is(k.mixer, k.no_ffn, e.active() && !k.dense_ffn && !k.no_ffn)) n += mtp;
      return n;
    };
    const double fwd = layers([](Mixer x, bool, bool) { return x == Mixer::kAttention; }) * attn +
                       layers([](Mixer x, bool, bool) { return x == Mixer::kMamba2; }) * mamba +
                       layers([](Mixer, bool no_ffn, bool experts) { return !no_ffn && !experts; }) * mlp +
                       layers([](Mixer, bool no_ffn, bool experts) { return !no_ffn && experts; }) * moe +
                       2.0 * t * h * vocab * (1.0 + mtp);
    return 3.0 * fwd;
  }
  // transformer_flops, per token, then times s (token-linear) plus the s^2 core.
  const double ffn_factor = swiglu ? 3.0 : 2.0;
  // Each depth of multi-token prediction is one more layer of the last layer's kind.
  const double mtp = static_cast<double>(mtp_layers);
  const bool last_is_moe = pattern.groups[static_cast<size_t>(pattern.runs.back().group)].model.moe.active();
  const double moe_layers = count([](const ModelConfig& l) { return l.moe.active(); }) + (last_is_moe ? mtp : 0.0);
  const double dense_layers = static_cast<double>(m.n_layers) + mtp - moe_layers;
  const double routed =
      latent > 0 ? moe_ffn * topk * ffn_factor * latent / h + 2.0 * latent : moe_ffn * topk * ffn_factor;
  const double mlp = 6.0 * h *
                     (static_cast<double>(m.d_ffn()) * ffn_factor * dense_layers + routed * moe_layers +
                      shared * ffn_factor * moe_layers);
  double attn_linear = 0, attn_core = 0;
  if (m.mla.active()) {
    const MlaConfig& a = m.mla;
    const double nope = static_cast<double>(a.qk_nope_head_dim), rope = static_cast<double>(a.qk_rope_head_dim);
    const double v = static_cast<double>(a.v_head_dim), q_rank = static_cast<double>(a.q_lora_rank);
    const double kv_rank = static_cast<double>(a.kv_lora_rank);
    const double q_term = a.q_lora_rank > 0 ? q_rank * (h + n * (nope + rope) + 1.0) : h * n * (nope + rope);
    attn_linear = 6.0 * (q_term + kv_rank * (h + n * (nope + v) + 1.0) + h * rope + n * v * h);
    attn_core = 6.0 * (n * (nope + rope) / 2.0 + n * v / 2.0);
  } else {
    const double q = kv_channels * n, kv = kv_channels * g, gate = m.attention_output_gate ? q : 0.0;
    attn_linear = 6.0 * (h * (q + 2.0 * kv + gate) + q * h);
    attn_core = 6.0 * q;
  }
  // Gated DeltaNet layers (the linear-attention variant): in projection, convolution, the delta
  // rule's 4 products per value head (KK^T, VK^T, the state's update and SQ), out projection.
  const GdnConfig& gd = m.gdn;
  const double gdn_layers = count([](const ModelConfig& l) { return l.mixer == Mixer::kGatedDeltaNet; });
  const double gdn_linear =
      6.0 * (h * static_cast<double>(gd.in_width()) + static_cast<double>(gd.conv_kernel * gd.conv_channels()) +
             static_cast<double>(gd.value_heads) * static_cast<double>(gd.value_head_dim) *
                 static_cast<double>(gd.value_head_dim) * 4.0 +
             h * static_cast<double>(gd.value_dim()));
  const double attn_layers = static_cast<double>(m.n_layers) + mtp - gdn_layers;
  const double per_token = mlp + attn_layers * attn_linear + gdn_layers * gdn_linear +
                           6.0 * mtp * (3.0 * h + 2.0 * h * h) + 6.0 * h * vocab * (1.0 + mtp);
  return s * per_token + s * s * attn_layers * attn_core;
}

double foundry_flops_per_seq(int64_t n_params, int64_t seq_len) {
  return 2.0 * static_cast<double>(n_params) * static_cast<double>(seq_len);
}

double foundry_attn_flops_per_seq(int64_t n_layers, int64_t d_model, int64_t seq_len) {
  const double s = static_cast<double>(seq_len);
  return static_cast<double>(n_layers) * 2.0 * 2.0 * static_cast<double>(d_model) * s * s;
}

FoundryMetrics foundry_metrics(int64_t n_params, int64_t n_layers, int64_t d_model, int64_t seq_len, double seq_per_s,
                               int64_t n_gpus, double peak_flops_per_s, bool activation_checkpointing) {
  return foundry_metrics(n_params, n_layers, d_model, seq_len, seq_per_s, n_gpus, peak_flops_per_s,
                         activation_checkpointing ? Checkpointing::kFull : Checkpointing::kNone);
}

FoundryMetrics foundry_metrics(int64_t n_params, int64_t n_layers, int64_t d_model, int64_t seq_len, double seq_per_s,
                               int64_t n_gpus, double peak_flops_per_s, Checkpointing checkpointing,
                               int64_t lora_params) {
  const double flops = foundry_flops_per_seq(n_params + lora_params, seq_len);
  // The parameter term: 3x (forward, data and weight gradients), or under LoRA the weight gradient
  // of the adapters alone.
  const double params = lora_params > 0 ? 2.0 * flops + foundry_flops_per_seq(lora_params, seq_len) : 3.0 * flops;
  const double attn = foundry_attn_flops_per_seq(n_layers, d_model, seq_len);
  const double gpus = static_cast<double>(n_gpus);
  FoundryMetrics m;
  m.model_flops_per_s_per_gpu = (params + 3.0 * attn) * seq_per_s / gpus;
  m.mfu = m.model_flops_per_s_per_gpu / peak_flops_per_s;
  switch (checkpointing) {
    case Checkpointing::kNone: m.hfu = m.mfu; break;
    case Checkpointing::kSelective: m.hfu = (params + 4.0 * attn) * seq_per_s / (gpus * peak_flops_per_s); break;
    case Checkpointing::kFull: m.hfu = (params + flops + 4.0 * attn) * seq_per_s / (gpus * peak_flops_per_s); break;
  }
  return m;
}

std::string check_measured_throughput(const ModelConfig& model, const DeviceSpec& device, const TrainConfig& cfg,
                                      double tokens_per_s) {
  const int64_t active = active_parameter_count(model, cfg.seq_len);
  const double seq_per_s = tokens_per_s / static_cast<double>(cfg.seq_len);
  // Under LoRA the frozen weights have no weight gradient: 4 FLOPs per token and parameter.
  const double per_param = cfg.lora.active() ? 2.0 : 3.0;
  const double least =
      per_param * foundry_flops_per_seq(active, cfg.seq_len) * seq_per_s / static_cast<double>(cfg.n_gpus);
  const DType dtype = mfu_dtype(cfg.precision);
  const double peak = device.peak(dtype);
  if (peak <= 0 || least <= peak) return {};
  char text[400];
  std::snprintf(text, sizeof text,
                "Throughput (T/s) %.6g needs at least %.4g TFLOP/s per GPU (%d FLOPs per token and active parameter, "
                "%.4g billion of them, over %lld GPUs), more than %s's %s peak of %.4g TFLOP/s",
                tokens_per_s, least / 1e12, static_cast<int>(2.0 * per_param), static_cast<double>(active) / 1e9,
                static_cast<long long>(cfg.n_gpus), device.id.c_str(), std::string(to_string(dtype)).c_str(),
                peak / 1e12);
  return text;
}

}  // namespace tpsim
