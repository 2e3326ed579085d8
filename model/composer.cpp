#include "model/composer.hpp"

#include <algorithm>
#include <cmath>

#include "model/cost.hpp"
#include "model/ops.hpp"
#include "model/parallelism.hpp"
#include "model/rules.hpp"

namespace tpsim {
namespace {

// Costs of one micro-batch's blocks of one layer group (`k`, `qb`: the group's block; L: its
// layers): their compute, FSDP's casts and collectives for the configuration's sharding, and the
// recompute its checkpointing adds; with `ends`, the embedding's and head's too (once per micro-batch).
MicroBatchResult micro_batch_costs(const ComputeCosts& k, const FsdpBlockCosts& qb, const FsdpCosts& q,
                                   const CostParams& params, const TrainConfig& cfg, double L, bool ends) {
  const FsdpLayout& layout = q.layout;
  MicroBatchResult r;
  const CategoryTotals &f = k.block_fwd, &b = k.block_bwd, &cast = qb.cast, &red = qb.reduce_casts;

  const double recompute = cfg.layout.checkpointing == Checkpointing::kFull ? params.recompute_fraction : 0.0;
  // Selective checkpointing runs each block's attention forward (block_fwd's only attention op)
  // again before its backward.
  const double attention_again = cfg.layout.checkpointing == Checkpointing::kSelective ? f.attention : 0.0;
  // Casts of a block's weights: before each gather, or (DDP) autocast's in each forward.
  const bool cast_in_forward = layout.gather_in_forward || layout.ddp;
  const double casts_per_block = (cast_in_forward ? 1.0 : 0.0) + (layout.gather_in_backward ? 1.0 : 0.0);
  MicroBatchCosts& c = r.costs;
  c.block_fwd_s = f.total() + (cast_in_forward ? cast.total() : 0.0);
  c.block_bwd_s = b.total() + recompute * f.total() + attention_again + red.total() +
                  (layout.gather_in_backward ? cast.total() : 0.0);
  c.embed_fwd_s = k.embed_fwd.total();
  c.embed_bwd_s = k.embed_bwd.total();
  c.head_s = k.head_fwd.total() + k.head_bwd.total();
  c.overhead_s = params.microbatch_overhead_s;
  c.block_overhead_s = params.block_overhead_s;

  r.categories.add(f, L * (1.0 + recompute));
  r.categories.add(b, L);
  r.categories.attention += L * attention_again;  // + 0 without selective checkpointing
  r.categories.add(cast, L * casts_per_block);
  r.categories.add(red, L);
  if (ends) {
    r.categories.add(k.embed_fwd, 1);
    r.categories.add(k.embed_bwd, 1);
    r.categories.add(k.head_fwd, 1);
    r.categories.add(k.head_bwd, 1);
  }

  if (layout.gather_in_forward) {
    c.block_gather_fwd_s = qb.gather_s;
    c.root_gather_s = q.root_gather_s;
  }
  if (layout.gather_in_backward) c.block_gather_bwd_s = qb.gather_s;
  c.block_reduce_s = qb.reduce_s;
  c.root_reduce_s = q.root_reduce_s;
  return r;
}

// Composer's own rules (model/rules.hpp; no-model-parallelism is a general one, by
// kComposerFramework.model_parallel).
std::string hsdp_mesh_valid(const RuleInput& in) {
  HsdpMesh mesh;
  return resolve_hsdp_mesh(in.cfg.layout, in.cfg.layout.sharding, in.cfg.n_gpus, &mesh);
}

std::string hybrid_shard_whole_nodes(const RuleInput& in) {
  const TrainConfig& cfg = in.cfg;
  if (cfg.layout.sharding != Sharding::kHybridShard) return {};
  const DeviceSpec& device = *in.device;
  HsdpMesh mesh;
  resolve_hsdp_mesh(cfg.layout, cfg.layout.sharding, cfg.n_gpus, &mesh);
  const int64_t host = device.gpus_per_host > 0 ? device.gpus_per_host : device.gpus_per_node;  // HYBRID_SHARD's shard
  if (!mesh.mesh && cfg.layout.sharding == Sharding::kHybridShard && cfg.n_gpus > host && cfg.n_gpus % host != 0)
    return "HYBRID_SHARD needs whole nodes: " + std::to_string(cfg.n_gpus) + " GPUs is not a multiple of " +
           std::to_string(host) + " per node";
  return {};
}

constexpr Rule kHsdpMeshValid{"hsdp-mesh-valid", "--shard-degree --replicate-degree --sharding; fsdp_config",
                              RuleScope::kConfig, hsdp_mesh_valid};
constexpr Rule kHybridShardWholeNodes{"hybrid-shard-whole-nodes", "--sharding --gpus; Sharding Strategy",
                                      RuleScope::kConfig, hybrid_shard_whole_nodes};
constexpr std::array<const Rule*, 4> kComposerRules = {&kHsdpMeshValid, &kHybridShardWholeNodes,
                                                       &kChunkedAttentionNotModelled, &kHybridLayersModelled};

}  // namespace

ComposerEvaluator::ComposerEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params)
    : model_(model), device_(device), params_(params), cost_(device, params), pattern_(layer_pattern(model)) {
  for (const LayerGroup& g : pattern_.groups)
    block_params_.push_back(static_cast<double>(layer_parameter_count(g.model)));
}

