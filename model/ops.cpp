#include "model/ops.hpp"

#include <cassert>

namespace tpsim {
namespace {

double d(int64_t x) { return static_cast<double>(x); }
int64_t count(double x) { return static_cast<int64_t>(x + 0.5); }

}  // namespace

void OpList::push(const Op& op) {
  assert(size_ < kCapacity);
  ops_[size_++] = op;
}

BlockShape block_shape(const ModelConfig& m, int64_t micro_batch, int64_t seq_len, Precision p) {
  BlockShape s;
  s.batch = micro_batch;
  s.seq = seq_len;
  s.d_model = m.d_model;
  s.n_heads = m.n_heads;
  s.d_ffn = m.d_ffn();
  s.vocab = m.vocab_size;
  s.bias = m.linear_bias;
  s.precision = p;
  return s;
}

namespace {

// The four linear layers of a block: name stems and (N, K) of y[t,N] = x[t,K] W^T.
struct Linear {
  const char* fwd;
  const char* dgrad;
  const char* wgrad;
  const char* bgrad;
  const char* cast_in;
  const char* cast_grad;
  int64_t n, k;
};

Linear qkv(const BlockShape& s) {
  return {"attn.Wqkv.fwd", "attn.Wqkv.dgrad", "attn.Wqkv.wgrad", "attn.Wqkv.bgrad",
          "attn.Wqkv.fp8_cast", "attn.Wqkv.fp8_cast_grad", 3 * s.d_model, s.d_model};
}
Linear out_proj(const BlockShape& s) {
  return {"attn.out_proj.fwd", "attn.out_proj.dgrad", "attn.out_proj.wgrad", "attn.out_proj.bgrad",
          "attn.out_proj.fp8_cast", "attn.out_proj.fp8_cast_grad", s.d_model, s.d_model};
}
Linear up(const BlockShape& s) {
  return {"ffn.up_proj.fwd", "ffn.up_proj.dgrad", "ffn.up_proj.wgrad", "ffn.up_proj.bgrad",
          "ffn.up_proj.fp8_cast", "ffn.up_proj.fp8_cast_grad", s.d_ffn, s.d_model};
}
Linear down(const BlockShape& s) {
  return {"ffn.down_proj.fwd", "ffn.down_proj.dgrad", "ffn.down_proj.wgrad", "ffn.down_proj.bgrad",
          "ffn.down_proj.fp8_cast", "ffn.down_proj.fp8_cast_grad", s.d_model, s.d_ffn};
}

// Forward of a linear layer. `input_saved_elsewhere`: another op already keeps the input alive.
void linear_forward(const BlockShape& s, const Linear& l, bool input_saved_elsewhere, OpSink& out) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const double t = d(s.tokens());
  const DType dt = block_gemm_dtype(s.precision);
  double saved = input_saved_elsewhere ? 0.0 : t * d(l.k) * a;
  if (dt == DType::kFp8) {
    // TransformerEngine: cast (and transpose, for the weight gradient) the input and the weight to
    // fp8, computing amax on the way; the fp8 copy of the input is what it keeps for backward.
    out.push(membound_op(l.cast_in, MemKind::kCast, s.tokens(), l.k, act, t * d(l.k) * a + d(l.n) * d(l.k) * a,
                         2.0 * t * d(l.k) + 2.0 * d(l.n) * d(l.k), 2));
    saved = t * d(l.k);
    Op g = gemm_op(l.fwd, s.tokens(), l.n, l.k, dt, 1.0, a, false, true);
    g.saved_bytes = saved;
    out.push(g);
    return;
  }
  Op g = gemm_op(l.fwd, s.tokens(), l.n, l.k, dt, a, a, false, true);  // y = x W^T
  g.saved_bytes = saved;
  out.push(g);
}

void linear_backward(const BlockShape& s, const Linear& l, OpSink& out) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const double t = d(s.tokens());
  const DType dt = block_gemm_dtype(s.precision);
  const double in_bytes = dt == DType::kFp8 ? 1.0 : a;
  if (dt == DType::kFp8)  // cast-transpose of the output gradient
    out.push(membound_op(l.cast_grad, MemKind::kCast, s.tokens(), l.n, act, t * d(l.n) * a, 2.0 * t * d(l.n)));
  // dX[t,K] = dY[t,N] W[N,K];  dW[N,K] = dY^T[N,t] X[t,K]; the parameter gradient is written in
  // the parameter dtype (bf16 under FSDP mixed precision).
  out.push(gemm_op(l.dgrad, s.tokens(), l.k, l.n, dt, in_bytes, a));                // dX = dY W
  out.push(gemm_op(l.wgrad, l.n, l.k, s.tokens(), dt, in_bytes, a, true, false));    // dW = dY^T X
  if (s.bias) out.push(membound_op(l.bgrad, MemKind::kBiasGrad, s.tokens(), l.n, act, t * d(l.n) * a, d(l.n) * a));
}

