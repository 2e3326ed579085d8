#include "model/megatron.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "model/metrics.hpp"
#include "model/ops.hpp"
#include "model/parallelism.hpp"
#include "model/pipeline.hpp"
#include "model/schedule.hpp"
#include "model/rules.hpp"

namespace tpsim {
namespace {

double d(int64_t x) { return static_cast<double>(x); }

// Bytes per element of the gradients Megatron-LM keeps and reduces: fp32 main gradients under bf16
// (accumulate_allreduce_grads_in_fp32, which --bf16 turns on) and fp32, the parameters' fp16
// under fp16 (megatron/training/arguments.py), bf16 with --grad-reduce-in-bf16.
double megatron_grad_bytes(const TrainConfig& cfg) {
  return cfg.precision == Precision::kAmpFp16 || cfg.layout.grad_reduce_bf16 ? 2.0 : 4.0;
}

// The routed experts of `m`: its own, or its first expert layer's (a model whose layers differ); null
// without any.
const MoeConfig* routed_experts(const ModelConfig& m, const LayerPattern& pattern) {
  if (m.moe.active()) return &m.moe;
  for (const LayerGroup& g : pattern.groups)
    if (g.model.moe.active()) return &g.model.moe;
  return nullptr;
}

// Bytes per master parameter of the optimizer's state: the fp32 master weight and Adam's two fp32
// moments, 12. Under Layout::bf16_moments (Megatron-Core's precision-aware optimizer,
// megatron/core/optimizer/optimizer_config.py and distrib_optimizer.py) the moments take 2 each, and
// with bf16 weights (no fp8 recipe, use_precision_aware_optimizer_no_fp8_or_ds_fp8) TransformerEngine's
// FusedAdam keeps only the 16 bits of each fp32 master weight the bf16 weight lacks
// (store_param_remainders, on by default from TransformerEngine 2.1): 2 + 2 + 2. Under the fp8
// recipes Megatron-Core keeps the fp32 master itself: 4 + 2 + 2. (tpsim's amp_fp8 is taken as a
// current-scaling recipe, as Megatron-Bridge's; delayed scaling would take the remainders' 6.)
double optimizer_state_bytes(const TrainConfig& cfg) {
  if (!cfg.layout.bf16_moments) return 12.0;
  const DType w = block_gemm_dtype(cfg.precision);
  return (w == DType::kFp8 || w == DType::kFp4 ? 4.0 : 2.0) + 2.0 + 2.0;
}

// The routed experts' weights of one block (architecture.cpp ffn_params: each expert's 2 or 3
// matrices of d x d_expert, no biases): what expert parallelism splits. 0 for a dense block.
double routed_expert_params(const ModelConfig& m) {
  if (!m.moe.active()) return 0.0;
  return d(m.moe.experts) * (m.ffn == FfnKind::kGlu ? 3.0 : 2.0) * d(m.moe.routed_width(m.d_model)) * d(m.moe.d_expert);
}

// A gradient collective of the dense parameters' `dense_bytes` over the data-parallel group with
// context (dp*cp ranks) and of the routed experts' `expert_bytes` over the expert-data-parallel group
// (dp*cp/ep ranks): Megatron-Core's DDP keeps the expert parameters in buffers of their own, reduced
// over get_expert_data_parallel_group (parallel_state.py); the distributed optimizer shards each over
// its group.
double grad_collective(const CostModel& cost, CollectiveKind kind, double dense_bytes, double expert_bytes,
                       const ModelParallelLayout& l) {
  return cost.collective_seconds(kind, dense_bytes, l.dp_group) +
         cost.collective_seconds(kind, expert_bytes, l.expert_dp_group);
}

// One rank's model for its backward buffers: the model with its tensor-parallel widths, and `moe`,
// the experts' widths divided by the expert tensor parallel degree.
ModelConfig tensor_parallel_slice(const ModelConfig& model, int64_t tp, const MoeConfig& moe) {
  ModelConfig slice = model;
  slice.head_dim = model.d_head();
  slice.n_kv_heads = model.kv_heads() / tp;
  slice.n_heads = model.n_heads / tp;
  slice.ffn_hidden = model.d_ffn() / tp;
  slice.mamba.heads = model.mamba.heads / tp;
  slice.mamba.groups = model.mamba.groups / tp;
  slice.gdn.key_heads = model.gdn.key_heads / tp;
  slice.gdn.value_heads = model.gdn.value_heads / tp;
  slice.moe = moe;
  return slice;
}

// Each stage's layers: the sum of its model chunks' (chunk k runs on stage k % pp).
std::vector<int64_t> stage_layers_of(const std::vector<int64_t>& chunk_layers, int64_t pp) {
  std::vector<int64_t> out(static_cast<size_t>(pp), 0);
  for (size_t k = 0; k < chunk_layers.size(); ++k) out[k % out.size()] += chunk_layers[k];
  return out;
}

}  // namespace

UserbuffersSmCost userbuffers_sm_seconds(const LinearSeconds& fwd, const LinearSeconds& dgrad, int compute_units) {
  const double cu = static_cast<double>(compute_units);
  const auto slower = [cu](double gemm_s, double sms) { return gemm_s * sms / (cu - sms); };
  UserbuffersSmCost c;
  c.fwd_s = slower(fwd.out, 1.0) + slower(fwd.down, 1.0);
  const double fc1 = dgrad.gate + dgrad.up;
  c.bwd_s = slower(dgrad.qkv, 4.0) + slower(fc1, 2.0) + slower(dgrad.qkv, 24.0) + slower(fc1, 4.0);
  return c;
}

namespace {

// Megatron-Core's own rules (model/rules.hpp), each naming the value at fault.
std::string tp_comm_overlap_needs_tp_and_sp(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.tp_comm_overlap && (par.tensor < 2 || !par.sequence_parallel))
    return "TransformerEngine's tensor-parallel communication overlap (--tp-comm-overlap) needs tensor parallel > 1 "
           "and sequence parallelism";
  return {};
}

std::string moe_tensor_needs_sp(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (in.model->moe.active() && par.tensor > 1 && !par.sequence_parallel)
    return "a mixture of experts with tensor parallel " + std::to_string(par.tensor) +
           " needs sequence parallelism (--sp), as Megatron-LM asserts";
  return {};
}

std::string grad_reduce_bf16_needs_bf16(const RuleInput& in) {
  const Precision p = in.cfg.precision;
  if (in.cfg.layout.grad_reduce_bf16 && (p == Precision::kAmpFp16 || p == Precision::kFp32))
    return "--grad-reduce-in-bf16 needs bf16 parameters; precision " + std::string(to_string(p)) + " keeps its own";
  return {};
}

std::string fp8_param_gather_needs_low_precision(const RuleInput& in) {
  const Precision p = in.cfg.precision;
  if (in.cfg.layout.fp8_param_gather && block_gemm_dtype(p) != DType::kFp8 && block_gemm_dtype(p) != DType::kFp4)
    return "--fp8-param-gather needs low-precision weights (amp_fp8, mxfp8 or nvfp4); precision " +
           std::string(to_string(p)) + " has none";
  return {};
}

std::string moe_a2a_overlap_conditions(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.delay_wgrad && !par.moe_a2a_overlap)
    return "delayed weight gradients (--delay-wgrad-compute) need the expert-parallel all-to-all overlap "
           "(--overlap-moe-expert-parallel-comm), as Megatron-Core asserts";
  if (!par.moe_a2a_overlap) return {};
  const std::string what = "the expert-parallel all-to-all overlap (--overlap-moe-expert-parallel-comm)";
  if (!in.model->moe.active() || par.expert < 2)
    return what + " needs a mixture-of-experts model with expert parallel > 1, as Megatron-Core asserts";
  if (par.checkpointing == Checkpointing::kFull)
    return what + " does not run with full recompute, as Megatron-Core asserts";
  if (in.cfg.precision == Precision::kFp32) return what + " needs bf16 or fp16 weights, as Megatron-Core asserts";
  if (par.pipeline > 1 && par.virtual_stages < 2)
    return what + " with pipeline parallel " + std::to_string(par.pipeline) +
           " runs Megatron-Core's interleaved schedule: it needs virtual stages (--vp) of at least 2";
  return {};
}

// Megatron-FSDP's sharded gradients and parameters are modelled on one pipeline stage, and under the
// distributed optimizer's flags as it sets them (fixed_layout); a layout built otherwise (a measured
// row's columns) says which.
std::string megatron_fsdp_modelled(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.megatron_fsdp == MegatronFsdp::kOff) return {};
  const std::string what = "Megatron-FSDP " + std::string(to_string(par.megatron_fsdp));
  if (par.fsdp_shards_grads() && par.pipeline > 1)
    return what + " with pipeline parallel " + std::to_string(par.pipeline) +
           ": tpsim models Megatron-FSDP's sharded gradients and parameters on one pipeline stage (--pp 1)";
  if (par.distributed_optimizer != (par.megatron_fsdp >= MegatronFsdp::kOptim))
    return what + (par.distributed_optimizer ? " shards no optimizer state" : " shards the optimizer state") +
           ": the Distributed Optimizer column says otherwise";
  return {};
}

// Megatron-Core's recompute modules (Layout::recompute_modules) under its selective granularity, each
// on a model with what it recomputes where Megatron-Core asserts so (moe_act needs the experts' grouped
// GEMM, mla_up_proj latent attention) or would recompute nothing (moe and shared_experts without
// experts or shared experts, mlp without a dense feed-forward).
std::string recompute_modules_apply(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.recompute_modules == kDefaultRecomputeModules) return {};
  const std::string what = "--recompute-modules " + recompute_modules_text(par.recompute_modules, ",");
  if (par.checkpointing != Checkpointing::kSelective)
    return what + ": Megatron-Core's recompute modules run under selective recompute (--ckpt selective), not " +
           std::string(to_string(par.checkpointing));
  const ModelConfig& m = *in.model;
  const LayerPattern pattern = layer_pattern(m);
  bool dense_ffn = false;
  for (const LayerGroup& g : pattern.groups) dense_ffn = dense_ffn || (!g.model.no_ffn && !g.model.moe.active());
  const bool moe = routed_experts(m, pattern) != nullptr;
  const auto lacks = [&](RecomputeModule mod, std::string_view needs) {
    return what + ": " + std::string(to_string(mod)) + " needs " + std::string(needs) + "; " + m.name + " has none";
  };
  if (par.recomputes(RecomputeModule::kMoeAct) && !moe) return lacks(RecomputeModule::kMoeAct, "routed experts");
  if (par.recomputes(RecomputeModule::kMoe) && !moe) return lacks(RecomputeModule::kMoe, "routed experts");
  if (par.recomputes(RecomputeModule::kSharedExperts) && (!moe || m.moe.shared_experts == 0))
    return lacks(RecomputeModule::kSharedExperts, "shared experts");
  if (par.recomputes(RecomputeModule::kMlaUpProj) && !m.mla.active())
    return lacks(RecomputeModule::kMlaUpProj, "multi-head latent attention");
  if (par.recomputes(RecomputeModule::kMlp) && !dense_ffn)
    return lacks(RecomputeModule::kMlp, "a layer with a dense feed-forward");
  return {};
}

