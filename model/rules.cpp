#include "model/rules.hpp"

#include <algorithm>
#include <array>
#include <vector>

#include "model/architecture.hpp"
#include "model/device.hpp"
#include "model/framework.hpp"
#include "model/model_parallel.hpp"
#include "model/pipeline.hpp"
#include "model/profile.hpp"

namespace tpsim {

namespace {

std::string n(int64_t v) { return std::to_string(v); }
const FrameworkDef& def_of(const RuleInput& in) { return framework_def(in.cfg.layout.framework); }
std::string degree_text(const AxisNames& axis, int64_t v) { return std::string(axis.name) + " " + n(v); }
const AxisNames& tensor_axis() { return kDegreeAxes[0].names; }
const AxisNames& pipeline_axis() { return kDegreeAxes[1].names; }

// The framework that runs expert tensor parallelism (--etp).
const FrameworkDef& expert_tensor_owner() {
  return **std::find_if(kFrameworkDefs.begin(), kFrameworkDefs.end(),
                        [](const FrameworkDef* d) { return d->expert_tensor_parallel; });
}

// ---- What a framework runs at all (kFramework) ----

std::string degrees_in_range(const RuleInput& in) {
  const Layout& l = in.cfg.layout;
  for (const DegreeAxis& a : kDegreeAxes)
    if (l.*a.value < 1 || l.*a.value > kMaxGpus)
      return degree_text(a.names, l.*a.value) + " is outside 1.." + n(kMaxGpus);
  if (l.expert_tensor < 0 || l.expert_tensor > kMaxGpus)
    return degree_text(kExpertTensorAxis, l.expert_tensor) + " is outside 1.." + n(kMaxGpus);
  return {};
}

std::string options_owned(const RuleInput& in) {
  const FrameworkDef& def = def_of(in);
  const Layout& l = in.cfg.layout;
  const auto refuse = [](std::string_view flag, std::string_view whose, std::string_view owner) {
    return std::string(flag) + ": " + std::string(whose) + " option; use --framework " + std::string(owner);
  };
  // --overlap-grad-reduce outside megatron: no-model-parallelism under composer, FSDP2's own rule
  // under torchtitan.
  for (const SwitchAxis& a : kSwitchAxes)
    if (l.*a.value && !def.owns(a.owner) && a.owner != FrameworkOption::kDistributedOptimizer)
      return refuse(a.names.flag, a.whose, option_owner(a.owner).name);
  const std::string_view uneven = option_owner(FrameworkOption::kUnevenPipeline).name;
  if (l.pipeline_layout != 0 && !def.owns(FrameworkOption::kUnevenPipeline))
    return refuse("--pipeline-layout", "Megatron-Core's", uneven);
  if (l.first_stage_layers > 0 && !def.owns(FrameworkOption::kUnevenPipeline))
    return refuse("--first-stage-layers", "Megatron-Core's", uneven);
  if (l.last_stage_layers > 0 && !def.owns(FrameworkOption::kUnevenPipeline))
    return refuse("--last-stage-layers", "Megatron-Core's", uneven);
  if (l.selective_ac_layers != 0 && !def.owns(FrameworkOption::kSelectiveAcLayers))
    return refuse("--selective-ac-option", "torchtitan's", option_owner(FrameworkOption::kSelectiveAcLayers).name);
  if (l.recompute_modules != kDefaultRecomputeModules && !def.owns(FrameworkOption::kRecomputeModules))
    return refuse("--recompute-modules", "Megatron-Core's", option_owner(FrameworkOption::kRecomputeModules).name);
  if ((l.mtp_layers != 0 || l.mtp_repeated_layer) && !def.owns(FrameworkOption::kMtp))
    return refuse("--mtp-layers", "Megatron-Core's", option_owner(FrameworkOption::kMtp).name);
  if (l.moe_capacity_factor != 0 && !def.owns(FrameworkOption::kMoeCapacity))
    return refuse("--moe-capacity-factor", "Megatron-Core's", option_owner(FrameworkOption::kMoeCapacity).name);
  if (l.moe_paged_stash != 0 && !def.owns(FrameworkOption::kMoePagedStash))
    return refuse("--moe-paged-stash", "Megatron-Core's", option_owner(FrameworkOption::kMoePagedStash).name);
  if ((l.bf16_layers_start != 0 || l.bf16_layers_end != 0) && !def.owns(FrameworkOption::kBf16Layers))
    return refuse(l.bf16_layers_start != 0 ? "--bf16-layers-at-start" : "--bf16-layers-at-end", "Megatron-Core's",
                  option_owner(FrameworkOption::kBf16Layers).name);
  if (l.cuda_graphs != 0 && !def.owns(FrameworkOption::kCudaGraphs))
    return refuse("--cuda-graphs", "Megatron-Core's", option_owner(FrameworkOption::kCudaGraphs).name);
  if (l.moe_dispatcher != MoeDispatcher::kAllToAll && !def.owns(FrameworkOption::kMoeDispatcher))
    return refuse("--moe-dispatcher", "Megatron-Core's", option_owner(FrameworkOption::kMoeDispatcher).name);
  if (l.megatron_fsdp != MegatronFsdp::kOff && !def.owns(FrameworkOption::kMegatronFsdp))
    return refuse(kMegatronFsdpAxis.flag, "Megatron-Core's", option_owner(FrameworkOption::kMegatronFsdp).name);
  if (l.expert_tensor > 0 && def.model_parallel && !def.expert_tensor_parallel)
    return refuse(std::string(kExpertTensorAxis.flag) + " " + n(l.expert_tensor), "Megatron-Core's",
                  expert_tensor_owner().name);
  return {};
}

std::string data_parallel_alone(const RuleInput& in) {
  const Layout& l = in.cfg.layout;
  const auto refuse = [&](const std::string& given) {
    return given + ": " + std::string(def_of(in).no_model_parallelism);
  };
  for (const DegreeAxis& a : kDegreeAxes)
    if (l.*a.value > 1) return refuse(std::string(a.names.flag) + " " + n(l.*a.value));
  if (l.expert_tensor > 0) return refuse(std::string(kExpertTensorAxis.flag) + " " + n(l.expert_tensor));
  if (l.sequence_parallel) return refuse(std::string(kSequenceParallelAxis.flag));
  if (l.distributed_optimizer) return refuse(std::string(kDistributedOptimizerAxis.flag));
  if (l.overlap_grad_reduce) return refuse("--overlap-grad-reduce");
  return {};
}

// ---- The layout against the model, the GPU count and the batches (kLayout) ----

std::string sizes_in_range(const RuleInput& in) {
  const TrainConfig& cfg = in.cfg;
  if (cfg.seq_len <= 0 || cfg.seq_len > kMaxSeqLen)
    return "sequence length " + n(cfg.seq_len) + " is outside 1.." + n(kMaxSeqLen);
  if (cfg.n_gpus <= 0 || cfg.n_gpus > kMaxGpus) return "GPU count " + n(cfg.n_gpus) + " is outside 1.." + n(kMaxGpus);
  if (cfg.global_batch < 0 || cfg.global_batch > kMaxBatch)
    return "global batch " + n(cfg.global_batch) + " is outside 1.." + n(kMaxBatch);
  return {};
}

// The FFN widths tensor parallelism splits by columns: the dense FFN's, or each routed and shared
// expert's; the routed experts' only where their own degree (expert tensor parallel) is tp's.
std::vector<int64_t> split_ffn_widths(const ModelConfig& m, bool with_routed) {
  if (!m.moe.active()) return {m.d_ffn()};
  std::vector<int64_t> w;
  if (with_routed) w.push_back(m.moe.d_expert);
  if (m.moe.shared_experts > 0) w.push_back(m.moe.d_shared);
  return w;
}

std::string tensor_divides_heads(const RuleInput& in) {
  const ModelConfig& m = *in.model;
  const int64_t tp = in.cfg.layout.tensor;
  if (m.n_heads % tp != 0)
    return degree_text(tensor_axis(), tp) + " does not divide the " + n(m.n_heads) + " attention heads of " + m.name;
  if (m.kv_heads() % tp != 0)
    return degree_text(tensor_axis(), tp) + " does not divide the " + n(m.kv_heads()) + " key/value heads of " + m.name;
  // Megatron-Core's MambaMixer splits the heads and the groups of B and C over the ranks.
  if (m.mamba.active() && (m.mamba.heads % tp != 0 || m.mamba.groups % tp != 0))
    return degree_text(tensor_axis(), tp) + " does not divide the " + n(m.mamba.heads) + " Mamba-2 heads and " +
           n(m.mamba.groups) + " groups of " + m.name;
  return {};
}

std::string tensor_divides_ffn(const RuleInput& in) {
  const Layout& l = in.cfg.layout;
  for (int64_t w : split_ffn_widths(*in.model, l.expert_tensor == 0))
    if (w % l.tensor != 0)
      return degree_text(tensor_axis(), l.tensor) + " does not divide the FFN width " + n(w) + " of " + in.model->name;
  return {};
}

std::string expert_tensor_fits_experts(const RuleInput& in) {
  const Layout& l = in.cfg.layout;
  const ModelConfig& m = *in.model;
  if (l.expert_tensor == 0) return {};
  if (!m.moe.active())
    return degree_text(kExpertTensorAxis, l.expert_tensor) + " needs a mixture-of-experts model; " + m.name +
           " is dense";
  if (m.moe.d_expert % l.expert_tensor != 0)
    return degree_text(kExpertTensorAxis, l.expert_tensor) + " does not divide the expert width " + n(m.moe.d_expert) +
           " of " + m.name;
  return {};
}

std::string pipeline_splits_layers(const RuleInput& in) {
  const Layout& l = in.cfg.layout;
  const int64_t layers = in.model->n_layers;
  if (l.pipeline > layers)
    return degree_text(pipeline_axis(), l.pipeline) + " is more stages than the " + n(layers) + " layers of " +
           in.model->name;
  if (l.virtual_stages > 1 && l.pipeline < 2)
    return "virtual stages need pipeline parallelism of at least 2 (virtual stages " + n(l.virtual_stages) +
           ", pipeline parallel " + n(l.pipeline) + ")";
  std::vector<int64_t> chunk_layers;
  return split_layers(layers, l, chunk_layers);
}

std::string context_splits_sequence(const RuleInput& in) {
  const int64_t cp = in.cfg.layout.context, s = in.cfg.seq_len;
  if (cp > 1 && s % (2 * cp) != 0)
    return degree_text(kDegreeAxes[3].names, cp) + " does not split the sequence length " + n(s) + " into " +
           n(2 * cp) + " equal chunks (causal load balancing gives each rank two)";
  return {};
}

std::string expert_divides_experts(const RuleInput& in) {
  const int64_t ep = in.cfg.layout.expert;
  const ModelConfig& m = *in.model;
  if (ep == 1) return {};
  if (!m.moe.active())
    return degree_text(kDegreeAxes[4].names, ep) + " needs a mixture-of-experts model; " + m.name + " is dense";
  if (m.moe.experts % ep != 0)
    return degree_text(kDegreeAxes[4].names, ep) + " does not divide the " + n(m.moe.experts) + " experts of " + m.name;
  return {};
}

std::string sequence_parallel_needs_tensor(const RuleInput& in) {
  if (in.cfg.layout.sequence_parallel && in.cfg.layout.tensor == 1)
    return "sequence parallelism needs tensor parallelism (tensor parallel > 1)";
  return {};
}

std::string degrees_divide_gpus(const RuleInput& in) {
  const int64_t mp = in.cfg.layout.model_parallel();
  if (in.cfg.n_gpus % mp != 0)
    return "tensor x pipeline x context parallel = " + n(mp) + " does not divide the GPU count " + n(in.cfg.n_gpus);
  return {};
}

std::string expert_groups_fit(const RuleInput& in) {
  const Layout& l = in.cfg.layout;
  const int64_t dp_cp = in.cfg.data_parallel() * l.context;
  if (l.expert_tensor == 0 && dp_cp % l.expert != 0)
    return degree_text(kDegreeAxes[4].names, l.expert) + " does not divide data x context parallel " + n(dp_cp) +
           " (the expert groups are carved out of those ranks; with --etp 1 they span the tensor ranks too)";
  const int64_t etp = l.expert_tensor_degree();
  if ((l.tensor * dp_cp) % (etp * l.expert) != 0)
    return degree_text(kExpertTensorAxis, etp) + " x " + degree_text(kDegreeAxes[4].names, l.expert) +
           " does not divide tensor x data x context parallel " + n(l.tensor * dp_cp) +
           " (the expert groups are carved out of each stage's ranks)";
  return {};
}

std::string batch_divides_gpus(const RuleInput& in) {
  const TrainConfig& cfg = in.cfg;
  if (cfg.global_batch > 0 && cfg.global_batch % cfg.n_gpus != 0)
    return "global batch " + n(cfg.global_batch) + " is not a multiple of the GPU count " + n(cfg.n_gpus);
  return {};
}

std::string data_parallel_divides_batch(const RuleInput& in) {
  const TrainConfig& cfg = in.cfg;
  if (cfg.global_batch > 0 && cfg.global_batch % cfg.data_parallel() != 0)
    return "global batch " + n(cfg.global_batch) + " is not a multiple of data parallel " + n(cfg.data_parallel());
  return {};
}

std::string micro_batch_divides_replica_batch(const RuleInput& in) {
  const TrainConfig& cfg = in.cfg;
  if (cfg.micro_batch > 0 && cfg.global_batch > 0 && cfg.per_device_batch() % cfg.micro_batch != 0)
    return "micro-batch " + n(cfg.micro_batch) + " does not divide the " + n(cfg.per_device_batch()) +
           " sequences per data-parallel rank (" + std::string(def_of(in).name) +
           " needs whole micro-batches: no ragged last one)";
  return {};
}

// Which frameworks' books hold a general rule (Rule::applies).
bool needs_model_parallelism(const FrameworkDef& def) { return def.model_parallel; }
bool without_model_parallelism(const FrameworkDef& def) { return !def.model_parallel; }
bool splits_batch_per_gpu(const FrameworkDef& def) { return def.batching.batch_per_gpu; }
bool takes_whole_micro_batches(const FrameworkDef& def) { return def.batching.whole_micro_batches; }

// ---- The configuration on its device and profile (kConfig) ----

std::string batches_given(const RuleInput& in) {
  const TrainConfig& cfg = in.cfg;
  if (cfg.global_batch <= 0) return "global batch " + n(cfg.global_batch) + " is outside 1.." + n(kMaxBatch);
  if (cfg.micro_batch <= 0 || cfg.micro_batch > cfg.per_device_batch())
    return "micro-batch " + n(cfg.micro_batch) + " is outside 1..per-device batch " + n(cfg.per_device_batch());
  if (static_cast<double>(cfg.micro_batch) * static_cast<double>(cfg.seq_len) > 1e12)
    return "micro-batch of " + n(cfg.micro_batch) + " x " + n(cfg.seq_len) +
           " tokens is beyond what the simulator models";
  return {};
}

std::string architecture_valid(const RuleInput& in) {
  if (std::string arch = check_architecture(*in.model); !arch.empty()) return "model " + in.model->name + ": " + arch;
  return {};
}

std::string positions_cover_sequence(const RuleInput& in) {
  const ModelConfig& m = *in.model;
  if (m.learned_positions() && m.max_positions > 0 && in.cfg.seq_len > m.max_positions)
    return "sequence length " + n(in.cfg.seq_len) + " exceeds the model's " + n(m.max_positions) + " learned positions";
  return {};
}

std::string device_runs_precision(const RuleInput& in) {
  const DeviceSpec& device = *in.device;
  const Precision p = in.cfg.precision;
  if (const auto f = scaled_format(p); f && !device.supports(*f)) {
    const bool mx4 = *f == ScaledFormat::kNvfp4 && device.supports(ScaledFormat::kMxfp4);
    return "precision " + std::string(to_string(p)) + " needs " + std::string(kScaledFormatNames[int(*f)]) +
           " tensor cores, which " + device.id + " does not have" +
           (mx4 ? " (its fp4 is MXFP4: 32-element blocks with e8m0 scales, not NVFP4)" : "");
  }
  for (DType t : {block_gemm_dtype(p), other_gemm_dtype(p)}) {
    if (!device.supports(t))
      return "precision " + std::string(to_string(p)) + " needs " + std::string(to_string(t)) + " matmuls, which " +
             device.id + " does not have";
    if (!(in.params->gemm_flops_per_s(t) > 0))
      return "the " + device.id + " profile has no achieved " + std::string(to_string(t)) + " GEMM rate";
  }
  return {};
}

// LoRA (model/lora.hpp): a rank with targets, on linears the model has; the experts' linears are not
// adapted (tpsim costs adapters on the attention and the dense feed-forward).
std::string lora_targets_modelled(const RuleInput& in) {
  const Lora& l = in.cfg.lora;
  const ModelConfig& m = *in.model;
  if (!l.active()) {
    if (l.target_bits != 0) return "LoRA targets " + lora_targets_name(l) + " without a rank (--lora-rank)";
    return {};
  }
  if (l.rank > kMaxLoraRank) return "LoRA rank " + n(l.rank) + " is beyond " + n(kMaxLoraRank);
  if (l.target_bits == 0) return "LoRA rank " + n(l.rank) + " without targets (--lora-targets, target_modules)";
  const uint8_t ffn = kLoraGateUp | lora_bit(LoraTarget::kDown);
  if (m.moe.active() && (l.target_bits & ffn))
    return "LoRA on " + lora_targets_name(l) + ": model " + m.name +
           " is a mixture of experts, and adapters on its experts' linears are not modelled (adapt the attention: "
           "linear_qkv, linear_proj, q_proj, ...)";
  if (m.mla.active() && (l.target_bits & kLoraQkv))
    return "LoRA on " + lora_targets_name(l) + ": model " + m.name +
           " has latent attention, and adapters on its down and up projections are not modelled (adapt its out "
           "projection: linear_proj, o_proj)";
  if (m.ffn != FfnKind::kGlu && l.adapts(LoraTarget::kGate) && !l.fused_fc1)
    return "LoRA on gate_proj: model " + m.name + "'s feed-forward is an MLP without a gate projection";
  if (l.dropout_per_mille < 0 || l.dropout_per_mille >= 1000)
    return "LoRA dropout " + n(l.dropout_per_mille) + " per mille is not a probability below 1";
  return {};
}

std::string device_has_nodes(const RuleInput& in) {
  if (in.device->gpus_per_node <= 0) return "device " + in.device->id + " has no gpus_per_node";
  return {};
}

// clang-format off
constexpr Rule kDegreesInRange{"degrees-in-range", "--tp --pp --vp --cp --ep --etp; the degree columns",
                               RuleScope::kFramework, degrees_in_range};
constexpr Rule kOptionsOwned{"option-owned", "each framework's own flags and columns (model/layout.hpp kSwitchAxes)",
                             RuleScope::kFramework, options_owned};
constexpr Rule kDataParallelAlone{"no-model-parallelism", "--framework; --tp --pp --vp --cp --ep --etp --sp --dist-opt",
                                  RuleScope::kFramework, data_parallel_alone, false, without_model_parallelism};
constexpr Rule kSizesInRange{"sizes-in-range", "--seq --gpus --global-batch; SeqLen (T), # GPUs, GlobalBatchSize",
                             RuleScope::kLayout, sizes_in_range};
constexpr Rule kExpertTensorFitsExperts{"expert-tensor-fits-experts", "--etp; Expert Tensor Parallel",
                                        RuleScope::kLayout, expert_tensor_fits_experts, false, needs_model_parallelism};
constexpr Rule kPipelineSplitsLayers{"pipeline-splits-layers",
                                     "--pp --vp --first-stage-layers --last-stage-layers --account-for-embedding "
                                     "--account-for-loss --pipeline-layout; Pipeline Parallel, Virtual Stages, "
                                     "Pipeline Layout",
                                     RuleScope::kLayout, pipeline_splits_layers, false, needs_model_parallelism};
constexpr Rule kContextSplitsSequence{"context-splits-sequence", "--cp --seq; Context Parallel", RuleScope::kLayout,
                                      context_splits_sequence, false, needs_model_parallelism};
constexpr Rule kExpertDividesExperts{"expert-divides-experts", "--ep; Expert Parallel", RuleScope::kLayout,
                                     expert_divides_experts, false, needs_model_parallelism};
constexpr Rule kSequenceParallelNeedsTensor{"sequence-parallel-needs-tensor", "--sp --tp; Sequence Parallel",
                                            RuleScope::kLayout, sequence_parallel_needs_tensor, false, needs_model_parallelism};
constexpr Rule kExpertGroupsFit{"expert-groups-fit", "--ep --etp --gpus; Expert Parallel, Expert Tensor Parallel",
                                RuleScope::kLayout, expert_groups_fit, false, needs_model_parallelism};
constexpr Rule kBatchDividesGpus{"batch-divides-gpus", "--global-batch --gpus; GlobalBatchSize", RuleScope::kLayout,
                                 batch_divides_gpus, false, splits_batch_per_gpu};
constexpr Rule kDataParallelDividesBatch{"data-parallel-divides-batch", "--global-batch --gpus; GlobalBatchSize",
                                         RuleScope::kLayout, data_parallel_divides_batch};
constexpr Rule kMicroBatchDividesReplicaBatch{"micro-batch-divides-replica-batch", "--micro-batch; MicroBatchSize",
                                              RuleScope::kLayout, micro_batch_divides_replica_batch, true, takes_whole_micro_batches};
constexpr Rule kBatchesGiven{"batches-in-range", "--global-batch --micro-batch; GlobalBatchSize, MicroBatchSize",
                             RuleScope::kConfig, batches_given, true};
constexpr Rule kArchitectureValid{"architecture-valid", "--model; Model", RuleScope::kConfig, architecture_valid};
constexpr Rule kPositionsCoverSequence{"positions-cover-sequence", "--seq --model; SeqLen (T)", RuleScope::kConfig,
                                       positions_cover_sequence};
constexpr Rule kDeviceRunsPrecision{"device-runs-precision", "--precision --device; Precision, GPU",
                                    RuleScope::kConfig, device_runs_precision};
constexpr Rule kLoraTargetsModelled{"lora-targets-modelled",
                                    "--lora-rank --lora-targets --lora-dropout; peft_config; LoRA Rank, LoRA Targets",
                                    RuleScope::kConfig, lora_targets_modelled};
constexpr Rule kDeviceHasNodes{"device-has-nodes", "--device, the device file's gpus_per_node", RuleScope::kConfig,
                               device_has_nodes};
// clang-format on

}  // namespace

const Rule kTensorDividesHeads{
    "tensor-divides-heads", "--tp; Tensor Parallel", RuleScope::kLayout, tensor_divides_heads, false,
    needs_model_parallelism};
const Rule kTensorDividesFfn{
    "tensor-divides-ffn",   "--tp; Tensor Parallel", RuleScope::kLayout, tensor_divides_ffn, false,
    needs_model_parallelism};
const Rule kDegreesDivideGpus{"degrees-divide-gpus", "--tp --pp --cp --gpus; # GPUs and the degree columns",
                              RuleScope::kLayout, degrees_divide_gpus};

namespace {

constexpr std::array kGeneralRules = {
    &kDegreesInRange,        &kOptionsOwned,         &kDataParallelAlone,           &kSizesInRange,
    &kTensorDividesHeads,    &kTensorDividesFfn,     &kExpertTensorFitsExperts,     &kPipelineSplitsLayers,
    &kContextSplitsSequence, &kExpertDividesExperts, &kSequenceParallelNeedsTensor, &kDegreesDivideGpus,
    &kExpertGroupsFit,       &kBatchDividesGpus,     &kDataParallelDividesBatch,    &kMicroBatchDividesReplicaBatch,
    &kBatchesGiven,          &kArchitectureValid,    &kPositionsCoverSequence,      &kDeviceRunsPrecision,
    &kDeviceHasNodes,        &kLoraTargetsModelled,
};

}  // namespace

std::span<const Rule* const> general_rules() { return kGeneralRules; }

bool splits_the_batch(std::string_view rule) {
  return rule == kBatchDividesGpus.name || rule == kDataParallelDividesBatch.name;
}

namespace {

// Each framework's book in the order it is read (scope by scope, the general rules before its
// own), and where each scope ends: built once, so that a check walks one list (the searches check
// millions of configurations).
struct Book {
  std::vector<const Rule*> rules;
  std::array<size_t, 3> scope_end{};
  std::vector<const Rule*> micro_batch_rules;  // those of `rules` that read the micro-batch
};

const Book& book_of(const FrameworkDef& def) {
  static const std::array<Book, kAllFrameworks.size()> books = [] {
    std::array<Book, kAllFrameworks.size()> out;
    for (size_t f = 0; f < out.size(); ++f) {
      Book& b = out[f];
      for (RuleScope scope : {RuleScope::kFramework, RuleScope::kLayout, RuleScope::kConfig}) {
        for (std::span<const Rule* const> part : {general_rules(), kFrameworkDefs[f]->rules})
          for (const Rule* r : part)
            if (r->scope == scope && (!r->applies || r->applies(*kFrameworkDefs[f]))) b.rules.push_back(r);
        b.scope_end[static_cast<size_t>(scope)] = b.rules.size();
      }
      for (const Rule* r : b.rules)
        if (r->reads_micro_batch) b.micro_batch_rules.push_back(r);
    }
    return out;
  }();
  return books[static_cast<size_t>(def.id)];
}

}  // namespace

BrokenRule first_broken_rule(const RuleInput& in, RuleScope upto) {
  const Book& book = book_of(def_of(in));
  const size_t end = book.scope_end[static_cast<size_t>(upto)];
  for (size_t i = 0; i < end; ++i)
    if (std::string why = book.rules[i]->broken(in); !why.empty()) return {book.rules[i]->name, std::move(why)};
  return {};
}

BrokenRule first_broken_micro_batch_rule(const RuleInput& in) {
  for (const Rule* r : book_of(def_of(in)).micro_batch_rules)
    if (std::string why = r->broken(in); !why.empty()) return {r->name, std::move(why)};
  return {};
}

BrokenRule first_broken_rule(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                             const TrainConfig& cfg) {
  return first_broken_rule({.model = &model, .cfg = cfg, .device = &device, .params = &params}, RuleScope::kConfig);
}

BrokenRule first_broken_layout_rule(const ModelConfig& model, const TrainConfig& cfg) {
  return first_broken_rule({.model = &model, .cfg = cfg}, RuleScope::kLayout);
}

// ---- Shared by two frameworks ----

namespace {

std::string context_needs_fused_attention(const RuleInput& in) {
  const int64_t cp = in.cfg.layout.context;
  if (cp > 1 && in.model->unfused_attention)
    return degree_text(kDegreeAxes[3].names, cp) + " needs flash (fused) attention; model " + in.model->name +
           " has unfused attention (unfused_attention)";
  return {};
}

// The micro-batches of a step (0 while the batches are not set).
int64_t micro_batches(const TrainConfig& cfg) {
  return cfg.micro_batch > 0 && cfg.global_batch > 0 ? cfg.per_device_batch() / cfg.micro_batch : 0;
}

std::string interleaved_micro_batches(const RuleInput& in) {
  const Layout& l = in.cfg.layout;
  const int64_t m = micro_batches(in.cfg);
  if (m > 0 && l.virtual_stages > 1 && m % l.pipeline != 0)
    return "interleaved 1F1B needs the " + n(m) + " micro-batches to be a multiple of pipeline parallel " +
           n(l.pipeline);
  return {};
}

std::string pipeline_schedule_limits(const RuleInput& in) {
  const Layout& l = in.cfg.layout;
  const int64_t m = micro_batches(in.cfg);
  if (m == 0) return {};
  PipelineCosts pipeline;  // the schedule's own limits (stages, chunks, micro-batches)
  pipeline.stages = l.pipeline;
  pipeline.virtual_stages = l.virtual_stages;
  pipeline.micro_batches = m;
  const std::vector<double> zero(static_cast<size_t>(std::min<int64_t>(l.pipeline * l.virtual_stages, 1 << 12)), 0.0);
  pipeline.fwd_s = pipeline.bwd_s = zero;
  return check_pipeline(pipeline);
}

// Megatron-Core passes a window to TransformerEngine's fused attention (window_size), which the
// cost model's windowed attention covers; with context parallelism (the ring's windowed steps) or
// Megatron's unfused core attention it is not modelled, nor under torchtitan.
std::string sliding_window_not_modelled(const RuleInput& in) {
  const ModelConfig& m = *in.model;
  if (m.sliding_window <= 0 || m.sliding_window >= in.cfg.seq_len) return {};
  const std::string what = "sliding-window attention under " + std::string(def_of(in).name);
  if (def_of(in).id != Framework::kMegatron) return what + " is not modelled yet";
  if (in.cfg.layout.context > 1)
    return what + " with context parallel " + n(in.cfg.layout.context) + " is not modelled yet";
  if (m.unfused_attention) return what + "'s unfused core attention is not modelled yet";
  return {};
}

// Chunked attention (Llama 4) is attention over independent sequences of the chunk's length, which
// any fused flash-attention kernel runs (as variable-length sequences, or a block mask); a last,
// shorter chunk, the ring of context parallelism over chunks, unfused core attention and torchtitan's
// Llama 4 (its experiments, with FlexAttention's block mask) are not modelled.
std::string chunked_attention_not_modelled(const RuleInput& in) {
  const ModelConfig& m = *in.model;
  const int64_t seq = in.cfg.seq_len;
  if (m.attention_chunk <= 0 || m.attention_chunk >= seq) return {};
  const std::string what = "chunked attention (chunks of " + n(m.attention_chunk) + " tokens)";
  if (seq % m.attention_chunk != 0)
    return what + " over a sequence of " + n(seq) + " tokens, not a multiple of the chunk, is not modelled yet";
  if (def_of(in).id == Framework::kTorchtitan) return what + " under torchtitan is not modelled yet";
  if (in.cfg.layout.context > 1)
    return what + " with context parallel " + n(in.cfg.layout.context) + " is not modelled yet";
  if (m.unfused_attention) return what + " with unfused core attention is not modelled yet";
  return {};
}

// Layers of a Mamba-2 mixer, or of a feed-forward alone (Nemotron-H): Megatron-Core runs them (its
// hybrid model), and Composer through Hugging Face's model; not torchtitan, which has no such model,
// nor context parallelism (Megatron-Core's Mamba context parallelism is an all-to-all between
// sequence and head sharding, not modelled).
std::string hybrid_layers_modelled(const RuleInput& in) {
  const ModelConfig& m = *in.model;
  const bool mamba = m.mamba.active();
  const bool hybrid = mamba || m.mixer != Mixer::kAttention || m.no_ffn ||
                      std::any_of(m.layers.begin(), m.layers.end(),
                                  [](const LayerKind& k) { return k.mixer != Mixer::kAttention || k.no_ffn; });
  if (!hybrid) return {};
  const std::string what = std::string(mamba            ? "Mamba-2 layers"
                                       : m.gdn.active() ? "Gated DeltaNet layers"
                                                        : "layers of a feed-forward or a mixer alone") +
                           " (" + m.name + ")";
  if (def_of(in).id == Framework::kTorchtitan) return what + " under torchtitan are not modelled yet";
  if (in.cfg.layout.context > 1)
    return what + " with context parallel " + n(in.cfg.layout.context) + " are not modelled yet";
  if (in.cfg.lora.active()) return "LoRA on " + what + " is not modelled yet";
  return {};
}

}  // namespace

const Rule kHybridLayersModelled{"hybrid-layers-modelled", "--model, --framework, --cp, --lora-rank",
                                 RuleScope::kConfig, hybrid_layers_modelled};
const Rule kChunkedAttentionNotModelled{"chunked-attention-not-modelled", "--model, --seq, --framework",
                                        RuleScope::kConfig, chunked_attention_not_modelled};
const Rule kContextNeedsFusedAttention{"context-needs-fused-attention", "--cp --attention; Context Parallel",
                                       RuleScope::kLayout, context_needs_fused_attention};
const Rule kInterleavedMicroBatches{"interleaved-micro-batches", "--vp --micro-batch; Virtual Stages",
                                    RuleScope::kLayout, interleaved_micro_batches, true};
const Rule kPipelineScheduleLimits{"pipeline-schedule-limits", "--pp --vp --micro-batch; Pipeline Parallel",
                                   RuleScope::kLayout, pipeline_schedule_limits, true};
const Rule kSlidingWindowNotModelled{"sliding-window-not-modelled", "--model, --framework", RuleScope::kConfig,
                                     sliding_window_not_modelled};

// ---- What a command line asks ----

namespace {

struct RequestRule {
  std::string_view name;
  std::string (*broken)(const LayoutRequest& r);
};

std::string given_options_owned(const LayoutRequest& r) {
  const FrameworkDef& def = framework_def(r.framework);
  if (r.megatron_fsdp && !def.owns(FrameworkOption::kMegatronFsdp))
    return std::string(kMegatronFsdpAxis.flag) + ": Megatron-Core's option; use --framework " +
           std::string(option_owner(FrameworkOption::kMegatronFsdp).name);
  if (r.megatron_fsdp && r.distributed_optimizer)
    return std::string(*r.distributed_optimizer ? "--dist-opt" : "--no-dist-opt") + " with " +
           std::string(kMegatronFsdpAxis.flag) + " " + std::string(to_string(*r.megatron_fsdp)) +
           ": the strategy says what the optimizer shards; give one of them";
  if ((r.mtp_layers || r.mtp_repeated_layer) && !def.owns(FrameworkOption::kMtp))
    return "--mtp-layers: Megatron-Core's option; use --framework " +
           std::string(option_owner(FrameworkOption::kMtp).name);
  if (r.moe_paged_stash && !def.owns(FrameworkOption::kMoePagedStash))
    return "--moe-paged-stash: Megatron-Core's option; use --framework " +
           std::string(option_owner(FrameworkOption::kMoePagedStash).name);
  if (r.moe_capacity_factor && !def.owns(FrameworkOption::kMoeCapacity))
    return "--moe-capacity-factor: Megatron-Core's option; use --framework " +
           std::string(option_owner(FrameworkOption::kMoeCapacity).name);
  if ((r.bf16_layers_start || r.bf16_layers_end) && !def.owns(FrameworkOption::kBf16Layers))
    return std::string(r.bf16_layers_start ? "--bf16-layers-at-start" : "--bf16-layers-at-end") +
           ": Megatron-Core's option; use --framework " + std::string(option_owner(FrameworkOption::kBf16Layers).name);
  if (r.cuda_graphs && !def.owns(FrameworkOption::kCudaGraphs))
    return "--cuda-graphs: Megatron-Core's option; use --framework " +
           std::string(option_owner(FrameworkOption::kCudaGraphs).name);
  if (r.moe_dispatcher && !def.owns(FrameworkOption::kMoeDispatcher))
    return "--moe-dispatcher: Megatron-Core's option; use --framework " +
           std::string(option_owner(FrameworkOption::kMoeDispatcher).name);
  if (r.recompute_modules && !def.owns(FrameworkOption::kRecomputeModules))
    return "--recompute-modules: Megatron-Core's option; use --framework " +
           std::string(option_owner(FrameworkOption::kRecomputeModules).name);
  if (r.selective_ac_layers && !def.owns(FrameworkOption::kSelectiveAcLayers))
    return "--selective-ac-option: torchtitan's option; use --framework " +
           std::string(option_owner(FrameworkOption::kSelectiveAcLayers).name);
  // A framework that shards the optimizer itself, with no flag for it (torchtitan's FSDP2).
  if (def.distributed_optimizer && !def.owns(FrameworkOption::kDistributedOptimizer) &&
      (r.distributed_optimizer || r.overlap_grad_reduce))
    return std::string(r.distributed_optimizer ? (*r.distributed_optimizer ? "--dist-opt" : "--no-dist-opt")
                                               : "--overlap-grad-reduce") +
           ": " + std::string(option_owner(FrameworkOption::kDistributedOptimizer).name) + "'s option; " +
           std::string(def.name) + "'s FSDP2 shards the optimizer state and reduces gradients during the backward";
  return {};
}

std::string given_expert_tensor(const LayoutRequest& r) {
  const FrameworkDef& def = framework_def(r.framework);
  if (r.expert_tensor && !def.model_parallel)
    return std::string(kExpertTensorAxis.flag) + " " + n(*r.expert_tensor) + ": " +
           std::string(def.no_model_parallelism);
  return {};
}

std::string given_tp_comm_overlap(const LayoutRequest& r) {
  if (!r.tp_comm_overlap) return {};
  if (r.sequence_parallel == false)
    return "--tp-comm-overlap: TransformerEngine's TP communication overlap needs sequence parallelism (--no-sp given)";
  if (r.tensor == 1) return "--tp-comm-overlap: TransformerEngine's TP communication overlap needs --tp > 1";
  return {};
}

std::string given_hsdp_degrees(const LayoutRequest& r) {
  const FrameworkDef& def = framework_def(r.framework);
  if (def.sharding_strategies || def.data_parallel_degrees) return {};
  for (const auto& [flag, given] : {std::pair{"--shard-degree", r.shard_degree.has_value()},
                                    std::pair{"--replicate-degree", r.replicate_degree.has_value()}})
    if (given)
      return std::string(flag) + ": HSDP's shard and replicate degrees are composer's (FSDP) and " +
             "torchtitan's (FSDP2); --framework " + std::string(def.name) + " has its own data parallelism";
  return {};
}

std::string given_unfused_attention(const LayoutRequest& r) {
  const FrameworkDef& def = framework_def(r.framework);
  if (r.unfused_attention.value_or(false) && !def.conventions.unfused_attention)
    return "--attention unfused: " + std::string(def.name) +
           " runs PyTorch's scaled_dot_product_attention, costed as flash attention; its unfused math fallback is "
           "not modelled";
  return {};
}

// After the framework rules on the asked layout: what fixed_layout cannot show (--etp equal to
// --tp is stored as tp's; an unset --sp and an asked --no-sp differ; unset degrees are 1).
constexpr std::array<RequestRule, 4> kGivenRules = {{
    {"given-expert-tensor", given_expert_tensor},
    {"given-tp-comm-overlap", given_tp_comm_overlap},
    {"given-hsdp-degrees", given_hsdp_degrees},
    {"given-unfused-attention", given_unfused_attention},
}};

}  // namespace

BrokenRule first_broken_request_rule(const LayoutRequest& r) {
  if (std::string why = given_options_owned(r); !why.empty()) return {"given-option-owned", std::move(why)};
  TrainConfig cfg;
  cfg.layout = fixed_layout(r);
  if (BrokenRule b = first_broken_rule({.cfg = cfg}, RuleScope::kFramework)) return b;
  for (const RequestRule& rule : kGivenRules)
    if (std::string why = rule.broken(r); !why.empty()) return {rule.name, std::move(why)};
  return {};
}

}  // namespace tpsim
