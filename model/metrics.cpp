#include "model/metrics.hpp"

namespace tpsim {

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
                               int64_t n_gpus, double peak_flops_per_s, Checkpointing checkpointing) {
  const double flops = foundry_flops_per_seq(n_params, seq_len);
  const double attn = foundry_attn_flops_per_seq(n_layers, d_model, seq_len);
  const double gpus = static_cast<double>(n_gpus);
  FoundryMetrics m;
  m.model_flops_per_s_per_gpu = (3.0 * flops + 3.0 * attn) * seq_per_s / gpus;
  m.mfu = m.model_flops_per_s_per_gpu / peak_flops_per_s;
  switch (checkpointing) {
    case Checkpointing::kNone: m.hfu = m.mfu; break;
    case Checkpointing::kSelective: m.hfu = (3.0 * flops + 4.0 * attn) * seq_per_s / (gpus * peak_flops_per_s); break;
    case Checkpointing::kFull: m.hfu = (4.0 * flops + 4.0 * attn) * seq_per_s / (gpus * peak_flops_per_s); break;
  }
  return m;
}

}  // namespace tpsim