// Multi-token prediction (Layout::mtp_layers) where it is modelled: a transformer whose last layer is
// attention with a feed-forward (the MTP layer is one of its kind), or a hybrid model that names its
// depth's layers (ModelConfig::mtp_kinds, from mtp_hybrid_override_pattern); not under LoRA.
std::string mtp_modelled(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.mtp_layers == 0 && !par.mtp_repeated_layer) return {};
  if (par.mtp_layers < 0 || par.mtp_layers > 64)
    return "--mtp-layers " + std::to_string(par.mtp_layers) + " is outside 0..64";
  if (par.mtp_layers == 0) return "--mtp-repeated-layer needs --mtp-layers of at least 1";
  const ModelConfig& m = *in.model;
  const LayerPattern pattern = layer_pattern(m);
  const ModelConfig& last = pattern.groups[static_cast<size_t>(pattern.runs.back().group)].model;
  if (m.mtp_kinds.empty() && (last.mixer != Mixer::kAttention || last.no_ffn || m.mamba.active()))
    return "multi-token prediction on " + m.name +
           " (a hybrid model: its MTP depths follow a pattern of their own, which its config does not give as "
           "mtp_hybrid_override_pattern)";
  if (in.cfg.lora.active()) return "multi-token prediction under LoRA is not modelled";
  return {};
}

// The flex dispatcher (Layout::moe_dispatcher) where Megatron-Core runs it: on routed experts; DeepEP
// over more than one rank (token_dispatcher.py asserts TPxEP > 1), without padding to the capacity
// (transformer_config.py refuses moe_pad_expert_input_to_capacity) and within DeepEP's 8 NVLink peers
// (its NUM_MAX_NVL_PEERS; Megatron-Core: only hybridep supports a multi-node NVLink domain).
std::string moe_dispatcher_applies(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.moe_dispatcher == MoeDispatcher::kAllToAll) return {};
  const std::string what = "--moe-dispatcher " + std::string(to_string(par.moe_dispatcher));
  const ModelConfig& m = *in.model;
  const LayerPattern pattern = layer_pattern(m);
  const MoeConfig* moe = routed_experts(m, pattern);
  if (!moe) return what + ": " + m.name + " has no routed experts";
  if (par.moe_dispatcher != MoeDispatcher::kDeepEp) return {};
  const int64_t ranks = par.expert * par.expert_tensor_degree();
  if (ranks < 2) return what + " needs expert x expert tensor parallel > 1, as Megatron-Core asserts";
  if (const double cf = run_capacity_factor(par, *moe); cf > 0)
    return what + " does not pad experts to a capacity (capacity factor " + std::to_string(cf) +
           "), as Megatron-Core refuses; use flex:hybridep or alltoall";
  const int64_t peers = std::min<int64_t>(ranks, in.device->gpus_per_node);
  if (peers > 8)
    return what + " over " + std::to_string(peers) +
           " ranks of one NVLink domain: DeepEP reaches at most 8 NVLink peers (Megatron-Core runs only "
           "flex:hybridep across a multi-node NVLink domain)";
  return {};
}

// CUDA graphs (Layout::cuda_graphs) as Megatron-Core's TransformerConfig asserts them: each module on
// a model with what it captures (mlp needs a dense layer, moe and moe_router routed experts, mamba
// Mamba layers, attn attention), moe_preprocess with moe_router, not moe with moe_router, moe only
// with drop-padding (a capacity factor), moe_preprocess not with the all-to-all's capacity (its
// preprocessing copies to the host), and full recompute only under full_iteration.
std::string cuda_graphs_apply(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.cuda_graphs == 0) return {};
  const std::string what = "--cuda-graphs " + cuda_graphs_text(par.cuda_graphs, ",");
  const bool full_iteration = par.cuda_graphs == graph_bit(GraphModule::kFullIteration);
  if (par.checkpointing == Checkpointing::kFull && !full_iteration)
    return what + ": full recompute runs only under full_iteration graphs, as Megatron-Core asserts";
  if (full_iteration) return {};
  const auto has = [&](GraphModule m) { return (par.cuda_graphs & graph_bit(m)) != 0; };
  if (has(GraphModule::kMoePreprocess) && !has(GraphModule::kMoeRouter))
    return what + ": moe_preprocess needs moe_router, as Megatron-Core asserts";
  if (has(GraphModule::kMoe) && has(GraphModule::kMoeRouter))
    return what + ": moe and moe_router together, which Megatron-Core refuses";
  const ModelConfig& m = *in.model;
  const LayerPattern pattern = layer_pattern(m);
  bool attention = false, mamba = false, dense = false;
  const MoeConfig* moe = routed_experts(m, pattern);
  for (const LayerGroup& g : pattern.groups) {
    attention = attention || g.model.mixer == Mixer::kAttention;
    mamba = mamba || g.model.mixer == Mixer::kMamba2;
    dense = dense || (!g.model.no_ffn && !g.model.moe.active());
  }
  const bool whole_layer = (par.cuda_graphs & kWholeLayerGraphs) == kWholeLayerGraphs;
  const auto lacks = [&](GraphModule g, std::string_view needs) {
    return what + ": " + std::string(to_string(g)) + " captures " + std::string(needs) + "; " + m.name + " has none";
  };
  if (!whole_layer) {
    if (has(GraphModule::kAttn) && !attention) return lacks(GraphModule::kAttn, "attention layers");
    if (has(GraphModule::kMamba) && !mamba) return lacks(GraphModule::kMamba, "Mamba layers");
    if (has(GraphModule::kMlp) && !dense) return lacks(GraphModule::kMlp, "dense feed-forward layers");
    if ((has(GraphModule::kMoeRouter) || has(GraphModule::kMoe)) && !moe)
      return lacks(has(GraphModule::kMoe) ? GraphModule::kMoe : GraphModule::kMoeRouter, "routed experts");
  }
  const double capacity = moe ? run_capacity_factor(par, *moe) : 0.0;
  if (moe && has(GraphModule::kMoe) && capacity <= 0)
    return what +
           ": Megatron-Core captures a whole mixture-of-experts layer only with drop-padding (a capacity "
           "factor); dropless routing's shapes change every step";
  if (moe && has(GraphModule::kMoePreprocess) && capacity > 0 && par.moe_dispatcher == MoeDispatcher::kAllToAll)
    return what +
           ": moe_preprocess with the all-to-all dispatcher and a capacity factor, whose preprocessing "
           "copies to the host (Megatron-Core refuses it)";
  return {};
}

// Token dropping (Layout::moe_capacity_factor) on a model with routed experts, at a factor Megatron-Core
// can run (positive; at most 64, as a model's own).
std::string moe_capacity_applies(const RuleInput& in) {
  const double cf = in.cfg.layout.moe_capacity_factor;
  if (cf == 0) return {};
  if (!(cf > 0) || !std::isfinite(cf) || cf > 64)
    return "--moe-capacity-factor " + std::to_string(cf) + " is outside (0, 64]";
  const ModelConfig& m = *in.model;
  if (!routed_experts(m, layer_pattern(m)))
    return "--moe-capacity-factor: " + m.name + " has no routed experts to drop tokens from";
  return {};
}

// The first and last layers in bf16 (Layout::bf16_layers_start, bf16_layers_end) as Megatron-Core
// takes them: out of a recipe that quantizes the layers (amp_fp8, mxfp8, nvfp4; under any other
// precision there is no recipe to leave them out of), each count at most the layers of one pipeline
// stage (num_layers // pp, as transformer_config.py asserts).
std::string bf16_layers_apply(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.bf16_layers_start == 0 && par.bf16_layers_end == 0) return {};
  const char* flag = par.bf16_layers_start != 0 ? "--bf16-layers-at-start" : "--bf16-layers-at-end";
  const DType w = block_gemm_dtype(in.cfg.precision);
  if (w != DType::kFp8 && w != DType::kFp4)
    return std::string(flag) + ": precision " + std::string(to_string(in.cfg.precision)) +
           " quantizes no layer to leave out (it applies under amp_fp8, mxfp8 and nvfp4)";
  const int64_t most = in.model->n_layers / par.pipeline;
  for (const auto& [name, n] : {std::pair{"--bf16-layers-at-start", par.bf16_layers_start},
                                std::pair{"--bf16-layers-at-end", par.bf16_layers_end}})
    if (n < 0 || n > most)
      return std::string(name) + " " + std::to_string(n) + " is outside 0.." + std::to_string(most) +
             " (the layers of one pipeline stage, as Megatron-Core asserts)";
  return {};
}

// The output layer under MXFP8 (Layout::fp8_output_proj) as Megatron-Core runs it: with the MXFP8
// recipe (transformer_config.py asserts fp8_recipe 'mxfp8'), on an untied output layer
// (TELMHeadColumnParallelLinear refuses skip_weight_param_allocation, which a tied one takes).
std::string fp8_output_proj_applies(const RuleInput& in) {
  if (!in.cfg.layout.fp8_output_proj) return {};
  if (in.cfg.precision != Precision::kMxfp8)
    return "--fp8-output-proj needs precision mxfp8 (Megatron-Core asserts the MXFP8 recipe); precision is " +
           std::string(to_string(in.cfg.precision));
  if (in.model->tie_embeddings)
    return "--fp8-output-proj: " + in.model->name +
           " ties its output layer to the embedding, which Megatron-Core's MXFP8 output layer refuses";
  return {};
}

// TransformerEngine's fused grouped MLP (Layout::fused_grouped_mlp) where it runs
// (ops/fused/grouped_mlp.py: fuse_grouped_mlp_ops and is_supported): routed experts, the MXFP8 or
// NVFP4 recipe, and compute capability 10 (Blackwell's B200, B300, GB200 and GB300).
std::string fused_grouped_mlp_applies(const RuleInput& in) {
  if (!in.cfg.layout.fused_grouped_mlp) return {};
  const ModelConfig& m = *in.model;
  if (!routed_experts(m, layer_pattern(m))) return "--fused-grouped-mlp: " + m.name + " has no routed experts";
  if (in.cfg.precision != Precision::kMxfp8 && in.cfg.precision != Precision::kNvfp4)
    return "--fused-grouped-mlp runs under mxfp8 or nvfp4 (TransformerEngine's fused kernels); precision is " +
           std::string(to_string(in.cfg.precision));
  if (in.device->architecture != "blackwell")
    return "--fused-grouped-mlp runs on Blackwell GPUs (compute capability 10); device " + in.device->id + " is " +
           (in.device->architecture.empty() ? std::string("of no stated architecture") : in.device->architecture);
  return {};
}

// Megatron-Core's paged stash (Layout::moe_paged_stash) where it runs: on routed experts, inside
// the TransformerEngine op fuser's grouped MLP (experts.py, _fused_forward), with a buffer of at
// least the activations' expected size (a smaller one spills to the host, which is not modelled).
std::string moe_paged_stash_applies(const RuleInput& in) {
  const double f = in.cfg.layout.moe_paged_stash;
  if (f == 0) return {};
  if (!(f >= 1.0) || f > 4.0 || !std::isfinite(f))
    return "--moe-paged-stash " + std::to_string(f) + " is outside [1, 4] (the buffer over the expected activations)";
  const ModelConfig& m = *in.model;
  if (!routed_experts(m, layer_pattern(m))) return "--moe-paged-stash: " + m.name + " has no routed experts";
  if (!in.cfg.layout.fused_grouped_mlp)
    return "--moe-paged-stash runs inside TransformerEngine's fused grouped MLP: it needs --fused-grouped-mlp";
  return {};
}

std::string userbuffers_sm_count(const RuleInput& in) {
  if (in.cfg.layout.tp_comm_overlap && in.device->compute_units <= kUserbuffersMaxSms)
    return "tensor-parallel communication overlap needs the SM count of device " + in.device->id + " (compute_units)";
  return {};
}

