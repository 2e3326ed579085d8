#include "model/metrics.hpp"

#include <cstdio>

#include "model/architecture.hpp"
#include "model/device.hpp"

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