const ComputeCosts& ComposerEvaluator::compute_costs(int64_t micro_batch, const TrainConfig& cfg, size_t group) {
  constexpr size_t kComputeMemoSlots = 1024;
  const int64_t seq_len = cfg.seq_len;
  const Precision precision = cfg.precision;
  const size_t slot = (static_cast<size_t>(micro_batch) % kComputeMemoSlots) * pattern_.groups.size() + group;
  if (slot >= memo_.size()) memo_.resize(slot + 1);
  ComputeCosts& k = memo_[slot];
  if (k.micro_batch == micro_batch && k.seq_len == seq_len && k.precision == precision && k.lora == cfg.lora &&
      k.torch_compile == cfg.layout.torch_compile)
    return k;
  const ModelConfig& model = pattern_.groups[group].model;
  BlockShape shape = block_shape(model, micro_batch, seq_len, precision);
  shape.lora = cfg.lora;
  shape.torch_compile = cfg.layout.torch_compile;
  shape.eager_rms_norm = shape.eager_rope = kComposerFramework.conventions.eager_norm_rope;
  k.micro_batch = micro_batch;
  k.seq_len = seq_len;
  k.precision = precision;
  k.lora = cfg.lora;
  k.torch_compile = cfg.layout.torch_compile;
  static_cast<MicroBatchOpCosts&>(k) = cost_micro_batch_ops(cost_, shape);
  k.block_attention_only_bytes = attention_only_saved_bytes(shape);
  k.block_backward_buffer_bytes = block_backward_buffer_bytes(model, shape.tokens(), precision);
  return k;
}