constexpr Rule kTpCommOverlapNeedsTpAndSp{"tp-comm-overlap-needs-tp-and-sp",
                                          "--tp-comm-overlap --tp --sp; TP Comm Overlap", RuleScope::kLayout,
                                          tp_comm_overlap_needs_tp_and_sp};
constexpr Rule kMoeTensorNeedsSp{"moe-tensor-needs-sp", "--tp --sp; Sequence Parallel", RuleScope::kLayout,
                                 moe_tensor_needs_sp};
constexpr Rule kGradReduceBf16NeedsBf16{"grad-reduce-bf16-needs-bf16", "--grad-reduce-in-bf16 --precision",
                                        RuleScope::kConfig, grad_reduce_bf16_needs_bf16};
constexpr Rule kFp8ParamGatherNeedsLowPrecision{"fp8-param-gather-needs-low-precision",
                                                "--fp8-param-gather --precision; FP8 Param Gather", RuleScope::kConfig,
                                                fp8_param_gather_needs_low_precision};
constexpr Rule kMoeA2aOverlapConditions{"moe-a2a-overlap-conditions",
                                        "--overlap-moe-expert-parallel-comm --ep --vp --ckpt; MoE A2A Overlap",
                                        RuleScope::kConfig, moe_a2a_overlap_conditions};
constexpr Rule kUserbuffersSmCount{"userbuffers-sm-count", "--tp-comm-overlap --device", RuleScope::kConfig,
                                   userbuffers_sm_count};
constexpr Rule kRecomputeModulesApply{"recompute-modules-apply", "--recompute-modules --ckpt; Recompute Modules",
                                      RuleScope::kConfig, recompute_modules_apply};
constexpr Rule kMtpModelled{"mtp-modelled", "--mtp-layers --mtp-repeated-layer; MTP Layers", RuleScope::kConfig,
                            mtp_modelled};
constexpr Rule kMoeDispatcherApplies{"moe-dispatcher-applies", "--moe-dispatcher --ep --etp; MoE Dispatcher",
                                     RuleScope::kConfig, moe_dispatcher_applies};
constexpr Rule kCudaGraphsApply{"cuda-graphs-apply", "--cuda-graphs --ckpt; CUDA Graphs", RuleScope::kConfig,
                                cuda_graphs_apply};
constexpr Rule kMoeCapacityApplies{"moe-capacity-applies", "--moe-capacity-factor; MoE Capacity Factor",
                                   RuleScope::kConfig, moe_capacity_applies};
constexpr Rule kBf16LayersApply{"bf16-layers-apply",
                                "--bf16-layers-at-start --bf16-layers-at-end --precision; BF16 Layers At Start",
                                RuleScope::kConfig, bf16_layers_apply};
constexpr Rule kFp8OutputProjApplies{"fp8-output-proj-applies", "--fp8-output-proj --precision; FP8 Output Proj",
                                     RuleScope::kConfig, fp8_output_proj_applies};
constexpr Rule kFusedGroupedMlpApplies{"fused-grouped-mlp-applies",
                                       "--fused-grouped-mlp --precision --device; Fused Grouped MLP",
                                       RuleScope::kConfig, fused_grouped_mlp_applies};
constexpr Rule kMoePagedStashApplies{"moe-paged-stash-applies",
                                     "--moe-paged-stash --fused-grouped-mlp; MoE Paged Stash", RuleScope::kConfig,
                                     moe_paged_stash_applies};
constexpr Rule kMegatronFsdpModelled{"megatron-fsdp-modelled", "--megatron-fsdp --pp --dist-opt; Megatron FSDP",
                                     RuleScope::kLayout, megatron_fsdp_modelled};
const std::array<const Rule*, 22> kMegatronRules = {&kHybridLayersModelled,
                                                    &kChunkedAttentionNotModelled,
                                                    &kTpCommOverlapNeedsTpAndSp,
                                                    &kContextNeedsFusedAttention,
                                                    &kMoeTensorNeedsSp,
                                                    &kInterleavedMicroBatches,
                                                    &kPipelineScheduleLimits,
                                                    &kSlidingWindowNotModelled,
                                                    &kGradReduceBf16NeedsBf16,
                                                    &kFp8ParamGatherNeedsLowPrecision,
                                                    &kMoeA2aOverlapConditions,
                                                    &kUserbuffersSmCount,
                                                    &kMegatronFsdpModelled,
                                                    &kRecomputeModulesApply,
                                                    &kMtpModelled,
                                                    &kMoeDispatcherApplies,
                                                    &kCudaGraphsApply,
                                                    &kMoeCapacityApplies,
                                                    &kBf16LayersApply,
                                                    &kFp8OutputProjApplies,
                                                    &kFusedGroupedMlpApplies,
                                                    &kMoePagedStashApplies};

}  // namespace

// One block of a layer group (layer_pattern; the only group of a uniform model) on one rank, per
// micro-batch, and what it holds.
struct MegatronBlock {
  CategoryTotals fwd, bwd;
  double attention_again = 0;         // selective: the attention forward run again before each backward
  double tp_fwd_s = 0, tp_bwd_s = 0;  // its tensor-parallel collectives
  // Context and expert parallelism: the ring's exposed K/V exchange (and again before the backward
  // under selective recompute), the dispatcher's all-to-alls, and for a mixture of experts under
  // tensor parallelism the change from the dense MLP's all-gather and reduce-scatter of t tokens to
  // those of the routed (and shared) experts' rows.
  RingAttention ring;
  double all_to_all_s = 0;  // one of the dispatcher's four
  // Combined 1F1B's split of a block: the GPU seconds of its experts' ops (routed and shared) and the
  // change in its MLP's tensor-parallel collectives that the experts bring (expert_tp_change_s).
  double expert_fwd_s = 0, expert_bwd_s = 0, expert_tp_change_s = 0;
  // Of the backward, the weight gradients' GPU seconds: the experts' and the rest's (Layout::delay_wgrad).
  double expert_wgrad_s = 0, other_wgrad_s = 0;
  double cp_ep_fwd_s = 0, cp_ep_bwd_s = 0;
  double ring_again_s = 0;   // selective: the forward ring's exposed exchange again
  double comm_again_s = 0;   // the mlp and moe recomputes: the feed-forward's forward collectives again
  double params = 0;         // local parameters: the tensor-parallel slice, 1/(etp*ep) of the routed experts
  double expert_params = 0;  // of them, the routed experts'
  double lora = 0;           // local LoRA adapter parameters
  // Megatron-FSDP, per micro-batch: the layer's parameter all-gather (ZeRO-3) and gradient
  // reduce-scatter (ZeRO-2 and 3), and the bytes of its gathered parameters and unsharded gradients.
  double fsdp_gather_s = 0, fsdp_reduce_s = 0, fsdp_gather_bytes = 0, fsdp_grad_bytes = 0;
  // What its forward keeps for the backward (the discards of the recompute modules but core_attn left
  // out), of that what only the attention kernel keeps (0 unless core_attn is recomputed), what the
  // other modules discard (each rebuilt one layer at a time), and its backward's gradient buffers.
  double saved = 0, saved_attention_only = 0, saved_dropped = 0, backward_buffers = 0;
};

// Everything of a configuration but its global batch, costed once.
struct MegatronCosts {
  TrainConfig key;  // global_batch unused
  ModelParallelLayout layout;
  CategoryTotals embed_fwd, embed_bwd, head_fwd, head_bwd;
  std::vector<MegatronBlock> blocks;      // by layer group of `pattern`
  const LayerPattern* pattern = nullptr;  // the run's layer pattern (the evaluator's, which outlives it)
  double tp_embed_s = 0, tp_head_fwd_s = 0, tp_head_bwd_s = 0;
  double p2p_s = 0;
  std::vector<double> stage_params;         // local parameters per stage
  std::vector<double> stage_trained;        // of them, those trained (all, or under LoRA the adapters)
  std::vector<double> stage_master_params;  // of them, those whose fp32 master weights and moments the rank keeps
  std::vector<double> reduce_s;             // per stage: data-parallel gradient reduction
  std::vector<double> gather_s;             // per stage: distributed optimizer's parameter all-gather
  std::vector<double> optimizer_s;          // per stage
  double embedding_sync_s = 0;              // first and last stage
  // Megatron-FSDP (Layout::megatron_fsdp), per micro-batch: the root units' all-gather (ZeRO-3: the
  // embedding and the output layer) and their bytes.
  double fsdp_root_gather_s = 0, fsdp_root_bytes = 0;
  double embed_saved = 0, head_saved = 0;  // what the embedding and head keep for the backward
  // Multi-token prediction's depths together (Layout::mtp_layers), on the last stage after its head:
  // each depth's embedding, norms and projection, layer and logits, forward and backward; their
  // collectives; what they keep; and the rank's parameters of them (of them, the routed experts').
  CategoryTotals mtp_fwd, mtp_bwd;
  double mtp_comm_fwd_s = 0, mtp_comm_bwd_s = 0, mtp_saved = 0, mtp_params = 0, mtp_expert_params = 0;
  // Their layers' weights cast once a step (as many copies as mtp_params counts): seconds and bytes.
  double mtp_cast_s = 0, mtp_cast_bytes = 0;
  std::vector<int64_t> chunk_layers;  // per model chunk, in model order (split_layers)
  std::vector<int64_t> stage_layers;  // per stage: its chunks' layers
  // Layers of each group per model chunk and per stage (chunk k's of group g at k * groups + g).
  std::vector<int64_t> chunk_group_layers, stage_group_layers;

  size_t groups() const { return blocks.size(); }
  // The once-a-step casts of stage s's low-precision weights into TransformerEngine's cache: its
  // layers' and, on the last stage, the output layer's (BlockShape::fp8_head) and the multi-token
  // prediction depths' layers'; their seconds and the bytes they keep.
  double stage_cast_s(size_t s) const {
    return over_stage(s, [](const MegatronBlock& b) { return b.fwd.per_step_s; }) +
           (s + 1 == static_cast<size_t>(layout.pp) ? head_fwd.per_step_s + mtp_cast_s : 0.0);
  }
  double stage_cast_bytes(size_t s) const {
    return over_stage(s, [](const MegatronBlock& b) { return b.fwd.per_step_written_bytes; }) +
           (s + 1 == static_cast<size_t>(layout.pp) ? head_fwd.per_step_written_bytes + mtp_cast_bytes : 0.0);
  }
  // The sum over chunk k's (stage s's) layers of f(block).
  template <class F>
  double over_chunk(size_t k, F&& f) const {
    return over(chunk_group_layers, k, f);
  }
  template <class F>
  double over_stage(size_t s, F&& f) const {
    return over(stage_group_layers, s, f);
  }
  // ... over the layers `counts` gives part i (of each group) of.
  template <class F>
  double over(const std::vector<int64_t>& counts, size_t i, F&& f) const {
    double sum = 0;
    for (size_t g = 0; g < groups(); ++g)
      if (const int64_t n = counts[i * groups() + g]; n > 0) sum += static_cast<double>(n) * f(blocks[g]);
    return sum;
  }
  template <class F>
  double most(F&& f) const {
    double m = 0;
    for (const MegatronBlock& b : blocks) m = std::max(m, f(b));
    return m;
  }
};

