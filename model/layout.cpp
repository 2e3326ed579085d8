#include "model/layout.hpp"

namespace tpsim {

Layout fixed_layout(const LayoutRequest& r, std::optional<Sharding> sharding) {
  const FrameworkDef& def = framework_def(r.framework);
  Layout l;
  l.framework = r.framework;
  l.sharding = framework_sharding(r.framework, sharding);
  for (const DegreeAxis& a : kDegreeAxes) l.*a.value = (r.*a.asked).value_or(1);
  if (r.expert_tensor) l.set_expert_tensor(*r.expert_tensor);
  l.sequence_parallel = r.sequence_parallel.value_or(l.tensor > 1);
  l.distributed_optimizer = r.distributed_optimizer.value_or(def.distributed_optimizer);
  for (const SwitchAxis& a : kSwitchAxes) l.*a.value = r.*a.asked;
  l.shard_degree = r.shard_degree.value_or(0);
  l.replicate_degree = r.replicate_degree.value_or(0);
  for (const StageLayersAxis& a : kStageLayersAxes) l.*a.value = (r.*a.asked).value_or(0);
  l.selective_ac_layers = r.selective_ac_layers.value_or(0);
  l.recompute_modules = r.recompute_modules.value_or(kDefaultRecomputeModules);
  l.mtp_layers = r.mtp_layers.value_or(0);
  l.mtp_repeated_layer = r.mtp_repeated_layer;
  l.pipeline_layout = r.pipeline_layout;
  l.moe_dispatcher = r.moe_dispatcher.value_or(MoeDispatcher::kAllToAll);
  l.cuda_graphs = r.cuda_graphs.value_or(0);
  l.moe_capacity_factor = r.moe_capacity_factor.value_or(0);
  l.moe_paged_stash = r.moe_paged_stash.value_or(0);
  l.bf16_layers_start = r.bf16_layers_start.value_or(0);
  l.bf16_layers_end = r.bf16_layers_end.value_or(0);
  if (r.megatron_fsdp) set_megatron_fsdp(l, *r.megatron_fsdp);
  return l;
}

void set_megatron_fsdp(Layout& l, MegatronFsdp m) {
  l.megatron_fsdp = m;
  if (m == MegatronFsdp::kOff) return;
  l.distributed_optimizer = m >= MegatronFsdp::kOptim;
  l.overlap_grad_reduce = true;
  l.sharding = m == MegatronFsdp::kOptimGradsParams ? Sharding::kFullShard
               : m == MegatronFsdp::kOptimGrads     ? Sharding::kShardGradOp
                                                    : Sharding::kNoShard;
}

}  // namespace tpsim
