#include "model/simulator.hpp"

#include "model/cost.hpp"
#include "model/metrics.hpp"
#include "model/ops.hpp"

namespace tpsim {

// Flattened: the builders, CategorySeconds::push and op_seconds are inlined here, where the sink's
// type is known, so each op is costed without a virtual call. The builders are also called with
// other sinks (torchtitan, calibration), which stopped the link-time optimiser from inlining them on
// its own; the searches' op costing then took 8% more instructions and twice the indirect branches.
__attribute__((flatten)) MicroBatchOpCosts cost_micro_batch_ops(const CostModel& cost, const BlockShape& shape) {
  MicroBatchOpCosts o;
  o.block_fwd = costed(cost, block_forward_ops, shape);
  o.block_bwd = costed(cost, block_backward_ops, shape);
  o.embed_fwd = costed(cost, embedding_forward_ops, shape);
  o.embed_bwd = costed(cost, embedding_backward_ops, shape);
  o.head_fwd = costed(cost, head_forward_ops, shape);
  o.head_bwd = costed(cost, head_backward_ops, shape);
  return o;
}

std::string check_config(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                         const TrainConfig& cfg) {
  if (std::string arch = check_architecture(model); !arch.empty()) return "model " + model.name + ": " + arch;
  if (cfg.seq_len <= 0 || cfg.seq_len > kMaxSeqLen)
    return "sequence length " + std::to_string(cfg.seq_len) + " is outside 1.." + std::to_string(kMaxSeqLen);
  if (model.learned_positions() && model.max_positions > 0 && cfg.seq_len > model.max_positions)
    return "sequence length " + std::to_string(cfg.seq_len) + " exceeds the model's " +
           std::to_string(model.max_positions) + " learned positions";
  if (cfg.n_gpus <= 0 || cfg.n_gpus > kMaxGpus)
    return "GPU count " + std::to_string(cfg.n_gpus) + " is outside 1.." + std::to_string(kMaxGpus);
  if (cfg.global_batch <= 0 || cfg.global_batch > kMaxBatch)
    return "global batch " + std::to_string(cfg.global_batch) + " is outside 1.." + std::to_string(kMaxBatch);
  if (framework_def(cfg.layout.framework).batch_per_gpu && cfg.global_batch % cfg.n_gpus != 0)
    return "global batch " + std::to_string(cfg.global_batch) + " is not a multiple of the GPU count " +
           std::to_string(cfg.n_gpus);
  const Layout& par = cfg.layout;
  const FrameworkDef& def = framework_def(par.framework);
  const auto use = [](FrameworkOption o) { return "use --framework " + std::string(option_owner(o).name); };
  if (par.fp8_param_gather && !def.owns(FrameworkOption::kFp8ParamGather))
    return "--fp8-param-gather is Megatron-Core's option; " + use(FrameworkOption::kFp8ParamGather);
  if (par.pipeline_scatter_gather && !def.owns(FrameworkOption::kPipelineScatterGather))
    return "--pipeline-scatter-gather is Megatron-LM's option; " + use(FrameworkOption::kPipelineScatterGather);
  for (int64_t degree : {par.tensor, par.pipeline, par.virtual_stages, par.context, par.expert})
    if (degree < 1 || degree > kMaxGpus)
      return "parallel degree " + std::to_string(degree) + " is outside 1.." + std::to_string(kMaxGpus);
  if (par.tensor * par.context > kMaxGpus || par.model_parallel() > kMaxGpus || cfg.n_gpus % par.model_parallel() != 0)
    return "tensor x context x pipeline parallel = " + std::to_string(par.tensor) + " x " +
           std::to_string(par.context) + " x " + std::to_string(par.pipeline) + " does not divide the " +
           std::to_string(cfg.n_gpus) + " GPUs";
  if (cfg.global_batch % cfg.data_parallel() != 0)
    return "global batch " + std::to_string(cfg.global_batch) + " is not a multiple of the data-parallel degree " +
           std::to_string(cfg.data_parallel());
  if (cfg.micro_batch <= 0 || cfg.micro_batch > cfg.per_device_batch())
    return "micro-batch " + std::to_string(cfg.micro_batch) + " is outside 1..per-device batch " +
           std::to_string(cfg.per_device_batch());
  if (static_cast<double>(cfg.micro_batch) * static_cast<double>(cfg.seq_len) > 1e12)
    return "micro-batch of " + std::to_string(cfg.micro_batch) + " x " + std::to_string(cfg.seq_len) +
           " tokens is beyond what the simulator models";
  if (const auto f = scaled_format(cfg.precision); f && !device.supports(*f)) {
    const bool mx4 = *f == ScaledFormat::kNvfp4 && device.supports(ScaledFormat::kMxfp4);
    return "precision " + std::string(to_string(cfg.precision)) + " needs " + std::string(kScaledFormatNames[int(*f)]) +
           " tensor cores, which " + device.id + " does not have" +
           (mx4 ? " (its fp4 is MXFP4: 32-element blocks with e8m0 scales, not NVFP4)" : "");
  }
  for (DType t : {block_gemm_dtype(cfg.precision), other_gemm_dtype(cfg.precision)}) {
    if (!device.supports(t))
      return "precision " + std::string(to_string(cfg.precision)) + " needs " + std::string(to_string(t)) +
             " matmuls, which " + device.id + " does not have";
    if (!(params.gemm_flops_per_s(t) > 0))
      return "the " + device.id + " profile has no achieved " + std::string(to_string(t)) + " GEMM rate";
  }
  if (device.gpus_per_node <= 0) return "device " + device.id + " has no gpus_per_node";
  if ((par.async_tensor_parallel && !def.owns(FrameworkOption::kAsyncTensorParallel)) ||
      (par.selective_ac_layers != 0 && !def.owns(FrameworkOption::kSelectiveAcLayers)))
    return "async tensor parallelism and selective_ac_option are torchtitan's (framework " +
           std::string(option_owner(FrameworkOption::kAsyncTensorParallel).name) + " runs them)";
  return def.check(model, device, cfg);
}

Evaluator::Evaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params)
    : model_(model), device_(device), params_(params) {}

