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

FsdpLayout fsdp_layout(Sharding sharding, int64_t n_gpus, int64_t gpus_per_node, int64_t gpus_per_host) {
  FsdpLayout l;
  if (sharding == Sharding::kHybridShard && gpus_per_host > 0 && gpus_per_host < gpus_per_node) {
    const int64_t per_host = std::min(n_gpus, gpus_per_host);
    l.shard_ranks = per_host;
    l.shard_group = strided_group(per_host, 1, gpus_per_node);
    l.gather_in_forward = l.gather_in_backward = per_host > 1;
    l.replica_group = strided_group(n_gpus / per_host, per_host, gpus_per_node);
    return l;
  }
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
    case Sharding::kDdp:
      l.shard_ranks = 1;
      l.shard_group = spanning(n_gpus, gpus_per_node);
      l.grad_reduce = CollectiveKind::kAllReduce;
      l.ddp = true;
      l.bucket_bytes = kDdpBucketBytes;
      break;
  }
  return l;
}

std::string resolve_hsdp_mesh(const Layout& par, Sharding sharding, int64_t n_gpus, HsdpMesh* out) {
  *out = HsdpMesh{};
  const int64_t shard = par.shard_degree == 0 ? -1 : par.shard_degree;  // Composer's default: -1
  const int64_t replicate = par.replicate_degree;                       // 0: None
  if (replicate == 0 && shard == -1) return {};  // Composer's defaults: the strategy's own groups
  const std::string degrees =
      (replicate == 0 ? std::string() : "replicate degree " + std::to_string(replicate) + " x ") + "shard degree " +
      std::to_string(shard);
  for (int64_t d : {shard, replicate})
    if (d < -1 || d > kMaxGpus) return degrees + ": a degree is -1 (the rest) or 1.." + std::to_string(kMaxGpus);
  if (sharding == Sharding::kDdp)
    return degrees + ": DDP has no shard or replicate groups (they are fsdp_config's; give a sharding strategy)";
  if (shard == -1 && replicate == -1) return degrees + ": only one degree may be -1 (the rest of the GPUs)";
  if (replicate != 0 && sharding == Sharding::kNoShard)
    return degrees + ": NO_SHARD takes no 2D device mesh (PyTorch FSDP); use HYBRID_SHARD or FULL_SHARD";
  const bool has_rest = shard == -1 || replicate == -1;
  const int64_t fixed = std::max<int64_t>(shard, 1) * std::max<int64_t>(replicate, 1);
  if (has_rest && n_gpus % fixed != 0) return degrees + ": does not divide the GPU count " + std::to_string(n_gpus);
  if (!has_rest && fixed != n_gpus) return degrees + ": the product is not the GPU count " + std::to_string(n_gpus);
  HsdpMesh m;
  m.mesh = true;
  m.two_d = replicate != 0;
  m.shard = shard > 0 ? shard : n_gpus / fixed;
  m.replicate = replicate > 0 ? replicate : n_gpus / fixed;
  *out = m;
  return {};
}

FsdpLayout composer_layout(Sharding sharding, const Layout& par, int64_t n_gpus, int64_t gpus_per_node,
                           int64_t gpus_per_host) {
  HsdpMesh m;
  resolve_hsdp_mesh(par, sharding, n_gpus, &m);
  if (!m.mesh) return fsdp_layout(sharding, n_gpus, gpus_per_node, gpus_per_host);
  if (!m.two_d)
    return fsdp_layout(sharding == Sharding::kHybridShard ? Sharding::kFullShard : sharding, n_gpus, gpus_per_node);
  FsdpLayout l;
  l.shard_ranks = m.shard;
  l.shard_group = strided_group(m.shard, 1, gpus_per_node);
  l.replica_group = strided_group(m.replicate, m.shard, gpus_per_node);
  l.gather_in_forward = m.shard > 1;
  l.gather_in_backward = m.shard > 1 && sharding != Sharding::kShardGradOp;  // _HYBRID_SHARD_ZERO2 keeps them
  return l;
}

CommGroup strided_group(int64_t ranks, int64_t stride, int64_t gpus_per_node, int64_t offsets) {
  CommGroup g;
  g.ranks = ranks;
  if (offsets <= 0) offsets = stride;
  if (ranks <= 1 || ranks * stride <= gpus_per_node) return g;  // one node
  if (stride >= gpus_per_node) {
    g.nodes = ranks;  // every member on its own node
  } else {
    // The members are closer than a node: the group touches every node from its first member's to
    // its last's. The count repeats with the offset's remainder by the node size.
    for (int64_t o = 0; o < std::min(offsets, gpus_per_node); ++o)
      g.nodes = std::max(g.nodes, (o + (ranks - 1) * stride) / gpus_per_node - o / gpus_per_node + 1);
    if (g.nodes == 1) return g;
  }
  g.groups_per_node = std::min(offsets, gpus_per_node);
  return g;
}

ModelParallelLayout model_parallel_layout(const Layout& par, int64_t n_gpus, int64_t gpus_per_node) {
  ModelParallelLayout l;
  l.tp = par.tensor;
  l.cp = par.context;
  l.pp = par.pipeline;
  l.vp = par.virtual_stages;
  l.dp = n_gpus / par.model_parallel();
  l.ep = par.expert;
  l.etp = par.expert_tensor_degree();
  l.tp_group = strided_group(l.tp, 1, gpus_per_node);
  l.cp_group = strided_group(l.cp, l.tp, gpus_per_node);
  // cp = 1: the dp replicas, tp apart, as before context parallelism.
  l.dp_group = strided_group(l.dp * l.cp, l.tp, gpus_per_node);
  l.etp_group = strided_group(l.etp, 1, gpus_per_node);
  l.ep_group = strided_group(l.ep, l.etp, gpus_per_node);
  l.tp_ep_group = strided_group(l.etp * l.ep, 1, gpus_per_node);
  l.expert_dp_group = strided_group(l.expert_grad_ranks(), l.etp * l.ep, gpus_per_node);
  const int64_t stage_stride = l.tp * l.cp * l.dp;
  // Some stage boundary falls between nodes once the stages span more than one node; the schedule
  // then waits on the slowest link every micro-batch.
  l.stage_link_crosses_nodes = l.pp > 1 && stage_stride * l.pp > gpus_per_node;
  l.stage_link_sharers = std::min(stage_stride, gpus_per_node);
  // The first and last stage's ranks holding the same embedding slice: two ranks, (pp-1) strides apart.
  l.embedding_group = l.pp > 1 ? strided_group(2, stage_stride * (l.pp - 1), gpus_per_node, stage_stride) : CommGroup{};
  return l;
}

}  // namespace tpsim