namespace {

// The GPU seconds of a block's expert ops, routed and shared (per micro-batch; the fp8 weights'
// once-a-step casts left out): Megatron-Core's combined 1F1B schedules them as the layer's "mlp"
// node, everything else before the dispatch and after the combine as its "attn" node.
class ExpertSeconds final : public OpSink {
 public:
  explicit ExpertSeconds(const CostModel& cost) : cost_(cost) {}
  void push(const Op& op) override {
    if (op.per_step) return;
    const bool expert = op.role == OpRole::kRoutedExpert || op.role == OpRole::kSharedExpert;
    if (!expert && op.pass != OpPass::kWeightGrad) return;
    const double s = cost_.op_seconds(op);
    if (expert) seconds += s;
    if (op.pass == OpPass::kWeightGrad) (expert ? expert_wgrad : other_wgrad) += s;
  }
  double seconds = 0;
  double expert_wgrad = 0, other_wgrad = 0;  // the weight gradients' seconds, of the experts and the rest

 private:
  const CostModel& cost_;
};

// A layer's shape on the rank as Megatron-Core runs it (model/ops.hpp's flags): its loss, fused
// SwiGLU, TransformerEngine's kernels and weight cache, the options of `cfg`'s layout, and the
// selective recompute's modules but the attention kernel's (costed apart).
BlockShape megatron_shape(const ModelConfig& model, const TrainConfig& cfg, int64_t vocab) {
  const Layout& par = cfg.layout;
  BlockShape shape = rank_shape(model, cfg, vocab);
  shape.fp32_vocab_parallel_xent = true;           // Megatron's loss
  shape.fused_swiglu = true;                       // bias_activation_fusion
  shape.native_attention = true;                   // TransformerEngine's cuDNN fused attention
  shape.per_expert_launches = true;                // TransformerEngine's GroupedLinear, one GEMM per expert
  shape.fp8_weight_cache = true;                   // set_is_first_microbatch: the weights cast once a step
  shape.fp8_head = par.fp8_output_proj;            // the output layer in MXFP8
  shape.fused_expert_mlp = par.fused_grouped_mlp;  // TransformerEngine's fused grouped MLP
  shape.paged_stash = par.moe_paged_stash;         // Megatron-Core's paged stash
  shape.moe_probs_in_activation = true;            // the grouped experts' weighted activation
  if (par.checkpointing == Checkpointing::kSelective)
    shape.recompute = par.recompute_modules & static_cast<uint8_t>(~kDefaultRecomputeModules);
  return shape;
}

// Combined 1F1B merges a layer's forward of one micro-batch with its backward of another
// (megatron/core/models/common/model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run):
//   communication stream: combine_bwd | dispatch_fwd, dispatch_bwd | combine_fwd
//   compute stream:       attn_fwd    | mlp_bwd, mlp_fwd           | attn_bwd
// each piece waiting for what it consumes on the other stream: the dispatch for attn_fwd's
// output, mlp_bwd for combine_bwd's, mlp_fwd for the dispatch's, dispatch_bwd for mlp_bwd's,
// combine_fwd for mlp_fwd's, attn_bwd for dispatch_bwd's (two_stream_seconds); the compute
// that runs beside an all-to-all slows by overlap_slowdown (the SMs the collective holds).
// "mlp" is the experts with their (expert) tensor-parallel collectives, "attn" the rest of the
// block. With delayed weight gradients the experts' run after their data gradients, so that
// dispatch_bwd starts once those are done, and the attention's at the end of the layer, beside
// the next layer's combine_bwd: in the steady state, this layer's compute starts with the
// previous layer's. Returns the GPU seconds of block `b`'s merged layer (a forward beside a
// backward), with the weight gradients delayed or not.
double combined_1f1b_gpu_seconds(const MegatronBlock& b, bool delay_wgrad, double slowdown) {
  const double a2a = b.all_to_all_s, tp_mlp_f = b.tp_fwd_s / 2.0, tp_mlp_b = b.tp_bwd_s / 2.0;
  const double gpu_f = b.fwd.total() + b.tp_fwd_s + b.cp_ep_fwd_s;
  const double gpu_b = b.bwd.total() + b.tp_bwd_s + b.cp_ep_bwd_s + b.attention_again + b.ring_again_s + b.comm_again_s;
  const double mlp_f = std::max(b.expert_fwd_s + tp_mlp_f + b.expert_tp_change_s, 0.0);
  const double mlp_b = std::max(b.expert_bwd_s + tp_mlp_b + b.expert_tp_change_s, 0.0);
  const double attn_f = std::max(gpu_f - mlp_f - 2.0 * a2a, 0.0);
  const double attn_b = std::max(gpu_b - mlp_b - 2.0 * a2a, 0.0);
  if (delay_wgrad) {
    const double mlp_w = std::min(b.expert_wgrad_s, mlp_b), attn_w = std::min(b.other_wgrad_s, attn_b);
    const std::array<StreamPiece, 6> compute = {
        {{attn_w, -1}, {attn_f, -1}, {mlp_b - mlp_w, 0}, {mlp_w, -1}, {mlp_f, 1}, {attn_b - attn_w, 2}}};
    const std::array<StreamPiece, 4> comm = {{{a2a, -1}, {a2a, 1}, {a2a, 2}, {a2a, 4}}};
    return two_stream_seconds(compute, comm, slowdown);
  }
  const std::array<StreamPiece, 4> compute = {{{attn_f, -1}, {mlp_b, 0}, {mlp_f, 1}, {attn_b, 2}}};
  const std::array<StreamPiece, 4> comm = {{{a2a, -1}, {a2a, 0}, {a2a, 1}, {a2a, 2}}};
  return two_stream_seconds(compute, comm, slowdown);
}

// The CUDA graph modules (GraphModule bits) an op of a block runs in, its backward's alike, by the
// op's name and role (model/ops.cpp's names): a mixer's input norm, ops and residual are its
// module's (attn, mamba; a Gated DeltaNet's none); a dense feed-forward's norm, ops and residual
// mlp's; of a mixture of experts, the pre-MLP norm, the router and the shared experts moe_router's,
// the latent down projection and the permutation moe_preprocess's, every op moe's.
uint8_t graphed_modules(const Op& op, Mixer mixer, bool moe) {
  const std::string_view name = op.name;
  const auto starts = [&](std::string_view prefix) { return name.substr(0, prefix.size()) == prefix; };
  const uint8_t mixer_module = mixer == Mixer::kAttention ? graph_bit(GraphModule::kAttn)
                               : mixer == Mixer::kMamba2  ? graph_bit(GraphModule::kMamba)
                                                          : uint8_t{0};
  if (starts("norm_1.")) return mixer_module;
  if (starts("attn.") || starts("resid_attn.") || starts("norm_post_attn.")) return graph_bit(GraphModule::kAttn);
  if (starts("mamba.") || starts("resid_mamba.")) return graph_bit(GraphModule::kMamba);
  const bool ffn = starts("norm_2.") || starts("ffn.") || starts("resid_ffn.") || starts("norm_post_ffn.") ||
                   starts("moe.") || op.role == OpRole::kRouter || op.role == OpRole::kRoutedExpert ||
                   op.role == OpRole::kSharedExpert;
  if (!ffn) return 0;
  if (!moe) return graph_bit(GraphModule::kMlp);
  const uint8_t whole = graph_bit(GraphModule::kMoe);
  if (starts("norm_2.") || starts("moe.router.") || op.role == OpRole::kRouter || op.role == OpRole::kSharedExpert)
    return whole | graph_bit(GraphModule::kMoeRouter);
  if (starts("moe.latent_down") || starts("moe.permute.")) return whole | graph_bit(GraphModule::kMoePreprocess);
  return whole;
}

// The kernels of a block's pass that run inside its CUDA graphs (`modules`), and the graphs: one
// launch per module that holds any of them.
class GraphedKernels final : public OpSink {
 public:
  GraphedKernels(uint8_t modules, Mixer mixer, bool moe) : modules_(modules), mixer_(mixer), moe_(moe) {}
  void push(const Op& op) override {
    if (op.per_step) return;
    const uint8_t in = graphed_modules(op, mixer_, moe_) & modules_;
    if (in == 0) return;
    kernels += static_cast<double>(op.kernels);
    // a module of its own, or the first of two an op is in (moe_router with moe)
    seen_ |= static_cast<uint8_t>(in & (~in + 1u));
  }
  double graphs() const { return static_cast<double>(std::popcount(static_cast<unsigned>(seen_))); }
  double kernels = 0;

 private:
  uint8_t modules_, seen_ = 0;
  Mixer mixer_;
  bool moe_;
};

// Per-layer CUDA graphs (`graphs`, not full_iteration): the host issues one launch per graph for the
// kernels they hold, in a block's forward (`fwd`) and backward (`bwd`) kernel counts.
void count_graph_launches(uint8_t graphs, const ModelConfig& model, const BlockShape& shape, CategoryTotals& fwd,
                          CategoryTotals& bwd) {
  if (graphs == 0 || graphs == graph_bit(GraphModule::kFullIteration)) return;
  GraphedKernels f(graphs, model.mixer, model.moe.active()), b(graphs, model.mixer, model.moe.active());
  block_forward_ops(shape, f);
  block_backward_ops(shape, b);
  fwd.kernels += f.graphs() - f.kernels;
  bwd.kernels += b.graphs() - b.kernels;
}

// What selective recompute adds to a block (`b`'s forward costed, its ring and dispatcher set):
// the attention kernel again under core_attn, with the ring's exposed exchange; the mlp and moe
// recomputes' forward collectives again before the feed-forward's backward (its tensor-parallel
// all-reduce, `sync`, hidden behind the GEMMs run again under --tp-comm-overlap as the forward's are;
// a mixture of experts' two all-to-alls and the change from the dense collectives the experts bring);
// and what the recompute stops keeping, rebuilt one layer at a time: the attention kernel's, and what
// the other modules discard (the block's saved bytes without them, less with them).
void recompute_costs(MegatronBlock& b, const BlockShape& shape, const Layout& par, double sync) {
  const bool core_attn = par.recomputes(RecomputeModule::kCoreAttn);
  b.attention_again = core_attn ? b.fwd.attention : 0.0;
  b.ring_again_s = core_attn ? b.ring.fwd_exposed_s : 0.0;
  b.comm_again_s = 0;
  const bool moe = shape.moe.active();
  if (!shape.no_ffn && (moe ? shape.recomputes(RecomputeModule::kMoe) : shape.recomputes(RecomputeModule::kMlp)))
    b.comm_again_s = (par.tp_comm_overlap ? 0.0 : sync) + (moe ? 2.0 * b.all_to_all_s + b.expert_tp_change_s : 0.0);
  b.saved_attention_only = core_attn ? attention_only_saved_bytes(shape) : 0.0;
  b.saved_dropped = 0;
  if (shape.recompute != 0) {
    BlockShape kept = shape;
    kept.recompute = 0;
    OpList fwd;
    block_forward_ops(kept, fwd);
    b.saved_dropped = total_saved_bytes(fwd) - b.fwd.saved_bytes;
  }
}

}  // namespace

MegatronEvaluator::MegatronEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params)
    : ModelParallelEvaluator(model, device, params), pattern_(layer_pattern(model)) {
  base_.pattern = pattern_;
  base_.bf16.assign(pattern_.groups.size(), false);
  // One multi-token prediction depth's layers as runs of the pattern's groups: the model's MTP kinds
  // (check_architecture: each a kind of its layers) or one layer of the last layer's kind.
  if (model.mtp_kinds.empty()) {
    mtp_depth_.push_back({pattern_.runs.back().group, 1});
    return;
  }
  for (const LayerKind& k : model.mtp_kinds) {
    const auto at = std::find(model.layers.begin(), model.layers.end(), k) - model.layers.begin();
    int64_t first = 0;
    int group = pattern_.runs.back().group;
    for (const LayerRun& r : pattern_.runs) {
      if (at < first + r.layers) {
        group = r.group;
        break;
      }
      first += r.layers;
    }
    if (!mtp_depth_.empty() && mtp_depth_.back().group == group) ++mtp_depth_.back().layers;
    else mtp_depth_.push_back({group, 1});
  }
}

