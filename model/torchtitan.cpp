#include "model/torchtitan.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include "model/model_parallel.hpp"
#include "model/metrics.hpp"
#include "model/ops.hpp"
#include "model/parallelism.hpp"
#include "model/rules.hpp"

namespace tpsim {
namespace {

double d(int64_t x) { return static_cast<double>(x); }

// Weights of one block's linear layers on one tensor-parallel rank: what Float8Linear casts, and
// what enable_fsdp_float8_all_gather gathers in fp8.
double block_linear_weights(const ModelConfig& m, int64_t tp) {
  const double dm = d(m.d_model);
  const double ffn_matrices = m.ffn == FfnKind::kGlu ? 3.0 : 2.0;
  return (dm * d(m.q_dim() + 2 * m.kv_dim()) + d(m.q_dim()) * dm + ffn_matrices * dm * d(m.d_ffn())) / d(tp);
}

// torchtitan's own rules (model/rules.hpp), each naming the value at fault.
std::string expert_parallel_not_modelled(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.expert > 1)
    return "expert parallelism (" + std::to_string(par.expert) + ") is not modelled yet under torchtitan";
  return {};
}

std::string fsdp2_reduces_in_backward(const RuleInput& in) {
  if (in.cfg.layout.overlap_grad_reduce)
    return "--overlap-grad-reduce is megatron's: torchtitan's FSDP2 reduce-scatters each block's gradients during "
           "the backward";
  return {};
}

std::string selective_ac_positive(const RuleInput& in) {
  const int64_t every = in.cfg.layout.selective_ac_layers;
  if (every < 0) return "selective_ac_option " + std::to_string(every) + " is below 1";
  return {};
}

// parallel_dims.py seq_len_divisor: sequence parallelism then splits each rank's s/cp tokens over tp.
std::string sequence_divides_over_tp_and_cp(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  const auto n = [](int64_t v) { return std::to_string(v); };
  if (par.context > 1 && in.cfg.seq_len % (2 * par.context * par.tensor) != 0)
    return "sequence length " + n(in.cfg.seq_len) + " is not a multiple of tensor parallel " + n(par.tensor) +
           " x 2 x context parallel " + n(par.context) + " (torchtitan's seq_len_divisor)";
  return {};
}

std::string moe_not_modelled(const RuleInput& in) {
  if (in.model->moe.active()) return "mixture-of-experts models under torchtitan are not modelled yet";
  return {};
}

std::string layer_pattern_not_modelled(const RuleInput& in) {
  if (!in.model->uniform())
    return "models whose layers differ (" + in.model->name + "'s layers are of " +
           std::to_string(layer_pattern(*in.model).groups.size()) + " kinds) under torchtitan are not modelled yet";
  return {};
}

// parallelize_llama.py apply_tp: every block's norms are SequenceParallel whenever tp > 1.
std::string tensor_needs_sequence_parallel(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.tensor > 1 && !par.sequence_parallel)
    return "tensor parallelism without sequence parallelism (--no-sp) under torchtitan is not modelled yet: its "
           "apply_tp always shards the norms along the sequence";
  return {};
}

std::string async_tp_needs_tensor(const RuleInput& in) {
  if (in.cfg.layout.async_tensor_parallel && in.cfg.layout.tensor == 1)
    return "async tensor parallelism needs tensor parallel > 1";
  return {};
}

std::string selective_ac_needs_selective(const RuleInput& in) {
  const Layout& par = in.cfg.layout;
  if (par.selective_ac_layers > 0 && par.checkpointing != Checkpointing::kSelective)
    return "selective_ac_option " + std::to_string(par.selective_ac_layers) +
           " applies to selective checkpointing only";
  return {};
}

std::string torchtitan_mesh_valid(const RuleInput& in) {
  TorchtitanMesh mesh;
  return resolve_torchtitan_mesh(in.cfg, in.device->gpus_per_node, &mesh);
}

constexpr Rule kExpertParallelNotModelled{"expert-parallel-not-modelled", "--ep; Expert Parallel",
                                          RuleScope::kFramework, expert_parallel_not_modelled};
constexpr Rule kFsdp2ReducesInBackward{"fsdp2-reduces-in-backward", "--overlap-grad-reduce; Overlap Grad Reduce",
                                       RuleScope::kFramework, fsdp2_reduces_in_backward};
constexpr Rule kSelectiveAcPositive{"selective-ac-positive", "--selective-ac-option", RuleScope::kFramework,
                                    selective_ac_positive};
constexpr Rule kSequenceDividesOverTpAndCp{"sequence-divides-over-tp-and-cp", "--seq --tp --cp; SeqLen (T)",
                                           RuleScope::kLayout, sequence_divides_over_tp_and_cp};
constexpr Rule kMoeNotModelled{"moe-not-modelled", "--model", RuleScope::kLayout, moe_not_modelled};
constexpr Rule kLayerPatternNotModelled{"layer-pattern-not-modelled", "--model", RuleScope::kLayout,
                                        layer_pattern_not_modelled};
