// How a run's GPUs are grouped: data parallelism under PyTorch FSDP (Composer), and Megatron-LM's
// tensor, pipeline and data-parallel groups.
#pragma once

#include <cstdint>
#include <string>

#include "model/cost.hpp"
#include "model/training.hpp"

namespace tpsim {

struct FsdpLayout {
  int64_t shard_ranks = 1;          // parameters, gradients and optimizer state are divided this many ways
  CommGroup shard_group;            // all-gathers and reduce-scatters (or NO_SHARD's all-reduce)
  CommGroup replica_group;          // HYBRID_SHARD: all-reduce of the gradient shards across nodes
  bool gather_in_forward = false;   // parameters gathered before each block's forward
  bool gather_in_backward = false;  // ... and again before its backward (resharded after forward)
  CollectiveKind grad_reduce = CollectiveKind::kReduceScatter;
  // DDP (Sharding::kDdp): no FSDP units. Autocast casts the fp32 weights in each forward (the casts
  // FSDP makes before a gather), and gradients are all-reduced in buckets of `bucket_bytes` on the
  // last micro-batch only (Composer's default DDPSyncStrategy SINGLE_AUTO_SYNC runs the others under
  // no_sync).
  bool ddp = false;
  double bucket_bytes = 0;
};

// PyTorch DDP's gradient bucket, bucket_cap_mb = 25 (torch/nn/parallel/distributed.py); Composer's
// prepare_ddp_module keeps the default.
inline constexpr double kDdpBucketBytes = 25.0 * 1024 * 1024;

// FULL_SHARD:    shard over all GPUs; gather in forward and backward; reduce-scatter.
// SHARD_GRAD_OP: shard over all GPUs; gather in forward only (kept until backward); reduce-scatter.
// NO_SHARD:      every GPU holds everything; all-reduce the gradients.
// HYBRID_SHARD:  FULL_SHARD inside a node; all-reduce of the gradient shards across nodes.
// Every strategy issues its collectives per micro-batch (Composer does not skip the reduction of
// intermediate micro-batches).
// DDP:           every GPU holds everything; gradients all-reduced in buckets once per step.
// `gpus_per_host` (0: gpus_per_node): PyTorch's HYBRID_SHARD shards over a host's local ranks. Where
// the scale-up domain spans hosts (NVL72: hosts of 4 in a domain of 72) it shards over the host and
// its replicas stay inside the domain while they fit in it.
FsdpLayout fsdp_layout(Sharding sharding, int64_t n_gpus, int64_t gpus_per_node, int64_t gpus_per_host = 0);

// Composer's HSDP device mesh from fsdp_config's data_parallel_shard_degree and
// data_parallel_replicate_degree (Layout::shard_degree, replicate_degree; composer/core/state.py
// _create_device_mesh): the replicate dimension when given, then the shard dimension; one -1 is the
// rest of the GPUs; the product must be the GPU count. A 1D mesh (no replicate degree) shards over
// every GPU. `mesh` is false when neither degree is given other than Composer's defaults (the
// sharding strategy's own groups, as before).
struct HsdpMesh {
  bool mesh = false;
  bool two_d = false;  // a replicate degree was given: (replicate, shard)
  int64_t shard = 1, replicate = 1;
};
// The mesh of `par` on n_gpus, or the reason it is not one, naming the degrees (one line).
std::string resolve_hsdp_mesh(const Layout& par, Sharding sharding, int64_t n_gpus, HsdpMesh* out);

// The layout Composer runs: fsdp_layout without a mesh; with one, the strategy Composer's
// prepare_fsdp_module hands PyTorch (a 2D mesh turns FULL_SHARD into HYBRID_SHARD and SHARD_GRAD_OP
// into _HYBRID_SHARD_ZERO2; a 1D mesh turns HYBRID_SHARD into FULL_SHARD): parameters, gradients
// and optimizer state sharded over the shard group, `shard` consecutive ranks (inside a node when it
// fits); the gradient shards all-reduced over the replicate group, ranks `shard` apart
// (strided_group). Requires resolve_hsdp_mesh to accept the configuration.
FsdpLayout composer_layout(Sharding sharding, const Layout& par, int64_t n_gpus, int64_t gpus_per_node,
                           int64_t gpus_per_host = 0);

// The group of `ranks` GPUs whose rank numbers are `stride` apart, on nodes of `gpus_per_node`
// consecutive ranks: within one node when the group's span fits, else over as many nodes as it
// reaches, with as many such groups crossing each node's NICs as share it. The groups start at the
// `offsets` consecutive ranks 0, 1, ... (0: `stride` of them, the groups interleaved); the slowest
// (the one reaching the most nodes) sets the time. Megatron's embedding group, the first and last
// stage's ranks (pp-1) stages apart, starts at each of the first stage's ranks only.
CommGroup strided_group(int64_t ranks, int64_t stride, int64_t gpus_per_node, int64_t offsets = 0);

// Megatron-LM's process groups (megatron/core/parallel_state.py, its default order "tp-cp-ep-dp-pp"):
// tensor-parallel ranks consecutive (inside a node), then context, then data-parallel replicas,
// with pipeline stages outermost (some stage boundary crosses nodes once the stages span several).
// The expert layers see the same ranks through a second generator (parallel_state.py's
// expert_decoder_rank_generator: tp = expert tensor parallel, ep, dp = expert data parallel, pp, with
// cp folded away): expert-tensor ranks innermost (etp of them; Megatron-Core's default expert tensor
// parallel is the tensor-parallel degree, megatron/training/arguments.py), then the ep ranks, then
// the expert-data-parallel ranks, tp*cp*dp/(etp*ep) of them: expert groups are carved out of each
// stage's tensor x context x data ranks (with etp = tp, out of its data x context ranks).
struct ModelParallelLayout {
  int64_t tp = 1, cp = 1, pp = 1, vp = 1, dp = 1, ep = 1, etp = 1;
  CommGroup tp_group;  // the activations' all-reduces (or all-gathers and reduce-scatters)
  CommGroup cp_group;  // ring attention's K/V exchange: cp ranks tp apart
  // The gradients' all-reduce (or the distributed optimizer's reduce-scatter) of every parameter but
  // the routed experts': the data-parallel group with context (dp*cp ranks tp apart; Megatron's DDP
  // reduces over get_data_parallel_group(with_context_parallel=True)). cp = 1: the dp replicas.
  CommGroup dp_group;
  CommGroup etp_group;                    // the routed experts' rows gathered and scattered: etp consecutive ranks
  CommGroup ep_group;                     // the token dispatcher's all-to-alls: ep ranks etp apart
  CommGroup tp_ep_group;                  // the flex dispatcher's: the etp x ep ranks, consecutive
  CommGroup expert_dp_group;              // the routed experts' gradients: tp*cp*dp/(etp*ep) ranks etp*ep apart
  CommGroup embedding_group;              // first and last stage: the tied word embedding's gradient all-reduce
  bool stage_link_crosses_nodes = false;  // pipeline sends between stages go over the network
  int64_t stage_link_sharers = 1;         // GPUs of a node sending over its NICs at once

  int64_t grad_ranks() const { return dp * cp; }                           // the dense parameters' gradient group
  int64_t expert_grad_ranks() const { return tp * cp * dp / (etp * ep); }  // the routed experts' (expert data parallel)
};
ModelParallelLayout model_parallel_layout(const Layout& par, int64_t n_gpus, int64_t gpus_per_node);

}  // namespace tpsim
