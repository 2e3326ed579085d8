// A Megatron-LM training step: tensor (and sequence), pipeline, context, expert and data parallelism.
//
// Each rank computes the tensor-parallel slice of its stage's layers (ops.hpp tensor_parallel_shape)
// and, inside each block, waits for the activations' collectives over its tensor-parallel group:
// two all-reduces in the forward (after the attention's and the MLP's row-parallel linears) and two
// in the backward (the column-parallel linears' input gradients), or with sequence parallelism an
// all-gather and a reduce-scatter in their place (the same bytes; Korthikanti et al. 2022, Sec. 4.2.2).
// Megatron runs them on the compute stream's critical path, so they add to the block's time; with
// TransformerEngine's tp-comm-overlap (Parallelism::tp_comm_overlap) each is hidden behind the GEMM
// it feeds or follows up to that GEMM's time (tensor_parallel_seconds, userbuffers_sm_seconds). The vocabulary-parallel embedding adds one
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
//
// Context parallelism (docs/frameworks.md) divides every sequence's tokens over cp ranks: each op
// but the attention runs on s/cp tokens; the attention is ring_attention below. Expert parallelism
// splits a mixture of experts' routed experts over ep ranks, with Megatron-Core's all-to-all token
// dispatcher before and after them; the gradients of everything else are reduced over the dp*cp
// ranks, the experts' over the dp*cp/ep expert-data-parallel ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "model/ops.hpp"
#include "model/pipeline.hpp"
#include "model/recent_costs.hpp"
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

// The shape one rank computes (context, tensor and expert parallelism; `padded_vocab`:
// megatron_padded_vocab): the sequence's s/cp tokens (each op but the attention runs on them; the
// attention is ring_attention's), the tensor-parallel slice (tensor_parallel_shape), and for a
// mixture of experts each routed expert's width divided by the expert tensor parallel degree
// (--etp, Megatron-Core's --expert-tensor-parallel-size; when it is not given, the tensor-parallel
// degree, as megatron/training/arguments.py sets it) and each shared expert's by tp, and the routed
// experts split over ep (BlockShape::ep, BlockShape::expert_tp).
BlockShape megatron_rank_shape(const ModelConfig& model, const TrainConfig& cfg, int64_t padded_vocab);

// What one rank of `rank_shape` holds for each of the token dispatcher's all-to-alls of a block:
// its routed rows (moe_routed_rows of its row_tokens(): t/tp tokens under sequence parallelism,
// times top_k, or the capacity's padded slots) of d_model activations. (ep-1)/ep of it leaves the
// rank (all_to_all_seconds).
double moe_dispatch_bytes(const BlockShape& rank_shape);

// One rank's ring attention over one micro-batch of a block under context parallelism:
// TransformerEngine's AttnFuncWithCPAndKVP2P (cp_comm_type "p2p"), which Megatron-Core's
// TEDotProductAttention runs with --context-parallel-size. With causal load balancing each rank holds
// chunks i and 2cp-1-i of the 2cp chunks of every sequence (Megatron's get_batch_on_this_cp_rank), so
// `local` is the rank's shape with seq = s/cp. The rank computes its queries against every rank's
// keys in cp steps: step 0 its own K/V, causal (an attention of `local`'s shape); each later step
// one K/V block of another rank, of which the load balancing keeps exactly half of the (s/cp)^2
// pairs unmasked, the same FLOPs as step 0's causal attention. So each step costs one causal
// attention of `local`, and the cp steps together 1/cp of the full sequence's causal attention.
// While step i computes, the K/V of step i+1 travel one hop around the ring (2 * t/cp * kv_dim
// elements: K and V of the rank's tokens); step 0 waits for nothing, and each of the cp-1 exchanges
// is exposed only where it takes longer than the step it overlaps. The backward runs the same ring
// with dK and dV travelling beside K and V (twice the bytes per step), overlapped with each step's
// attention backward. cp = 1: one attention, nothing exchanged. `ring`: the cp ranks' group
// (MegatronLayout::cp_group), whose slowest hop each exchange waits for (ring_step_seconds).
struct RingAttention {
  double step_fwd_s = 0, step_bwd_s = 0;          // one step's attention forward and backward
  double fwd_compute_s = 0, bwd_compute_s = 0;    // the cp steps'
  double kv_bytes_per_step = 0;                   // K and V sent per step in the forward
  double step_fwd_comm_s = 0, step_bwd_comm_s = 0;  // one exchange: K/V, and K/V with dK/dV
  double fwd_exposed_s = 0, bwd_exposed_s = 0;    // what the steps' compute does not hide
};
RingAttention ring_attention(const CostModel& cost, const BlockShape& local, int64_t cp, const CommGroup& ring);

// Seconds of one hop of a ring over `ring` carrying `bytes` from every member to the next at once:
// within a node over the GPU's link; a ring spanning nodes waits for its hop between nodes, on NICs
// that the groups_per_node rings crossing each node share.
double ring_step_seconds(const CostModel& cost, double bytes, const CommGroup& ring);

// Seconds of one send of `bytes` from each rank of a stage to its peer in the next: over NVLink
// between stages on one node, else over the NICs the node's stage_link_sharers share.
double stage_hop_seconds(const CostModel& cost, const MegatronLayout& layout, double bytes);

// Seconds of one pipeline hop of a micro-batch's activations (or their gradients), `td_bytes` (its
// t x d values): over NVLink between stages on one node, else over the NICs the node's
// stage_link_sharers share. Under sequence parallelism each tensor-parallel rank holds and sends its
// tp-th part; under the legacy scatter-gather (Parallelism::pipeline_scatter_gather, without
// sequence parallelism) it sends its tp-th part too, and the receivers all-gather the parts over
// their tensor-parallel group before the next stage can run. One stage: nothing.
double pipeline_send_seconds(const CostModel& cost, const MegatronLayout& layout, const Parallelism& par,
                             double td_bytes);