constexpr Rule kTensorNeedsSequenceParallel{"tensor-needs-sequence-parallel", "--tp --no-sp; Sequence Parallel",
                                            RuleScope::kLayout, tensor_needs_sequence_parallel};
constexpr Rule kAsyncTpNeedsTensor{"async-tp-needs-tensor", "--async-tp --tp", RuleScope::kLayout,
                                   async_tp_needs_tensor};
constexpr Rule kSelectiveAcNeedsSelective{"selective-ac-needs-selective", "--selective-ac-option --ckpt",
                                          RuleScope::kLayout, selective_ac_needs_selective};
constexpr Rule kTorchtitanMeshValid{"torchtitan-mesh-valid", "--shard-degree --replicate-degree --cp --tp --pp --gpus",
                                    RuleScope::kConfig, torchtitan_mesh_valid};
const std::array<const Rule*, 16> kTorchtitanRules = {
    &kHybridLayersModelled,    &kChunkedAttentionNotModelled, &kExpertParallelNotModelled,  &kFsdp2ReducesInBackward,
    &kSelectiveAcPositive,     &kSequenceDividesOverTpAndCp,  &kContextNeedsFusedAttention, &kMoeNotModelled,
    &kLayerPatternNotModelled, &kTensorNeedsSequenceParallel, &kAsyncTpNeedsTensor,         &kSelectiveAcNeedsSelective,
    &kInterleavedMicroBatches, &kPipelineScheduleLimits,      &kSlidingWindowNotModelled,   &kTorchtitanMeshValid};

}  // namespace

std::string resolve_torchtitan_mesh(const TrainConfig& cfg, int64_t gpus_per_node, TorchtitanMesh* out) {
  *out = TorchtitanMesh{};
  const Layout& par = cfg.layout;
  const auto n = [](int64_t v) { return std::to_string(v); };
  const int64_t replicate = par.replicate_degree == 0 ? 1 : par.replicate_degree;  // torchtitan's default 1
  const int64_t shard = par.shard_degree == 0 ? -1 : par.shard_degree;             // its default -1
  if (replicate < 1 || replicate > kMaxGpus)
    return "data_parallel_replicate_degree " + n(replicate) + " is outside 1.." + n(kMaxGpus) +
           " (torchtitan takes -1, the rest of the GPUs, for the shard degree only)";
  if (shard < -1 || shard == 0 || shard > kMaxGpus)
    return "data_parallel_shard_degree " + n(shard) + " is neither -1 (the rest of the GPUs) nor in 1.." + n(kMaxGpus);
  const int64_t dp = cfg.data_parallel();  // GPUs / (tensor x context x pipeline): dp_replicate x dp_shard
  if (shard == -1 && dp % replicate != 0)
    return "data_parallel_replicate_degree " + n(replicate) + " does not divide the " + n(dp) +
           " data-parallel ranks (GPUs / (tensor x context x pipeline))";
  const int64_t dp_shard = shard == -1 ? dp / replicate : shard;
  if (replicate * dp_shard != dp)
    return "data_parallel_replicate_degree " + n(replicate) + " x data_parallel_shard_degree " + n(dp_shard) +
           " x context " + n(par.context) + " x tensor " + n(par.tensor) + " x pipeline " + n(par.pipeline) + " = " +
           n(replicate * dp_shard * par.model_parallel()) + " is not the GPU count " + n(cfg.n_gpus);
  // parallelize_llama.py applies FSDP only when dp_shard x cp > 1; replicas alone run DDP (apply_ddp).
  if (replicate > 1 && dp_shard * par.context == 1)
    return "data_parallel_replicate_degree " + n(replicate) +
           " with nothing to shard (shard 1, context 1) is "
           "torchtitan's DDP (apply_ddp), not modelled yet";
  TorchtitanMesh m;
  m.dp_replicate = replicate;
  m.dp_shard = dp_shard;
  m.cp = par.context;
  m.shard_group = strided_group(dp_shard * par.context, par.tensor, gpus_per_node);
  m.replicate_group = strided_group(replicate, par.tensor * par.context * dp_shard, gpus_per_node);
  *out = m;
  return {};
}

