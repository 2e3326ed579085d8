#include "model/scaling.hpp"

#include <algorithm>
#include <cmath>

#include "model/cost.hpp"

namespace tpsim {

std::string to_string(SyncFramework f) {
  switch (f) {
    case SyncFramework::kDdp: return "ddp";
    case SyncFramework::kLightning: return "lightning";
    case SyncFramework::kHorovod: return "horovod";
    case SyncFramework::kDeepSpeed: return "deepspeed";
    case SyncFramework::kUnnamed: return "unnamed";
  }
  return "?";
}

int64_t scaling_micro_batches(const ScalingRun& run) {
  if (run.gpus < 1 || run.per_device_batch < 1) return 0;
  if (run.global_batch <= 0) return 1;
  const int64_t per_step = run.gpus * run.per_device_batch;
  return run.global_batch % per_step == 0 ? run.global_batch / per_step : 0;
}

namespace {

// The all-reduce of the run's gradients over its GPUs on the cluster, by tpsim's collective model.
double allreduce_seconds(const ScalingRun& run, const DeviceSpec& cluster, const ScalingParams& p) {
  CostParams cost;
  cost.intra_node_link_efficiency = p.intra_node_link_efficiency;
  cost.inter_node_link_efficiency = p.inter_node_link_efficiency;
  const CostModel model(cluster, cost);
  const int64_t per_node = std::max(1, cluster.gpus_per_node);
  const CommGroup group{run.gpus, (run.gpus + per_node - 1) / per_node, 1};
  return model.collective_seconds(CollectiveKind::kAllReduce, run.grad_bytes, group);
}

// The share of the all-reduce that cannot hide behind the backward whatever its length.
double least_exposed_share(const ScalingRun& run, const ScalingParams& p) {
  double share = p.exposed_fraction;
  if (run.framework == SyncFramework::kDdp || run.framework == SyncFramework::kLightning)
    share += run.grad_bytes > 0 ? std::min(1.0, run.bucket_bytes / run.grad_bytes) : 0.0;
  return std::clamp(share, 0.0, 1.0);
}

}  // namespace

ScalingPrediction predict_scaling(const ScalingRun& run, const DeviceSpec& cluster, const ScalingParams& p) {
  ScalingPrediction out;
  const int64_t micro_1 = scaling_micro_batches(ScalingRun{1, run.per_device_batch, run.global_batch});
  out.micro_batches = scaling_micro_batches(run);
  const double samples_1 = static_cast<double>(run.per_device_batch * micro_1);
  const double step_1 = samples_1 / run.throughput_1gpu;
  out.fixed_s = p.fixed_fraction * step_1;
  const double micro_s = (step_1 - out.fixed_s) / static_cast<double>(micro_1);
  out.compute_s = micro_s * static_cast<double>(out.micro_batches);
  if (run.gpus > 1) {
    out.allreduce_s = allreduce_seconds(run, cluster, p);
    // The backward is about two thirds of a micro-batch (twice the forward's FLOPs); only the last
    // micro-batch's runs beside the all-reduce (the others accumulate under no_sync).
    const double backward_s = micro_s * 2.0 / 3.0;
    out.exposed_s = std::max(least_exposed_share(run, p) * out.allreduce_s, out.allreduce_s - backward_s);
    out.slowdown_s = p.overlap_slowdown * (out.allreduce_s - out.exposed_s);
  }
  if (run.gpus > 1) {
    out.sync_s = p.sync_jitter * out.compute_s * std::sqrt(2.0 * std::log(static_cast<double>(run.gpus)));
    if (run.framework == SyncFramework::kHorovod) out.coordination_s = p.coordination_s;
  }
  out.step_s = out.compute_s + out.fixed_s + out.exposed_s + out.slowdown_s + out.sync_s + out.coordination_s;
  const double samples = static_cast<double>(run.per_device_batch * run.gpus * out.micro_batches);
  out.throughput = samples / out.step_s;
  out.efficiency = out.throughput / (static_cast<double>(run.gpus) * run.throughput_1gpu);
  return out;
}

TrainConfig one_gpu_config(int64_t seq_len, int64_t micro_batch, int64_t global_batch, Precision precision) {
  TrainConfig cfg;
  cfg.seq_len = seq_len;
  cfg.n_gpus = 1;
  cfg.micro_batch = micro_batch;
  cfg.global_batch = global_batch > 0 ? global_batch : micro_batch;
  cfg.precision = precision;
  cfg.layout.sharding = Sharding::kDdp;
  cfg.layout.checkpointing = Checkpointing::kNone;
  return cfg;
}

}  // namespace tpsim
