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

CommGroup strided_group(int64_t ranks, int64_t stride, int64_t gpus_per_node) {
  CommGroup g;
  g.ranks = ranks;
  if (ranks <= 1 || ranks * stride <= gpus_per_node) return g;  // one node
  if (stride >= gpus_per_node) {
    g.nodes = ranks;                 // every member on its own node
    g.groups_per_node = gpus_per_node;
  } else {
    const int64_t per_node = gpus_per_node / stride;  // members sharing a node
    g.nodes = (ranks + per_node - 1) / per_node;
    g.groups_per_node = stride;
  }
  return g;
}

MegatronLayout megatron_layout(const Parallelism& par, int64_t n_gpus, int64_t gpus_per_node) {
  MegatronLayout l;
  l.tp = par.tensor;
  l.cp = par.context;
  l.pp = par.pipeline;
  l.vp = par.virtual_stages;
  l.dp = n_gpus / par.model_parallel();
  l.ep = par.expert;
  l.tp_group = strided_group(l.tp, 1, gpus_per_node);
  l.cp_group = strided_group(l.cp, l.tp, gpus_per_node);
  // cp = 1: the dp replicas, tp apart, as before context parallelism.
  l.dp_group = strided_group(l.dp * l.cp, l.tp, gpus_per_node);
  l.ep_group = strided_group(l.ep, l.tp, gpus_per_node);
  l.expert_dp_group = strided_group(l.dp * l.cp / l.ep, l.tp * l.ep, gpus_per_node);
  const int64_t stage_stride = l.tp * l.cp * l.dp;
  // Some stage boundary falls between nodes once the stages span more than one node; the schedule
  // then waits on the slowest link every micro-batch.
  l.stage_link_crosses_nodes = l.pp > 1 && stage_stride * l.pp > gpus_per_node;
  l.stage_link_sharers = std::min(stage_stride, gpus_per_node);
  // The first and last stage's ranks holding the same embedding slice: two ranks, (pp-1) strides apart.
  l.embedding_group = l.pp > 1 ? strided_group(2, stage_stride * (l.pp - 1), gpus_per_node) : CommGroup{};
  return l;
}

}  // namespace tpsim
