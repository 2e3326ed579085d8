// What a training run is asked to do: the llm-foundry/Composer knobs of one configuration.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "model/lora.hpp"

namespace tpsim {

// Number formats a kernel can compute in; indexes per-format peak and achieved rates.
// kFp4 (last, so the older formats keep their indices): Blackwell's NVFP4/MXFP4 and CDNA 4's MXFP4
// tensor-core peak, one format for the peak since the chips run both block-scaled kinds at one rate.
enum class DType : uint8_t { kFp8, kBf16, kFp16, kTf32, kFp32, kFp4 };
inline constexpr int kNumDTypes = 6;
inline constexpr std::array<std::string_view, kNumDTypes> kDTypeNames = {"fp8", "bf16", "fp16", "tf32", "fp32", "fp4"};

// Composer's `precision`.
//   amp_bf16 / amp_fp16: fp32 master weights, matmuls in bf16 / fp16 under autocast.
//   amp_fp8: TransformerEngine fp8 matmuls for the block's linear layers, the rest as amp_bf16.
//   bf16: the older Composer "bf16" precision of seed 001's A100 40GB rows; matmuls in bf16.
//   fp32: fp32 matmuls (no TF32).
//   mxfp8: the block's linear layers in OCP MXFP8 (e4m3 elements, one e8m0 scale per 32 elements:
//     TransformerEngine's MXFP8BlockScaling recipe), the rest as amp_bf16. Blackwell and CDNA 4.
//   nvfp4: the block's linear layers in NVFP4 (e2m1 elements, one e4m3 scale per 16 elements and an
//     fp32 scale per tensor: TransformerEngine's NVFP4BlockScaling recipe), the rest as amp_bf16.
//     Blackwell only: CDNA 4's fp4 is MXFP4 (32-element blocks, e8m0 scales), not NVFP4.
enum class Precision : uint8_t { kAmpBf16, kAmpFp16, kAmpFp8, kBf16, kFp32, kMxfp8, kNvfp4 };

// The block-scaled ("microscaling") formats a device's tensor cores take (DeviceSpec::scaled_formats).
enum class ScaledFormat : uint8_t { kMxfp8, kMxfp4, kNvfp4 };
inline constexpr int kNumScaledFormats = 3;
inline constexpr std::array<std::string_view, kNumScaledFormats> kScaledFormatNames = {"mxfp8", "mxfp4", "nvfp4"};
std::optional<ScaledFormat> parse_scaled_format(std::string_view s);
// The block-scaled format a precision's block GEMMs need; none for the others.
std::optional<ScaledFormat> scaled_format(Precision p);
// Elements per scale factor (one byte each: e8m0 for MX, e4m3 for NVFP4): 32 for MX, 16 for NVFP4;
// 0 for a precision without block scaling.
int scale_block_elements(Precision p);

// Composer's FSDP `mixed_precision`: the dtypes of the gathered parameters and reduced gradients.
//   DEFAULT: parameters gathered in the autocast dtype (bf16/fp16), gradients reduced in fp32.
//   PURE:    parameters gathered and gradients reduced in the autocast dtype.
//   FULL:    both in fp32.
enum class MpMode : uint8_t { kDefault, kPure, kFull };

// PyTorch FSDP sharding strategies as Composer names them, and (kDdp, last) plain PyTorch DDP:
// what Composer runs when a training YAML has no fsdp_config (its Trainer wraps the model in
// DistributedDataParallel, composer/distributed/dist_strategy.py prepare_ddp_module). kDdp is not
// an FSDP strategy: parse_sharding does not accept it and kAllShardings does not list it.
enum class Sharding : uint8_t { kFullShard, kShardGradOp, kNoShard, kHybridShard, kDdp };
inline constexpr std::array<Sharding, 4> kAllShardings = {Sharding::kFullShard, Sharding::kShardGradOp,
                                                          Sharding::kNoShard, Sharding::kHybridShard};

// Activation checkpointing (Composer's activation_checkpointing, Megatron-LM's recompute granularity):
//   kNone: every block keeps what its backward needs.
//   kSelective: the attention core (the flash-attention kernel) is run again in the backward instead
//     of keeping what only it needs (Korthikanti et al. 2022, as Megatron-LM and torchtitan do).
//   kFull: each block keeps only its input and runs its whole forward again before its backward.
enum class Checkpointing : uint8_t { kNone, kSelective, kFull };
inline constexpr std::array<Checkpointing, 3> kAllCheckpointings = {Checkpointing::kNone, Checkpointing::kSelective,
                                                                    Checkpointing::kFull};

// Megatron-Core's selective recompute modules (TransformerConfig.recompute_modules, Megatron-LM's
// --recompute-modules, under --recompute-granularity selective), as a set of bits. What each runs
// again in the backward and stops keeping (model/ops.hpp BlockShape::recompute says how tpsim costs
// them; megatron/core/transformer/transformer_config.py documents them):
//   core_attn (the default set): the attention kernel (what Checkpointing::kSelective means under
//     every framework);
//   layernorm: the norms Megatron-Core runs apart from a linear (a mixture of experts' pre-MLP norm,
//     latent attention's input norm), their output discarded and rebuilt;
//   moe_act: the routed experts' activation, its output (fc2's input) discarded and rebuilt;
//   mla_up_proj: latent attention's up projections and RoPE, their outputs (the attention's q, k and
//     v) discarded and rebuilt;
//   mlp: a dense layer's whole feed-forward (with its fused norm) from its input;
//   moe: a mixture of experts' whole layer, the dispatcher's all-to-alls included, from its input;
//   shared_experts: the shared experts from their input.
enum class RecomputeModule : uint8_t { kCoreAttn, kLayernorm, kMoeAct, kMlaUpProj, kMlp, kMoe, kSharedExperts };
inline constexpr int kRecomputeModuleCount = 7;
constexpr uint8_t module_bit(RecomputeModule m) { return static_cast<uint8_t>(1u << static_cast<unsigned>(m)); }
inline constexpr uint8_t kDefaultRecomputeModules = module_bit(RecomputeModule::kCoreAttn);
inline constexpr uint8_t kAllRecomputeModules = (1u << kRecomputeModuleCount) - 1;
std::string_view to_string(RecomputeModule m);  // Megatron's name: "core_attn", "moe_act", ...
// The set as its names in the enum's order, joined by `sep` ("" for the empty set).
std::string recompute_modules_text(uint8_t modules, std::string_view sep = ";");
// A list of Megatron's names separated by commas, semicolons or spaces (each at most once); nullopt
// with `error` naming the first unknown or repeated name, or an empty list.
std::optional<uint8_t> parse_recompute_modules(std::string_view text, std::string& error);

std::string_view to_string(Precision p);
std::string_view to_string(MpMode m);
std::string_view to_string(Sharding s);
std::string_view to_string(DType t);
std::optional<Precision> parse_precision(std::string_view s);  // llm-foundry spelling, e.g. "amp_bf16"
std::optional<MpMode> parse_mp_mode(std::string_view s);       // "DEFAULT", "PURE", "FULL"
std::optional<Sharding> parse_sharding(std::string_view s);    // "FULL_SHARD", ...
std::optional<DType> parse_dtype(std::string_view s);
std::string_view to_string(Checkpointing c);  // "none", "selective", "full"
std::optional<Checkpointing> parse_checkpointing(std::string_view s);

// The dtype of the transformer blocks' matmuls, of everything else (attention, logits), and of
// activations as stored (bytes per element).
DType block_gemm_dtype(Precision p);
DType other_gemm_dtype(Precision p);
double activation_bytes(Precision p);
DType activation_dtype(Precision p);  // bf16, fp16 (amp_fp16) or fp32
// Bytes per element of gathered parameters and of reduced gradients under an FSDP mixed-precision mode.
double gathered_param_bytes(Precision p, MpMode m);
double reduced_grad_bytes(Precision p, MpMode m);
// The dtype whose peak MFU and HFU divide by: the blocks' matmuls' (Composer: amp_fp8 -> fp8 peak,
// bf16 and amp_bf16 -> bf16 ...).
DType mfu_dtype(Precision p);

// The training framework whose conventions a configuration follows (docs/frameworks.md):
//   composer:   llm-foundry/Composer with PyTorch FSDP (the sharding strategies above), no model
//               parallelism.
//   megatron:   Megatron-LM / Megatron-DeepSpeed / Megatron-Core: tensor (with or without sequence)
//               parallelism, 1F1B or interleaved 1F1B pipeline parallelism, data parallelism with
//               DDP's gradient all-reduce or the distributed optimizer (ZeRO-1).
//   torchtitan: FSDP2 (every parameter, gradient and optimizer state sharded over data parallel) with
//               sequence-parallel tensor parallelism (async as an option), 1F1B or interleaved 1F1B
//               pipeline parallelism and float8 all-gathers (model/torchtitan.hpp).
enum class Framework : uint8_t { kComposer, kMegatron, kTorchtitan };
inline constexpr std::array<Framework, 3> kAllFrameworks = {Framework::kComposer, Framework::kMegatron,
                                                            Framework::kTorchtitan};
inline constexpr Framework kDefaultFramework = Framework::kComposer;  // a run that names none
std::string_view to_string(Framework f);                              // "composer", "megatron", "torchtitan"
std::optional<Framework> parse_framework(std::string_view s);

// Megatron-Core's own fully sharded data parallelism (Megatron-FSDP: Megatron-LM's --use-megatron-fsdp
// with --data-parallel-sharding-strategy; Megatron-Bridge's use_megatron_fsdp), by what it shards
// over the data-parallel (x context) ranks (megatron/core/distributed/fsdp/src/README.md):
//   kOff: Megatron-Core's DDP, with or without the distributed optimizer (--dist-opt);
//   kNoShard: nothing (DDP's memory; the gradient all-reduce overlapped with the last backward);
//   kOptim: the optimizer state (ZeRO-1: the distributed optimizer's memory and collectives);
//   kOptimGrads: and the gradients (ZeRO-2): each micro-batch's gradients reduce-scattered during
//     its backward, layer by layer; the updated parameters all-gathered after the optimizer step;
//   kOptimGradsParams: and the parameters (ZeRO-3): each layer all-gathered before its forward and
//     again before its backward (prefetched one layer ahead, two layers' buffers), its gradients
//     reduce-scattered after its backward, every micro-batch.
enum class MegatronFsdp : uint8_t { kOff, kNoShard, kOptim, kOptimGrads, kOptimGradsParams };
std::string_view to_string(MegatronFsdp m);  // "off", "no_shard", "optim", "optim_grads", "optim_grads_params"
std::optional<MegatronFsdp> parse_megatron_fsdp(std::string_view s);

// Megatron-Core's MoE token dispatcher (--moe-token-dispatcher-type, and --moe-flex-dispatcher-backend
// under 'flex'; megatron/core/transformer/moe/token_dispatcher.py):
//   kAllToAll: MoEAlltoAllTokenDispatcher: each routed (token, expert) pair permuted into its own row
//     and sent by torch.distributed's all-to-all over the ep ranks (a token routed to two experts of
//     one rank goes twice), the rows gathered over the expert tensor-parallel ranks after it;
//   kDeepEp, kHybridEp: MoEFlexTokenDispatcher over the etp x ep ranks at once, with DeepEP's fused
//     dispatch and combine kernels (deepseek-ai/DeepEP) or NVIDIA's HybridEP (DeepEP's hybrid-ep
//     branch): each token sent once to each rank holding one of its experts, and between NVLink
//     domains once to each domain, forwarded inside it (model/model_parallel.hpp
//     flex_dispatch_seconds).
enum class MoeDispatcher : uint8_t { kAllToAll, kDeepEp, kHybridEp };
std::string_view to_string(MoeDispatcher m);  // "alltoall", "flex:deepep", "flex:hybridep"
// "alltoall", "flex:deepep" or "deepep", "flex:hybridep" or "hybridep".
std::optional<MoeDispatcher> parse_moe_dispatcher(std::string_view s);

// Megatron-Core's CUDA graphs (transformer_config.py: --cuda-graph-impl transformer_engine or local
// with --cuda-graph-modules, or full_iteration), as a set of bits: the modules each layer captures,
// its forward and backward each replayed as one graph, so that the host issues one launch for each
// instead of one per kernel (model/megatron.cpp graphed_modules says which ops each holds):
//   attn: TransformerLayer._forward_attention (the input norm, the attention, its residual);
//   mlp: a dense layer's _forward_mlp (the pre-MLP norm, the MLP, its residual);
//   moe: a mixture of experts' whole _forward_mlp (Megatron-Core: only with drop-padding);
//   moe_router: _forward_mlp up to the router (the pre-MLP norm, the router, the shared experts);
//   moe_preprocess: MoELayer.preprocess (latent experts' down projection, the dispatcher's
//     preprocessing: the all-to-all's permutation);
//   mamba: a Mamba layer;
//   full_iteration: the whole step, one graph (--cuda-graph-impl full_iteration): no host time.
// "layer" (an empty module list: the whole layer) is attn, mlp, moe and mamba.
enum class GraphModule : uint8_t { kAttn, kMlp, kMoe, kMoeRouter, kMoePreprocess, kMamba, kFullIteration };
inline constexpr int kGraphModuleCount = 7;
constexpr uint8_t graph_bit(GraphModule m) { return static_cast<uint8_t>(1u << static_cast<unsigned>(m)); }
inline constexpr uint8_t kWholeLayerGraphs = graph_bit(GraphModule::kAttn) | graph_bit(GraphModule::kMlp) |
                                             graph_bit(GraphModule::kMoe) | graph_bit(GraphModule::kMamba);
std::string_view to_string(GraphModule m);  // Megatron's name: "attn", "moe_router", "full_iteration", ...
// The set as its names in the enum's order, joined by `sep` ("" for none), the implementation's
// prefix left out.
std::string cuda_graphs_text(uint8_t modules, std::string_view sep = ";");
// Megatron's names separated by commas, semicolons or spaces, after an optional implementation
// ("transformer_engine:", "local:"), or "layer", "full_iteration", "none"; nullopt with `error` naming
// what is wrong (an unknown or repeated name, full_iteration with modules).
std::optional<uint8_t> parse_cuda_graphs(std::string_view text, std::string& error);

// A configuration's layout: every choice of a training run but its size (sequence length, batches,
// GPU count) and number formats: the framework, its data parallelism (the FSDP sharding strategy),
// activation checkpointing, and how its GPUs divide the model beyond data parallelism. Ranks are
// laid out tensor-parallel innermost (within a node), then context, then pipeline, then data
// parallel across what is left: data_parallel = n_gpus / (tensor * context * pipeline). The degrees
// all 1 (composer's default) is plain data parallelism under `sharding`. What a user asks of a
// layout, each axis given or searched, is a LayoutRequest (model/search.hpp).
struct Layout {
  Framework framework = Framework::kComposer;
  Sharding sharding = Sharding::kFullShard;
  Checkpointing checkpointing = Checkpointing::kNone;
  int64_t tensor = 1;          // TP: heads and FFN columns split across ranks (Megatron's column/row-parallel linears)
  int64_t pipeline = 1;        // PP: layers split into stages
  int64_t virtual_stages = 1;  // interleaved 1F1B: model chunks per pipeline rank (1: plain 1F1B)
  int64_t context = 1;         // CP: the sequence split across ranks (ring attention)
  int64_t expert = 1;          // EP: experts split across ranks (carved out of data x context parallelism)
  // ETP: the routed experts' own tensor-parallel degree (Megatron-Core's --expert-tensor-parallel-size);
  // 0: the tensor-parallel degree, Megatron-Core's default. The expert groups (ETP x EP ranks) are
  // carved out of each stage's tensor x context x data ranks, so ETP 1 lets EP span the tensor ranks.
  int64_t expert_tensor = 0;
  bool sequence_parallel = false;      // TP's norms, dropout and residuals split along the sequence
  bool distributed_optimizer = false;  // megatron: optimizer state and fp32 master weights sharded over DP (ZeRO-1)
  bool overlap_grad_reduce = false;    // megatron: gradient buckets reduced during the backward
  // megatron: main gradients kept and reduced in bf16 (Megatron-LM's --grad-reduce-in-bf16,
  // Megatron-Bridge's ddp.grad_reduce_in_fp32 = False), not fp32 as --bf16 otherwise makes them.
  bool grad_reduce_bf16 = false;
  // megatron: the linears' weights are fp8 parameters (Megatron-LM's --fp8-param-gather; set by
  // Megatron-Bridge's fp8 recipes but blockwise): they take the 2 bytes of bf16 weights as fp8 and
  // its transpose. Without it TransformerEngine caches an fp8 copy and its transpose of each weight
  // beside the bf16 one, 2 bytes a parameter more (BlockShape::fp8_weight_cache).
  bool fp8_param_gather = false;
  // megatron: the output layer under the MXFP8 recipe (Megatron-Core's --fp8-output-proj,
  // TELMHeadColumnParallelLinear; Megatron-Bridge's DeepSeek-V3 and GPT-OSS Blackwell recipes): the
  // logits' GEMMs in MXFP8 with their casts (BlockShape::fp8_head), not in bf16.
  bool fp8_output_proj = false;
  // megatron: the routed experts' MLP as TransformerEngine's fused grouped MLP (Megatron-Core's
  // --use-transformer-engine-op-fuser with TransformerEngine's CuTe DSL kernels; Megatron-Bridge's
  // DeepSeek-V3 and GPT-OSS GB200/GB300 recipes): BlockShape::fused_expert_mlp.
  bool fused_grouped_mlp = false;
  // megatron: the routed experts' kept activations in Megatron-Core's paged stash
  // (moe_paged_stash, transformer/moe/paged_stash.py), a buffer of this many times their expected
  // size (moe_paged_stash_buffer_size_factor_cuda; Megatron-Bridge's full-iteration recipes: 1.2):
  // BlockShape::paged_stash. 0: off.
  double moe_paged_stash = 0;
  // composer: HSDP's 2D device mesh (replicate, shard), fsdp_config.data_parallel_shard_degree and
  // data_parallel_replicate_degree (Composer's _create_device_mesh): parameters sharded over
  // shard_degree consecutive ranks, gradients all-reduced over replicate_degree ranks that far
  // apart. 0: not given (Composer's defaults: shard -1, replicate None, and the sharding strategy's
  // own groups, as before these fields existed); -1: the rest of the GPUs. model/parallelism.hpp
  // resolve_hsdp_mesh says what a pair means.
  int64_t shard_degree = 0;
  int64_t replicate_degree = 0;
  bool async_tensor_parallel = false;  // torchtitan: enable_async_tensor_parallel (TP collectives beside the GEMMs)
  // torchtitan: activation_checkpoint.selective_ac_option under Checkpointing::kSelective: 0 is 'op'
  // (per-op selective checkpointing), N >= 1 checkpoints every N-th block in full.
  int64_t selective_ac_layers = 0;
  // megatron: Megatron-Core's uneven pipeline splits (model/megatron.hpp split_layers).
  // first_stage_layers and last_stage_layers (--decoder-first-pipeline-num-layers and
  // --decoder-last-pipeline-num-layers; 0: not given) fix the first and last stage's layers and split
  // the rest evenly over the stages between; account_for_embedding and account_for_loss
  // (--account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split) count the
  // embedding and the loss as one layer each of the first and last model chunk. None: equal chunks.
  int64_t first_stage_layers = 0;
  int64_t last_stage_layers = 0;
  bool account_for_embedding = false;
  bool account_for_loss = false;
  // megatron: TransformerEngine's tensor-parallel communication overlap (Megatron-Core's
  // --tp-comm-overlap, userbuffers): each block's all-gathers and reduce-scatters pipelined with the
  // GEMMs they feed or follow (model/megatron.hpp tensor_parallel_seconds).
  bool tp_comm_overlap = false;
  // megatron: legacy Megatron-LM's and Megatron-DeepSpeed's --scatter-gather-tensors-in-pipeline (on
  // by default there; Narayanan et al. 2021, section 4.1; Megatron-Core has no such option): without
  // sequence parallelism each tensor-parallel rank sends 1/tp of a micro-batch's activations to its
  // peer in the next stage, and the receivers all-gather them over the tensor-parallel group.
  bool pipeline_scatter_gather = false;
  // megatron: Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm; Megatron-Bridge's
  // moe_a2a_overlap): the expert-parallel all-to-alls of one micro-batch hidden behind another's
  // compute (model/megatron.hpp, model/pipeline.hpp).
  bool moe_a2a_overlap = false;
  // megatron: under combined 1F1B, each layer's weight gradients computed apart from its data
  // gradients (Megatron-Core's --delay-wgrad-compute; TransformerEngine's delay_wgrad_compute): the
  // experts' after their data gradients, so that the dispatch's backward all-to-all starts earlier,
  // and the attention's at the end of the layer, beside the next layer's combine
  // (model_chunk_schedule_plan.py, TransformerLayerSchedulePlan.run).
  bool delay_wgrad = false;
  // megatron: the MoE token dispatcher (above).
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // megatron: Megatron-Core's precision-aware optimizer (--use-precision-aware-optimizer) with both
  // Adam moments in bf16 (--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; Megatron-Bridge's DeepSeek-V3
  // recipes): model/megatron.cpp optimizer_state_bytes says what the optimizer then keeps.
  bool bf16_moments = false;
  // megatron: the modules Megatron-Core captures in CUDA graphs (GraphModule bits; 0: none).
  uint8_t cuda_graphs = 0;
  // megatron: token dropping, Megatron-Core's --moe-expert-capacity-factor with
  // --moe-pad-expert-input-to-capacity (Megatron-Bridge's apply_moe_token_drop: 1.0): each expert
  // takes this many times its even share of the routed rows, the rest dropped and short experts
  // padded (the run's MoeConfig::capacity_factor, in place of the model's). 0: the model's own.
  double moe_capacity_factor = 0;
  // megatron: the first and last decoder layers that run in bf16 under an fp8 or fp4 recipe
  // (Megatron-Core's --first-last-layers-bf16 with --num-layers-at-start-in-bf16 and
  // --num-layers-at-end-in-bf16; Nemotron 3 Super's NVFP4 recipes: 0 and 14): their GEMMs, casts and
  // buffers as under amp_bf16, the other layers' as the run's precision (fp8_utils.py and
  // fp4_utils.py: get_fp8_context and get_fp4_context leave those layers out of the recipe).
  int64_t bf16_layers_start = 0;
  int64_t bf16_layers_end = 0;
  // megatron: Megatron-FSDP's sharding strategy (above); kOff: Megatron-Core's DDP.
  MegatronFsdp megatron_fsdp = MegatronFsdp::kOff;
  // megatron: under Checkpointing::kSelective, the modules recomputed (RecomputeModule bits); every
  // other framework's selective checkpointing is the default set, the attention kernel alone.
  uint8_t recompute_modules = kDefaultRecomputeModules;
  // megatron: multi-token prediction (Megatron-Core's --mtp-num-layers; DeepSeek-V3's
  // num_nextn_predict_layers): after the last layer, each of `mtp_layers` depths norms the hidden state
  // and the embedding of the tokens one further ahead, projects their concatenation (eh_proj, 2h to h),
  // runs one more layer of the model's last layer's kind and its own logits and loss, on the last
  // pipeline stage (megatron/core/transformer/multi_token_prediction.py). mtp_repeated_layer: one
  // such layer's weights for every depth (--mtp-use-repeated-layer; Nemotron 3 Super's recipes).
  int64_t mtp_layers = 0;
  bool mtp_repeated_layer = false;
  // megatron: Megatron-Core's pipeline_model_parallel_layout (--pipeline-model-parallel-layout), as the
  // id of its parsed chunks (model/model_parallel.hpp pipeline_layout); 0: none.
  uint16_t pipeline_layout = 0;
  // composer and torchtitan: torch.compile of each transformer block (Composer's compile_config,
  // torchtitan's compile): Inductor fuses the block's elementwise and norm kernels (model/ops.hpp
  // BlockShape::torch_compile says which).
  bool torch_compile = false;
  // torchtitan: model.norm_type "fused_rmsnorm" (its Triton RMSNorm kernel, one kernel each way),
  // not "rmsnorm" (PyTorch ops; BlockShape::eager_rms_norm).
  bool fused_rmsnorm = false;

