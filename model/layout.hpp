// What a user asks of a layout (LayoutRequest: each axis given, or left to the search), and the one
// registry of the layout's axes: how the flags, the measured tables, the outputs and the rules name
// each of them. The concrete layout a configuration runs is Layout (model/training.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "model/framework.hpp"
#include "model/training.hpp"

namespace tpsim {

// What the command line (predict, sweep, plan) asks of a layout. An axis left unset is searched by
// sweep and plan and takes its framework's default under predict (fixed_layout). Composer's
// sharding strategy and checkpointing are asked through their own flags (--sharding, --ckpt),
// since a search lists them.
struct LayoutRequest {
  Framework framework = kDefaultFramework;
  bool framework_given = false;  // --framework given: the output shows the layout columns
  // The degrees (kDegreeAxes) and the routed experts' own tensor-parallel degree (unset: tp's, and
  // under megatron a search of a mixture of experts with tp > 1 also tries 1).
  std::optional<int64_t> tensor, pipeline, virtual_stages, context, expert, expert_tensor;
  // Unset: on wherever tensor > 1 (Megatron-LM's recommended setting); the framework's default.
  std::optional<bool> sequence_parallel, distributed_optimizer;
  // HSDP's mesh (composer: fsdp_config's data_parallel_shard_degree and _replicate_degree;
  // torchtitan: its data_parallel_*_degree): -1 the rest of the GPUs; unset: the framework's groups.
  std::optional<int64_t> shard_degree, replicate_degree;
  // megatron: the uneven pipeline split's first and last stage (Layout's fields).
  std::optional<int64_t> first_stage_layers, last_stage_layers;
  // torchtitan: selective_ac_option under selective checkpointing: 0 'op', N every N-th block.
  std::optional<int64_t> selective_ac_layers;
  // megatron: Megatron-FSDP's strategy (searched on one-stage layouts unless given); it sets the distributed optimizer
  // and the overlapped gradient reduction as Megatron-FSDP runs them.
  std::optional<MegatronFsdp> megatron_fsdp;
  // megatron: Megatron-Core's recompute modules of selective recompute (RecomputeModule bits; unset:
  // core_attn, its default). A search gives them to its selective layouts.
  std::optional<uint8_t> recompute_modules;
  // megatron: multi-token prediction's depths and whether they share one layer (Layout's fields).
  std::optional<int64_t> mtp_layers;
  bool mtp_repeated_layer = false;
  // megatron: the MoE token dispatcher (Layout::moe_dispatcher; unset: alltoall, never searched).
  std::optional<MoeDispatcher> moe_dispatcher;
  // megatron: the modules captured in CUDA graphs (Layout::cuda_graphs; unset: none, never searched).
  std::optional<uint8_t> cuda_graphs;
  // megatron: token dropping's capacity factor (Layout::moe_capacity_factor; unset: the model's).
  std::optional<double> moe_capacity_factor;
  // megatron: the paged stash's buffer factor (Layout::moe_paged_stash; unset: off).
  std::optional<double> moe_paged_stash;
  // megatron: the first and last layers in bf16 under an fp8 or fp4 recipe (Layout's fields; unset: 0).
  std::optional<int64_t> bf16_layers_start, bf16_layers_end;
  // megatron: a pipeline layout's id (Layout::pipeline_layout); 0: none.
  uint16_t pipeline_layout = 0;
  // The switches (kSwitchAxes): on when given, never searched.
  bool overlap_grad_reduce = false, grad_reduce_bf16 = false, fp8_param_gather = false, pipeline_scatter_gather = false,
       account_for_embedding = false, account_for_loss = false, tp_comm_overlap = false, moe_a2a_overlap = false,
       async_tensor_parallel = false, torch_compile = false, fused_rmsnorm = false, bf16_moments = false,
       delay_wgrad = false, fp8_output_proj = false, fused_grouped_mlp = false;
  // --attention: true unfused (the scores materialised, as the framework runs it without a fused
  // kernel), false flash; unset: the model's own.
  std::optional<bool> unfused_attention;
};

// The layout predict runs: the asked axes, the others at their framework's defaults (degrees 1,
// expert tensor parallel tp's, sequence parallel wherever tensor > 1, its distributed-optimizer
// default, no HSDP mesh), the sharding `sharding` under framework_sharding, no checkpointing.
Layout fixed_layout(const LayoutRequest& r, std::optional<Sharding> sharding = std::nullopt);

// Megatron-FSDP's strategy `m` and what it sets with it (Megatron-Bridge's _set_megatron_fsdp_overrides
// and Megatron-Core's DistributedDataParallelConfig): the distributed optimizer from optim on,
// gradient reduction overlapped with the backward, and the FSDP strategy it amounts to as the
// Sharding Strategy column names it (optim_grads_params FULL_SHARD, optim_grads SHARD_GRAD_OP,
// NO_SHARD below). kOff changes nothing else.
void set_megatron_fsdp(Layout& l, MegatronFsdp m);

// How a flag, a measured table's column, an output and a rule name one axis.
struct AxisNames {
  std::string_view name;    // in rules and errors: "tensor parallel"
  std::string_view flag;    // "--tp"
  std::string_view column;  // a table's and an output's header: "Tensor Parallel"; empty: none
  std::string_view label;   // the compact table's header ("TP"); lower-cased in a layout's phrase
};

// The model-parallel degrees (at least 1; 1 is no parallelism along the axis). Ranks are laid out
// in this order, tensor innermost (model/training.hpp Layout).
struct DegreeAxis {
  AxisNames names;
  int64_t Layout::*value;
  std::optional<int64_t> LayoutRequest::*asked;
};
inline constexpr std::array<DegreeAxis, 5> kDegreeAxes = {{
    {{"tensor parallel", "--tp", "Tensor Parallel", "TP"}, &Layout::tensor, &LayoutRequest::tensor},
    {{"pipeline parallel", "--pp", "Pipeline Parallel", "PP"}, &Layout::pipeline, &LayoutRequest::pipeline},
    {{"virtual stages", "--vp", "Virtual Stages", "VP"}, &Layout::virtual_stages, &LayoutRequest::virtual_stages},
    {{"context parallel", "--cp", "Context Parallel", "CP"}, &Layout::context, &LayoutRequest::context},
    {{"expert parallel", "--ep", "Expert Parallel", "EP"}, &Layout::expert, &LayoutRequest::expert},
}};
// The degrees that are not a Layout field of their own: data parallel (what the others leave of the
// GPUs) and expert tensor parallel (0 in Layout: tp's).
inline constexpr AxisNames kDataParallelAxis = {"data parallel", "", "Data Parallel", "DP"};
inline constexpr AxisNames kExpertTensorAxis = {"expert tensor parallel", "--etp", "Expert Tensor Parallel", "ETP"};

// The on/off options of a layout that no search varies: on in every layout when given, and each one
// framework's own option (`owner`; `whose` names the project it comes from). The label, when the
// option has one, is the phrase a layout's description gives it.
struct SwitchAxis {
  AxisNames names;
  bool Layout::*value;
  bool LayoutRequest::*asked;
  FrameworkOption owner;
  std::string_view whose;
};
inline constexpr std::array<SwitchAxis, 15> kSwitchAxes = {{
    {{"overlapped gradient reduction", "--overlap-grad-reduce", "Overlap Grad Reduce", "overlapped grad reduce"},
     &Layout::overlap_grad_reduce,
     &LayoutRequest::overlap_grad_reduce,
     FrameworkOption::kDistributedOptimizer,
     "megatron's"},
    {{"bf16 gradient reduction", "--grad-reduce-in-bf16", "Grad Reduce In BF16", "bf16 grad reduce"},
     &Layout::grad_reduce_bf16,
     &LayoutRequest::grad_reduce_bf16,
     FrameworkOption::kGradReduceBf16,
     "Megatron-Core's"},
    {{"fp8 parameters", "--fp8-param-gather", "FP8 Param Gather", "fp8 params"},
     &Layout::fp8_param_gather,
     &LayoutRequest::fp8_param_gather,
     FrameworkOption::kFp8ParamGather,
     "Megatron-Core's"},
    {{"fp8 output projection", "--fp8-output-proj", "FP8 Output Proj", "fp8 output proj"},
     &Layout::fp8_output_proj,
     &LayoutRequest::fp8_output_proj,
     FrameworkOption::kFp8OutputProj,
     "Megatron-Core's"},
    {{"fused grouped MLP", "--fused-grouped-mlp", "Fused Grouped MLP", "fused grouped mlp"},
     &Layout::fused_grouped_mlp,
     &LayoutRequest::fused_grouped_mlp,
     FrameworkOption::kFusedGroupedMlp,
     "TransformerEngine's"},
    {{"scatter-gather between stages", "--pipeline-scatter-gather", "Pipeline Scatter Gather", "scatter-gather p2p"},
     &Layout::pipeline_scatter_gather,
     &LayoutRequest::pipeline_scatter_gather,
     FrameworkOption::kPipelineScatterGather,
     "Megatron-LM's"},
    {{"tensor-parallel communication overlap", "--tp-comm-overlap", "TP Comm Overlap", ""},
     &Layout::tp_comm_overlap,
     &LayoutRequest::tp_comm_overlap,
     FrameworkOption::kTpCommOverlap,
     "Megatron-Core's"},
    {{"expert-parallel all-to-all overlap", "--overlap-moe-expert-parallel-comm", "MoE A2A Overlap", ""},
     &Layout::moe_a2a_overlap,
     &LayoutRequest::moe_a2a_overlap,
     FrameworkOption::kMoeA2aOverlap,
     "Megatron-Core's"},
    {{"delayed weight gradients", "--delay-wgrad-compute", "Delay Wgrad Compute", "delayed wgrad"},
     &Layout::delay_wgrad,
     &LayoutRequest::delay_wgrad,
     FrameworkOption::kMoeA2aOverlap,
     "Megatron-Core's"},
    {{"embedding counted as a layer", "--account-for-embedding", "Account For Embedding", "embedding as a layer"},
     &Layout::account_for_embedding,
     &LayoutRequest::account_for_embedding,
     FrameworkOption::kUnevenPipeline,
     "Megatron-Core's"},
    {{"loss counted as a layer", "--account-for-loss", "Account For Loss", "loss as a layer"},
     &Layout::account_for_loss,
     &LayoutRequest::account_for_loss,
     FrameworkOption::kUnevenPipeline,
     "Megatron-Core's"},
    {{"async tensor parallelism", "--async-tp", "", ""},
     &Layout::async_tensor_parallel,
     &LayoutRequest::async_tensor_parallel,
     FrameworkOption::kAsyncTensorParallel,
     "torchtitan's"},
    {{"torch.compile", "--compile", "Compile", "compiled"},
     &Layout::torch_compile,
     &LayoutRequest::torch_compile,
     FrameworkOption::kTorchCompile,
     "PyTorch's"},
    {{"fused RMSNorm", "--fused-rmsnorm", "Fused RMSNorm", "fused rmsnorm"},
     &Layout::fused_rmsnorm,
     &LayoutRequest::fused_rmsnorm,
     FrameworkOption::kFusedRmsNorm,
     "torchtitan's"},
    {{"bf16 Adam moments", "--bf16-adam-moments", "BF16 Adam Moments", "bf16 moments"},
     &Layout::bf16_moments,
     &LayoutRequest::bf16_moments,
     FrameworkOption::kBf16Moments,
     "Megatron-Core's"},
}};

// Megatron-Core's uneven split's fixed first and last stages (0: not fixed).
struct StageLayersAxis {
  AxisNames names;
  int64_t Layout::*value;
  std::optional<int64_t> LayoutRequest::*asked;
};
inline constexpr std::array<StageLayersAxis, 2> kStageLayersAxes = {{
    {{"first stage layers", "--first-stage-layers", "First Stage Layers", "first stage"},
     &Layout::first_stage_layers,
     &LayoutRequest::first_stage_layers},
    {{"last stage layers", "--last-stage-layers", "Last Stage Layers", "last stage"},
     &Layout::last_stage_layers,
     &LayoutRequest::last_stage_layers},
}};

// Megatron-FSDP's strategy: its flag and its column.
inline constexpr AxisNames kMegatronFsdpAxis = {"Megatron-FSDP", "--megatron-fsdp", "Megatron FSDP", "megatron-fsdp"};

// The two switches a search may vary, by their framework's default when not asked.
inline constexpr AxisNames kSequenceParallelAxis = {"sequence parallelism", "--sp", "Sequence Parallel", "sp"};
inline constexpr AxisNames kDistributedOptimizerAxis = {"the distributed optimizer", "--dist-opt",
                                                        "Distributed Optimizer", "dist-opt"};

}  // namespace tpsim