ContextParallelAttention torchtitan_context_parallel(const CostModel& cost, const BlockShape& local, int64_t cp,
                                                     const CommGroup& cp_group) {
  // The steps' compute is Megatron's ring's (the same load balancing); its K/V exchange is not used.
  const RingAttention ring = ring_attention(cost, local, cp, CommGroup{});
  ContextParallelAttention a;
  a.step_fwd_s = ring.step_fwd_s;
  a.step_bwd_s = ring.step_bwd_s;
  if (cp <= 1) return a;
  const double kv_elements = 2.0 * d(local.tokens()) * d(local.kv_dim());
  a.kv_gather_bytes = d(cp) * kv_elements * activation_bytes(local.precision);
  a.kv_gather_s = cost.collective_seconds(CollectiveKind::kAllGather, a.kv_gather_bytes, cp_group);
  a.dkv_hop_bytes = kv_elements * 4.0;  // convert_to_f32: dK and dV accumulate and travel in fp32
  a.dkv_hop_s = ring_step_seconds(cost, a.dkv_hop_bytes, cp_group);
  a.fwd_exposed_s = std::max(a.kv_gather_s - a.step_fwd_s, 0.0);
  a.bwd_exposed_s =
      std::max(a.kv_gather_s - a.step_bwd_s, 0.0) + d(cp - 1) * std::max(a.dkv_hop_s - a.step_bwd_s, 0.0) + a.dkv_hop_s;
  return a;
}

// Everything of a configuration but its global batch, costed once.
struct TorchtitanCosts : MicroBatchOpCosts {
  TrainConfig key;  // global_batch unused
  ModelParallelLayout layout;
  TorchtitanMesh mesh;
  ContextParallelAttention cp;
  double cp_block_bytes = 0;  // forward and backward: the K/V gathers' buffers and the dK/dV hops
  // Tensor- and context-parallel collectives of one micro-batch on the compute stream (exposed
  // seconds: the block's include the ring attention's exposed K/V gathers and dK/dV hops), and the
  // bytes of the tensor-parallel ones' buffers.
  double tp_block_fwd_s = 0, tp_block_bwd_s = 0, tp_embed_fwd_s = 0, tp_embed_bwd_s = 0;
  double tp_head_fwd_s = 0, tp_head_bwd_s = 0;
  double tp_block_bytes = 0, tp_embed_bytes = 0, tp_head_bytes = 0;  // forward and backward together
  // What activation checkpointing runs again per block (averaged over the blocks when every N-th
  // is checkpointed), and the tensor-parallel collectives it repeats.
  CategoryTotals recompute;
  double recompute_comm_s = 0, recompute_tp_bytes = 0, recompute_cp_bytes = 0;
  // Memory of one micro-batch: kept per block, rebuilt for the block in backward, and the rest.
  double kept_per_block = 0, rebuilt = 0, backward_buffers = 0;
  // FSDP2 over the dp_shard x cp group (HSDP: and the all-reduce over dp_replicate), per
  // tensor-parallel rank.
  double block_params = 0, root_params = 0;    // before sharding (a block's with its LoRA adapters)
  double block_trained = 0, root_trained = 0;  // of them, those trained: all, or under LoRA the adapters
  double lora_block = 0;                       // one block's local LoRA adapter parameters
  double block_gather_bytes = 0, root_gather_bytes = 0, reduce_bytes_per_param = 0;
  CategoryTotals cast, reduce_casts;
  double block_gather_s = 0, root_gather_s = 0, block_reduce_s = 0, root_reduce_s = 0;
  std::vector<double> stage_params, stage_root_params, stage_trained, optimizer_s;  // per pipeline stage
};

TorchtitanEvaluator::TorchtitanEvaluator(const ModelConfig& model, const DeviceSpec& device, const CostParams& params)
    : ModelParallelEvaluator(model, device, params) {}

TorchtitanEvaluator::~TorchtitanEvaluator() = default;

void TorchtitanEvaluator::cost_layout(Costs& c, const TrainConfig& cfg) {
  const ModelParallelLayout& l = c.layout;
  resolve_torchtitan_mesh(cfg, device_.gpus_per_node, &c.mesh);
  // The rank's s/cp tokens of each sequence, its tensor-parallel slice; torchtitan does not pad the
  // vocabulary: DTensor splits it in ceil(V / tp) rows.
  const BlockShape shape = rank_shape(model_, cfg, model_.vocab_size);
  static_cast<MicroBatchOpCosts&>(c) = cost_micro_batch_ops(cost_, shape);
  c.lora_block = lora_block_params(shape);
  // Context parallelism: the block's one attention (step 0) becomes the ring's cp steps.
  c.cp = torchtitan_context_parallel(cost_, shape, l.cp, l.cp_group);
  c.block_fwd.attention += d(l.cp - 1) * c.cp.step_fwd_s;
  c.block_bwd.attention += d(l.cp - 1) * c.cp.step_bwd_s;
  c.cp_block_bytes = 2.0 * c.cp.kv_gather_bytes + d(l.cp) * c.cp.dkv_hop_bytes;

  const double a = activation_bytes(cfg.precision);
  const double td = d(shape.tokens()) * d(model_.d_model) * a;
  double ag = 0, rs = 0;
  tensor_parallel_seconds(cost_, shape, l.tp_group, cfg.layout.async_tensor_parallel, td, c.tp_block_fwd_s,
                          c.tp_block_bwd_s, ag, rs);
  c.tp_block_fwd_s += c.cp.fwd_exposed_s;  // full recompute repeats it with the forward
  c.tp_block_bwd_s += c.cp.bwd_exposed_s;
  // Loss parallel: log-softmax's max and sum and the target logit, all-reduced per token.
  const double per_token = cost_.collective_seconds(CollectiveKind::kAllReduce, d(shape.tokens()) * 4.0, l.tp_group);
  c.tp_embed_fwd_s = rs, c.tp_embed_bwd_s = ag;                  // RowwiseParallel embedding, output Shard(1)
  c.tp_head_fwd_s = ag + 3.0 * per_token, c.tp_head_bwd_s = rs;  // ColwiseParallel output, input Shard(1)
  const bool tp = l.tp > 1;
  c.tp_block_bytes = tp ? 8.0 * td : 0.0;
  c.tp_embed_bytes = tp ? 2.0 * td : 0.0;
  c.tp_head_bytes = tp ? 2.0 * td + 3.0 * d(shape.tokens()) * 4.0 : 0.0;

  checkpointing_costs(c, cfg, shape, ag);
  fsdp_costs(c, cfg);
}