Op layer_norm_forward(const char* name, const BlockShape& s) {
  const double a = activation_bytes(s.precision);
  const double td = d(s.tokens()) * d(s.d_model);
  const double stats = d(s.tokens()) * 8.0;  // fp32 mean and rstd per token
  // Keeps its input and statistics for backward.
  return membound_op(name, MemKind::kLayerNorm, s.tokens(), s.d_model, activation_dtype(s.precision),
                     td * a + 2.0 * d(s.d_model) * a, td * a + stats, 1, td * a + stats);
}

Op layer_norm_backward(const char* name, const BlockShape& s) {
  const double a = activation_bytes(s.precision);
  const double td = d(s.tokens()) * d(s.d_model);
  const double stats = d(s.tokens()) * 8.0;
  // Input gradient (reads dY, x, stats) and weight/bias gradients (reads dY, x again): two kernels.
  return membound_op(name, MemKind::kLayerNormBackward, s.tokens(), s.d_model, activation_dtype(s.precision),
                     4.0 * td * a + 2.0 * stats, td * a + 2.0 * d(s.d_model) * 4.0, 2);
}

Op residual_add(const char* name, const BlockShape& s) {
  const double a = activation_bytes(s.precision);
  const double td = d(s.tokens()) * d(s.d_model);
  return membound_op(name, MemKind::kAdd, s.tokens(), s.d_model, activation_dtype(s.precision), 2.0 * td * a, td * a);
}

}  // namespace

void block_forward_ops(const BlockShape& s, OpSink& out) {
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double tf = d(s.tokens()) * d(s.d_ffn);
  const bool fp8 = block_gemm_dtype(s.precision) == DType::kFp8;
  out.push(layer_norm_forward("norm_1.fwd", s));
  linear_forward(s, qkv(s), false, out);
  out.push(attention_op("attn.flash.fwd", OpKind::kAttentionFwd, s));
  linear_forward(s, out_proj(s), /*input_saved_elsewhere=*/!fp8, out);  // attention keeps its output
  out.push(residual_add("resid_attn.fwd", s));
  out.push(layer_norm_forward("norm_2.fwd", s));
  linear_forward(s, up(s), false, out);
  // GELU keeps its input for backward.
  out.push(membound_op("ffn.gelu.fwd", MemKind::kGelu, s.tokens(), s.d_ffn, act, tf * a, tf * a, 1, tf * a));
  linear_forward(s, down(s), /*input_saved_elsewhere=*/false, out);
  out.push(residual_add("resid_ffn.fwd", s));
}

void block_backward_ops(const BlockShape& s, OpSink& out) {
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double tf = d(s.tokens()) * d(s.d_ffn);
  out.push(residual_add("resid_ffn.bwd", s));  // the skip and branch gradients summed
  linear_backward(s, down(s), out);
  out.push(membound_op("ffn.gelu.bwd", MemKind::kGeluBackward, s.tokens(), s.d_ffn, act, 2.0 * tf * a, tf * a));
  linear_backward(s, up(s), out);
  out.push(layer_norm_backward("norm_2.bwd", s));
  out.push(residual_add("resid_attn.bwd", s));
  linear_backward(s, out_proj(s), out);
  out.push(attention_op("attn.flash.bwd", OpKind::kAttentionBwd, s));
  linear_backward(s, qkv(s), out);
  out.push(layer_norm_backward("norm_1.bwd", s));
}

void embedding_forward_ops(const BlockShape& s, OpSink& out) {
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double t = d(s.tokens());
  const double td = t * d(s.d_model);
  Op wte = membound_op("wte.fwd", MemKind::kEmbedding, s.tokens(), s.d_model, act, td * a + t * 8.0, td * a, 1,
                       t * 8.0);  // keeps the token ids
  wte.k = s.vocab;            // table rows
  out.push(wte);
  out.push(membound_op("wpe.fwd", MemKind::kAdd, s.tokens(), s.d_model, act, td * a + d(s.seq) * d(s.d_model) * a,
                       td * a));
}

