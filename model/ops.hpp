// The ops of one training step, each with its shape, FLOPs and bytes. The cost model (cost.hpp)
// only turns these into seconds.
//
// Shapes are per device (no tensor parallelism yet: a later split of heads and d_ffn across
// tensor-parallel ranks divides the n of column-parallel GEMMs and the k of row-parallel ones).
#pragma once

#include <array>
#include <cstdint>

#include "model/architecture.hpp"
#include "model/training.hpp"

namespace tpsim {

enum class OpKind : uint8_t {
  kGemm,          // C[m,n] = A[m,k] * B[k,n]
  kAttentionFwd,  // causal flash attention forward over (batch, heads, seq, head_dim)
  kAttentionBwd,  // its backward (recomputes the scores internally)
  kMemoryBound,   // elementwise, normalisation, reduction, cast, optimizer: bytes over bandwidth
};

// Where an op's time is reported in the step-time breakdown.
enum class OpCategory : uint8_t { kGemm, kAttention, kOther, kOptimizer };

// Which memory-bound kernel an op is, so that a backend can run it (kernels/). Shapes: `m` rows
// (tokens, or parameters for the per-parameter kinds) by `n` columns.
enum class MemKind : uint8_t {
  kNone,              // not memory-bound
  kLayerNorm,         // y = norm(x) * w + b over rows of n
  kLayerNormBackward, // dx, dw, db from dy, x and the row statistics
  kGelu,              // y = gelu(x), tanh approximation
  kGeluBackward,      // dx = dy * gelu'(x)
  kAdd,               // y = a + b
  kBiasGrad,          // db[n] = sum over m rows of dy
  kCrossEntropy,      // loss and, in place, the gradient of an m x n logits matrix
  kCrossEntropyBackward,  // scale the stored gradient
  kEmbedding,         // y[m, n] = table[ids[m]] (+ positions)
  kEmbeddingBackward, // accumulate rows of dy into the table gradient
  kCast,              // convert m x n elements to another format
  kGradNorm,          // sum of squares of m parameters
  kScale,             // x *= c over m parameters
  kAdamW,             // decoupled AdamW over m parameters
};

// Plain data; every field is set by the builders in ops.cpp. No default member initialisers, so
// that OpList's storage is not initialised op by op on every evaluation.
struct Op {
  const char* name;  // e.g. "ffn.up_proj.fwd", "ffn.up_proj.dgrad"; static storage
  OpKind kind;
  OpCategory category;
  MemKind mem;                            // memory-bound ops: which kernel
  DType dtype;
  bool trans_a, trans_b;                  // GEMM: C[m,n] = op(A)[m,k] * op(B)[k,n], row-major
  int64_t m, n, k;                        // GEMM dims; memory-bound ops: m rows of n elements
  int64_t batch, heads, seq, head_dim;    // attention
  int64_t kernels;       // kernel launches this op stands for
  double flops;          // floating-point operations executed
  double bytes_read;
  double bytes_written;
  double saved_bytes;    // activation bytes kept alive until the backward pass (forward ops)
};

// Where the builders below put the ops they describe: a list to keep (OpList), or a consumer that
// costs each op as it arrives and keeps nothing (the simulator's hot path).
class OpSink {
 public:
  virtual void push(const Op& op) = 0;

 protected:
  ~OpSink() = default;
};

// A small fixed-capacity list: building the ops of a layer allocates nothing.
class OpList final : public OpSink {
 public:
  static constexpr int kCapacity = 48;
  void push(const Op& op) override;
  const Op* begin() const { return ops_.data(); }
  const Op* end() const { return ops_.data() + size_; }
  int size() const { return size_; }

 private:
  std::array<Op, kCapacity> ops_;  // only the first size_ are set
  int size_ = 0;
};

// The tokens a device processes at once and the model dimensions they meet.
struct BlockShape {
  int64_t batch = 0;  // sequences in the micro-batch
  int64_t seq = 0;
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t d_ffn = 0;
  int64_t vocab = 0;
  bool bias = true;
  Precision precision = Precision::kAmpBf16;
  int64_t tokens() const { return batch * seq; }
};

BlockShape block_shape(const ModelConfig& m, int64_t micro_batch, int64_t seq_len, Precision p);

// One transformer block (MPT: pre-LN attention and MLP with residuals).
// Forward: ln_1, Wqkv, causal flash attention, out_proj, residual, ln_2, up, GELU, down, residual.
// Backward: for every linear a data-gradient and a weight-gradient GEMM (and a bias reduction),
// attention backward, the elementwise backwards, and the residual-gradient sums.
// amp_fp8 adds TransformerEngine's cast-transposes of inputs, weights and output gradients.
void block_forward_ops(const BlockShape& s, OpSink& out);
void block_backward_ops(const BlockShape& s, OpSink& out);

// Token and position embedding lookup, and its gradient scatter into the embedding tables.
void embedding_forward_ops(const BlockShape& s, OpSink& out);
void embedding_backward_ops(const BlockShape& s, OpSink& out);

// Final layer norm, tied logits GEMM (t x V) and fused cross-entropy (loss and gradient computed
// in place in the bf16 logits buffer, as the flash-attn cross-entropy llm-foundry's MPT uses).
void head_forward_ops(const BlockShape& s, OpSink& out);
void head_backward_ops(const BlockShape& s, OpSink& out);

// Decoupled AdamW with gradient-norm clipping over `local_params` fp32 parameters.
void optimizer_ops(double local_params, OpSink& out);

// FSDP's casts around collectives, per FSDP unit of `unit_params` parameters sharded `shard` ways:
// the local fp32 shard cast to the gather dtype before each all-gather, and (DEFAULT) the
// unsharded bf16 gradient cast to fp32 before the reduce-scatter plus the accumulation into the
// sharded gradient after it.
void fsdp_pre_gather_ops(double unit_params, double shard, double gather_bytes, OpSink& out);
void fsdp_pre_reduce_ops(double unit_params, double shard, double grad_compute_bytes, double reduce_bytes,
                         OpSink& out);

// Sums of the ops' fields.
double total_flops(const OpList& ops);
double total_saved_bytes(const OpList& ops);

}  // namespace tpsim
