// predict(): one training configuration in, step time, throughput, MFU/HFU and memory out.
// The chain: build the ops of a micro-batch -> cost them on the device -> lay the blocks' compute
// and FSDP collectives on two streams -> add the optimizer -> check memory -> llm-foundry metrics.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "model/architecture.hpp"
#include "model/cost.hpp"
#include "model/device.hpp"
#include "model/framework.hpp"
#include "model/memory.hpp"
#include "model/parallelism.hpp"
#include "model/profile.hpp"
#include "model/schedule.hpp"
#include "model/training.hpp"

namespace tpsim {

// Where the step's time goes; the parts sum to the step time.
struct StepBreakdown {
  double gemm_s = 0;
  double attention_s = 0;
  double other_compute_s = 0;  // norms, activations, residuals, embeddings, loss, FSDP casts
  double exposed_comm_s = 0;   // collectives compute does not hide, and compute slowed by them
  double optimizer_s = 0;
  double overhead_s = 0;         // fixed per-micro-batch and per-step idle time
  double pipeline_bubble_s = 0;  // pipeline parallelism: the stage's idle time waiting for other stages
  double allocator_s = 0;        // the caching allocator's retries near full memory (allocator_retry_fraction)
};

enum class Feasibility : uint8_t { kFits, kOutOfMemory };

struct Prediction {
  Feasibility feasibility = Feasibility::kFits;
  double step_s = 0;
  double seq_per_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double mfu = 0;  // fractions
  double hfu = 0;
  double model_flops_per_s_per_gpu = 0;
  int64_t n_params = 0;       // parameter_count(): the NumParams column
  int64_t active_params = 0;  // active_parameter_count(): what MFU and HFU multiply (llm-foundry's flops_per_batch)
  StepBreakdown time;
  Timeline timeline;
  MemoryBreakdown memory;
  double capacity_bytes = 0;

  bool fits() const { return feasibility == Feasibility::kFits; }
};

// What every framework's prediction derives alike once it has its step time, its active parameters
// and its memory: the throughput, llm-foundry's MFU and HFU (metrics.hpp; flops_per_batch counts the
// active parameters), the device's capacity, and whether the peak fits in it.
void complete_prediction(const ModelConfig& model, const DeviceSpec& device, const TrainConfig& cfg, Prediction& p);

// Empty when the simulator can model this configuration on this device, else the reason, naming
// the value at fault: the first rule of the rulebook it breaks (model/rules.hpp).
std::string check_config(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                         const TrainConfig& cfg);

// Requires check_config(...) to be empty. Allocates nothing; safe to call from many threads.
// The same as Evaluator(model, device, params).predict(cfg).
Prediction predict(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                   const TrainConfig& cfg);

// Seconds of a group of ops by breakdown category, and the activation bytes they keep for backward.
struct CategoryTotals {
  double gemm = 0, attention = 0, other = 0;
  double saved_bytes = 0;
  double kernels = 0;  // kernel launches
  // Ops that run once per optimizer step (Op::per_step), kept out of the per-micro-batch sums
  // above: their seconds and the bytes they write (what stays allocated: the fp8 weight cache).
  double per_step_s = 0, per_step_written_bytes = 0;
  double total() const { return gemm + attention + other; }
  void add(const CategoryTotals& o, double times) {
    gemm += o.gemm * times;
    attention += o.attention * times;
    other += o.other * times;
  }
};

// Costs each op as the builders produce it, into seconds by breakdown category.
class CategorySeconds final : public OpSink {
 public:
  CategorySeconds(const CostModel& cost, CategoryTotals& out) : cost_(cost), out_(out) {}

  void push(const Op& op) override {
    const double s = cost_.op_seconds(op);
    if (op.per_step) {
      out_.per_step_s += s;
      out_.per_step_written_bytes += op.bytes_written;
      return;
    }
    out_.saved_bytes += op.saved_bytes;
    out_.kernels += static_cast<double>(op.kernels);
    switch (op.category) {
      case OpCategory::kGemm: out_.gemm += s; break;
      case OpCategory::kAttention: out_.attention += s; break;
      case OpCategory::kOther:
      case OpCategory::kOptimizer: out_.other += s; break;
    }
  }

 private:
  const CostModel& cost_;
  CategoryTotals& out_;
};

// The seconds by category of the ops build(args..., sink) produces.
template <typename Build, typename... Args>
CategoryTotals costed(const CostModel& cost, Build build, const Args&... args) {
  CategoryTotals t;
  CategorySeconds sink(cost, t);
  build(args..., sink);
  return t;
}

// The costed ops of one micro-batch that depend only on its size, the sequence length and the
// precision: not on the sharding strategy, checkpointing or the GPU count.
// The costed ops of one micro-batch of a shape: a block's, the embeddings' and the head's forward
// and backward (shared by the FSDP and Megatron evaluators).
struct MicroBatchOpCosts {
  CategoryTotals block_fwd, block_bwd, embed_fwd, embed_bwd, head_fwd, head_bwd;
};
MicroBatchOpCosts cost_micro_batch_ops(const CostModel& cost, const BlockShape& shape);

// Predicts many configurations of one model on one device and profile, as a search does: each
// configuration goes to the evaluator of its framework (framework_def(f).make_evaluator, made on its
// first configuration), which shares what it costed across the configurations after it (the ops of
// a micro-batch shape, a layout's collectives). The results are those of predict(). The referenced
// model, device and params must outlive the Evaluator and not change while it is used; one
// Evaluator per thread.
class Evaluator {
 public:
  Evaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params);
  ~Evaluator();
  Evaluator(Evaluator&&) noexcept;
  Prediction predict(const TrainConfig& cfg);  // requires check_config(...) to be empty
  // The peak memory predict(cfg) would report, without laying out the schedule (a search's bound).
  MemoryBreakdown memory(const TrainConfig& cfg);
  bool fits(const MemoryBreakdown& m) const;  // within the device's memory, as Prediction::fits()

 private:
  FrameworkEvaluator& framework(Framework f);

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  std::array<std::unique_ptr<FrameworkEvaluator>, kAllFrameworks.size()> evaluators_;  // by Framework
};

}  // namespace tpsim