// What activation checkpointing runs again and keeps per block, and one block's backward buffers.
void TorchtitanEvaluator::checkpointing_costs(Costs& c, const TrainConfig& cfg, const BlockShape& shape, double ag) {
  const Layout& par = cfg.layout;
  const ModelParallelLayout& l = c.layout;
  const double a = activation_bytes(cfg.precision);
  const double td = d(shape.tokens()) * d(model_.d_model) * a;
  const bool tp = l.tp > 1;
  // Activations: a block keeps its ops' saved bytes and, under tensor parallelism, the gathered
  // (whole-sequence) input of its two column-parallel groups, which autograd saves for their weight
  // gradients (Megatron keeps only its own tokens/tp and gathers again).
  const double row_td = d(shape.row_tokens()) * d(model_.d_model) * a;
  // Under LoRA a frozen group keeps its gathered input only for its adapters.
  const Lora& lora = cfg.lora;
  const double gathered_groups =
      !lora.active() ? 2.0
                     : ((lora.target_bits & kLoraQkv) ? 1.0 : 0.0) + ((lora.target_bits & kLoraGateUp) ? 1.0 : 0.0);
  const double full_block = c.block_fwd.saved_bytes + (tp ? gathered_groups * (td - row_td) : 0.0);
  const double t = d(shape.tokens());
  const bool glu = model_.ffn == FfnKind::kGlu;
  // Selective 'op' (apply_ac's _save_list): every other matmul's output (torchtitan's order wq wk wv
  // wo w1 w3 w2 keeps wq, wv, w1 and w2; an MLP's wq wk wv wo up down keeps wq, wv, up), the
  // attention's output with its statistics, and the reduce-scatters' outputs; the block's input
  // is the checkpoint's.
  const double op_kept = row_td + a * t * d(shape.q_dim() + shape.kv_dim() + shape.q_dim()) +
                         attention_only_saved_bytes(shape) + a * t * d(shape.d_ffn) + (glu ? td : 0.0) +
                         (tp ? 2.0 * row_td : 0.0);
  const LinearSeconds f = linear_seconds(cost_, block_forward_ops, shape, OpPass::kForward);
  const double kv_share = d(shape.kv_dim()) / d(shape.q_dim() + 2 * shape.kv_dim());
  c.recompute = {};
  c.recompute_comm_s = c.recompute_tp_bytes = c.recompute_cp_bytes = 0;
  c.kept_per_block = full_block;
  c.rebuilt = 0;
  double full_fraction = 0;  // of the blocks, those whose whole forward runs again
  if (cfg.layout.checkpointing == Checkpointing::kFull) {
    full_fraction = 1.0;
  } else if (cfg.layout.checkpointing == Checkpointing::kSelective && par.selective_ac_layers > 0) {
    full_fraction = std::floor(d(model_.n_layers) / d(par.selective_ac_layers)) / d(model_.n_layers);
  } else if (cfg.layout.checkpointing == Checkpointing::kSelective) {
    c.recompute.gemm = f.qkv * kv_share + f.out + (glu ? f.up : f.down);
    c.recompute.other = c.block_fwd.other;
    c.recompute_comm_s =
        tp ? (par.async_tensor_parallel ? std::max(ag - f.qkv, 0.0) + std::max(ag - f.gate - f.up, 0.0) : 2.0 * ag)
           : 0.0;
    c.recompute_tp_bytes = tp ? 2.0 * td : 0.0;
    c.kept_per_block = std::min(op_kept, full_block);
    c.rebuilt = full_block - c.kept_per_block;
  }
  if (full_fraction > 0) {
    c.recompute.add(c.block_fwd, full_fraction);
    c.recompute_comm_s = full_fraction * c.tp_block_fwd_s;
    c.recompute_tp_bytes = full_fraction * 4.0 * (tp ? td : 0.0);
    c.recompute_cp_bytes = full_fraction * c.cp.kv_gather_bytes;
    c.kept_per_block = full_fraction * row_td + (1.0 - full_fraction) * full_block;
    c.rebuilt = full_block;
  }
  // One rank's backward buffers: the model's with its tensor-parallel widths.
  ModelConfig slice = model_;
  slice.head_dim = model_.d_head();
  slice.n_kv_heads = model_.kv_heads() / l.tp;
  slice.n_heads = model_.n_heads / l.tp;
  slice.ffn_hidden = model_.d_ffn() / l.tp;
  // Context parallelism adds the gathered K/V (forward and backward) and the backward's two fp32
  // dK/dV buffers (the one accumulating, the one in flight).
  c.backward_buffers = block_backward_buffer_bytes(slice, shape.tokens(), cfg.precision) + c.cp.kv_gather_bytes +
                       2.0 * c.cp.dkv_hop_bytes;
}

