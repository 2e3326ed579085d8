// How a run's GPUs are grouped: today data parallelism under PyTorch FSDP. Tensor and pipeline
// parallelism would add their own groups here (a tensor-parallel group inside a node, pipeline
// stages across), shrinking the FSDP groups to the data-parallel ranks of one model replica.
#pragma once

#include <cstdint>

#include "model/cost.hpp"
#include "model/training.hpp"

namespace tpsim {

struct FsdpLayout {
  int64_t shard_ranks = 1;   // parameters, gradients and optimizer state are divided this many ways
  CommGroup shard_group;     // all-gathers and reduce-scatters (or NO_SHARD's all-reduce)
  CommGroup replica_group;   // HYBRID_SHARD: all-reduce of the gradient shards across nodes
  bool gather_in_forward = false;   // parameters gathered before each block's forward
  bool gather_in_backward = false;  // ... and again before its backward (resharded after forward)
  CollectiveKind grad_reduce = CollectiveKind::kReduceScatter;
};

// FULL_SHARD:    shard over all GPUs; gather in forward and backward; reduce-scatter.
// SHARD_GRAD_OP: shard over all GPUs; gather in forward only (kept until backward); reduce-scatter.
// NO_SHARD:      every GPU holds everything; all-reduce the gradients.
// HYBRID_SHARD:  FULL_SHARD inside a node; all-reduce of the gradient shards across nodes.
// Every strategy issues its collectives per micro-batch (Composer does not skip the reduction of
// intermediate micro-batches).
FsdpLayout fsdp_layout(Sharding sharding, int64_t n_gpus, int64_t gpus_per_node);

}  // namespace tpsim
