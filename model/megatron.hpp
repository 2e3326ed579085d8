// A Megatron-LM training step: tensor (and sequence), pipeline and data parallelism.
//
// Each rank computes the tensor-parallel slice of its stage's layers (ops.hpp tensor_parallel_shape)
// and, inside each block, waits for the activations' collectives over its tensor-parallel group:
// two all-reduces in the forward (after the attention's and the MLP's row-parallel linears) and two
// in the backward (the column-parallel linears' input gradients), or with sequence parallelism an
// all-gather and a reduce-scatter in their place (the same bytes; Korthikanti et al. 2022, Sec. 4.2.2).
// Megatron runs them on the compute stream's critical path (without TransformerEngine's
// tp-comm-overlap), so they add to the block's time. The vocabulary-parallel embedding adds one
// such collective in the forward; the vocabulary-parallel head one in each direction, and the
// cross-entropy three all-reduces of a number per token.
//
// The stages' chunks are laid out by the pipeline schedule (pipeline.hpp: 1F1B, interleaved with
// virtual stages), with point-to-point sends of one micro-batch's activations between stages. After
// its last backward each stage reduces its gradients over the data-parallel group (an all-reduce,
// or the distributed optimizer's reduce-scatter and, after the step, all-gather of the updated
// bf16 parameters), exposed unless overlap_grad_reduce hides it behind the last micro-batch's
// backward; the tied embedding's gradient is all-reduced between the first and last stage; then the
// optimizer runs over the rank's parameters (or its 1/dp shard).
#pragma once

#include <memory>
#include <string_view>
#include <vector>

#include "model/pipeline.hpp"
#include "model/simulator.hpp"

namespace tpsim {

// Empty when `cfg` is a layout Megatron-LM can run for `model` on `device`, else why not, naming the
// value at fault. check_config calls it for cfg.parallel.framework == kMegatron after its general
// checks (degrees at least 1, their product dividing the GPU count, whole data-parallel batches).
std::string check_megatron_config(const ModelConfig& model, const DeviceSpec& device, const TrainConfig& cfg);

// The rules Megatron-LM and torchtitan share ("" when `cfg` keeps them): tensor parallel divides the
// query and key/value heads and the feed-forward width; pipeline parallel at most the layers, and
// pipeline x virtual stages dividing them; virtual stages only with a pipeline; whole micro-batches
// (`framework` names who needs them); interleaved 1F1B with a multiple of the stages of
// micro-batches; and the pipeline schedule's own limits (check_pipeline).
std::string check_tensor_pipeline_config(const ModelConfig& model, const TrainConfig& cfg, std::string_view framework);

// Parameters one rank of stage `stage` holds (its tensor-parallel slice), and bytes per parameter
// of its weights, gradients and optimizer state.
struct MegatronStageState {
  double params = 0;  // local parameters
  double state_bytes = 0;
};

class MegatronEvaluator {
 public:
  MegatronEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params);
  ~MegatronEvaluator();
  Prediction predict(const TrainConfig& cfg);  // requires check_config(...) to be empty
  MemoryBreakdown memory(const TrainConfig& cfg);

 private:
  struct Costs;
  const Costs& costs(const TrainConfig& cfg);
  // The host's time beyond the GPU's per block forward and backward (with its recompute) and per
  // micro-batch on the first and last chunk.
  struct HostTime {
    double block_fwd = 0, block_bwd = 0, first = 0, last = 0;
  };
  HostTime chunk_seconds(const Costs& c, double recompute);
  void breakdown(const Costs& c, int64_t m, double recompute, const HostTime& host, size_t critical, double tail_s,
                 Prediction& p) const;

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  CostModel cost_;
  std::unique_ptr<Costs> memo_[4];
  size_t next_ = 0;
  std::vector<double> fwd_s_, bwd_s_;  // per model chunk, reused
  PipelineSimulator pipeline_;         // its buffers reused
};

}  // namespace tpsim