// FSDP2's parameters, collectives and casts per block and root, and each stage's parameters and
// optimizer.
void TorchtitanEvaluator::fsdp_costs(Costs& c, const TrainConfig& cfg) {
  const ModelParallelLayout& l = c.layout;
  const TorchtitanMesh& mesh = c.mesh;
  // FSDP2: each block's and the root's tensor-parallel slice, sharded over dp_shard x cp ranks.
  const double shard = d(mesh.shard_ranks());
  const double gb = gathered_param_bytes(cfg.precision, cfg.mp_mode);
  const double fp8_weights = cfg.precision == Precision::kAmpFp8 ? block_linear_weights(model_, l.tp) : 0.0;
  // Under LoRA the base weights are frozen (torchtitan's LoRAConverter): FSDP2 gathers them and
  // reduce-scatters only the adapters' gradients; Adam keeps state for the adapters alone.
  const bool lora = cfg.lora.active();
  const double base = d(layer_parameter_count(model_)) / d(l.tp);
  c.block_params = base + c.lora_block;
  c.root_params = d(embedding_parameter_count(model_, cfg.seq_len)) / d(l.tp);
  c.block_trained = lora ? c.lora_block : c.block_params;
  c.root_trained = lora ? 0.0 : c.root_params;
  c.block_gather_bytes = (c.block_params - fp8_weights) * gb + fp8_weights * 1.0;
  c.root_gather_bytes = c.root_params * gb;
  c.reduce_bytes_per_param = reduced_grad_bytes(cfg.precision, cfg.mp_mode);
  const bool gathers = mesh.shard_ranks() > 1;
  c.cast = gathers ? costed(cost_, fsdp_pre_gather_ops, c.block_params, shard, c.block_gather_bytes / c.block_params)
                   : CategoryTotals{};
  c.reduce_casts =
      costed(cost_, fsdp_pre_reduce_ops, c.block_trained, shard, std::min(gb, 4.0), c.reduce_bytes_per_param);
  const auto gather = [&](double bytes) {
    return gathers ? cost_.collective_seconds(CollectiveKind::kAllGather, bytes, mesh.shard_group) : 0.0;
  };
  // HSDP: each reduce-scatter's shard then all-reduced over the replicas (FSDP2 runs both in its
  // post-backward, every micro-batch as the reduce-scatter, on the same stream).
  const auto reduce = [&](double params) {
    const double bytes = params * c.reduce_bytes_per_param;
    double s = cost_.collective_seconds(CollectiveKind::kReduceScatter, bytes, mesh.shard_group);
    if (mesh.dp_replicate > 1)
      s += cost_.collective_seconds(CollectiveKind::kAllReduce, bytes / shard, mesh.replicate_group);
    return s;
  };
  c.block_gather_s = gather(c.block_gather_bytes);
  c.root_gather_s = gather(c.root_gather_bytes);
  c.block_reduce_s = reduce(c.block_trained);
  c.root_reduce_s = reduce(c.root_trained);

  // Stages: the first holds the embedding, the last the final norm and output (pipeline_llama.py).
  const double table = d(model_.vocab_size) * d(model_.d_model) / d(l.tp);
  const double layers_per_stage = d(model_.n_layers) / d(l.pp);
  c.stage_params.assign(static_cast<size_t>(l.pp), 0.0);
  c.stage_root_params.assign(c.stage_params.size(), 0.0);
  c.stage_trained.assign(c.stage_params.size(), 0.0);
  c.optimizer_s.assign(c.stage_params.size(), 0.0);
  for (int64_t s = 0; s < l.pp; ++s) {
    const size_t i = static_cast<size_t>(s);
    double root = l.pp == 1 ? c.root_params : 0.0;
    if (l.pp > 1 && s == 0) root += std::min(table, c.root_params);
    if (l.pp > 1 && s == l.pp - 1) root += std::max(c.root_params - table, 0.0) + (model_.tie_embeddings ? table : 0.0);
    c.stage_root_params[i] = root;
    c.stage_params[i] = layers_per_stage * c.block_params + root;
    c.stage_trained[i] = layers_per_stage * c.block_trained + (lora ? 0.0 : root);
    // Adam over the fp32 shard; FSDP2 casts to bf16 at the all-gather (cast above), no copy-back.
    c.optimizer_s[i] = costed(cost_, optimizer_ops, c.stage_trained[i] / shard).total();
  }
}

