// A Megatron-LM training step: tensor (and sequence), pipeline, context, expert and data parallelism.
//
// Each rank computes the tensor-parallel slice of its stage's layers (ops.hpp tensor_parallel_shape)
// and, inside each block, waits for the activations' collectives over its tensor-parallel group:
// two all-reduces in the forward (after the attention's and the MLP's row-parallel linears) and two
// in the backward (the column-parallel linears' input gradients), or with sequence parallelism an
// all-gather and a reduce-scatter in their place (the same bytes; Korthikanti et al. 2022, Sec. 4.2.2).
// Megatron runs them on the compute stream's critical path, so they add to the block's time; with
// TransformerEngine's tp-comm-overlap (Layout::tp_comm_overlap) each is hidden behind the GEMM
// it feeds or follows up to that GEMM's time (tensor_parallel_seconds, userbuffers_sm_seconds). The vocabulary-parallel
// embedding adds one such collective in the forward; the vocabulary-parallel head one in each direction, and the
// cross-entropy three all-reduces of a number per token.
//
// The stages' chunks are laid out by the pipeline schedule (pipeline.hpp: 1F1B, interleaved with
// virtual stages), with point-to-point sends of one micro-batch's activations between stages. After
// its last backward each stage reduces its gradients over the data-parallel group (an all-reduce,
// or the distributed optimizer's reduce-scatter and, after the step, all-gather of the updated
// bf16 parameters), exposed unless overlap_grad_reduce hides it behind the last micro-batch's
// backward; the tied embedding's gradient is all-reduced between the first and last stage; then the
// optimizer runs over the rank's parameters (or its 1/dp shard).
//
// Context parallelism (docs/frameworks.md) divides every sequence's tokens over cp ranks: each op
// but the attention runs on s/cp tokens; the attention is ring_attention below. Expert parallelism
// splits a mixture of experts' routed experts over ep ranks, with Megatron-Core's all-to-all token
// dispatcher before and after them; the gradients of everything else are reduced over the dp*cp
// ranks, the experts' over the dp*cp/ep expert-data-parallel ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "model/model_parallel.hpp"
#include "model/ops.hpp"
#include "model/framework.hpp"
#include "model/pipeline.hpp"
#include "model/model_parallel_evaluator.hpp"
#include "model/recent_costs.hpp"
#include "model/simulator.hpp"

namespace tpsim {

// What TransformerEngine's userbuffers take from the GEMMs they overlap (--tp-comm-overlap): their
// communication kernels hold some of the GPU's SMs while a GEMM runs, which then runs on the rest,
// its time scaled by compute_units / (compute_units - held). The SMs held per GEMM are those of
// Megatron-Bridge's userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192 (megatron/bridge/training/
// comm_overlap.py), the configuration of its Llama 3 70B H100 FP8 runs (its 405B configuration
// differs by 2 SMs on two GEMMs): the forward's reduce-scatters after the out projection and down
// (ring exchange, num_sm 1, set_sm_margin) 1 SM each; its all-gathers (ring exchange over the copy
// engines) none; in the backward, the bulk all-gather of the input beside the QKV (4 SMs) and
// gate/up (2) input-gradient GEMMs, and the bulk reduce-scatter of the input gradient beside their
// weight-gradient GEMMs (24 and 4 SMs), costed on the input-gradient GEMMs' time (the same FLOPs);
// the all-gathers before the out and down input gradients (ring exchange) none. Seconds added to one
// block's forward and backward GEMMs.
struct UserbuffersSmCost {
  double fwd_s = 0, bwd_s = 0;
};
UserbuffersSmCost userbuffers_sm_seconds(const LinearSeconds& fwd, const LinearSeconds& dgrad, int compute_units);
inline constexpr int kUserbuffersMaxSms = 24;  // the most SMs userbuffers hold beside one GEMM (above)

// Parameters one rank of stage `stage` holds (its tensor-parallel slice), and bytes per parameter
// of its weights, gradients and optimizer state.
struct MegatronStageState {
  double params = 0;  // local parameters
  double state_bytes = 0;
};

struct MegatronCosts;  // model/megatron.cpp
struct MegatronBlock;  // model/megatron.cpp

class MegatronEvaluator final : public ModelParallelEvaluator<MegatronCosts> {
 public:
  MegatronEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params);
  ~MegatronEvaluator() override;
  Prediction predict(const TrainConfig& cfg) override;  // requires check_config(...) to be empty
  MemoryBreakdown memory(const TrainConfig& cfg) override;

 private:
  using Costs = MegatronCosts;
  void cost_layout(Costs& c, const TrainConfig& cfg) override;
  void context_and_expert_costs(MegatronBlock& b, const ModelParallelLayout& l, const BlockShape& shape,
                                const TrainConfig& cfg) const;
  void tp_comm_overlap_costs(MegatronBlock& b, const ModelParallelLayout& l, const BlockShape& shape,
                             double td_bytes) const;
  void stage_costs(Costs& c, const TrainConfig& cfg, int64_t vocab) const;
  void mtp_costs(Costs& c, const BlockShape& shape, const TrainConfig& cfg) const;
  void fsdp_costs(Costs& c, const TrainConfig& cfg, double root) const;
  // Per layer group, one block's seconds per micro-batch in the pipeline (forward, and backward with
  // its recompute) and the host's time beyond the GPU's in them; per micro-batch the host's on the
  // first and last chunk.
  struct HostTime {
    struct Block {
      double f_s = 0, b_s = 0;  // the block's forward and backward in the pipeline
      double fwd = 0, bwd = 0;  // the host's time beyond the GPU's in them
      // Megatron-FSDP: what a layer's gathers and reduce-scatters add beyond its compute (forward
      // and backward together).
      double fsdp = 0;
    };
    std::span<Block> blocks;  // by layer group (the evaluator's host_blocks_)
    double first = 0, last = 0;
    double fsdp_first = 0;  // Megatron-FSDP: the first unit's gather before each micro-batch's forward
  };
  HostTime chunk_seconds(const Costs& c, double recompute);
  void breakdown(const Costs& c, int64_t m, double recompute, const HostTime& host, size_t critical, double tail_s,
                 double merged_saving_s, Prediction& p) const;

  // A run's layer pattern (Costs::pattern): the model's, or with the layers Layout::bf16_layers_start
  // and bf16_layers_end leave out of the precision's recipe as groups of their own (bf16: which).
  struct RunPattern {
    int64_t start = 0, end = 0;
    LayerPattern pattern;
    std::vector<bool> bf16;  // per group
  };
  const RunPattern& run_pattern(const Layout& par);

  LayerPattern pattern_;  // the model's
  RunPattern base_;       // pattern_, no layer in bf16
  std::vector<std::unique_ptr<RunPattern>> bf16_patterns_;
  std::vector<LayerRun> mtp_depth_;           // one multi-token prediction depth's layers, as runs of pattern_'s groups
  std::vector<HostTime::Block> host_blocks_;  // chunk_seconds' per-group storage, reused
  std::vector<double> chunk_saved_;           // memory(): per model chunk, its layers' saved bytes
  double pair_hidden_s_ = 0;                  // combined 1F1B: what merging a layer's forward and backward saves
};

}  // namespace tpsim
