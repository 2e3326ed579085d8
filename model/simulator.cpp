#include "model/simulator.hpp"
#include "model/rules.hpp"

#include "model/cost.hpp"
#include "model/metrics.hpp"
#include "model/ops.hpp"
#include "model/units.hpp"

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
  return first_broken_rule(model, device, params, cfg).why;
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
  const int64_t lora_params =
      cfg.lora.active() ? round_count(static_cast<double>(model.n_layers) * lora_model_block_params(model, cfg.lora))
                        : 0;
  const FoundryMetrics fm =
      foundry_metrics(p.active_params, attention_layer_count(model), model.d_model, cfg.seq_len, p.seq_per_s,
                      cfg.n_gpus, device.peak(mfu_dtype(cfg.precision)), cfg.layout.checkpointing, lora_params);
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