// No pipeline: Composer's FSDP schedule (schedule.hpp) over the tensor-parallel slices, the
// tensor-parallel collectives and recompute on the compute stream.
Prediction TorchtitanEvaluator::predict_fsdp(const Costs& c, const TrainConfig& cfg) {
  const bool gathers = c.mesh.shard_ranks() > 1;
  MicroBatchCosts mc;
  mc.block_fwd_s = c.block_fwd.total() + c.tp_block_fwd_s + c.cast.total();
  mc.block_bwd_s = c.block_bwd.total() + c.tp_block_bwd_s + c.recompute.total() + c.recompute_comm_s +
                   c.reduce_casts.total() + c.cast.total();
  mc.embed_fwd_s = c.embed_fwd.total() + c.tp_embed_fwd_s;
  mc.embed_bwd_s = c.embed_bwd.total() + c.tp_embed_bwd_s;
  mc.head_s = c.head_fwd.total() + c.head_bwd.total() + c.tp_head_fwd_s + c.tp_head_bwd_s;
  mc.root_gather_s = c.root_gather_s;
  mc.block_gather_fwd_s = mc.block_gather_bwd_s = gathers ? c.block_gather_s : 0.0;
  mc.block_reduce_s = c.block_reduce_s;
  mc.root_reduce_s = c.root_reduce_s;
  mc.overhead_s = params_.microbatch_overhead_s;
  mc.block_overhead_s = params_.block_overhead_s;
  mc.last_block_regathered = false;  // apply_fsdp: reshard_after_forward False for the last block

  const int64_t n_micro = cfg.per_device_batch() / cfg.micro_batch;
  Prediction p;
  p.timeline = simulate_step(data_parallel_step(model_.n_layers, n_micro, mc, mc, c.optimizer_s.front(), params_));
  p.step_s = p.timeline.step_s;
  const double m = d(n_micro), L = d(model_.n_layers);
  CategoryTotals per;
  per.add(c.block_fwd, L);
  per.add(c.block_bwd, L);
  per.add(c.recompute, L);
  per.add(c.cast, L * (gathers ? 2.0 : 0.0));
  per.add(c.reduce_casts, L);
  for (const CategoryTotals* o : {&c.embed_fwd, &c.embed_bwd, &c.head_fwd, &c.head_bwd}) per.add(*o, 1.0);
  const double tp_comm = L * (c.tp_block_fwd_s + c.tp_block_bwd_s + c.recompute_comm_s) + c.tp_embed_fwd_s +
                         c.tp_embed_bwd_s + c.tp_head_fwd_s + c.tp_head_bwd_s;
  p.time.gemm_s = m * per.gemm;
  p.time.attention_s = m * per.attention;
  p.time.other_compute_s = m * per.other;
  p.time.optimizer_s = p.timeline.optimizer_s;
  p.time.overhead_s = p.timeline.overhead_s;
  p.time.exposed_comm_s = p.timeline.exposed_comm_s + m * tp_comm;
  return p;
}