  // Whether the backward runs module `m` again (selective checkpointing with `m` in the set).
  bool recomputes(RecomputeModule m) const {
    return checkpointing == Checkpointing::kSelective && (recompute_modules & module_bit(m)) != 0;
  }
  bool uneven_pipeline() const {
    return first_stage_layers > 0 || last_stage_layers > 0 || account_for_embedding || account_for_loss ||
           pipeline_layout != 0;
  }
  int64_t model_parallel() const { return tensor * context * pipeline; }
  int64_t expert_tensor_degree() const { return expert_tensor > 0 ? expert_tensor : tensor; }
  // A given expert tensor parallel degree (set tensor first); tp's own is the default, stored as 0.
  void set_expert_tensor(int64_t etp) { expert_tensor = etp == tensor ? 0 : etp; }
  // No model parallelism and none of the model-parallel frameworks' options (whatever the sharding
  // and checkpointing).
  bool is_data_parallel_only() const {
    return tensor == 1 && pipeline == 1 && virtual_stages == 1 && context == 1 && expert == 1 && expert_tensor == 0 &&
           !sequence_parallel && !uneven_pipeline() && !tp_comm_overlap && !grad_reduce_bf16 &&
           !pipeline_scatter_gather && !moe_a2a_overlap && !delay_wgrad && !fp8_output_proj && !fused_grouped_mlp &&
           moe_paged_stash == 0 && moe_dispatcher == MoeDispatcher::kAllToAll && !bf16_moments && cuda_graphs == 0 &&
           moe_capacity_factor == 0 && bf16_layers_start == 0 && bf16_layers_end == 0 &&
           megatron_fsdp == MegatronFsdp::kOff;
  }
  // Megatron-FSDP sharding the gradients (ZeRO-2), and the parameters too (ZeRO-3).
  bool fsdp_shards_grads() const { return megatron_fsdp >= MegatronFsdp::kOptimGrads; }
  bool fsdp_shards_params() const { return megatron_fsdp == MegatronFsdp::kOptimGradsParams; }
  bool operator==(const Layout&) const = default;
};

// One configuration of a training run on n_gpus identical devices.
// The per-replica batch (global_batch / data_parallel(); per device without model parallelism) is processed in
// micro-batches of micro_batch sequences; when micro_batch does not divide it, the last micro-batch is smaller
// (llm-foundry accumulates 11, 11, 11, 11, 4 for a per-device batch of 48 and micro-batches of 11).
struct TrainConfig {
  int64_t seq_len = 0;       // tokens per sequence (max_seq_len)
  int64_t global_batch = 0;  // sequences per optimizer step over all GPUs
  int64_t micro_batch = 0;   // sequences per micro-batch per GPU
  int64_t n_gpus = 0;
  Precision precision = Precision::kAmpBf16;
  MpMode mp_mode = MpMode::kDefault;
  Layout layout;  // degrees all 1: data parallelism alone, as llm-foundry runs
  Lora lora;      // rank 0: every weight trained (pre-training, full fine-tuning); model/lora.hpp

  // Model replicas: the GPU count over the tensor, context and pipeline degrees.
  int64_t data_parallel() const { return n_gpus / layout.model_parallel(); }
  // Sequences each model replica processes per step (the per-device batch of data parallelism alone).
  int64_t per_device_batch() const { return global_batch / data_parallel(); }
  int64_t grad_accum() const { return (per_device_batch() + micro_batch - 1) / micro_batch; }
  int64_t last_micro_batch() const { return per_device_batch() - (grad_accum() - 1) * micro_batch; }
};

// The same configuration but perhaps for its global batch (what a search varies for one costing).
inline bool same_but_global_batch(const TrainConfig& a, const TrainConfig& b) {
  return a.seq_len == b.seq_len && a.micro_batch == b.micro_batch && a.n_gpus == b.n_gpus &&
         a.precision == b.precision && a.mp_mode == b.mp_mode && a.layout == b.layout && a.lora == b.lora;
}

// Upper bounds that keep every count and byte total exact and finite.
inline constexpr int64_t kMaxSeqLen = 1 << 24;
inline constexpr int64_t kMaxGpus = 1 << 20;
inline constexpr int64_t kMaxBatch = 1LL << 32;

}  // namespace tpsim