void embedding_backward_ops(const BlockShape& s, OpSink& out) {
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double t = d(s.tokens());
  const double td = t * d(s.d_model);
  Op wpe = membound_op("wpe.bwd", MemKind::kEmbeddingBackward, s.tokens(), s.d_model, act, td * a,
                       d(s.seq) * d(s.d_model) * a);
  wpe.k = s.seq;  // table rows: one per position
  out.push(wpe);
  // Dense embedding backward: sort the ids, zero the V x d gradient, accumulate the rows.
  Op wte = membound_op("wte.bwd", MemKind::kEmbeddingBackward, s.tokens(), s.d_model, act, td * a + 2.0 * t * 8.0,
                       d(s.vocab) * d(s.d_model) * a + t * 8.0, 4);
  wte.k = s.vocab;
  out.push(wte);
}

void head_forward_ops(const BlockShape& s, OpSink& out) {
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double t = d(s.tokens());
  const double tv = t * d(s.vocab);
  out.push(layer_norm_forward("norm_f.fwd", s));
  Op logits = gemm_op("logits.fwd", s.tokens(), s.vocab, s.d_model, other_gemm_dtype(s.precision), a, a, false, true);
  logits.saved_bytes = t * d(s.d_model) * a;  // its input, for the weight gradient
  out.push(logits);
  // Fused cross-entropy: reads the logits, writes the loss and, in place, the logits gradient;
  // the t x V buffer stays alive until the head's backward.
  out.push(membound_op("loss.xent.fwd", MemKind::kCrossEntropy, s.tokens(), s.vocab, act, tv * a, tv * a + t * 4.0, 1,
                       tv * a));
}

void head_backward_ops(const BlockShape& s, OpSink& out) {
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double tv = d(s.tokens()) * d(s.vocab);
  const DType dt = other_gemm_dtype(s.precision);
  out.push(membound_op("loss.xent.bwd", MemKind::kCrossEntropyBackward, s.tokens(), s.vocab, act, tv * a,
                       tv * a));  // scale the stored gradient by dL
  out.push(gemm_op("logits.dgrad", s.tokens(), s.d_model, s.vocab, dt, a, a));
  // Into the tied wte gradient.
  out.push(gemm_op("logits.wgrad", s.vocab, s.d_model, s.tokens(), dt, a, a, true, false));
  out.push(layer_norm_backward("norm_f.bwd", s));
}

void optimizer_ops(double p, OpSink& out) {
  // fp32 master parameters, gradients and both Adam moments.
  const int64_t n = count(p);
  out.push(membound_op("optim.grad_norm", MemKind::kGradNorm, n, 1, DType::kFp32, 4.0 * p, 0.0, 1, 0.0,
                       OpCategory::kOptimizer));
  out.push(membound_op("optim.clip", MemKind::kScale, n, 1, DType::kFp32, 4.0 * p, 4.0 * p, 1, 0.0,
                       OpCategory::kOptimizer));
  out.push(membound_op("optim.adamw", MemKind::kAdamW, n, 1, DType::kFp32, 16.0 * p, 12.0 * p, 1, 0.0,
                       OpCategory::kOptimizer));
}

void fsdp_pre_gather_ops(double unit_params, double shard, double gather_bytes, OpSink& out) {
  if (gather_bytes < 4.0)
    out.push(membound_op("fsdp.cast_shard", MemKind::kCast, count(unit_params / shard), 1, DType::kFp32,
                         4.0 * unit_params / shard, gather_bytes * unit_params / shard));
}

void fsdp_pre_reduce_ops(double unit_params, double shard, double grad_compute_bytes, double reduce_bytes,
                         OpSink& out) {
  if (reduce_bytes > grad_compute_bytes)
    out.push(membound_op("fsdp.cast_grad", MemKind::kCast, count(unit_params), 1, DType::kFp32,
                         grad_compute_bytes * unit_params, reduce_bytes * unit_params));
  out.push(membound_op("fsdp.accumulate_grad", MemKind::kAdd, count(unit_params / shard), 1, DType::kFp32,
                       8.0 * unit_params / shard, 4.0 * unit_params / shard));
}

double total_flops(const OpList& ops) {
  double f = 0;
  for (const Op& op : ops) f += op.flops;
  return f;
}

double total_saved_bytes(const OpList& ops) {
  double b = 0;
  for (const Op& op : ops) b += op.saved_bytes;
  return b;
}

}  // namespace tpsim