MegatronEvaluator::~MegatronEvaluator() = default;

// The model's pattern with its first `par.bf16_layers_start` and last `par.bf16_layers_end` layers
// moved into groups of their own, one per kind they are of (appended after the model's groups, which
// keep their indices and the rest of their layers), the runs split where the bf16 layers begin and
// end. Made once per pair of counts.
const MegatronEvaluator::RunPattern& MegatronEvaluator::run_pattern(const Layout& par) {
  const int64_t start = par.bf16_layers_start, end = par.bf16_layers_end;
  if (start == 0 && end == 0) return base_;
  for (const std::unique_ptr<RunPattern>& r : bf16_patterns_)
    if (r->start == start && r->end == end) return *r;
  auto out = std::make_unique<RunPattern>(base_);
  out->start = start, out->end = end;
  LayerPattern& p = out->pattern;
  p.runs.clear();
  std::vector<int> bf16_group(pattern_.groups.size(), -1);
  int64_t layer = 0;
  for (const LayerRun& r : pattern_.runs) {
    for (int64_t i = 0; i < r.layers; ++i, ++layer) {
      int g = r.group;
      if (layer < start || layer >= model_.n_layers - end) {
        int& b = bf16_group[static_cast<size_t>(g)];
        if (b < 0) {
          b = static_cast<int>(p.groups.size());
          p.groups.push_back({pattern_.groups[static_cast<size_t>(g)].model, 0});
          out->bf16.push_back(true);
        }
        --p.groups[static_cast<size_t>(g)].layers, ++p.groups[static_cast<size_t>(b)].layers;
        g = b;
      }
      if (!p.runs.empty() && p.runs.back().group == g) ++p.runs.back().layers;
      else p.runs.push_back({g, 1});
    }
  }
  bf16_patterns_.push_back(std::move(out));
  return *bf16_patterns_.back();
}

void MegatronEvaluator::cost_layout(Costs& c, const TrainConfig& cfg) {
  const Layout& par = cfg.layout;
  const ModelParallelLayout& l = c.layout;
  if (const std::string why = split_layers(model_.n_layers, par, c.chunk_layers); !why.empty())
    throw std::invalid_argument("MegatronEvaluator: " + why + " (the rule pipeline-splits-layers refuses the layout)");
  const int64_t vocab = megatron_padded_vocab(model_.vocab_size, l.tp);
  const RunPattern& run = run_pattern(par);
  c.pattern = &run.pattern;
  const size_t groups = run.pattern.groups.size();
  c.blocks.resize(groups);
  c.mtp_fwd = c.mtp_bwd = {};
  c.mtp_comm_fwd_s = c.mtp_comm_bwd_s = c.mtp_saved = c.mtp_params = c.mtp_expert_params = 0;
  c.mtp_cast_s = c.mtp_cast_bytes = 0;
  // The tensor-parallel collectives: an all-reduce, or an all-gather plus a reduce-scatter (the same
  // time in the ring model), of one micro-batch's t x d activations.
  const double a = activation_bytes(cfg.precision);
  double td_bytes = 0;
  std::optional<BlockShape> last_shape;  // the last layer's, for the multi-token prediction depths
  for (size_t g = 0; g < groups; ++g) {
    const ModelConfig& model = run.pattern.groups[g].model;
    // A layer left out of the run's fp8 or fp4 recipe (Layout::bf16_layers_start, bf16_layers_end)
    // runs as under amp_bf16.
    std::optional<TrainConfig> bf16_cfg;  // made only for such a group
    if (run.bf16[g]) bf16_cfg.emplace(cfg).precision = Precision::kAmpBf16;
    const TrainConfig& group_cfg = bf16_cfg ? *bf16_cfg : cfg;
    const BlockShape shape = megatron_shape(model, group_cfg, vocab);
    MegatronBlock& b = c.blocks[g];
    const MicroBatchOpCosts ops = cost_micro_batch_ops(cost_, shape);
    b.fwd = ops.block_fwd, b.bwd = ops.block_bwd;
    count_graph_launches(par.cuda_graphs, model, shape, b.fwd, b.bwd);
    if (g == 0) {
      c.embed_fwd = ops.embed_fwd, c.embed_bwd = ops.embed_bwd, c.head_fwd = ops.head_fwd, c.head_bwd = ops.head_bwd;
      c.embed_saved = ops.embed_fwd.saved_bytes, c.head_saved = ops.head_fwd.saved_bytes;
      td_bytes = d(shape.tokens()) * d(model_.d_model) * a;
      const double sync = cost_.collective_seconds(CollectiveKind::kAllReduce, td_bytes, l.tp_group);
      const double per_token =
          cost_.collective_seconds(CollectiveKind::kAllReduce, d(shape.tokens()) * 4.0, l.tp_group);
      c.tp_embed_s = sync;
      c.tp_head_fwd_s = (par.sequence_parallel ? sync / 2.0 : 0.0) + 3.0 * per_token;
      c.tp_head_bwd_s = sync;
      c.p2p_s = pipeline_send_seconds(cost_, l, par, td_bytes);
    }
    b.expert_fwd_s = b.expert_bwd_s = b.expert_wgrad_s = b.other_wgrad_s = 0;
    if (par.moe_a2a_overlap) {
      ExpertSeconds fwd(cost_), bwd(cost_);
      block_forward_ops(shape, fwd);
      block_backward_ops(shape, bwd);
      b.expert_fwd_s = fwd.seconds, b.expert_bwd_s = bwd.seconds;
      b.expert_wgrad_s = bwd.expert_wgrad, b.other_wgrad_s = bwd.other_wgrad;
    }
    context_and_expert_costs(b, c.layout, shape, group_cfg);
    b.lora = lora_block_params(shape);
    // One all-reduce (all-gather and reduce-scatter) per sublayer each way: the mixer's and the
    // feed-forward's (a Nemotron-H layer has one of them).
    const double sync = cost_.collective_seconds(CollectiveKind::kAllReduce, td_bytes, l.tp_group);
    const double sublayers = (model.mixer != Mixer::kNone ? 1.0 : 0.0) + (model.no_ffn ? 0.0 : 1.0);
    b.tp_fwd_s = sublayers * sync;
    b.tp_bwd_s = sublayers * sync;
    recompute_costs(b, shape, par, sync);
    if (model.mla.active()) {
      // Latent attention gathers its compressed query and key/value (and the shared RoPE key) before
      // the up projections, not the hidden state: the down projections run on each rank's own rows.
      const MlaConfig& mla = model.mla;
      const double width =
          d((mla.q_lora_rank > 0 ? mla.q_lora_rank : model.d_model) + mla.kv_lora_rank + mla.qk_rope_head_dim);
      const double attn_in =
          cost_.collective_seconds(CollectiveKind::kAllReduce, td_bytes * width / d(model.d_model), l.tp_group);
      b.tp_fwd_s = b.tp_bwd_s = sync + attn_in;
    }
    if (par.tp_comm_overlap) tp_comm_overlap_costs(b, c.layout, shape, td_bytes);
    b.saved = b.fwd.saved_bytes;
    b.backward_buffers =
        block_backward_buffer_bytes(tensor_parallel_slice(model, l.tp, shape.moe), shape.tokens(), group_cfg.precision);
    // The rank's parameters of the block (1/(etp*ep) of the routed experts).
    const double routed = routed_expert_params(model);
    b.expert_params = routed / d(l.etp * l.ep);
    b.params = (d(layer_parameter_count(model)) - routed) / d(l.tp) + b.expert_params;
    if (par.mtp_layers > 0 && g == static_cast<size_t>(pattern_.runs.back().group)) last_shape = shape;
  }
  if (last_shape) mtp_costs(c, *last_shape, cfg);
  // Each chunk's and stage's layers of each group (a uniform model's: its chunks' and stages').
  c.stage_layers = stage_layers_of(c.chunk_layers, l.pp);
  if (groups == 1) {
    c.chunk_group_layers = c.chunk_layers;
    c.stage_group_layers = c.stage_layers;
  } else {
    c.chunk_group_layers.clear();
    c.stage_group_layers.assign(static_cast<size_t>(l.pp) * groups, 0);
    int64_t first = 0;
    for (size_t k = 0; k < c.chunk_layers.size(); ++k) {
      const std::vector<int64_t> n = run.pattern.count_in(first, c.chunk_layers[k]);
      first += c.chunk_layers[k];
      c.chunk_group_layers.insert(c.chunk_group_layers.end(), n.begin(), n.end());
      const size_t stage = k % static_cast<size_t>(l.pp);
      for (size_t g = 0; g < groups; ++g) c.stage_group_layers[stage * groups + g] += n[g];
    }
  }
  stage_costs(c, cfg, vocab);
}

// Multi-token prediction's depths (Layout::mtp_layers), each the layers mtp_depth_ names (one of the
// last layer's kind, or a hybrid model's MTP pattern) with its own embedding lookup, norms and
// projection (mtp_forward_ops, at the last layer's shape `shape`) and logits: their seconds,
// collectives and saved bytes times the depths, their parameters once per depth or, sharing one
// depth's layers (mtp_repeated_layer), once.
void MegatronEvaluator::mtp_costs(Costs& c, const BlockShape& shape, const TrainConfig& cfg) const {
  const Layout& par = cfg.layout;
  const double depths = d(par.mtp_layers), copies = par.mtp_repeated_layer ? 1.0 : depths;
  const CategoryTotals own_fwd = costed(cost_, mtp_forward_ops, shape),
                       own_bwd = costed(cost_, mtp_backward_ops, shape);
  CategoryTotals fwd, bwd;
  const auto add = [](CategoryTotals& t, const CategoryTotals& p, double n) {
    t.add(p, n);
    t.saved_bytes += n * p.saved_bytes;
    t.kernels += n * p.kernels;
  };
  add(fwd, c.embed_fwd, 1.0), add(fwd, own_fwd, 1.0), add(fwd, c.head_fwd, 1.0);
  add(bwd, c.embed_bwd, 1.0), add(bwd, own_bwd, 1.0), add(bwd, c.head_bwd, 1.0);
  double comm_fwd = c.tp_embed_s + c.tp_head_fwd_s, comm_bwd = c.tp_head_bwd_s;
  double saved = c.embed_saved + own_fwd.saved_bytes + c.head_saved, params = 0, expert_params = 0;
  double cast_s = 0, cast_bytes = 0;
  for (const LayerRun& r : mtp_depth_) {
    const MegatronBlock& b = c.blocks[static_cast<size_t>(r.group)];
    const double n = d(r.layers);
    add(fwd, b.fwd, n), add(bwd, b.bwd, n);
    bwd.attention += n * b.attention_again;
    comm_fwd += n * (b.tp_fwd_s + b.cp_ep_fwd_s);
    comm_bwd += n * (b.tp_bwd_s + b.cp_ep_bwd_s + b.ring_again_s + b.comm_again_s);
    saved += n * (b.saved - b.saved_attention_only);
    params += n * b.params, expert_params += n * b.expert_params;
    cast_s += n * b.fwd.per_step_s, cast_bytes += n * b.fwd.per_step_written_bytes;
  }
  c.mtp_fwd = {}, c.mtp_bwd = {};
  c.mtp_fwd.add(fwd, depths), c.mtp_bwd.add(bwd, depths);
  c.mtp_fwd.kernels = fwd.kernels * depths, c.mtp_bwd.kernels = bwd.kernels * depths;
  c.mtp_comm_fwd_s = depths * comm_fwd, c.mtp_comm_bwd_s = depths * comm_bwd;
  c.mtp_saved = depths * saved;
  const double h = d(model_.d_model);
  c.mtp_params = copies * (params + 2.0 * h * h / d(c.layout.tp) + 3.0 * h);  // eh_proj, enorm, hnorm, final norm
  c.mtp_expert_params = copies * expert_params;
  c.mtp_cast_s = copies * cast_s, c.mtp_cast_bytes = copies * cast_bytes;
}

