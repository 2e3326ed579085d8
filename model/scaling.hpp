// Data-parallel scaling of any model (tpsim scale): the throughput of N GPUs from one GPU's, the
// bytes of the gradients and how the framework synchronises them, over a cluster's links.
//
// One optimizer step at N GPUs takes
//   compute   (micro-batches per GPU) x (one micro-batch's time at one GPU, less the fixed part)
// + fixed     fixed_fraction x the one-GPU step: work every GPU repeats whatever the GPU count
//             (the optimizer step, per-run start-up amortised over a fixed data set)
// + exposed   the part of the gradient all-reduce (CostModel::collective_seconds: ring over the
//             node's links, then the network) the backward of the last micro-batch does not hide
// + slowdown  overlap_slowdown x the hidden part (compute shares the GPU with the collective)
// + coordination  Horovod's per-step seconds: its background thread negotiates which tensors are
//             ready on every rank through the coordinator, once per cycle (HOROVOD_CYCLE_TIME, 1 ms
//             by default since v0.21, 5 ms before), before it fuses and reduces them.
// How much of the all-reduce can hide is the framework's: PyTorch DDP (and Lightning's DDP)
// reduce 25 MiB buckets as the backward produces them, so at least the last bucket is exposed;
// Horovod's tensor fusion and DeepSpeed's ZeRO (stages 0-2 reduce the same gradient bytes) expose
// a fitted fraction. The throughput is the step's samples over its seconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/device.hpp"
#include "model/profile.hpp"
#include "model/training.hpp"

namespace tpsim {

enum class SyncFramework : uint8_t { kDdp, kLightning, kHorovod, kDeepSpeed, kUnnamed };
inline constexpr int kNumSyncFrameworks = 5;
std::string to_string(SyncFramework f);  // "ddp", "lightning", "horovod", "deepspeed", "unnamed"

// The fitted values of the scaling model (one set per fit; per cluster and per framework ones are
// chosen by the run).
struct ScalingParams {
  double intra_node_link_efficiency = 0.75;  // achieved / datasheet GPU link bandwidth
  double inter_node_link_efficiency = 0.75;  // achieved / datasheet network bandwidth per node
  double overlap_slowdown = 0.1;             // compute slower by this while a collective runs beside it
  // Fraction of the all-reduce exposed at least, per framework. DDP and Lightning's is the last
  // bucket's share (bucket_bytes / gradient bytes) and is not fitted; this is added to it.
  double exposed_fraction = 0;
  double fixed_fraction = 0;  // of the one-GPU step; 0..1
  // Step-time jitter of one GPU (standard deviation / mean of its compute): a synchronous step
  // waits for the slowest of N GPUs, about sqrt(2 ln N) standard deviations above the mean.
  double sync_jitter = 0;
  double coordination_s = 0;  // Horovod only: seconds per step of its negotiation cycles (above)
};

struct ScalingRun {
  int64_t gpus = 1;
  int64_t per_device_batch = 1;  // samples per micro-batch per GPU
  int64_t global_batch = 0;      // samples per optimizer step; 0: weak scaling (gpus x per_device_batch)
  double throughput_1gpu = 0;    // samples/s of one GPU at this per-device batch
  double grad_bytes = 0;         // bytes all-reduced per optimizer step
  SyncFramework framework = SyncFramework::kDdp;
  double bucket_bytes = 25.0 * 1024 * 1024;  // DDP's bucket_cap_mb = 25 (torch/nn/parallel/distributed.py)
};

struct ScalingPrediction {
  double throughput = 0;  // samples/s of all GPUs
  double efficiency = 0;  // throughput / (gpus x throughput_1gpu)
  double step_s = 0;
  double compute_s = 0, fixed_s = 0, allreduce_s = 0, exposed_s = 0, slowdown_s = 0, sync_s = 0, coordination_s = 0;
  int64_t micro_batches = 1;  // per GPU per optimizer step
};

// The run's micro-batches per GPU per step, or 0 when the global batch is not a whole number of
// per-device batches over the GPUs.
int64_t scaling_micro_batches(const ScalingRun& run);

// `cluster` is the device with its cluster's gpus_per_node, links and network (io/clusters).
// Requires gpus >= 1, throughput_1gpu > 0, scaling_micro_batches(run) > 0.
ScalingPrediction predict_scaling(const ScalingRun& run, const DeviceSpec& cluster, const ScalingParams& params);

// The one-GPU run whose throughput tpsim predicts itself for a transformer it models (tpsim scale
// without a measured one): Composer's plain DDP on one GPU (no sharding, no activation
// checkpointing), `micro_batch` sequences of `seq_len` per micro-batch, `global_batch` sequences per
// optimizer step (0: one micro-batch). The same configuration `tpsim predict --gpus 1` runs.
TrainConfig one_gpu_config(int64_t seq_len, int64_t micro_batch, int64_t global_batch, Precision precision);

}  // namespace tpsim
