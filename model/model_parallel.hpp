// The model-parallel primitives Megatron-Core and torchtitan share: the shape one rank computes,
// how a pipeline splits the layers, the tensor-parallel collectives and the GEMMs they hide behind,
// ring attention, all-to-all, and the hops between pipeline stages; and the rules both frameworks'
// tensor and pipeline parallelism keep. Neither framework's conventions live here
// (model/megatron.hpp, model/torchtitan.hpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/cost.hpp"
#include "model/ops.hpp"
#include "model/parallelism.hpp"
#include "model/training.hpp"

namespace tpsim {

// The shape one rank computes (context, tensor and expert parallelism; `padded_vocab`:
// megatron_padded_vocab): the sequence's s/cp tokens (each op but the attention runs on them; the
// attention is ring_attention's), the tensor-parallel slice (tensor_parallel_shape), and for a
// mixture of experts each routed expert's width divided by the expert tensor parallel degree
// (--etp, Megatron-Core's --expert-tensor-parallel-size; when it is not given, the tensor-parallel
// degree, as megatron/training/arguments.py sets it) and each shared expert's by tp, and the routed
// experts split over ep (BlockShape::ep, BlockShape::expert_tp).
BlockShape rank_shape(const ModelConfig& model, const TrainConfig& cfg, int64_t padded_vocab);

// The capacity factor a run's routed experts `e` take: the run's token dropping
// (Layout::moe_capacity_factor) where given, else the model's own (0: dropless).
inline double run_capacity_factor(const Layout& par, const MoeConfig& e) {
  return par.moe_capacity_factor > 0 ? par.moe_capacity_factor : e.capacity_factor;
}

// What one rank of `rank_shape` holds for each of the token dispatcher's all-to-alls of a block:
// its routed rows (moe_routed_rows of its row_tokens(): t/tp tokens under sequence parallelism,
// times top_k, or the capacity's padded slots) of d_model activations. (ep-1)/ep of it leaves the
// rank (all_to_all_seconds).
double moe_dispatch_bytes(const BlockShape& rank_shape);

// The chance that a token's routed experts include one of `span` consecutive experts (a rank's, or
// an NVLink domain's), for a router that picks them uniformly at random: what Megatron-Core's
// --moe-router-force-load-balancing makes of every router (iid normal logits, moe_utils.py
// RandomSTE), as Megatron-Bridge's performance recipes run it, and the even load the rest of the
// cost model assumes. Without groups it is 1 - C(E-span, k) / C(E, k); with group-limited routing
// (MoeConfig::groups, g of n groups chosen) the groups are chosen uniformly (a group's score, the sum
// of its two best, is iid) and each chosen group takes k/g of the token's experts: a span inside a
// group is hit with 1 - C(size-span, k/g) / C(size, k/g) of its group's g/n chance, a span of c whole
// groups whenever one of them is chosen, 1 - C(n-c, g) / C(n, g). tests/test_dispatcher.cpp holds
// both to a simulation of Megatron-Core's router.
double routed_hit_probability(const MoeConfig& e, int64_t span);

// One of the flex dispatcher's dispatches or combines (Layout::moe_dispatcher deepep or hybridep;
// megatron/core/transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher, fused_a2a.py) of one
// micro-batch of a block: over the etp x ep ranks (`group`, ModelParallelLayout::tp_ep_group), each of
// the rank's row_tokens() tokens goes once to every rank holding one of its experts (the etp ranks
// of a hit expert slot), not once per expert as the all-to-all's rows do. Between NVLink domains
// (DeepEP's internode kernels, HybridEP's RDMA path) a token crosses the network once to each domain
// it reaches, to the rank of its own local index, which forwards it over NVLink: per rank, the
// network carries row bytes x P(domain hit) x (domains - 1), shared by the node's ranks, and NVLink
// row bytes x P(rank hit) x (ranks per domain - 1) x domains. Both at the links' rates and
// efficiencies (DeepEP's published normal kernels reach 153 of the H800's ~160 GB/s of NVLink and
// 43-58 GB/s of its 50 GB/s InfiniBand, deepseek-ai/DeepEP README), whichever is slower.
double flex_dispatch_seconds(const CostModel& cost, const BlockShape& rank_shape, const CommGroup& group);

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
// (ModelParallelLayout::cp_group), whose slowest hop each exchange waits for (ring_step_seconds).
struct RingAttention {
  double step_fwd_s = 0, step_bwd_s = 0;            // one step's attention forward and backward
  double fwd_compute_s = 0, bwd_compute_s = 0;      // the cp steps'
  double kv_bytes_per_step = 0;                     // K and V sent per step in the forward
  double step_fwd_comm_s = 0, step_bwd_comm_s = 0;  // one exchange: K/V, and K/V with dK/dV
  double fwd_exposed_s = 0, bwd_exposed_s = 0;      // what the steps' compute does not hide
};
RingAttention ring_attention(const CostModel& cost, const BlockShape& local, int64_t cp, const CommGroup& ring);

// Seconds of one hop of a ring over `ring` carrying `bytes` from every member to the next at once:
// within a node over the GPU's link; a ring spanning nodes waits for its hop between nodes, on NICs
// that the groups_per_node rings crossing each node share.
double ring_step_seconds(const CostModel& cost, double bytes, const CommGroup& ring);

// Seconds of one send of `bytes` from each rank of a stage to its peer in the next: over NVLink
// between stages on one node, else over the NICs the node's stage_link_sharers share.
double stage_hop_seconds(const CostModel& cost, const ModelParallelLayout& layout, double bytes);

// Seconds of one pipeline hop of a micro-batch's activations (or their gradients), `td_bytes` (its
// t x d values): over NVLink between stages on one node, else over the NICs the node's
// stage_link_sharers share. Under sequence parallelism each tensor-parallel rank holds and sends its
// tp-th part; under the legacy scatter-gather (Layout::pipeline_scatter_gather, without
// sequence parallelism) it sends its tp-th part too, and the receivers all-gather the parts over
// their tensor-parallel group before the next stage can run. One stage: nothing.
double pipeline_send_seconds(const CostModel& cost, const ModelParallelLayout& layout, const Layout& par,
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
//   - a pipeline layout (Layout::pipeline_layout): its chunks' decoder layers, the embedding in the
//     first chunk and the loss in the last, multi-token prediction's depths (as many as --mtp-layers)
//     with the loss; a chunk may hold no layer.
std::string split_layers(int64_t n_layers, const Layout& par, std::vector<int64_t>& layers);

// Megatron-Core's pipeline_model_parallel_layout (megatron/core/transformer/
// pipeline_parallel_layer_layout.py): model chunks separated by '|', each a run of 'E' (the
// embedding), 't' (a decoder layer), 'm' (a multi-token prediction depth) and 'L' (the loss); 'x*N'
// and '(...)*N' repeat; commas are cosmetic. Chunk k runs on stage k % pp.
struct PipelineLayout {
  std::string text;                                 // as given
  std::vector<int64_t> decoders;                    // per chunk, in model order
  std::vector<int64_t> mtp;                         // per chunk
  int64_t embedding_chunk = -1, loss_chunk = -1;    // where E and L are (each exactly once)
  bool embedding_first = false, loss_last = false;  // E the first entry of its chunk, L the last
};
// The layout `text` parses to, registered for Layout::pipeline_layout (its id, from 1), or nullopt
// with `error` saying what is wrong. Parsing registers; call it before evaluating (not thread-safe
// against itself).
std::optional<uint16_t> parse_pipeline_layout(std::string_view text, std::string& error);
const PipelineLayout& pipeline_layout(uint16_t id);  // id from parse_pipeline_layout

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

}  // namespace tpsim