// Pipeline parallelism: the stages' chunks laid out by the schedule (pipeline.hpp), each block's
// forward and backward with its tensor-parallel collectives and recompute. FSDP2 does not reshard
// under PP: a stage gathers its blocks once, before its first forward (the first block's gather
// exposed, the rest prefetched behind the first micro-batch's forward), and reduce-scatters its
// gradients once, block by block through its last backward (what that backward does not cover, and
// at least the last block's, exposed).
Prediction TorchtitanEvaluator::predict_pipeline(const Costs& c, const TrainConfig& cfg) {
  const ModelParallelLayout& l = c.layout;
  const int64_t chunks = l.pp * l.vp, m = cfg.per_device_batch() / cfg.micro_batch;
  const double layers_per_chunk = d(model_.n_layers) / d(chunks), layers_per_stage = d(model_.n_layers) / d(l.pp);
  const double block_f = c.block_fwd.total() + c.tp_block_fwd_s + params_.block_overhead_s;
  const double block_b =
      c.block_bwd.total() + c.tp_block_bwd_s + c.recompute.total() + c.recompute_comm_s + params_.block_overhead_s;
  fwd_s_.assign(static_cast<size_t>(chunks), layers_per_chunk * block_f);
  bwd_s_.assign(static_cast<size_t>(chunks), layers_per_chunk * block_b);
  fwd_s_.front() += c.embed_fwd.total() + c.tp_embed_fwd_s;
  bwd_s_.front() += c.embed_bwd.total() + c.tp_embed_bwd_s;
  fwd_s_.back() += c.head_fwd.total() + c.tp_head_fwd_s;
  bwd_s_.back() += c.head_bwd.total() + c.tp_head_bwd_s;
  for (int64_t s = 0; s < l.pp; ++s) fwd_s_[static_cast<size_t>(s)] += params_.microbatch_overhead_s;
  // Point-to-point: one micro-batch's activations, sequence-sharded (Shard(1)) under tensor parallelism.
  const double p2p_bytes =
      d(cfg.micro_batch) * d(cfg.seq_len / l.cp) * d(model_.d_model) * activation_bytes(cfg.precision) / d(l.tp);
  const double p2p_s = stage_hop_seconds(cost_, l, p2p_bytes);
  const PipelineCosts pc{
      .stages = l.pp, .virtual_stages = l.vp, .micro_batches = m, .fwd_s = fwd_s_, .bwd_s = bwd_s_, .p2p_s = p2p_s};
  const PipelineTimeline& pipe = pipeline_.simulate(pc);

  const double stage_gather =
      layers_per_stage * c.block_gather_s + c.root_gather_s * (c.stage_root_params[0] / c.root_params);
  const double start = std::max(c.block_gather_s, stage_gather - fwd_s_.front());
  double flushed = 0, optimizer = 0;
  size_t critical = 0;
  for (int64_t s = 0; s < l.pp; ++s) {
    const size_t i = static_cast<size_t>(s);
    double stage_backward = 0;
    for (int64_t k = 0; k < l.vp; ++k) stage_backward += bwd_s_[static_cast<size_t>(k * l.pp + s)];
    const double reduce =
        layers_per_stage * c.block_reduce_s + c.root_reduce_s * (c.stage_root_params[i] / c.root_params);

    const double end = start + pipe.stage_end_s[i] + std::max(reduce - stage_backward, c.block_reduce_s);
    if (end > flushed) flushed = end, critical = i;
    optimizer = std::max(optimizer, c.optimizer_s[i]);
  }
  Prediction p;
  p.step_s = flushed + optimizer + params_.step_overhead_s;
  p.timeline.step_s = p.step_s;
  p.timeline.optimizer_s = optimizer;
  // Breakdown of the stage that finishes last: its compute, the collectives it waits for, the
  // overheads, and the pipeline's idle time as the rest.
  const bool first = critical == 0, last = critical + 1 == static_cast<size_t>(l.pp);
  const double md = d(m), per_layer_m = layers_per_stage * md;
  CategoryTotals per;
  per.add(c.block_fwd, per_layer_m);
  per.add(c.block_bwd, per_layer_m);
  per.add(c.recompute, per_layer_m);
  double comm = per_layer_m * (c.tp_block_fwd_s + c.tp_block_bwd_s + c.recompute_comm_s);
  if (first) per.add(c.embed_fwd, md), per.add(c.embed_bwd, md), comm += md * (c.tp_embed_fwd_s + c.tp_embed_bwd_s);
  if (last) per.add(c.head_fwd, md), per.add(c.head_bwd, md), comm += md * (c.tp_head_fwd_s + c.tp_head_bwd_s);
  StepBreakdown& t = p.time;
  t.gemm_s = per.gemm;
  t.attention_s = per.attention;
  t.other_compute_s = per.other;
  t.exposed_comm_s = comm + start + (flushed - start - pipe.stage_end_s[critical]);
  t.optimizer_s = optimizer;
  t.overhead_s =
      md * params_.microbatch_overhead_s + 2.0 * per_layer_m * params_.block_overhead_s + params_.step_overhead_s;
  const double accounted =
      t.gemm_s + t.attention_s + t.other_compute_s + t.exposed_comm_s + t.optimizer_s + t.overhead_s;
  t.pipeline_bubble_s = std::max(p.step_s - accounted, 0.0);
  return p;
}

void TorchtitanEvaluator::finish(const TrainConfig& cfg, Prediction& p) {
  p.n_params = parameter_count(model_, cfg.seq_len);
  p.active_params = active_parameter_count(model_, cfg.seq_len);
  p.memory = memory(cfg);
  complete_prediction(model_, device_, cfg, p);
}

Prediction TorchtitanEvaluator::predict(const TrainConfig& cfg) {
  const Costs& c = costs(cfg);
  Prediction p = c.layout.pp == 1 ? predict_fsdp(c, cfg) : predict_pipeline(c, cfg);
  finish(cfg, p);
  return p;
}