// Seconds of an all-to-all in which each of the group's ranks sends `bytes` (its whole buffer, an
// equal part to every member, its own part staying) at once (NCCL's grouped send/recv, as
// torch.distributed.all_to_all_single runs): (m-1)/n of it over the GPU's link to the m members on
// its node, the rest through the node's NICs, which every member of the groups on the node uses at
// once; the slower of the two, plus one hop's latency.
double all_to_all_seconds(const CostModel& cost, double bytes, const CommGroup& group);

// The layers of each model chunk c = 0 .. pp*vp-1 in model order (chunk c runs on stage c % pp, as
// PipelineCosts lays them out) into `layers`, or why `par` cannot split `n_layers` (naming the value
// at fault; "" when it can). Megatron-Core's rules (megatron/core/transformer/transformer_block.py
// get_num_layers_to_build, transformer_layer.py get_transformer_layer_offset, and the checks of
// megatron/training/arguments.py and TransformerConfig):
//   - no uneven flag: n_layers / (pp*vp) per chunk, which must divide;
//   - first_stage_layers F and/or last_stage_layers L: the first (last) stage holds F (L) layers,
//     F/vp (L/vp) per chunk; the stages between split the rest evenly, each chunk
//     (n_layers - F - L) / (stages between * vp);
//   - account_for_embedding / account_for_loss: the embedding (loss) counts as one layer, so that
//     n_layers + 1 (+ 1) split evenly over the pp*vp chunks, and the first (last) chunk holds one
//     transformer layer fewer: Megatron-Bridge's Llama 3.1 405B recipe (126 layers, pp 8 x vp 8:
//     chunks of 2, the first and last of 1).
// Refused: a split with pp < 2, F or L not divisible by vp, the rest not divisible over the stages
// between, the two kinds of flag together (Megatron-Core refuses them together), counts that do not
// sum to n_layers, and any chunk left with no layers.
std::string megatron_chunk_layers(int64_t n_layers, const Parallelism& par, std::vector<int64_t>& layers);

// The seconds of a block's linears' GEMMs in one pass (the ops block_forward_ops or
// block_backward_ops build, costed, by their OpRole): the forward GEMMs (OpPass::kForward) or the
// input-gradient GEMMs (kDataGrad), which the tensor-parallel collectives feed or follow. Shared by Megatron's
// --tp-comm-overlap and torchtitan's async TP.
class LinearSeconds final : public OpSink {
 public:
  LinearSeconds(const CostModel& cost, OpPass pass) : cost_(cost), pass_(pass) {}
  double qkv = 0, out = 0, gate = 0, up = 0, down = 0;
  void push(const Op& op) override;

 private:
  const CostModel& cost_;
  OpPass pass_;
};
LinearSeconds linear_seconds(const CostModel& cost, void (*build)(const BlockShape&, OpSink&), const BlockShape& s,
                             OpPass pass);

// The sequence-parallel tensor-parallel collectives of one block and micro-batch: `ag` and `rs`, one
// all-gather and one reduce-scatter of the t x d activations (`td_bytes`) over `group`; `fwd` and
// `bwd`, what the compute stream waits for in each pass. Without `overlapped`: all of it, two
// all-gathers and two reduce-scatters per pass. With it (torchtitan's async TP, Megatron-Core's
// --tp-comm-overlap) each collective is hidden behind the GEMM it feeds or follows, up to that
// GEMM's time (min(comm, gemm) hidden, max(comm - gemm, 0) exposed): forward, the all-gather behind
// QKV, the reduce-scatter behind the out projection, the all-gather behind gate and up, the
// reduce-scatter behind down; backward, their transposes behind the input-gradient GEMMs (down,
// gate and up, out, QKV).
void tensor_parallel_seconds(const CostModel& cost, const BlockShape& shape, const CommGroup& group, bool overlapped,
                             double td_bytes, double& fwd, double& bwd, double& ag, double& rs);

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

class MegatronEvaluator {
 public:
  MegatronEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params);
  ~MegatronEvaluator();
  Prediction predict(const TrainConfig& cfg);  // requires check_config(...) to be empty
  MemoryBreakdown memory(const TrainConfig& cfg);

 private:
  struct Costs;
  const Costs& costs(const TrainConfig& cfg);
  void context_and_expert_costs(Costs& c, const BlockShape& shape, const TrainConfig& cfg) const;
  void tp_comm_overlap_costs(Costs& c, const BlockShape& shape, double td_bytes) const;
  void stage_costs(Costs& c, const TrainConfig& cfg, int64_t vocab) const;
  // The host's time beyond the GPU's per block forward and backward (with its recompute) and per
  // micro-batch on the first and last chunk.
  struct HostTime {
    double block_fwd = 0, block_bwd = 0, first = 0, last = 0;
  };
  HostTime chunk_seconds(const Costs& c, double recompute);
  void breakdown(const Costs& c, int64_t m, double recompute, const HostTime& host, size_t critical, double tail_s,
                 double merged_saving_s, Prediction& p) const;

  const ModelConfig& model_;
  const DeviceSpec& device_;
  const CostParams& params_;
  CostModel cost_;
  RecentCosts<Costs> memo_;
  std::vector<double> fwd_s_, bwd_s_;  // per model chunk, reused
  double pair_hidden_s_ = 0;           // combined 1F1B: what merging a layer's forward and backward saves
  PipelineSimulator pipeline_;         // its buffers reused
};

}  // namespace tpsim