// Each stage's parameters (the rank's tensor-parallel slice, and 1/(etp*ep) of the routed experts),
// their gradient reduction (grad_collective), the distributed optimizer's gather, the optimizer and,
// with tied embeddings across stages, the embedding's gradient sum.
void MegatronEvaluator::stage_costs(Costs& c, const TrainConfig& cfg, int64_t vocab) const {
  const Layout& par = cfg.layout;
  const ModelParallelLayout& l = c.layout;
  const double table = d(vocab) * d(model_.d_model) / d(l.tp);
  const double positions = model_.learned_positions()
                               ? d(model_.max_positions > 0 ? model_.max_positions : cfg.seq_len) * d(model_.d_model)
                               : 0.0;
  const double final_norm = d(model_.d_model) * (model_.norm == NormKind::kLayerNorm && model_.norm_bias ? 2.0 : 1.0);
  const double gb = megatron_grad_bytes(cfg);
  c.stage_params.assign(static_cast<size_t>(l.pp), 0.0);
  c.stage_trained.assign(c.stage_params.size(), 0.0);
  c.reduce_s.assign(c.stage_params.size(), 0.0);
  c.gather_s.assign(c.stage_params.size(), 0.0);
  c.optimizer_s.assign(c.stage_params.size(), 0.0);
  c.stage_master_params.assign(c.stage_params.size(), 0.0);
  // Under LoRA (Megatron-Bridge's PEFT) the base weights are frozen: Megatron-Core's DDP buffers,
  // reduces and (distributed optimizer) shards only the adapters, which are dense (never the experts').
  const bool lora = cfg.lora.active();
  for (int64_t s = 0; s < l.pp; ++s) {
    const size_t i = static_cast<size_t>(s);
    double p = c.over_stage(i, [](const MegatronBlock& b) { return b.params; });
    if (s == 0) p += table + positions;
    if (s == l.pp - 1) p += final_norm + (!model_.tie_embeddings || l.pp > 1 ? table : 0.0) + c.mtp_params;
    const double adapters = c.over_stage(i, [](const MegatronBlock& b) { return b.lora; });
    c.stage_params[i] = p + adapters;
    c.stage_trained[i] = lora ? adapters : p;
    const double experts = lora ? 0.0 : c.over_stage(i, [](const MegatronBlock& b) {
      return b.expert_params;
    }) + (s == l.pp - 1 ? c.mtp_expert_params : 0.0);
    const double dense = c.stage_trained[i] - experts;
    if (par.distributed_optimizer) {
      c.reduce_s[i] = grad_collective(cost_, CollectiveKind::kReduceScatter, dense * gb, experts * gb, l);
      // The updated weights, 2 bytes each; fp8 parameters (fp8_param_gather under per-tensor fp8)
      // sit in a torch.uint8 buffer of their raw bytes (Megatron-Core's distributed_data_parallel.py,
      // _allocate_buffers_for_parameters: "it is necessary to use torch.uint8"), 1 byte each: the
      // quantized linears' weights, as many per layer as the per-step weight casts write fp8 and
      // transpose bytes for (half of per_step_written_bytes); the routed experts' are all of them.
      // MXFP8 and NVFP4 weights are costed at 2 bytes (their gather is not read here). The adapters
      // are bf16.
      double gather_dense = dense * 2.0, gather_experts = experts * 2.0;
      if (par.fp8_param_gather && cfg.precision == Precision::kAmpFp8 && !lora) {
        const auto fp8_experts = [](const MegatronBlock& b) {
          return std::min(b.expert_params, b.fwd.per_step_written_bytes / 2.0);
        };
        gather_experts -= c.over_stage(i, fp8_experts);
        gather_dense -= c.over_stage(
            i, [&](const MegatronBlock& b) { return b.fwd.per_step_written_bytes / 2.0 - fp8_experts(b); });
      }
      c.gather_s[i] = grad_collective(cost_, CollectiveKind::kAllGather, gather_dense, gather_experts, l);
    } else {
      c.reduce_s[i] = grad_collective(cost_, CollectiveKind::kAllReduce, dense * gb, experts * gb, l);
    }
    // Adam over the rank's fp32 master parameters (or its shard), then the copy into the bf16 weights.
    const double master =
        par.distributed_optimizer ? dense / d(l.grad_ranks()) + experts / d(l.expert_grad_ranks()) : c.stage_trained[i];
    c.stage_master_params[i] = master;
    CategoryTotals opt = costed(cost_, adam_ops, master, par.bf16_moments ? 2.0 : 4.0);
    c.optimizer_s[i] =
        opt.total() + cost_.op_seconds(membound_op("optim.copy_to_model", MemKind::kCast, static_cast<int64_t>(master),
                                                   1, DType::kFp32, 4.0 * master, 2.0 * master));
  }
  fsdp_costs(c, cfg, table + positions + final_norm + (model_.tie_embeddings ? 0.0 : table));
  c.embedding_sync_s = l.pp > 1 && model_.tie_embeddings && !lora
                           ? cost_.collective_seconds(CollectiveKind::kAllReduce, table * gb, l.embedding_group)
                           : 0.0;
}

// Megatron-FSDP (megatron/core/distributed/fsdp; docs/user-guide/features/megatron_fsdp.md): under
// optim_grads and optim_grads_params each layer's gradients are reduce-scattered over the
// data-parallel (x context) ranks after its backward, every micro-batch; under optim_grads_params
// each layer is all-gathered before its forward and again before its backward (in the gather dtype:
// bf16, or the fp8 bytes of the quantized linears under --fp8-param-gather), and the embedding and
// output layer before the forward. One stage (megatron-fsdp-modelled). At the step's end the last
// layer's and the root's reduce-scatter are exposed (reduce_s); the optimizer steps each rank's
// shard (the distributed optimizer's master parameters); optim_grads gathers the updated parameters
// after it as the distributed optimizer does (gather_s), optim_grads_params does not.
void MegatronEvaluator::fsdp_costs(Costs& c, const TrainConfig& cfg, double root) const {
  const Layout& par = cfg.layout;
  const ModelParallelLayout& l = c.layout;
  c.fsdp_root_gather_s = c.fsdp_root_bytes = 0;
  for (MegatronBlock& b : c.blocks) b.fsdp_gather_s = b.fsdp_reduce_s = b.fsdp_gather_bytes = b.fsdp_grad_bytes = 0;
  if (!par.fsdp_shards_grads()) return;
  const double gb = megatron_grad_bytes(cfg);
  const bool lora = cfg.lora.active();
  for (MegatronBlock& b : c.blocks) {
    const double trained_experts = lora ? 0.0 : b.expert_params;
    const double trained_dense = (lora ? b.lora : b.params) - trained_experts;
    b.fsdp_reduce_s =
        grad_collective(cost_, CollectiveKind::kReduceScatter, trained_dense * gb, trained_experts * gb, l);
    b.fsdp_grad_bytes = (trained_dense + trained_experts) * gb;
  }
  // What is left after the last backward: the last layer's reduce-scatter (the step's last block is
  // the model's last) and the root's.
  const double root_reduce = lora ? 0.0 : grad_collective(cost_, CollectiveKind::kReduceScatter, root * gb, 0.0, l);
  const double last_layer = c.blocks[static_cast<size_t>(c.pattern->runs.back().group)].fsdp_reduce_s;
  c.reduce_s.assign(c.reduce_s.size(), last_layer + root_reduce);
  if (!par.fsdp_shards_params()) return;
  for (MegatronBlock& b : c.blocks) {
    double gather_dense = (b.params + b.lora - b.expert_params) * 2.0, gather_experts = b.expert_params * 2.0;
    if (par.fp8_param_gather && cfg.precision == Precision::kAmpFp8) {
      const double fp8_layer = b.fwd.per_step_written_bytes / 2.0;
      const double fp8_experts_layer = std::min(b.expert_params, fp8_layer);
      gather_experts -= fp8_experts_layer;
      gather_dense -= fp8_layer - fp8_experts_layer;
    }
    b.fsdp_gather_s = grad_collective(cost_, CollectiveKind::kAllGather, gather_dense, gather_experts, l);
    b.fsdp_gather_bytes = gather_dense + gather_experts;
  }
  c.fsdp_root_bytes = root * 2.0;
  c.fsdp_root_gather_s = grad_collective(cost_, CollectiveKind::kAllGather, c.fsdp_root_bytes, 0.0, l);
  c.gather_s.assign(c.gather_s.size(), 0.0);
}

// TransformerEngine's tensor-parallel communication overlap (Megatron-Core's --tp-comm-overlap,
// userbuffers; TransformerEngine's initialize_ub with ub_overlap_ag and ub_overlap_rs): each block's
// all-gathers and reduce-scatters split into chunks pipelined with the GEMMs they feed or follow,
// exposed only beyond those GEMMs' time (tensor_parallel_seconds, as torchtitan's async TP), and the
// GEMMs slowed by the SMs the userbuffers kernels hold (userbuffers_sm_seconds). The embedding's and
// head's collectives stay exposed (they are not TransformerEngine linears).
void MegatronEvaluator::tp_comm_overlap_costs(MegatronBlock& b, const ModelParallelLayout& l, const BlockShape& shape,
                                              double td_bytes) const {
  double ag = 0, rs = 0;
  tensor_parallel_seconds(cost_, shape, l.tp_group, true, td_bytes, b.tp_fwd_s, b.tp_bwd_s, ag, rs);
  const UserbuffersSmCost sm = userbuffers_sm_seconds(
      linear_seconds(cost_, block_forward_ops, shape, OpPass::kForward),
      linear_seconds(cost_, block_backward_ops, shape, OpPass::kDataGrad), device_.compute_units);
  b.fwd.gemm += sm.fwd_s;
  b.bwd.gemm += sm.bwd_s;
}