// Peak memory of the most loaded rank. Per stage: FSDP2's fp32 shard of the parameters, their
// gradients and Adam's two moments (16 bytes per local parameter over the dp_shard x cp ranks);
// the gathered parameters: without a pipeline the root and two blocks (one computing, one
// prefetched; the last block stays gathered into its backward in their place), under PP the whole
// stage for the step, beside its unsharded gradients accumulated in the reduce dtype until the last
// backward (FSDP2 accumulates in reduce_dtype); the activations of the micro-batches in flight
// (1F1B: p - s on stage s; interleaved: Megatron's warm-up count plus one; one without PP), each
// its blocks' kept bytes; the rebuilt block under checkpointing, the embedding's and the head's
// saved bytes, and one block's backward buffers (without PP, beside its unsharded gradients in the
// compute and reduce dtypes, as Composer's estimate has them).
MemoryBreakdown TorchtitanEvaluator::memory(const TrainConfig& cfg) {
  const Costs& c = costs(cfg);
  const ModelParallelLayout& l = c.layout;
  const int64_t m = cfg.per_device_batch() / cfg.micro_batch;
  const double layers_per_chunk = d(model_.n_layers) / d(l.pp * l.vp), layers_per_stage = d(model_.n_layers) / d(l.pp);
  const double gb = gathered_param_bytes(cfg.precision, cfg.mp_mode);
  const double rb = c.reduce_bytes_per_param;
  MemoryBreakdown worst;
  for (int64_t s = 0; s < l.pp; ++s) {
    const size_t i = static_cast<size_t>(s);
    const int64_t warmup = l.pp == 1 ? 1 : pipeline_warmup(l.pp, l.vp, m, s) + 1;
    const double in_flight = d(std::min(warmup, m * l.vp));
    MemoryBreakdown mb;
    // 4 bytes per frozen parameter (LoRA's base), 16 per trained one.
    mb.sharded_state_bytes = (4.0 * c.stage_params[i] + 12.0 * c.stage_trained[i]) / d(c.mesh.shard_ranks());
    if (c.mesh.shard_ranks() > 1 || l.pp > 1)
      mb.gathered_params_bytes = l.pp == 1
                                     ? c.root_gather_bytes + std::min(2.0, d(model_.n_layers)) * c.block_gather_bytes
                                     : layers_per_stage * c.block_gather_bytes + c.stage_root_params[i] * gb;
    mb.activation_bytes = in_flight * layers_per_chunk * c.kept_per_block + c.rebuilt;
    if (s == 0) mb.activation_bytes += std::ceil(in_flight / d(l.vp)) * c.embed_fwd.saved_bytes;
    if (s == l.pp - 1) mb.activation_bytes += c.head_fwd.saved_bytes;
    mb.transient_bytes = c.backward_buffers + (l.pp == 1 ? c.block_trained * (gb + rb) : c.stage_trained[i] * rb);
    mb = with_peak(mb, params_);
    if (mb.peak_bytes > worst.peak_bytes) worst = mb;
  }
  return worst;
}

TorchtitanTraffic TorchtitanEvaluator::traffic(const TrainConfig& cfg) {
  const Costs& c = costs(cfg);
  const ModelParallelLayout& l = c.layout;
  const double m = d(cfg.per_device_batch() / cfg.micro_batch);
  const double L = d(model_.n_layers) / d(l.pp);
  const double root = c.stage_root_params[0];
  const int64_t shard = c.mesh.shard_ranks();
  TorchtitanTraffic t;
  if (shard > 1) {
    // Without PP every micro-batch gathers the root once and each block twice but the last, which
    // stays gathered into its backward; under PP each block and the stage's root part once a step.
    t.fsdp_gather_bytes = l.pp == 1 ? m * (c.root_gather_bytes + (2.0 * L - 1.0) * c.block_gather_bytes)
                                    : L * c.block_gather_bytes + root * c.root_gather_bytes / c.root_params;
  }
  const double root_trained = c.root_trained > 0 ? root : 0.0;
  t.fsdp_reduce_bytes = (l.pp == 1 ? m : 1.0) * (L * c.block_trained + root_trained) * c.reduce_bytes_per_param;
  if (shard == 1) t.fsdp_reduce_bytes = 0;
  if (c.mesh.dp_replicate > 1) t.fsdp_replicate_bytes = t.fsdp_reduce_bytes / d(shard);
  t.tp_bytes =
      m * (L * (c.tp_block_bytes + c.recompute_tp_bytes) + c.tp_embed_bytes + (l.pp == 1 ? c.tp_head_bytes : 0.0));
  t.cp_bytes = m * L * (c.cp_block_bytes + c.recompute_cp_bytes);
  return t;
}

constinit const FrameworkDef kTorchtitanFramework = {
    .id = Framework::kTorchtitan,
    .name = "torchtitan",
    .sharding = Sharding::kFullShard,
    .conventions = {.eager_norm_rope = true},
    .model_parallel = true,
    .batching = {.whole_micro_batches = true},
    .distributed_optimizer = true,
    .data_parallel_degrees = true,
    .no_sharding_strategies =
        "shards with FSDP2 over its data-parallel ranks (FULL_SHARD); the sharding strategies are composer's",
    .options = option_bit(FrameworkOption::kAsyncTensorParallel) | option_bit(FrameworkOption::kSelectiveAcLayers) |
               option_bit(FrameworkOption::kTorchCompile) | option_bit(FrameworkOption::kFusedRmsNorm),
    .rules = kTorchtitanRules,
    .make_evaluator = make_evaluator<TorchtitanEvaluator>,
};

}  // namespace tpsim
