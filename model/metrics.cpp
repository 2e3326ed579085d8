#include "model/metrics.hpp"

namespace tpsim {

double foundry_flops_per_seq(int64_t n_params, int64_t seq_len) {
  return 2.0 * static_cast<double>(n_params) * static_cast<double>(seq_len);
}

double foundry_attn_flops_per_seq(int64_t n_layers, int64_t d_model, int64_t seq_len) {
  const double s = static_cast<double>(seq_len);
  return static_cast<double>(n_layers) * 2.0 * 2.0 * static_cast<double>(d_model) * s * s;
}

FoundryMetrics foundry_metrics(int64_t n_params, int64_t n_layers, int64_t d_model, int64_t seq_len,
                               double seq_per_s, int64_t n_gpus, double peak_flops_per_s,
                               bool activation_checkpointing) {
  const double flops = foundry_flops_per_seq(n_params, seq_len);
  const double attn = foundry_attn_flops_per_seq(n_layers, d_model, seq_len);
  const double gpus = static_cast<double>(n_gpus);
  FoundryMetrics m;
  m.model_flops_per_s_per_gpu = (3.0 * flops + 3.0 * attn) * seq_per_s / gpus;
  m.mfu = m.model_flops_per_s_per_gpu / peak_flops_per_s;
  m.hfu = activation_checkpointing ? (4.0 * flops + 4.0 * attn) * seq_per_s / (gpus * peak_flops_per_s) : m.mfu;
  return m;
}

}  // namespace tpsim
