// One training framework as tpsim models it: its conventions (the defaults a run under it takes),
// its rules (what it can run), and an evaluator of its step. Composer (model/composer), Megatron-Core
// (model/megatron) and torchtitan (model/torchtitan) each define one; framework_def(f) returns it.
// Code outside those three asks the definition, never which framework it is: a fourth framework is
// a fourth definition (docs/architecture.md, "Where a change goes").
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <span>

#include "model/profile.hpp"
#include "model/training.hpp"

namespace tpsim {

struct ModelConfig;
struct DeviceSpec;
struct Prediction;
struct MemoryBreakdown;
struct Rule;

// Predicts the steps of one model on one device and profile under one framework, remembering what
// it costed for the configurations that follow (a search asks for many). The referenced model,
// device and params must outlive it; one per thread.
class FrameworkEvaluator {
 public:
  virtual ~FrameworkEvaluator() = default;
  virtual Prediction predict(const TrainConfig& cfg) = 0;  // requires check_config(...) to be empty
  // The peak memory predict(cfg) would report, without laying out the schedule (a search's bound).
  virtual MemoryBreakdown memory(const TrainConfig& cfg) = 0;
};

// Options only one framework has (its own flags); asked of another, a run is refused naming the
// owner (option_owner).
enum class FrameworkOption : uint8_t {
  kUnevenPipeline,         // first/last stage layers, embedding or loss counted as layers (Megatron-Core)
  kTpCommOverlap,          // TransformerEngine's userbuffers (Megatron-Core's --tp-comm-overlap)
  kMoeA2aOverlap,          // --overlap-moe-expert-parallel-comm
  kGradReduceBf16,         // --grad-reduce-in-bf16
  kFp8ParamGather,         // --fp8-param-gather
  kPipelineScatterGather,  // Megatron-LM's legacy scatter-gather between stages
  kDistributedOptimizer,   // --dist-opt / --no-dist-opt, --overlap-grad-reduce
  kAsyncTensorParallel,    // torchtitan's enable_async_tensor_parallel
  kSelectiveAcLayers,      // torchtitan's selective_ac_option as a layer period
  kMegatronFsdp,           // Megatron-FSDP (--megatron-fsdp)
  kTorchCompile,           // torch.compile of each block (Composer's compile_config, torchtitan's compile)
  kFusedRmsNorm,           // torchtitan's norm_type = "fused_rmsnorm"
  kRecomputeModules,       // Megatron-Core's --recompute-modules beyond the attention kernel
  kMtp,                    // Megatron-Core's multi-token prediction (--mtp-num-layers)
  kMoeDispatcher,          // Megatron-Core's flex token dispatcher (--moe-dispatcher deepep, hybridep)
  kBf16Moments,            // Megatron-Core's precision-aware optimizer with bf16 Adam moments
  kCudaGraphs,             // Megatron-Core's CUDA graphs (--cuda-graphs)
  kMoeCapacity,            // Megatron-Core's token dropping (--moe-capacity-factor)
  kBf16Layers,             // Megatron-Core's first and last layers in bf16 (--bf16-layers-at-start, -end)
  kFp8OutputProj,          // Megatron-Core's output layer under MXFP8 (--fp8-output-proj)
  kFusedGroupedMlp,        // TransformerEngine's fused grouped MLP of the experts (--fused-grouped-mlp)
  kMoePagedStash,          // Megatron-Core's paged stash of the experts' activations (--moe-paged-stash)
};
constexpr uint32_t option_bit(FrameworkOption o) { return 1u << static_cast<unsigned>(o); }

// A framework's definition. A field it does not name is off (false, empty, none): each definition
// lists what it has.
struct FrameworkDef {
  Framework id;
  std::string_view name;  // as --framework and a table's Framework column take it
  // Its data parallelism: composer lets the run choose among FSDP's sharding strategies (and DDP);
  // otherwise `sharding` is what it always runs (Megatron-Core's DDP: NO_SHARD, --dist-opt sharding
  // the optimizer; torchtitan's FSDP2: FULL_SHARD over the data-parallel ranks).
  bool sharding_strategies = false;
  Sharding sharding;  // fixed without sharding_strategies; the default with them
  // Conventions of its model code.
  struct Conventions {
    bool padded_vocab = false;  // the vocabulary padded to a multiple of 128 x tp (Megatron-LM)
    // Unfused attention (the scores materialised) can be asked of it (--attention unfused).
    bool unfused_attention = false;
    // Unfused attention under it is Megatron-LM's core attention (its fused softmax, dropout 0.1);
    // else llm-foundry's PyTorch attention.
    bool core_attention = false;
    // Its RMSNorm and RoPE are PyTorch ops run one kernel each in eager mode, not fused kernels
    // (torchtitan's norms.py RMSNorm and model.py apply_rotary_emb; BlockShape::eager_rms_norm, eager_rope).
    bool eager_norm_rope = false;
  } conventions;
  // Tensor, pipeline, context and expert parallelism; without them, data parallelism only.
  bool model_parallel = false;
  // How a step's batch splits.
  struct Batching {
    // Micro-batches of one size that divide each data-parallel replica's batch; else (composer) the
    // last micro-batch of a step may be smaller.
    bool whole_micro_batches = false;
    // The global batch divides evenly over the GPUs (llm-foundry's device_train_batch_size); else
    // only over the data-parallel replicas.
    bool batch_per_gpu = false;
    // --micro-batch auto is Composer's: the per-device batch, halved on each out-of-memory; else
    // the largest micro-batch that fits.
    bool auto_micro_batch_halves = false;
  } batching;
  // Sharded optimizer state by default (Megatron-Core's --use-distributed-optimizer, FSDP2).
  bool distributed_optimizer = false;
  // HSDP's shard and replicate degrees are given as is (torchtitan's data_parallel_*_degree).
  bool data_parallel_degrees = false;
  // The shipped profiles' held-out errors are of runs under it, so its predictions get their
  // interval (Throughput Low/High); the others' errors are stated in docs/accuracy.md instead.
  bool profile_intervals = false;
  // Why --sharding does not apply to it, after "--framework NAME " (without sharding_strategies).
  std::string_view no_sharding_strategies;
  uint32_t options = 0;  // option_bit of each FrameworkOption it owns
  bool owns(FrameworkOption o) const { return (options & option_bit(o)) != 0; }
  // The cost parameters a table fit frees beyond the default set when rows of it are fitted, and
  // those of the default set its rows cannot inform (left fixed unless another framework's rows do).
  std::span<const CostParamMember> fit_adds, fit_uninformed;
  // The expert tensor-parallel degree a search tries besides tp (Megatron-Core's --etp 1).
  bool expert_tensor_parallel = false;
  // Why a layout with model parallelism does not apply to it, after "--tp 2: " (without
  // model_parallel; the rule no-model-parallelism).
  std::string_view no_model_parallelism;
  // Its own rules (model/rules.hpp), read after the general ones of each scope.
  std::span<const Rule* const> rules;
  std::unique_ptr<FrameworkEvaluator> (*make_evaluator)(const ModelConfig& model, const DeviceSpec& device,
                                                        const CostParams& params);
};

// The three definitions (model/composer.cpp, model/megatron.cpp, model/torchtitan.cpp), constant-
// initialized, so that asking one costs an indexed load wherever it is asked (the searches ask
// millions of times).
extern const FrameworkDef kComposerFramework;
extern const FrameworkDef kMegatronFramework;
extern const FrameworkDef kTorchtitanFramework;
inline constexpr std::array<const FrameworkDef*, kAllFrameworks.size()> kFrameworkDefs = {
    &kComposerFramework, &kMegatronFramework, &kTorchtitanFramework};  // in the enum's order (test_search)

inline const FrameworkDef& framework_def(Framework f) { return *kFrameworkDefs[static_cast<size_t>(f)]; }

// FrameworkDef::make_evaluator for an evaluator constructed from (model, device, params).
template <class E>
std::unique_ptr<FrameworkEvaluator> make_evaluator(const ModelConfig& model, const DeviceSpec& device,
                                                   const CostParams& params) {
  return std::make_unique<E>(model, device, params);
}

// The framework that owns option `o`.
const FrameworkDef& option_owner(FrameworkOption o);

// The sharding a run under `f` takes: what was asked under a framework with sharding strategies
// (its default when nothing was), else the one it runs.
Sharding framework_sharding(Framework f, std::optional<Sharding> asked = std::nullopt);

}  // namespace tpsim
