// What `tpsim plan` computes: for each device and GPU count asked, every configuration that fits
// (the search's kAllThatFit), scored by time or cost per token and ranked, with why the others
// were rejected. Rendering (tables, intervals, plots) is the command's.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/search.hpp"

namespace tpsim {

enum class Objective : uint8_t {
  kTime,  // seconds per token: the fastest run
  kCost,  // GPU-seconds per token: the fewest GPU-hours
};

// One device to plan on, with the profile its predictions use.
struct PlanDevice {
  const DeviceSpec* spec = nullptr;
  const CostParams* params = nullptr;
};

struct PlanQuery {
  const ModelConfig* model = nullptr;
  std::vector<PlanDevice> devices;
  std::vector<int64_t> gpu_counts;
  int64_t seq_len = 0;
  Precision precision = Precision::kAmpBf16;
  MpMode mp_mode = MpMode::kDefault;
  double asked_sequences = 0;  // the global batch asked for, in sequences (rounded per GPU count)
  SearchSpace space;
  Objective objective = Objective::kTime;
};

struct PlannedConfig {
  const DeviceSpec* device = nullptr;
  TrainConfig cfg;
  Prediction prediction;
  double score = 0;  // lower is better: seconds, or GPU-seconds, per token
};

struct PlanRejection {
  const DeviceSpec* device = nullptr;
  int64_t gpus = 0;
  bool batch_unreachable = false;  // fewer than one sequence per GPU: every layout (no `rejection`)
  Rejection rejection;
};

struct PlanResult {
  std::vector<PlannedConfig> ranked;  // best first; equal scores keep the order they were found in
  std::vector<PlanRejection> rejected;
};

// `progress(i)` is called before the i-th (device, GPU count) is searched.
PlanResult plan_runs(const PlanQuery& query, const std::function<void(int64_t)>& progress = {});

// Whole sequences per GPU, as close to `asked_sequences` as that allows; 0 when fewer than one.
// One global batch per GPU count, for every layout: a multiple of the GPU count is a multiple of
// every layout's data-parallel degree (which divides the GPU count), so each megatron layout meets
// Megatron-LM's global batch = micro-batch x data parallel x accumulation with some micro-batch,
// and the layouts of a GPU count are ranked on the same batch. (The price: a batch of fewer
// sequences than GPUs, which a layout with fewer replicas could run, is not planned.)
int64_t planned_global_batch(double asked_sequences, int64_t n_gpus);

}  // namespace tpsim
