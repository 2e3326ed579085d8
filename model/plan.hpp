// What `tpsim plan` computes: for each device and GPU count asked, every configuration that fits
// (the search's kAllThatFit) with at least the headroom asked, scored by time or cost per token and
// ranked robustly, with why the others were rejected; and the pick of each GPU count and of each
// device by the same rule. Rendering (tables, intervals, plots) is the command's.
//
// The ranking (docs/plan.md "How plan ranks"):
//   1. Headroom: configurations whose headroom (device memory - predicted peak) is under the margin
//      are dropped and counted. The margin is --min-headroom, by default 5% of the device's memory
//      (kDefaultHeadroomFraction: why there).
//   2. Score: seconds per token (time) or dollars per token (cost: GPU-seconds per token at each
//      device's price per GPU-hour), lowest first.
//   3. Robustness: the configurations whose score interval (the profile's held-out p10/p90 error,
//      widened beyond its fitted rows, model/interval.hpp; score x (1 + p10) to score x (1 + p90))
//      overlaps the fastest's cannot be told apart by the prediction. Among them, in turn: (a)
//      headroom: one with at least twice the margin goes before one with less, and between two
//      under it the one with more headroom goes first; (b) a power-of-two micro-batch; (c) less
//      checkpointing (none, selective, full); (d) fewer parallel degrees to set (model-parallel
//      ones above 1, an expert tensor parallel degree other than tp's, an HSDP mesh); (e) the score. They take the
//      first ranks, in that order; the rest follow by score. Without an interval (no profile interval for the model or
//      framework) the group is the configurations of equal score: the ranking is by score.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "model/interval.hpp"
#include "model/search.hpp"
#include "model/units.hpp"

namespace tpsim {

enum class Objective : uint8_t {
  kTime,  // seconds per token: the fastest run
  kCost,  // dollars per token (GPU-seconds per token x each device's price): the cheapest run
};

// The default --min-headroom: 5% of the device's memory (4 GiB of 80, 2 of 40, 7 of 141). The
// predicted peak already holds the profile's allocator fragmentation (x1.05) and reserve (3 GiB), both
// assumed, not measured; 5% of capacity more covers a fragmentation twice the assumed one (another
// 5% of the live memory, which is at most the capacity) before the run meets an out-of-memory error.
inline constexpr double kDefaultHeadroomFraction = 0.05;

// Full activation checkpointing close to full memory: a fitting prediction whose step includes the
// caching allocator's retries (StepBreakdown::allocator_s, model/memory.hpp). That term rests on
// seven measured runs of two models (docs/model.md "The allocator near full memory"): `predict`,
// `sweep` and `plan` say so, and plan's headroom rule (twice the default margin, 4 GiB of an A100
// 40GB) ranks such picks later.
bool checkpointed_near_full(const Prediction& p);

// One device to plan on, with the profile its predictions use and that profile's interval for the
// planned model and framework (none: ranked by score alone).
struct PlanDevice {
  const DeviceSpec* spec = nullptr;
  const CostParams* params = nullptr;
  std::optional<IntervalModel> interval;  // widened per configuration beyond its fit's domain
  double price_per_gpu_hour = 1;          // what Objective::kCost scores (1: GPU-hours)
};

struct PlanQuery {
  const ModelConfig* model = nullptr;
  std::vector<PlanDevice> devices;
  std::vector<int64_t> gpu_counts;
  int64_t seq_len = 0;
  Precision precision = Precision::kAmpBf16;
  MpMode mp_mode = MpMode::kDefault;
  Lora lora;  // fine-tuning with LoRA (model/lora.hpp); rank 0: every weight trained
  // The global batch, in sequences: the user's, never changed. A GPU count or layout that cannot
  // run it (llm-foundry: a multiple of the GPU count; megatron and torchtitan: of the data-parallel
  // degree, and whole micro-batches) is a rejection with its reason.
  int64_t global_batch = 0;
  SearchSpace space;
  Objective objective = Objective::kTime;
  std::optional<double> min_headroom_bytes;  // unset: kDefaultHeadroomFraction of each device's memory
};

struct PlannedConfig {
  const DeviceSpec* device = nullptr;
  TrainConfig cfg;
  Prediction prediction;
  double score = 0;                      // lower is better: seconds, or dollars (GPU-hours x price), per token
  double score_low = 0, score_high = 0;  // the interval of the score (equal to it without one)
  double headroom_bytes = 0;             // device memory - predicted peak
  double margin_bytes = 0;               // the headroom margin of its device
};

// Which rule put a configuration before the fastest of its group (kFastest: it is the fastest).
enum class PickRule : uint8_t { kFastest, kHeadroom, kPowerOfTwoMicroBatch, kLessCheckpointing, kFewerDegrees };

// A pick: `chosen` and the `fastest` of the same configurations (equal when the rule is kFastest).
struct Pick {
  PlannedConfig chosen, fastest;
  PickRule rule = PickRule::kFastest;
};

struct PlanRejection {
  const DeviceSpec* device = nullptr;
  int64_t gpus = 0;
  std::string all_reason;  // not empty: every layout of the GPU count is rejected for it (no `rejection`)
  Rejection rejection;
};

// Configurations that fit but with less headroom than the margin, per device and GPU count.
struct HeadroomDrop {
  const DeviceSpec* device = nullptr;
  int64_t gpus = 0;
  int64_t count = 0;
  double margin_bytes = 0;
  double best_headroom_bytes = 0;  // the most headroom among them
};

// The pick among one device's configurations (gpus 0: every GPU count), or none when none fits.
struct PointPick {
  const DeviceSpec* device = nullptr;
  int64_t gpus = 0;
  std::optional<Pick> pick;
};

struct PlanResult {
  std::vector<PlannedConfig> ranked;     // best first (the rule above)
  Pick top;                              // ranked[0] and why (when ranked is not empty)
  std::vector<PointPick> per_gpu_count;  // each GPU count asked, ascending; within one, each device in query order
  std::vector<PointPick> per_device;     // each device, in query order, over all its GPU counts
  std::vector<PlanRejection> rejected;
  std::vector<HeadroomDrop> dropped;
};

// `progress(i)` is called before the i-th (device, GPU count) is searched.
PlanResult plan_runs(const PlanQuery& query, const std::function<void(int64_t)>& progress = {});

// Step 3 of the rule on `configs` (any order): the robust group of the fastest first, in the
// robustness order, then the others by score (ties keep their order). Returns the pick.
Pick rank_robustly(std::vector<PlannedConfig>& configs);

}  // namespace tpsim