Evaluator::~Evaluator() = default;
Evaluator::Evaluator(Evaluator&&) noexcept = default;

FrameworkEvaluator& Evaluator::framework(Framework f) {
  std::unique_ptr<FrameworkEvaluator>& e = evaluators_[static_cast<size_t>(f)];
  if (!e) e = framework_def(f).make_evaluator(model_, device_, params_);
  return *e;
}

Prediction Evaluator::predict(const TrainConfig& cfg) { return framework(cfg.layout.framework).predict(cfg); }

MemoryBreakdown Evaluator::memory(const TrainConfig& cfg) { return framework(cfg.layout.framework).memory(cfg); }

bool Evaluator::fits(const MemoryBreakdown& m) const { return m.peak_bytes <= device_.memory_bytes; }

void complete_prediction(const ModelConfig& model, const DeviceSpec& device, const TrainConfig& cfg, Prediction& p) {
  p.seq_per_s = static_cast<double>(cfg.global_batch) / p.step_s;
  p.tokens_per_s = p.seq_per_s * static_cast<double>(cfg.seq_len);
  p.tokens_per_s_per_gpu = p.tokens_per_s / static_cast<double>(cfg.n_gpus);
  const FoundryMetrics fm =
      foundry_metrics(p.active_params, model.n_layers, model.d_model, cfg.seq_len, p.seq_per_s, cfg.n_gpus,
                      device.peak(mfu_dtype(cfg.precision)), cfg.layout.checkpointing);
  p.mfu = fm.mfu;
  p.hfu = fm.hfu;
  p.model_flops_per_s_per_gpu = fm.model_flops_per_s_per_gpu;
  p.capacity_bytes = device.memory_bytes;
  p.feasibility = p.memory.peak_bytes <= device.memory_bytes ? Feasibility::kFits : Feasibility::kOutOfMemory;
}

Prediction predict(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                   const TrainConfig& cfg) {
  return Evaluator(model, device, params).predict(cfg);
}

}  // namespace tpsim