const FsdpCosts& ComposerEvaluator::fsdp_costs(const TrainConfig& cfg) {
  for (const FsdpCosts& q : fsdp_memo_)
    if (q.sharding == cfg.layout.sharding && q.n_gpus == cfg.n_gpus && q.seq_len == cfg.seq_len &&
        q.precision == cfg.precision && q.mp_mode == cfg.mp_mode && q.shard_degree == cfg.layout.shard_degree &&
        q.replicate_degree == cfg.layout.replicate_degree && q.lora == cfg.lora)
      return q;
  FsdpCosts& q = fsdp_memo_[fsdp_next_];
  fsdp_next_ = (fsdp_next_ + 1) % fsdp_memo_.size();
  q.sharding = cfg.layout.sharding;
  q.n_gpus = cfg.n_gpus;
  q.seq_len = cfg.seq_len;
  q.precision = cfg.precision;
  q.mp_mode = cfg.mp_mode;
  q.shard_degree = cfg.layout.shard_degree;
  q.replicate_degree = cfg.layout.replicate_degree;
  q.lora = cfg.lora;
  q.layout = composer_layout(cfg.layout.sharding, cfg.layout, cfg.n_gpus, device_.gpus_per_node, device_.gpus_per_host);
  const FsdpLayout& layout = q.layout;
  // Under LoRA the blocks' weights are frozen and their adapters trained: llm-foundry wraps each
  // adapter module (its A and its B) in an FSDP unit of its own (prepare_hf_causal_lm_model_for_fsdp,
  // "PEFT layers should be individually wrapped"), gathered beside its block and reduce-scattered
  // alone; the frozen units are gathered and never reduced. DDP buckets only the adapters' gradients.
  const double root_params = static_cast<double>(embedding_parameter_count(model_, cfg.seq_len));
  const double root_trained = cfg.lora.active() ? 0.0 : root_params;
  const double shard = static_cast<double>(layout.shard_ranks);
  // DDP: autocast's copies in the compute dtype; gradients reduced in the parameters' fp32.
  const double gb = gathered_param_bytes(cfg.precision, layout.ddp ? MpMode::kDefault : cfg.mp_mode);
  const double rb = layout.ddp ? 4.0 : reduced_grad_bytes(cfg.precision, cfg.mp_mode);
  // Collectives of one block and of the root unit.
  const auto gather = [&](double bytes) {
    return cost_.collective_seconds(CollectiveKind::kAllGather, bytes, layout.shard_group);
  };
  const auto reduce = [&](double bytes) {
    if (layout.bucket_bytes > 0) {  // DDP: equal buckets of at most bucket_bytes, one all-reduce each
      const double buckets = std::ceil(bytes / layout.bucket_bytes);
      return buckets > 0 ? buckets * cost_.collective_seconds(layout.grad_reduce, bytes / buckets, layout.shard_group)
                         : 0.0;
    }
    double s = cost_.collective_seconds(layout.grad_reduce, bytes, layout.shard_group);
    if (layout.replica_group.ranks > 1)
      s += cost_.collective_seconds(CollectiveKind::kAllReduce, bytes / shard, layout.replica_group);
    return s;
  };
  const bool gathers = layout.gather_in_forward || layout.gather_in_backward;
  double total_trained = root_trained;
  q.blocks.resize(pattern_.groups.size());
  for (size_t g = 0; g < pattern_.groups.size(); ++g) {
    // Under LoRA the blocks' weights are frozen and their adapters trained: llm-foundry wraps each
    // adapter module (its A and its B) in an FSDP unit of its own (prepare_hf_causal_lm_model_for_fsdp,
    // "PEFT layers should be individually wrapped"), gathered beside its block and reduce-scattered
    // alone; the frozen units are gathered and never reduced. DDP buckets only the adapters' gradients.
    BlockShape lora_shape = block_shape(pattern_.groups[g].model, 1, 1, cfg.precision);
    lora_shape.lora = cfg.lora;
    int adapters = 0;
    const double lora_params = lora_block_params(lora_shape, &adapters);
    const double lora_units = 2.0 * adapters;
    const double block_params = block_params_[g];
    const double block_trained = cfg.lora.active() ? lora_params : block_params;
    total_trained += block_trained * static_cast<double>(pattern_.groups[g].layers);
    FsdpBlockCosts& b = q.blocks[g];
    // FSDP's casts for one block: before each gather, and around the gradient reduction.
    b.cast = costed(cost_, fsdp_pre_gather_ops, block_params + lora_params, shard, gb);
    b.reduce_casts = costed(cost_, fsdp_pre_reduce_ops, block_trained, shard, std::min(gb, 4.0), rb);
    if (cfg.lora.active() && !layout.ddp) {
      const double unit = lora_params / lora_units;
      b.gather_s = gathers ? gather(block_params * gb) + lora_units * gather(unit * gb) : 0.0;
      b.reduce_s = lora_units * reduce(unit * rb);
    } else {
      b.gather_s = gathers ? gather(block_params * gb) : 0.0;
      b.reduce_s = reduce(block_trained * rb);
    }
  }
  q.optimizer = costed(cost_, optimizer_ops, total_trained / shard);
  q.root_gather_s = layout.gather_in_forward ? gather(root_params * gb) : 0.0;
  q.root_reduce_s = reduce(root_trained * rb);
  return q;
}

MicroBatchResult ComposerEvaluator::micro_batch_result(int64_t micro_batch, const TrainConfig& cfg,
                                                       const FsdpCosts& fsdp, std::vector<MicroBatchCosts>* groups) {
  MicroBatchResult r;
  for (size_t g = 0; g < pattern_.groups.size(); ++g) {
    const double L = static_cast<double>(pattern_.groups[g].layers);
    const MicroBatchResult group =
        micro_batch_costs(compute_costs(micro_batch, cfg, g), fsdp.blocks[g], fsdp, params_, cfg, L, g == 0);
    if (g == 0) r.costs = group.costs;
    r.categories.add(group.categories, 1.0);
    if (groups) groups->push_back(group.costs);
  }
  return r;
}

SavedActivations ComposerEvaluator::saved_activations(int64_t micro_batch, const TrainConfig& cfg) {
  SavedActivations a;
  for (size_t g = 0; g < pattern_.groups.size(); ++g) {
    const ComputeCosts& k = compute_costs(micro_batch, cfg, g);
    const double L = static_cast<double>(pattern_.groups[g].layers);
    if (g == 0) a.embed = k.embed_fwd.saved_bytes, a.head = k.head_fwd.saved_bytes;
    a.block = std::max(a.block, k.block_fwd.saved_bytes);
    a.block_attention_only = std::max(a.block_attention_only, k.block_attention_only_bytes);
    a.block_backward_buffers = std::max(a.block_backward_buffers, k.block_backward_buffer_bytes);
    a.blocks += L * k.block_fwd.saved_bytes;
    a.blocks_attention_only += L * k.block_attention_only_bytes;
  }
  return a;
}