// Context parallelism: the block's one attention (of the rank's s/cp tokens) becomes the ring's cp
// steps, and its exposed exchange is communication the block waits for. Expert parallelism: the
// token dispatcher's all-to-all (megatron/core/transformer/moe/token_dispatcher.py,
// MoEAlltoAllTokenDispatcher, --moe-token-dispatcher-type alltoall) sends each of the rank's routed
// rows (its t/tp tokens under sequence parallelism, times top_k, or the capacity's slots) to the
// rank holding its expert before the experts and back after them, in the forward and again in the
// backward: four all-to-alls of rows * d_model * bytes, of which (ep-1)/ep leaves the rank, on the
// critical path (no --overlap-moe-expert-parallel-comm). With tensor parallelism the experts'
// inputs are all-gathered over the (expert) tensor-parallel ranks after the all-to-all and
// reduce-scattered before the return (gather_from_sequence_parallel_region, its reverse), over the
// routed rows of the rank's t tokens where the dense MLP's ran over t tokens; the shared experts are
// a dense MLP's own all-gather and reduce-scatter beside them. The flex dispatcher (DeepEP, HybridEP;
// Layout::moe_dispatcher) sends each token once per rank it reaches over the etp x ep ranks instead,
// with no gather after it (flex_dispatch_seconds); its four per block take the all-to-alls' place.
void MegatronEvaluator::context_and_expert_costs(MegatronBlock& b, const ModelParallelLayout& l,
                                                 const BlockShape& shape, const TrainConfig& cfg) const {
  b.ring = ring_attention(cost_, shape, l.cp, l.cp_group);
  const double extra_steps = d(l.cp - 1);
  b.fwd.attention += extra_steps * b.ring.step_fwd_s;
  b.bwd.attention += extra_steps * b.ring.step_bwd_s;
  b.fwd.kernels += 2.0 * extra_steps;  // an attention kernel and a send/receive per step
  b.bwd.kernels += 2.0 * extra_steps;
  b.cp_ep_fwd_s = b.ring.fwd_exposed_s;
  b.cp_ep_bwd_s = b.ring.bwd_exposed_s;
  b.all_to_all_s = 0;
  b.expert_tp_change_s = 0;
  if (!shape.moe.active()) return;
  const double a = activation_bytes(cfg.precision);
  const double dm = d(model_.d_model);
  const bool flex = cfg.layout.moe_dispatcher != MoeDispatcher::kAllToAll;
  b.all_to_all_s = flex ? flex_dispatch_seconds(cost_, shape, l.tp_ep_group)
                        : all_to_all_seconds(cost_, moe_dispatch_bytes(shape), l.ep_group);
  // the time of an all-gather and a reduce-scatter of `rows` rows over `group`
  const auto gather_scatter = [&](double rows, const CommGroup& group) {
    return cost_.collective_seconds(CollectiveKind::kAllReduce, rows * dm * a, group);
  };
  const double routed_share = d(shape.moe.routed_width(shape.d_model)) / dm;  // latent experts' narrower rows
  // The flex dispatcher's group spans the expert tensor-parallel ranks: no gather over them.
  double tp_change = (flex ? 0.0 : routed_share * gather_scatter(d(shape.expert_rows()), l.etp_group)) -
                     gather_scatter(d(shape.tokens()), l.tp_group);
  if (shape.moe.shared_experts > 0) tp_change += gather_scatter(d(shape.tokens()), l.tp_group);
  b.expert_tp_change_s = tp_change;
  const double moe_s = 2.0 * b.all_to_all_s + tp_change;
  b.cp_ep_fwd_s += moe_s;
  b.cp_ep_bwd_s += moe_s;
  const double launches = l.ep > 1 || (flex && l.etp > 1) ? 2.0 : 0.0;
  b.fwd.kernels += launches;
  b.bwd.kernels += launches;
}

// The seconds of one micro-batch's forward and backward of every model chunk (fwd_s_, bwd_s_), and
// the host's time beyond the GPU's in them (reported as overhead).
MegatronEvaluator::HostTime MegatronEvaluator::chunk_seconds(const Costs& c, double recompute) {
  const ModelParallelLayout& l = c.layout;
  const int64_t chunks = l.pp * l.vp;
  // A pass takes its kernels' GPU time, or the host's time to issue them when that is longer (eager
  // PyTorch at small sizes: the GPU waits for the next launch); a collective is one more launch. Near
  // the crossing the two only partly hide each other (the launch queue drains and refills), so they
  // combine as a smooth maximum, (gpu^4 + host^4)^(1/4): on vTrain's runs exponents 4 and 8 fit alike
  // (6.5% in-sample) and 2 worse (8.0%); 4 keeps the fit's derivatives smooth. Under a full-iteration
  // CUDA graph the host issues nothing (per-layer graphs: cost_layout's kernel counts).
  const double issue =
      c.key.layout.cuda_graphs == graph_bit(GraphModule::kFullIteration) ? 0.0 : params_.host_kernel_issue_s;
  const double tp_launches = l.tp > 1 ? 2.0 : 0.0;
  HostTime host;
  host_blocks_.assign(c.groups(), {});
  host.blocks = host_blocks_;
  const auto smooth_max = [](double gpu, double host_s) {
    const double g2 = gpu * gpu, h2 = host_s * host_s;
    return std::sqrt(std::sqrt(g2 * g2 + h2 * h2));
  };
  const auto pass = [issue, &smooth_max](const CategoryTotals& t, double comm_s, double launches, double& host_extra) {
    const double gpu = t.total() + comm_s;
    const double s = smooth_max(gpu, (t.kernels + launches) * issue);
    host_extra += s - gpu;
    return s;
  };
  const double slowdown = params_.overlap_slowdown;
  double pair_hidden = 0;  // over every layer of the model
  for (size_t g = 0; g < c.groups(); ++g) {
    const MegatronBlock& b = c.blocks[g];
    HostTime::Block& h = host.blocks[g];
    const double f_pass = pass(b.fwd, b.tp_fwd_s + b.cp_ep_fwd_s, tp_launches, h.fwd);
    const double b_pass = pass(b.bwd, b.tp_bwd_s + b.cp_ep_bwd_s, tp_launches, h.bwd);
    const double b_all = b_pass + recompute * f_pass + b.attention_again + b.ring_again_s + b.comm_again_s;
    // Megatron-FSDP: a layer's collectives run on their own streams beside its compute (the next
    // layer's gather prefetched during this one's forward; its gather before and its reduce-scatter
    // after the backward): the layer takes the longer of the two, the compute slowed by the SMs the
    // collectives hold where they overlap (side_by_side_seconds, as Composer's FSDP schedule has it).
    const double f_fsdp = b.fsdp_gather_s, b_fsdp = b.fsdp_gather_s + b.fsdp_reduce_s;
    const double f_layer = f_fsdp > 0 ? side_by_side_seconds(f_pass, f_fsdp, slowdown) : f_pass;
    const double b_layer = b_fsdp > 0 ? side_by_side_seconds(b_all, b_fsdp, slowdown) : b_all;
    h.fsdp = (f_layer - f_pass) + (b_layer - b_all);
    h.f_s = f_layer + params_.block_overhead_s;
    h.b_s = b_layer + params_.block_overhead_s;
    if (c.key.layout.moe_a2a_overlap) {
      const double merged_gpu = combined_1f1b_gpu_seconds(b, c.key.layout.delay_wgrad, slowdown);
      const double merged = smooth_max(merged_gpu, (b.fwd.kernels + b.bwd.kernels + 2.0 * tp_launches) * issue);
      pair_hidden += d(c.pattern->groups[g].layers) *
                     std::max(f_pass + b_pass + b.attention_again + b.ring_again_s + b.comm_again_s - merged, 0.0);
    }
    h.bwd += recompute * h.fwd;
  }
  // The pipeline pairs layers by count: per paired layer, the mean over the model's layers (exact
  // when they are all alike).
  pair_hidden_s_ = pair_hidden / d(model_.n_layers);
  fwd_s_.resize(static_cast<size_t>(chunks));
  bwd_s_.resize(static_cast<size_t>(chunks));
  for (size_t k = 0; k < fwd_s_.size(); ++k) {
    fwd_s_[k] = bwd_s_[k] = 0;
    for (size_t g = 0; g < c.groups(); ++g) {
      const double n = d(c.chunk_group_layers[k * c.groups() + g]);
      fwd_s_[k] += n * host.blocks[g].f_s;
      bwd_s_[k] += n * host.blocks[g].b_s;
    }
  }
  fwd_s_.front() += pass(c.embed_fwd, c.tp_embed_s, l.tp > 1 ? 1.0 : 0.0, host.first);
  bwd_s_.front() += pass(c.embed_bwd, 0.0, 0.0, host.first);
  fwd_s_.back() += pass(c.head_fwd, c.tp_head_fwd_s, l.tp > 1 ? 3.0 : 0.0, host.last);
  bwd_s_.back() += pass(c.head_bwd, c.tp_head_bwd_s, l.tp > 1 ? 1.0 : 0.0, host.last);
  if (c.key.layout.mtp_layers > 0) {
    fwd_s_.back() += pass(c.mtp_fwd, c.mtp_comm_fwd_s, 0.0, host.last);
    bwd_s_.back() += pass(c.mtp_bwd, c.mtp_comm_bwd_s, 0.0, host.last);
  }
  for (int64_t s = 0; s < l.pp; ++s) fwd_s_[static_cast<size_t>(s)] += params_.microbatch_overhead_s;
  const MegatronBlock& first = c.blocks[static_cast<size_t>(c.pattern->runs.front().group)];
  host.fsdp_first = c.fsdp_root_gather_s + first.fsdp_gather_s;
  fwd_s_.front() += host.fsdp_first;
  return host;
}

// Breakdown of the stage that finishes last (`critical`): its compute by category over m
// micro-batches, the collectives it waits for (`tail_s` of them after its flush), the overheads, and
// the pipeline's idle time (the bubble) as the rest of the step.
void MegatronEvaluator::breakdown(const Costs& c, int64_t m, double recompute, const HostTime& host, size_t critical,
                                  double tail_s, double merged_saving_s, Prediction& p) const {
  const ModelParallelLayout& l = c.layout;
  const double md = d(m);
  const bool first = critical == 0, last = critical + 1 == static_cast<size_t>(l.pp);
  const auto stage = [&](auto&& f) { return md * c.over_stage(critical, f); };
  StepBreakdown& t = p.time;
  t.gemm_s = stage([&](const MegatronBlock& b) { return b.fwd.gemm * (1.0 + recompute) + b.bwd.gemm; });
  t.attention_s = stage([&](const MegatronBlock& b) {
    return b.fwd.attention * (1.0 + recompute) + b.bwd.attention + b.attention_again;
  });
  t.other_compute_s = stage([&](const MegatronBlock& b) { return b.fwd.other * (1.0 + recompute) + b.bwd.other; }) +
                      c.stage_cast_s(critical);
  double comm = stage([&](const MegatronBlock& b) {
    return b.tp_fwd_s * (1.0 + recompute) + b.tp_bwd_s + b.cp_ep_fwd_s * (1.0 + recompute) + b.cp_ep_bwd_s +
           b.ring_again_s + b.comm_again_s;
  });
  double host_blocks = 0;  // per micro-batch on this stage
  for (size_t g = 0; g < c.groups(); ++g) {
    const double n = d(c.stage_group_layers[critical * c.groups() + g]);
    comm += md * n * host.blocks[g].fsdp;
    host_blocks += n * (host.blocks[g].fwd + host.blocks[g].bwd);
  }
  comm += first ? md * host.fsdp_first : 0.0;
  if (first) {
    t.gemm_s += md * (c.embed_fwd.gemm + c.embed_bwd.gemm);
    t.other_compute_s += md * (c.embed_fwd.other + c.embed_bwd.other + c.embed_fwd.attention);
    comm += md * c.tp_embed_s;
  }
  if (last) {
    t.gemm_s += md * (c.head_fwd.gemm + c.head_bwd.gemm + c.mtp_fwd.gemm + c.mtp_bwd.gemm);
    t.attention_s += md * (c.mtp_fwd.attention + c.mtp_bwd.attention);
    t.other_compute_s += md * (c.head_fwd.other + c.head_bwd.other + c.mtp_fwd.other + c.mtp_bwd.other);
    comm += md * (c.tp_head_fwd_s + c.tp_head_bwd_s + c.mtp_comm_fwd_s + c.mtp_comm_bwd_s);
  }
  // Combined 1F1B's merged steps hide all-to-alls (merged_saving_s on this stage).
  t.exposed_comm_s = std::max(comm + tail_s - merged_saving_s, 0.0);
  t.optimizer_s = p.timeline.optimizer_s;
  const double per_layer_m = d(c.stage_layers[critical]) * md;
  t.overhead_s = md * params_.microbatch_overhead_s + 2.0 * per_layer_m * params_.block_overhead_s + md * host_blocks +
                 md * ((first ? host.first : 0.0) + (last ? host.last : 0.0)) + params_.step_overhead_s;
  const double accounted =
      t.gemm_s + t.attention_s + t.other_compute_s + t.exposed_comm_s + t.optimizer_s + t.overhead_s;
  t.pipeline_bubble_s = std::max(p.step_s - accounted, 0.0);
}

