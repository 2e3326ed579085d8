#include "model/simulator.hpp"

#include <algorithm>
#include <cmath>

#include "model/cost.hpp"
#include "model/metrics.hpp"
#include "model/ops.hpp"
#include "model/parallelism.hpp"

namespace tpsim {
namespace {

// Seconds of ops by breakdown category, costed as the builders produce them.
class CategorySeconds final : public OpSink {
 public:
  explicit CategorySeconds(const CostModel& cost) : cost_(&cost) {}
  CategorySeconds() = default;

  void push(const Op& op) override {
    const double s = cost_->op_seconds(op);
    saved_bytes += op.saved_bytes;
    switch (op.category) {
      case OpCategory::kGemm: gemm += s; break;
      case OpCategory::kAttention: attention += s; break;
      case OpCategory::kOther:
      case OpCategory::kOptimizer: other += s; break;
    }
  }
  void add(const CategorySeconds& o, double times) {
    gemm += o.gemm * times;
    attention += o.attention * times;
    other += o.other * times;
  }
  double total() const { return gemm + attention + other; }

  double gemm = 0, attention = 0, other = 0;
  double saved_bytes = 0;  // activations the ops keep for backward

 private:
  const CostModel* cost_ = nullptr;
};

struct MicroBatchResult {
  MicroBatchCosts costs;
  CategorySeconds categories;  // compute of one micro-batch by category
  // Activation bytes the forward keeps for backward (for the memory model).
  double block_saved_bytes = 0, embed_saved_bytes = 0, head_saved_bytes = 0;
};

// Costs of one micro-batch of `micro_batch` sequences: each op is built and costed once.
MicroBatchResult micro_batch_costs(const ModelConfig& model, const CostModel& cost, const CostParams& params,
                                   const TrainConfig& cfg, const FsdpLayout& layout, int64_t micro_batch,
                                   double block_params, double root_params) {
  const BlockShape shape = block_shape(model, micro_batch, cfg.seq_len, cfg.precision);
  const double L = static_cast<double>(model.n_layers);
  const double shard = static_cast<double>(layout.shard_ranks);
  const double gb = gathered_param_bytes(cfg.precision, cfg.mp_mode);
  const double rb = reduced_grad_bytes(cfg.precision, cfg.mp_mode);

  MicroBatchResult r;
  CategorySeconds f(cost), b(cost), cast(cost), red(cost), ef(cost), eb(cost), hf(cost), hb(cost);
  block_forward_ops(shape, f);
  block_backward_ops(shape, b);
  // FSDP's casts for one block: before each gather, and around the gradient reduction.
  fsdp_pre_gather_ops(block_params, shard, gb, cast);
  fsdp_pre_reduce_ops(block_params, shard, std::min(gb, 4.0), rb, red);
  embedding_forward_ops(shape, ef);
  embedding_backward_ops(shape, eb);
  head_forward_ops(shape, hf);
  head_backward_ops(shape, hb);
  r.block_saved_bytes = f.saved_bytes;
  r.embed_saved_bytes = ef.saved_bytes;
  r.head_saved_bytes = hf.saved_bytes;

  const double recompute = cfg.activation_checkpointing ? params.recompute_fraction : 0.0;
  const double gathers_per_block = (layout.gather_in_forward ? 1.0 : 0.0) + (layout.gather_in_backward ? 1.0 : 0.0);
  MicroBatchCosts& c = r.costs;
  c.block_fwd_s = f.total() + (layout.gather_in_forward ? cast.total() : 0.0);
  c.block_bwd_s = b.total() + recompute * f.total() + red.total() + (layout.gather_in_backward ? cast.total() : 0.0);
  c.embed_fwd_s = ef.total();
  c.embed_bwd_s = eb.total();
  c.head_s = hf.total() + hb.total();
  c.overhead_s = params.microbatch_overhead_s;
  c.block_overhead_s = params.block_overhead_s;

  r.categories.add(f, L * (1.0 + recompute));
  r.categories.add(b, L);
  r.categories.add(cast, L * gathers_per_block);
  r.categories.add(red, L);
  r.categories.add(ef, 1);
  r.categories.add(eb, 1);
  r.categories.add(hf, 1);
  r.categories.add(hb, 1);

  // Collectives of one block and of the root unit.
  const auto gather = [&](double bytes) {
    return cost.collective_seconds(CollectiveKind::kAllGather, bytes, layout.shard_group);
  };
  const auto reduce = [&](double bytes) {
    double s = cost.collective_seconds(layout.grad_reduce, bytes, layout.shard_group);
    if (layout.replica_group.ranks > 1)
      s += cost.collective_seconds(CollectiveKind::kAllReduce, bytes / shard, layout.replica_group);
    return s;
  };
  if (layout.gather_in_forward) {
    c.block_gather_fwd_s = gather(block_params * gb);
    c.root_gather_s = gather(root_params * gb);
  }
  if (layout.gather_in_backward) c.block_gather_bwd_s = c.block_gather_fwd_s;
  c.block_reduce_s = reduce(block_params * rb);
  c.root_reduce_s = reduce(root_params * rb);
  return r;
}

}  // namespace

std::string check_config(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                         const TrainConfig& cfg) {
  if (std::string arch = check_architecture(model); !arch.empty()) return "model " + model.name + ": " + arch;
  if (cfg.seq_len <= 0 || cfg.seq_len > kMaxSeqLen)
    return "sequence length " + std::to_string(cfg.seq_len) + " is outside 1.." + std::to_string(kMaxSeqLen);
  if (cfg.n_gpus <= 0 || cfg.n_gpus > kMaxGpus)
    return "GPU count " + std::to_string(cfg.n_gpus) + " is outside 1.." + std::to_string(kMaxGpus);
  if (cfg.global_batch <= 0 || cfg.global_batch > kMaxBatch)
    return "global batch " + std::to_string(cfg.global_batch) + " is outside 1.." + std::to_string(kMaxBatch);
  if (cfg.global_batch % cfg.n_gpus != 0)
    return "global batch " + std::to_string(cfg.global_batch) + " is not a multiple of the GPU count " +
           std::to_string(cfg.n_gpus);
  if (cfg.micro_batch <= 0 || cfg.micro_batch > cfg.per_device_batch())
    return "micro-batch " + std::to_string(cfg.micro_batch) + " is outside 1..per-device batch " +
           std::to_string(cfg.per_device_batch());
  if (static_cast<double>(cfg.micro_batch) * static_cast<double>(cfg.seq_len) > 1e12)
    return "micro-batch of " + std::to_string(cfg.micro_batch) + " x " + std::to_string(cfg.seq_len) +
           " tokens is beyond what the simulator models";
  for (DType t : {block_gemm_dtype(cfg.precision), other_gemm_dtype(cfg.precision)}) {
    if (!device.supports(t))
      return "precision " + std::string(to_string(cfg.precision)) + " needs " + std::string(to_string(t)) +
             " matmuls, which " + device.id + " does not have";
    if (!(params.gemm_flops_per_s(t) > 0))
      return "the " + device.id + " profile has no achieved " + std::string(to_string(t)) + " GEMM rate";
  }
  if (device.gpus_per_node <= 0) return "device " + device.id + " has no gpus_per_node";
  if (cfg.sharding == Sharding::kHybridShard && cfg.n_gpus > device.gpus_per_node &&
      cfg.n_gpus % device.gpus_per_node != 0)
    return "HYBRID_SHARD needs whole nodes: " + std::to_string(cfg.n_gpus) + " GPUs is not a multiple of " +
           std::to_string(device.gpus_per_node) + " per node";
  return {};
}

Prediction predict(const ModelConfig& model, const DeviceSpec& device, const CostParams& params,
                   const TrainConfig& cfg) {
  const CostModel cost(device, params);
  const FsdpLayout layout = fsdp_layout(cfg.sharding, cfg.n_gpus, device.gpus_per_node);
  const double block_params = static_cast<double>(layer_parameter_count(model));
  const double root_params = static_cast<double>(embedding_parameter_count(model, cfg.seq_len));
  const double L = static_cast<double>(model.n_layers);
  const double total_params = block_params * L + root_params;

  const int64_t n_micro = cfg.grad_accum();
  const int64_t last = cfg.last_micro_batch();
  const MicroBatchResult full =
      micro_batch_costs(model, cost, params, cfg, layout, cfg.micro_batch, block_params, root_params);
  const MicroBatchResult tail =
      last == cfg.micro_batch ? full
                              : micro_batch_costs(model, cost, params, cfg, layout, last, block_params, root_params);

  CategorySeconds optimizer(cost);
  optimizer_ops(total_params / static_cast<double>(layout.shard_ranks), optimizer);

  StepCosts step;
  step.n_layers = model.n_layers;
  step.n_micro = n_micro;
  step.full = full.costs;
  step.last = tail.costs;
  step.optimizer_s = optimizer.total();
  step.step_overhead_s = params.step_overhead_s;
  step.overlap_slowdown = params.overlap_slowdown;

  Prediction p;
  p.timeline = simulate_step(step);
  p.step_s = p.timeline.step_s;
  p.n_params = parameter_count(model, cfg.seq_len);

  // Breakdown: compute by category over all micro-batches; the rest from the timeline.
  const double n_full = static_cast<double>(n_micro - 1);
  p.time.gemm_s = full.categories.gemm * n_full + tail.categories.gemm;
  p.time.attention_s = full.categories.attention * n_full + tail.categories.attention;
  p.time.other_compute_s = full.categories.other * n_full + tail.categories.other;
  p.time.optimizer_s = p.timeline.optimizer_s;
  p.time.overhead_s = p.timeline.overhead_s;
  p.time.exposed_comm_s = p.timeline.exposed_comm_s;

  p.seq_per_s = static_cast<double>(cfg.global_batch) / p.step_s;
  p.tokens_per_s = p.seq_per_s * static_cast<double>(cfg.seq_len);
  p.tokens_per_s_per_gpu = p.tokens_per_s / static_cast<double>(cfg.n_gpus);
  const FoundryMetrics fm = foundry_metrics(p.n_params, model.n_layers, model.d_model, cfg.seq_len, p.seq_per_s,
                                            cfg.n_gpus, device.peak(mfu_dtype(cfg.precision)),
                                            cfg.activation_checkpointing);
  p.mfu = fm.mfu;
  p.hfu = fm.hfu;
  p.model_flops_per_s_per_gpu = fm.model_flops_per_s_per_gpu;

  // Memory, from the full micro-batch's saved activations.
  const double a = activation_bytes(cfg.precision);
  const double tokens = static_cast<double>(cfg.micro_batch) * static_cast<double>(cfg.seq_len);
  const double td = tokens * static_cast<double>(model.d_model);
  const double tf = tokens * static_cast<double>(model.d_ffn());
  MemoryInputs mem;
  mem.block_params = block_params;
  mem.root_params = root_params;
  mem.n_layers = model.n_layers;
  mem.block_saved_bytes = full.block_saved_bytes;
  mem.block_input_bytes = td * a;
  mem.embed_saved_bytes = full.embed_saved_bytes;
  mem.head_saved_bytes = full.head_saved_bytes;
  // Backward of a block: the incoming gradient, the MLP's two t x d_ffn gradients, and dQ, dK, dV.
  mem.backward_buffer_bytes = (4.0 * td + 2.0 * tf) * a;
  p.memory = estimate_memory(mem, layout, cfg, params);
  p.capacity_bytes = device.memory_bytes;
  p.feasibility = p.memory.peak_bytes <= device.memory_bytes ? Feasibility::kFits : Feasibility::kOutOfMemory;
  return p;
}

}  // namespace tpsim