Prediction ComposerEvaluator::predict(const TrainConfig& cfg) {
  const ModelConfig& model = model_;
  const CostParams& params = params_;
  const FsdpCosts& fsdp = fsdp_costs(cfg);
  const FsdpLayout& layout = fsdp.layout;
  const bool per_layer = pattern_.groups.size() > 1;

  const int64_t n_micro = cfg.grad_accum();
  const int64_t last = cfg.last_micro_batch();
  StepCosts step = data_parallel_step(model.n_layers, n_micro, {}, {}, fsdp.optimizer.total(), params);
  if (per_layer) step.runs = pattern_.runs;
  const MicroBatchResult full = micro_batch_result(cfg.micro_batch, cfg, fsdp, per_layer ? &step.full_groups : nullptr);
  const MicroBatchResult tail =
      last == cfg.micro_batch ? full : micro_batch_result(last, cfg, fsdp, per_layer ? &step.last_groups : nullptr);
  if (last == cfg.micro_batch) step.last_groups = step.full_groups;
  step.full = full.costs;
  step.last = tail.costs;
  // DDP synchronises the gradients on the last micro-batch only: the others run under no_sync.
  if (layout.ddp && n_micro > 1) {
    step.full.block_reduce_s = step.full.root_reduce_s = 0;
    for (MicroBatchCosts& g : step.full_groups) g.block_reduce_s = g.root_reduce_s = 0;
  }

  Prediction p;
  p.timeline = simulate_step(step);
  p.step_s = p.timeline.step_s;
  update_counts(cfg);
  p.n_params = n_params_;
  p.active_params = active_params_;

  // Breakdown: compute by category over all micro-batches; the rest from the timeline.
  const double n_full = static_cast<double>(n_micro - 1);
  p.time.gemm_s = full.categories.gemm * n_full + tail.categories.gemm;
  p.time.attention_s = full.categories.attention * n_full + tail.categories.attention;
  p.time.other_compute_s = full.categories.other * n_full + tail.categories.other;
  p.time.optimizer_s = p.timeline.optimizer_s;
  p.time.overhead_s = p.timeline.overhead_s;
  p.time.exposed_comm_s = p.timeline.exposed_comm_s;

  // Memory, from the full micro-batch's saved activations.
  p.memory = estimate_memory(memory_counts_, cfg, saved_activations(cfg.micro_batch, cfg), layout, params);
  // Full checkpointing near full memory: the allocator's retries stall the whole step.
  if (cfg.layout.checkpointing == Checkpointing::kFull) {
    p.time.allocator_s = p.step_s * allocator_retry_fraction(device_.memory_bytes - p.memory.peak_bytes, params);
    p.step_s += p.time.allocator_s;
    p.timeline.step_s = p.step_s;
  }
  complete_prediction(model, device_, cfg, p);
  return p;
}

MemoryBreakdown ComposerEvaluator::memory(const TrainConfig& cfg) {
  const SavedActivations saved = saved_activations(cfg.micro_batch, cfg);
  update_counts(cfg);
  return estimate_memory(memory_counts_, cfg, saved, fsdp_costs(cfg).layout, params_);
}

void ComposerEvaluator::update_counts(const TrainConfig& cfg) {
  if (counts_seq_ == cfg.seq_len && counts_lora_ == cfg.lora) return;
  counts_seq_ = cfg.seq_len;
  counts_lora_ = cfg.lora;
  n_params_ = parameter_count(model_, cfg.seq_len);
  active_params_ = active_parameter_count(model_, cfg.seq_len);
  memory_counts_ = model_memory_counts(model_, cfg.seq_len, cfg.lora);
}

constinit const FrameworkDef kComposerFramework = {
    .id = Framework::kComposer,
    .name = "composer",
    .sharding_strategies = true,
    .sharding = Sharding::kFullShard,
    .conventions = {.unfused_attention = true},
    .batching = {.batch_per_gpu = true, .auto_micro_batch_halves = true},
    .profile_intervals = true,
    .options = option_bit(FrameworkOption::kTorchCompile),
    .no_model_parallelism = "composer runs FSDP without model parallelism; use --framework megatron",
    .rules = kComposerRules,
    .make_evaluator = make_evaluator<ComposerEvaluator>,
};

}  // namespace tpsim