Prediction MegatronEvaluator::predict(const TrainConfig& cfg) {
  const Costs& c = costs(cfg);
  const ModelParallelLayout& l = c.layout;
  // Megatron-LM's full recompute runs the whole forward of each layer again (recompute_fraction
  // describes Composer's checkpointing).
  const double recompute = cfg.layout.checkpointing == Checkpointing::kFull ? 1.0 : 0.0;
  const HostTime host = chunk_seconds(c, recompute);

  const int64_t m = cfg.per_device_batch() / cfg.micro_batch;
  PipelineCosts pc{
      .stages = l.pp, .virtual_stages = l.vp, .micro_batches = m, .fwd_s = fwd_s_, .bwd_s = bwd_s_, .p2p_s = c.p2p_s};
  pc.combined_1f1b = cfg.layout.moe_a2a_overlap;
  pc.pair_layers = c.chunk_layers;
  pc.pair_hidden_s = pair_hidden_s_;
  const PipelineTimeline& pipe = pipeline_.simulate(pc);

  // After its flush each stage reduces its gradients (overlapped with the last micro-batch's
  // backward when asked: only what that backward does not cover is exposed); the tied embedding's
  // gradient is summed between the first and last stage; then the optimizer, which waits for every
  // stage (the gradient norm is all-reduced over all ranks).
  double flushed = 0;
  size_t critical = 0;
  for (int64_t s = 0; s < l.pp; ++s) {
    const size_t i = static_cast<size_t>(s);
    double stage_backward = 0;
    for (int64_t k = 0; k < l.vp; ++k) stage_backward += bwd_s_[static_cast<size_t>(k * l.pp + s)];
    double reduce = c.reduce_s[i];
    // (Megatron-FSDP's sharded gradients are reduced during each backward: reduce_s is what is left.)
    if (cfg.layout.overlap_grad_reduce && !cfg.layout.fsdp_shards_grads())
      reduce = std::max(reduce - stage_backward, 0.0);
    if (s == 0 || s == l.pp - 1) reduce += c.embedding_sync_s;
    // The step's one cast of the stage's low-precision weights (the first micro-batch's).
    const double end = pipe.stage_end_s[i] + c.stage_cast_s(i) + reduce;
    if (end > flushed) {
      flushed = end;
      critical = i;
    }
  }
  double optimizer = 0;
  for (int64_t s = 0; s < l.pp; ++s)
    optimizer = std::max(optimizer, c.optimizer_s[static_cast<size_t>(s)] + c.gather_s[static_cast<size_t>(s)]);

  Prediction p;
  p.step_s = flushed + optimizer + params_.step_overhead_s;
  p.timeline.step_s = p.step_s;
  p.timeline.optimizer_s = optimizer;
  p.n_params = parameter_count(model_, cfg.seq_len);
  p.active_params = active_parameter_count(model_, cfg.seq_len);
  breakdown(c, m, recompute, host, critical, flushed - pipe.stage_end_s[critical], pipe.stage_merged_s[critical], p);

  p.memory = memory(cfg);
  complete_prediction(model_, device_, cfg, p);
  return p;
}

// Peak memory of the most loaded rank. Per stage: the weights (bf16 or fp16, 2 bytes), the main
// gradients (megatron_grad_bytes) and the fp32 master weights and Adam moments (12 bytes, or
// optimizer_state_bytes under the precision-aware optimizer; divided by
// dp under the distributed optimizer: Megatron-LM's docs give 18 and 6 + 12/dp bytes per parameter
// for bf16); the activations of the chunk-micro-batches in flight (1F1B: the first stage holds p of
// them, stage s p - s; interleaved: Megatron's warm-up count plus one; combined 1F1B one more), each
// the saved bytes of its layers (full recompute: only each layer's input; selective: without the
// attention-only bytes); the embedding's saved bytes on the first stage and one micro-batch's logits
// on the last; and the transient buffers of one block's backward (with full recompute, the rebuilt
// block beside them): of a model whose layers differ, its largest block's.
MemoryBreakdown MegatronEvaluator::memory(const TrainConfig& cfg) {
  const Costs& c = costs(cfg);
  const ModelParallelLayout& l = c.layout;
  const Layout& par = cfg.layout;
  const int64_t m = cfg.per_device_batch() / cfg.micro_batch;
  const double a = activation_bytes(cfg.precision);
  const double tokens = d(cfg.micro_batch) * d(cfg.seq_len / l.cp);  // the rank's s/cp of each sequence
  const double input = tokens * d(model_.d_model) * a / (par.sequence_parallel ? d(l.tp) : 1.0);
  const Checkpointing ckpt = cfg.layout.checkpointing;
  const auto per_layer = [&](const MegatronBlock& b) {
    return ckpt == Checkpointing::kFull ? input : b.saved - b.saved_attention_only;
  };
  const double rebuilt = ckpt == Checkpointing::kFull ? c.most([](const MegatronBlock& b) { return b.saved; })
                         : ckpt == Checkpointing::kSelective
                             ? c.most([](const MegatronBlock& b) { return b.saved_attention_only + b.saved_dropped; })
                             : 0.0;
  const bool uniform = c.groups() == 1;
  if (!uniform) {
    chunk_saved_.resize(c.chunk_layers.size());
    for (size_t k = 0; k < chunk_saved_.size(); ++k) chunk_saved_[k] = c.over_chunk(k, per_layer);
  }
  const double layer_gather = c.most([](const MegatronBlock& b) { return b.fsdp_gather_bytes; });
  const double layer_grads = c.most([](const MegatronBlock& b) { return b.fsdp_grad_bytes; });
  MemoryBreakdown worst;
  for (int64_t s = 0; s < l.pp; ++s) {
    // in flight: the warm-up's forwards plus one (combined 1F1B's warm-up is one longer)
    const int64_t warmup = pipeline_warmup(l.pp, l.vp, m, s, /*combined_1f1b=*/par.moe_a2a_overlap) + 1;
    const double in_flight = d(std::min(warmup, m * l.vp));
    // The layers of the chunk-micro-batches in flight: the stage's first forwards, virtual
    // micro-batch k on its chunk (k / pp) % vp (pipeline.hpp); each chunk's saved bytes (of a
    // uniform model: its layers times one layer's).
    int64_t layers_in_flight = 0;
    double saved_in_flight = 0;
    for (int64_t k = 0; k < std::min(warmup, m * l.vp); ++k) {
      const size_t chunk = static_cast<size_t>(((k / l.pp) % l.vp) * l.pp + s);
      if (uniform) layers_in_flight += c.chunk_layers[chunk];
      else saved_in_flight += chunk_saved_[chunk];
    }
    if (uniform) saved_in_flight = d(layers_in_flight) * per_layer(c.blocks.front());
    MemoryBreakdown mb;
    const size_t si = static_cast<size_t>(s);
    double weight_bytes = c.stage_params[si] * 2.0, grad_bytes = c.stage_trained[si] * megatron_grad_bytes(cfg);
    if (par.fsdp_shards_grads()) {
      // Megatron-FSDP: the gradients sharded over the data-parallel ranks beside two layers' unsharded
      // buffers; under optim_grads_params the weights too (in their gather bytes) beside the two
      // layers being computed and prefetched (its double buffer) and the output layer at the loss.
      grad_bytes = grad_bytes / d(l.grad_ranks()) + 2.0 * layer_grads;
      if (par.fsdp_shards_params()) {
        const double stage_gathered =
            c.over_stage(si, [](const MegatronBlock& b) { return b.fsdp_gather_bytes; }) + c.fsdp_root_bytes;
        weight_bytes = stage_gathered / d(l.grad_ranks()) + 2.0 * layer_gather +
                       (model_.tie_embeddings ? 1.0 : 0.5) * c.fsdp_root_bytes;
      }
    }
    mb.sharded_state_bytes = weight_bytes + grad_bytes + optimizer_state_bytes(cfg) * c.stage_master_params[si];
    mb.activation_bytes = saved_in_flight + rebuilt;
    if (s == 0) mb.activation_bytes += std::ceil(in_flight / d(l.vp)) * c.embed_saved;
    if (s == l.pp - 1) mb.activation_bytes += c.head_saved + c.mtp_saved;
    mb.transient_bytes = c.most([](const MegatronBlock& b) { return b.backward_buffers; });
    // TransformerEngine's fp8 copies (and transposes) of the stage's weights beside the bf16 ones,
    // kept all step; as fp8 parameters (fp8_param_gather) they are the weights the 2 bytes count.
    if (!par.fp8_param_gather) mb.gathered_params_bytes = c.stage_cast_bytes(si);
    mb = with_peak(mb, params_);
    if (mb.peak_bytes > worst.peak_bytes) worst = mb;
  }
  return worst;
}

namespace {

// Megatron rows: the host's kernel-issue time bounds their small passes, and each tensor-parallel
// collective waits for every rank of its group (the per-step latency of a ring inside a node);
// Composer's recompute share and overlap slowdown do not enter them.
constexpr CostParamMember kMegatronFitAdds[] = {&CostParams::host_kernel_issue_s, &CostParams::intra_node_latency_s};
constexpr CostParamMember kMegatronFitUninformed[] = {&CostParams::recompute_fraction, &CostParams::overlap_slowdown};

}  // namespace

constinit const FrameworkDef kMegatronFramework = {
    .id = Framework::kMegatron,
    .name = "megatron",
    .sharding = Sharding::kNoShard,
    .conventions = {.padded_vocab = true, .unfused_attention = true, .core_attention = true},
    .model_parallel = true,
    .batching = {.whole_micro_batches = true},
    .distributed_optimizer = true,
    .no_sharding_strategies =
        "has no FSDP sharding strategies (its data parallelism is DDP; --dist-opt shards the optimizer)",
    .options = option_bit(FrameworkOption::kUnevenPipeline) | option_bit(FrameworkOption::kTpCommOverlap) |
               option_bit(FrameworkOption::kMoeA2aOverlap) | option_bit(FrameworkOption::kGradReduceBf16) |
               option_bit(FrameworkOption::kFp8ParamGather) | option_bit(FrameworkOption::kPipelineScatterGather) |
               option_bit(FrameworkOption::kDistributedOptimizer) | option_bit(FrameworkOption::kMegatronFsdp) |
               option_bit(FrameworkOption::kRecomputeModules) | option_bit(FrameworkOption::kMtp) |
               option_bit(FrameworkOption::kMoeDispatcher) | option_bit(FrameworkOption::kBf16Moments) |
               option_bit(FrameworkOption::kCudaGraphs) | option_bit(FrameworkOption::kMoeCapacity) |
               option_bit(FrameworkOption::kBf16Layers) | option_bit(FrameworkOption::kFp8OutputProj) |
               option_bit(FrameworkOption::kFusedGroupedMlp) | option_bit(FrameworkOption::kMoePagedStash),
    .fit_adds = kMegatronFitAdds,
    .fit_uninformed = kMegatronFitUninformed,
    .expert_tensor_parallel = true,
    .rules = kMegatronRules,
    .make_evaluator = make_evaluator<MegatronEvaluator>,
};

}  // namespace tpsim
