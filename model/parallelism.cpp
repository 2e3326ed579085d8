#include "model/parallelism.hpp"

#include <algorithm>

namespace tpsim {
namespace {

CommGroup spanning(int64_t ranks, int64_t gpus_per_node) {
  CommGroup g;
  g.ranks = ranks;
  g.nodes = (ranks + gpus_per_node - 1) / gpus_per_node;
  g.groups_per_node = 1;
  return g;
}

}  // namespace

FsdpLayout fsdp_layout(Sharding sharding, int64_t n_gpus, int64_t gpus_per_node) {
  FsdpLayout l;
  switch (sharding) {
    case Sharding::kFullShard:
      l.shard_ranks = n_gpus;
      l.shard_group = spanning(n_gpus, gpus_per_node);
      l.gather_in_forward = l.gather_in_backward = n_gpus > 1;
      break;
    case Sharding::kShardGradOp:
      l.shard_ranks = n_gpus;
      l.shard_group = spanning(n_gpus, gpus_per_node);
      l.gather_in_forward = n_gpus > 1;
      break;
    case Sharding::kNoShard:
      l.shard_ranks = 1;
      l.shard_group = spanning(n_gpus, gpus_per_node);
      l.grad_reduce = CollectiveKind::kAllReduce;
      break;
    case Sharding::kHybridShard: {
      const int64_t per_node = std::min(n_gpus, gpus_per_node);
      l.shard_ranks = per_node;
      l.shard_group = spanning(per_node, gpus_per_node);
      l.gather_in_forward = l.gather_in_backward = per_node > 1;
      l.replica_group.ranks = n_gpus / per_node;
      l.replica_group.nodes = l.replica_group.ranks;
      l.replica_group.groups_per_node = per_node;
      break;
    }
  }
  return l;
}

}  // namespace tpsim
