// The ops of one training step, each with its shape, FLOPs and bytes. The cost model (cost.hpp)
// only turns these into seconds.
//
// Shapes are per device. Under tensor parallelism (tensor_parallel_shape) a device holds n_heads/tp
// query heads, kv_heads/tp key/value heads and d_ffn/tp feed-forward columns: the n of the
// column-parallel GEMMs (QKV, MLP up and gate) and the k of the row-parallel ones (out projection,
// MLP down) are divided, and with sequence parallelism the token-wise ops (norms, residuals) run on
// tokens/tp rows.
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
  kNone,                  // not memory-bound
  kLayerNorm,             // y = norm(x) * w + b over rows of n
  kLayerNormBackward,     // dx, dw, db from dy, x and the row statistics
  kGelu,                  // y = gelu(x), tanh approximation
  kGeluBackward,          // dx = dy * gelu'(x)
  kAdd,                   // y = a + b
  kBiasGrad,              // db[n] = sum over m rows of dy
  kCrossEntropy,          // loss and, in place, the gradient of an m x n logits matrix: one fused kernel,
                          // or (kernels > 1) PyTorch's sequence of reductions and element-wise kernels
  kCrossEntropyBackward,  // scale the stored gradient
  kEmbedding,             // y[m, n] = table[ids[m]] (+ positions)
  kEmbeddingBackward,     // accumulate rows of dy into the table gradient
  kCast,                  // convert m x n elements to another format
  kGradNorm,              // sum of squares of m parameters
  kScale,                 // x *= c over m parameters
  kAdamW,                 // decoupled AdamW over m parameters
  // Llama-family and mixture-of-experts kernels (m rows of n elements unless said otherwise):
  kRmsNorm,          // y = x * rsqrt(mean(x^2) + eps) * w over rows of n
  kRmsNormBackward,  // dx and dw from dy, x and the row rsqrt
  kSilu,             // y = x * sigmoid(x)
  kSiluBackward,     // dx = dy * silu'(x)
  kRelu,             // y = max(x, 0)
  kReluBackward,     // dx = dy * (x > 0)
  kMul,              // y = a * b (a GLU's gate times its up projection)
  kMulBackward,      // da = dy * b, db = dy * a
  kRope,             // rotate pairs of each head's k = head_dim elements of q and k in place by the
                     // token's position angles (n = the Q and K widths together); its backward is
                     // the same kernel rotating the other way
  kRouter,           // softmax over n experts per token, then the top k (k = top_k) indices and weights
  kRouterBackward,   // the softmax's gradient over m x n from the k chosen weights' gradients
  kPermute,          // gather: out[m*k rows, n] = x[token of each (token, choice) in expert order]
  kUnpermute,        // weighted sum: out[m, n] = sum over the k choices of weight * y[its row]
  // Unfused attention (the scores materialised: Megatron-LM's core attention without flash
  // attention, llm-foundry's attn_impl torch, Hugging Face's eager), over m rows of n = seq scores:
  kSoftmax,          // causal scaled masked softmax of each row (row i keeps its first i % n + 1 entries)
  kSoftmaxBackward,  // dx = y * (dy - sum(dy * y)) per row, from the saved y and dy
  kDropout,          // y = x * mask / (1 - p), writing a one-byte mask (p in the op's k, per mille)
  kDropoutBackward,  // dx = dy * mask / (1 - p)
  // The Mamba-2 mixer (model/architecture.hpp Mamba2Config), over m = tokens rows:
  kCausalConv1d,          // depthwise causal convolution of k taps over n channels, then SiLU
  kCausalConv1dBackward,  // its input, weight and bias gradients
  kSsdScan,               // the chunked state-space scan (SSD) of n = d_inner channels, state k = d_state
  kSsdScanBackward,       // its gradients of x, B, C and dt
  kGatedRmsNorm,          // y = rmsnorm(x * silu(z)) per group of n channels (m = tokens x groups rows)
  kGatedRmsNormBackward,  // dx, dz and dw
  // The Gated DeltaNet (model/architecture.hpp GdnConfig), over m = tokens rows of n = value_dim:
  kGatedDeltaRule,          // the chunked gated delta rule (k = key_head_dim)
  kGatedDeltaRuleBackward,  // its gradients of q, k, v, the decay and the write strength
};

// What an op is part of, for the rules that treat some ops apart (the tensor-parallel
// collectives each hidden behind the GEMM it feeds, the combined 1F1B's expert node): a typed
// field, so that renaming an op changes no timing.
enum class OpRole : uint8_t {
  kOther,
  kQkv,           // the token mixer's input projection: attention's QKV (its GEMMs, casts and bias
                  // gradient), latent attention's projections, the Mamba-2 mixer's in projection
  kAttnOut,       // the token mixer's out projection (attention's, the Mamba-2 mixer's)
  kFfnGate,       // the dense feed-forward's gate projection
  kFfnUp,         // ... its up projection
  kFfnFc1,        // ... gate and up as one linear (BlockShape::fused_swiglu)
  kFfnDown,       // ... its down projection
  kRouter,        // a mixture of experts' router: its GEMM and top-k
  kRoutedExpert,  // every op of the routed experts (their linears, activation, product)
  kSharedExpert,  // every op of the shared experts, their gate and the sum into the block's output
};

// Which of a linear layer's GEMMs an op is (kNone for every other op).
enum class OpPass : uint8_t { kNone, kForward, kDataGrad, kWeightGrad };

// Plain data; every field is set by the builders below (blank_op and those built on it). No
// default member initialisers, so that OpList's storage is not initialised op by op on every
// evaluation.
struct Op {
  const char* name;  // e.g. "ffn.up_proj.fwd", "ffn.up_proj.dgrad"; static storage
  OpKind kind;
  OpCategory category;
  MemKind mem;  // memory-bound ops: which kernel
  DType dtype;
  bool trans_a, trans_b;                // GEMM: C[m,n] = op(A)[m,k] * op(B)[k,n], row-major
  int64_t m, n, k;                      // GEMM dims; memory-bound ops: m rows of n elements
  int64_t batch, heads, seq, head_dim;  // attention
  int64_t kernels;                      // kernel launches this op stands for
  double flops;                         // floating-point operations executed
  double bytes_read;
  double bytes_written;
  double saved_bytes;  // activation bytes kept alive until the backward pass (forward ops)
  bool native_kernel;  // attention: the architecture's native fused kernel (BlockShape::native_attention)
  bool per_step;       // runs once per optimizer step, not per micro-batch (BlockShape::fp8_weight_cache)
  OpRole role;
  OpPass pass;
};

// ---- the op builders: every Op in the program is made by these three ----
// Defined here (inline) so that the per-evaluation builders in ops.cpp cost what private helpers
// would, and so that calibrate/, kernels/ and the tests make their ops with the same formulas.

// An op with its name, kind, category and dtype and every other field zero (one kernel).
inline Op blank_op(const char* name, OpKind kind, OpCategory category, DType dtype = DType::kBf16) {
  Op op;
  op.name = name;
  op.kind = kind;
  op.category = category;
  op.mem = MemKind::kNone;
  op.dtype = dtype;
  op.trans_a = op.trans_b = false;
  op.m = op.n = op.k = 0;
  op.batch = op.heads = op.seq = op.head_dim = 0;
  op.kernels = 1;
  op.flops = op.bytes_read = op.bytes_written = op.saved_bytes = 0;
  op.native_kernel = false;
  op.per_step = false;
  op.role = OpRole::kOther;
  op.pass = OpPass::kNone;
  return op;
}

// op's m, n and k: a GEMM's dims; a memory-bound op's m rows of n elements (k 0).
inline void set_dims(Op& op, int64_t m, int64_t n, int64_t k = 0) {
  op.m = m;
  op.n = n;
  op.k = k;
}

// A GEMM C[m,n] = op(A)[m,k] * op(B)[k,n] (row-major; op() transposes when trans_a / trans_b),
// computing in `dtype`, reading A and B in `in_bytes` per element and writing C in `out_bytes` per
// element. 2mnk FLOPs; bytes (mk + kn) * in_bytes read, mn * out_bytes written; saves nothing
// (a caller that keeps the input for backward sets saved_bytes).
inline Op gemm_op(const char* name, int64_t m, int64_t n, int64_t k, DType dtype, double in_bytes, double out_bytes,
                  bool trans_a = false, bool trans_b = false) {
  const double md = static_cast<double>(m), nd = static_cast<double>(n), kd = static_cast<double>(k);
  Op op = blank_op(name, OpKind::kGemm, OpCategory::kGemm, dtype);
  op.trans_a = trans_a;
  op.trans_b = trans_b;
  set_dims(op, m, n, k);
  op.flops = 2.0 * md * nd * kd;
  op.bytes_read = (md * kd + kd * nd) * in_bytes;
  op.bytes_written = md * nd * out_bytes;
  return op;
}

// `groups` GEMMs in one launch (a grouped GEMM: the routed experts of a mixture of experts), one
// per group, together C[m,n] = op(A)[m,k] * op(B)[k,n] split along m (each group's rows: the
// forward and the data gradient, `split_k` false) or along k (each group's reduction over its own
// rows: the weight gradient, `split_k` true); every group has its own B (forward, data gradient)
// or its own C (weight gradient). The op's m (or k) is the mean group's, rounded up, and `batch`
// the group count: the cost model spreads the tiles of all groups over the device in waves. FLOPs
// 2mnk over the totals; bytes as gemm_op's, with `groups` weight matrices.
inline Op grouped_gemm_op(const char* name, int64_t groups, int64_t m, int64_t n, int64_t k, bool split_k, DType dtype,
                          double in_bytes, double out_bytes, bool trans_a = false, bool trans_b = false) {
  Op op = gemm_op(name, m, n, k, dtype, in_bytes, out_bytes, trans_a, trans_b);
  const double g = static_cast<double>(groups), md = static_cast<double>(m), nd = static_cast<double>(n),
               kd = static_cast<double>(k);
  op.batch = groups;
  if (split_k) {
    op.k = (k + groups - 1) / groups;
    op.bytes_written = g * md * nd * out_bytes;
  } else {
    op.m = (m + groups - 1) / groups;
    op.bytes_read = (md * kd + g * kd * nd) * in_bytes;
  }
  return op;
}

// Bytes per element a GEMM computing in `dtype` reads its operands in and writes its output in,
// when its operands are stored in that format: fp8 reads e4m3 and writes bf16
// (TransformerEngine's output format), tf32 reads and writes fp32. The model's own GEMMs state
// their bytes from the precision's activation format instead (ops.cpp).
inline double gemm_operand_bytes(DType dtype) {
  if (dtype == DType::kFp4) return 0.5;
  return dtype == DType::kFp8 ? 1.0 : (dtype == DType::kFp32 || dtype == DType::kTf32 ? 4.0 : 2.0);
}
inline double gemm_output_bytes(DType dtype) {
  return dtype == DType::kFp8 || dtype == DType::kFp4 ? 2.0 : gemm_operand_bytes(dtype);
}

// A memory-bound op of `kind` over m rows of n elements (m parameters by 1 for the per-parameter
// kinds) stored in `dtype`: no FLOPs counted, `read` and `written` bytes, `kernels` launches,
// `saved` activation bytes kept for backward. A backend reads what a kCast converts from its bytes
// per element, so a cast's bytes must be the formats' sizes times m * n.
inline Op membound_op(const char* name, MemKind kind, int64_t m, int64_t n, DType dtype, double read, double written,
                      int64_t kernels = 1, double saved = 0, OpCategory category = OpCategory::kOther) {
  Op op = blank_op(name, OpKind::kMemoryBound, category, dtype);
  op.mem = kind;
  set_dims(op, m, n);
  op.kernels = kernels;
  op.bytes_read = read;
  op.bytes_written = written;
  op.saved_bytes = saved;
  return op;
}

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
  // The largest block: a mixture-of-experts backward with shared experts, a shared gate and fp8
  // casts is about 60 ops.
  static constexpr int kCapacity = 96;
  // Throws std::length_error past kCapacity, in every build.
  void push(const Op& op) override;
  const Op* begin() const { return ops_.data(); }
  const Op* end() const { return ops_.data() + size_; }
  int size() const { return size_; }

 private:
  std::array<Op, kCapacity> ops_;  // only the first size_ are set
  int size_ = 0;
};

// The tokens a device processes at once and the model dimensions they meet. The fields after
// `precision` default to MPT's architecture, so that a shape set field by field (the kernel plans
// and tests) is an MPT block; block_shape() sets all of them from the model.
struct BlockShape {
  int64_t batch = 0;  // sequences in the micro-batch
  int64_t seq = 0;
  int64_t d_model = 0;
  int64_t n_heads = 0;  // query heads
  int64_t d_ffn = 0;    // dense feed-forward width
  int64_t vocab = 0;
  bool bias = true;  // biases of the out projection and the dense feed-forward (linear_bias)
  Precision precision = Precision::kAmpBf16;
  int64_t kv_heads = 0;  // key/value heads; 0: n_heads
  int64_t head_dim = 0;  // 0: d_model / n_heads
  bool qkv_bias = true;
  NormKind norm = NormKind::kLayerNorm;
  bool norm_bias = true;        // LayerNorm's bias
  FfnKind ffn = FfnKind::kMlp;  // of the dense feed-forward and of every expert
  Activation activation = Activation::kGelu;
  PositionKind positions = PositionKind::kLearned;
  bool tie_embeddings = true;
  int64_t window = 0;  // sliding window, set only when shorter than seq; 0: the whole causal prefix
  // Chunked attention's chunk (ModelConfig::attention_chunk), set only when shorter than seq (which
  // it then divides: rules.cpp refuses a last, shorter chunk); 0: the whole causal prefix.
  int64_t chunk = 0;
  MoeConfig moe;                   // experts: 0 for a dense feed-forward
  QkNorm qk_norm = QkNorm::kNone;  // RMSNorm of q and k before RoPE (Qwen3 per head, OLMo 2 whole)
  // Latent attention (ModelConfig::mla): head_dim is then the query's and key's head, kv_heads
  // n_heads, and the value's head mla.v_head_dim.
  MlaConfig mla;
  bool post_norms = false;  // a norm on each branch's output before its residual add (Gemma 2, 3)
  // The layer's token mixer and whether it has a feed-forward (ModelConfig::mixer, no_ffn); a
  // Mamba-2 mixer's sizes, its heads and groups this rank's (tensor_parallel_shape).
  Mixer mixer = Mixer::kAttention;
  bool no_ffn = false;
  Mamba2Config mamba;
  GdnConfig gdn;                            // a Gated DeltaNet's sizes, its heads this rank's
  bool attention_output_gate = false;       // ModelConfig::attention_output_gate
  bool unfused_attention = false;           // the scores materialised (ModelConfig::unfused_attention)
  bool torch_attention = false;             // ... by PyTorch's kernels, as llm-foundry's attn_impl: torch
  int64_t attention_dropout_per_mille = 0;  // unfused attention's dropout probability x 1000
  int64_t tp = 1;                           // tensor-parallel ranks the heads and FFN columns are split over
  bool sequence_parallel = false;           // the token-wise ops' rows split over the tp ranks too
  bool fp32_vocab_parallel_xent = false;    // Megatron's cross-entropy: PyTorch kernels over fp32 logits
  // Megatron-Core's fused SwiGLU (bias_activation_fusion, which Megatron-LM's --swiglu and every
  // Megatron-Bridge Llama-family provider turn on; megatron/core/fusions/fused_bias_swiglu.py): one
  // fc1 linear of the gate and up widths together, whose output [gate | up] is all the activation
  // keeps (SwiGLUFunction saves its input and recomputes silu in the backward), one forward and one
  // backward kernel for silu(gate) * up. Applies to a GLU with SiLU (dense, routed and shared experts).
  bool fused_swiglu = false;
  // torch.compile of the block (Layout::torch_compile; PyTorch's Inductor, which compiles each
  // TransformerBlock as torchtitan's apply_compile and Composer's compile_config do): the block's
  // memory-bound kernels fused where Inductor fuses them, GEMMs and attention as they are. Modelled:
  // the attention's residual add and the second norm one kernel (the add writes the sum and its
  // norm); each norm's backward and the residual gradient sum after it one kernel; a GLU's
  // activation and product one kernel each way (as fused_swiglu's, with the gate and up GEMMs
  // apart); RMSNorm and RoPE single kernels under eager_rms_norm and eager_rope. The last residual
  // add and the first norm of a block stay apart (each block is its own graph).
  bool torch_compile = false;
  // RMSNorm and RoPE as PyTorch ops in eager mode, one kernel each op, not single fused kernels:
  // torchtitan's norms.py RMSNorm (x.float(), pow, mean, rsqrt, the product, type_as, the weight's
  // product) and model.py apply_rotary_emb (float(), view_as_complex, the complex product,
  // view_as_real, type_as), the backward as autograd runs them. torch_compile fuses each block's
  // back into one kernel each (the final norm, outside the blocks, stays eager).
  bool eager_rms_norm = false, eager_rope = false;
  // Flash attention by the architecture's native fused kernel (CostParams::attn_native_*): what
  // TransformerEngine's DotProductAttention runs under Megatron-Core (cuDNN's fused attention).
  bool native_attention = false;
  // The routed experts' GEMMs launched one per expert, as TransformerEngine's GroupedLinear runs them
  // under Megatron-Core on its per-expert path (TransformerEngine's docs/features/mixture_of_experts:
  // the token counts read on the host, the input split and quantized per expert, one cuBLAS GEMM per
  // expert on a pool of streams): each grouped GEMM, and each of its low-precision casts, stands for
  // as many kernel launches as the rank has experts. The device time stays the grouped op's (the
  // streams spread the experts' tiles over the device); the host issues every launch. The single
  // cuBLASLt grouped GEMM (cuBLAS 13.3 and later: bf16, and on Blackwell MXFP8 and NVFP4) is one.
  bool per_expert_launches = false;
  // The linears' low-precision weights made once a step, not each micro-batch: Megatron-Core's
  // forward_step calls set_is_first_microbatch() on a step's first micro-batch, when TransformerEngine
  // casts (and transposes) the weights into its cache for the later micro-batches and the backward;
  // under fp8_param_gather (every Megatron-Bridge fp8 recipe but blockwise) the weights are fp8
  // parameters the optimizer writes once a step. Each micro-batch casts only the linear's input; the
  // weight's cast is an op marked per_step.
  bool fp8_weight_cache = false;
  // The output layer (the logits' GEMMs) as a TransformerEngine linear under the block format, its
  // input and weight cast as a block linear's: Megatron-Core's fp8_output_proj under the MXFP8
  // recipe (TELMHeadColumnParallelLinear). Off: the output layer in bf16 (other_gemm_dtype).
  bool fp8_head = false;
  // The routed experts' MLP as TransformerEngine's fused grouped MLP (Megatron-Core's
  // use_transformer_engine_op_fuser; TransformerEngine's ops/fused/grouped_mlp.py on cuDNN's CuTe DSL
  // grouped GEMMs, Blackwell under MXFP8 or NVFP4): the activation, its routing probability and the
  // quantization of the down projection's input in the first GEMM's epilogue; their backward and the
  // quantization of the first linear's output gradient in the down projection's data-gradient
  // epilogue. The GEMMs themselves as the grouped GEMMs' (an assumption: no kernel run or published
  // figure times the fused kernels).
  bool fused_expert_mlp = false;
  // The routed experts' kept activations copied into Megatron-Core's paged stash after their
  // forward and back before their backward (transformer/moe/paged_stash.py: a page gather each way
  // over what they keep), in a buffer of this many times what they keep (its
  // moe_paged_stash_buffer_size_factor_cuda). 0: none.
  double paged_stash = 0;
  // Expert-parallel ranks the routed experts are split over (Megatron-LM's --expert-model-parallel-size):
  // this rank's grouped GEMMs run moe.experts / ep experts over as many rows in all as without it
  // (the ep ranks' tokens routed to them, balanced).
  int64_t ep = 1;
  // Tensor-parallel ranks each routed expert's width is split over (Megatron-Core's expert tensor
  // parallel degree; 0: tp, its default). The ETP ranks gather the rows their EP peers route to them,
  // so the rank's experts run over the routed rows of tokens() * expert_tp / tp tokens (expert_rows):
  // all of them at expert_tp = tp, its own tokens/tp at expert_tp = 1, the same FLOPs either way.
  int64_t expert_tp = 0;
  // LoRA (model/lora.hpp): every weight frozen (no weight-gradient GEMMs, bias gradients, router or
  // embedding gradients), adapters on the targeted linears of the attention and the dense
  // feed-forward, each with its forward (x A^T, then B, then scaled and added to the output) and
  // backward (the two data and two weight gradients and the sum into the input's gradient).
  Lora lora;
  // Megatron-Core's selective recompute modules beyond the attention kernel (Layout::recompute_modules
  // but core_attn, whose recompute every framework costs apart: attention_recompute_ops). The forward
  // builders stop counting as kept what a module's checkpoint discards, and the backward builders run
  // the module's forward ops again before its backward (nothing kept, the once-a-step weight casts not
  // repeated; megatron/core/transformer/transformer_layer.py, moe/experts.py, multi_latent_attention.py):
  //   layernorm: the norms Megatron-Core runs as modules of their own under TransformerEngine (a mixture
  //     of experts' pre-MLP norm, latent attention's input norm; the others are fused into the linear
  //     after them, and nothing is recomputed): their output, which the router, the latent and shared
  //     experts' first linears (latent attention's down projections) keep, discarded (under fp8 those
  //     linears keep the original input to make that possible: set_save_original_input); the norm
  //     run again;
  //   moe_act: the routed experts' activation: fc2's kept input discarded, the activation run again
  //     (fc2's input quantized again under fp8 is not counted);
  //   mla_up_proj: latent attention's up projections and RoPE: the q, k and v the attention keeps
  //     discarded, the up projections and RoPE run again;
  //   mlp: a dense feed-forward with its fused norm: only the norm's input kept, all run again;
  //   moe: a mixture of experts' whole layer: only its input kept, all run again (its collectives
  //     again are the framework's to cost);
  //   shared_experts: the shared experts: nothing of theirs kept, run again.
  uint8_t recompute = 0;
  // Each routed row weighted by its routing probability inside the experts' activation, not in the
  // combine: Megatron-Core's grouped experts (megatron/core/transformer/moe/experts.py, bias_act_func
  // multiplies the activation's output by permuted_probs before fc2; TransformerEngine's ScaledSwiGLU
  // in its fused path). The activation then reads and keeps one fp32 probability per row and its
  // backward gives their gradient, and the combine is a plain sum that keeps nothing (the weighted
  // combine keeps the experts' outputs for the weights' gradient).
  bool moe_probs_in_activation = false;
  bool recomputes(RecomputeModule m) const { return (recompute & module_bit(m)) != 0; }

  int64_t tokens() const { return batch * seq; }
  int64_t expert_tensor_parallel() const { return expert_tp > 0 ? expert_tp : tp; }
  int64_t expert_rows() const;  // the routed rows this rank's experts compute (above)
  // Rows of the token-wise ops (norms, residual adds) and of what the column-parallel linears keep of
  // their input: every token, or with sequence parallelism this rank's tokens/tp (Megatron gathers
  // the input before each column-parallel GEMM and keeps only its own part for the backward).
  int64_t row_tokens() const { return sequence_parallel && tp > 1 ? (tokens() + tp - 1) / tp : tokens(); }
  int64_t d_head() const { return head_dim > 0 ? head_dim : d_model / n_heads; }
  int64_t n_kv_heads() const { return kv_heads > 0 ? kv_heads : n_heads; }
  int64_t q_dim() const { return n_heads * d_head(); }        // width of Q and of the attention output
  int64_t kv_dim() const { return n_kv_heads() * d_head(); }  // width of K and of V
  int64_t v_head() const { return mla.active() ? mla.v_head_dim : d_head(); }
  int64_t v_dim() const { return n_kv_heads() * v_head(); }  // width of V
  int64_t o_dim() const { return n_heads * v_head(); }       // width of the attention output
};

BlockShape block_shape(const ModelConfig& m, int64_t micro_batch, int64_t seq_len, Precision p);

// The LoRA adapters' parameters of one block as the shape computes it (its tensor-parallel slice:
// each adapter's r x k and n x r over the linear's local k and n): what the block's ops train, and
// all its trained parameters under LoRA. 0 without LoRA.
// With `adapters`, the number of adapters too.
double lora_block_params(const BlockShape& s, int* adapters = nullptr);
// The same for one whole block of `m` (no tensor parallelism).
double lora_model_block_params(const ModelConfig& m, const Lora& lora);

// The shape one of `tp` tensor-parallel ranks computes (Megatron-LM's ColumnParallelLinear and
// RowParallelLinear, Shoeybi et al. 2019): query and key/value heads and the dense feed-forward
// width divided by tp (each must divide: check_config), the logits over `padded_vocab / tp`
// vocabulary rows (VocabParallelEmbedding), and with `sequence_parallel` the token-wise ops over
// tokens/tp rows (Korthikanti et al. 2022). tp = 1 returns `s` unchanged.
BlockShape tensor_parallel_shape(BlockShape s, int64_t tp, bool sequence_parallel, int64_t padded_vocab);

// The vocabulary Megatron-LM pads to: a multiple of 128 * tp (--make-vocab-size-divisible-by 128,
// megatron/training/tokenizer: _vocab_size_with_padding), so that every rank's slice is whole.
int64_t megatron_padded_vocab(int64_t vocab, int64_t tp);

// The share of causal attention's (query, key) pairs a sliding window of w keys keeps at sequence
// length s: sum_i min(i+1, w) = w(w+1)/2 + (s-w)w of the s(s+1)/2 causal pairs (Mistral; w < s).
inline double sliding_window_fraction(int64_t seq, int64_t window) {
  const double s = static_cast<double>(seq), w = static_cast<double>(window);
  return (w * (w + 1.0) / 2.0 + (s - w) * w) / (s * (s + 1.0) / 2.0);
}

// Causal flash attention (kind kAttentionFwd or kAttentionBwd) over (batch, n_heads query heads,
// seq, head_dim) of `s`, with K and V of n_kv_heads heads (grouped-query: each K/V head serves
// n_heads / n_kv_heads query heads), in the precision's non-block GEMM dtype, activations in its
// activation bytes `a` and an fp32 log-sum-exp per row. ALiBi's bias is computed inside the kernel
// (no op, no bytes). Latent attention's value heads (v_head) may be narrower than its query and key
// heads (head_dim); the op's `n` carries the value head then (0: head_dim).
// The score product takes 2*seq^2*head_dim FLOPs per query head and the value product
// 2*seq^2*v_head without the mask; the causal kernel skips the blocks above the diagonal, about
// half. Grouped-query attention does the same FLOPs per query head and changes only the bytes of K
// and V. A sliding window shorter than the sequence scales the FLOPs by sliding_window_fraction
// and is carried in the op's `k` (0: no window) for CostModel::attention_efficiency. Chunked
// attention is attention over independent sequences of the chunk's length: the op's batch is
// batch * seq / chunk and its seq the chunk (FLOPs, bytes and kernel as those sequences'; BlockShape::chunk).
// Forward: 2 products -> b*h*s^2*(head_dim + v_head) executed FLOPs, reads q, k, v, writes o and the
// log-sum-exp, and keeps all five for backward.
// Backward: 5 products (scores recomputed, dV, dP, dQ, dK) -> 2.5x the forward; reads q, k, v, o,
// dO and the log-sum-exp, writes dQ, dK, dV.
// The attention's inputs q, k and v, in bytes (what its forward keeps of them).
inline double attention_input_bytes(const BlockShape& s) {
  return static_cast<double>(s.tokens()) * static_cast<double>(s.q_dim() + s.kv_dim() + s.v_dim()) *
         activation_bytes(s.precision);
}
inline Op attention_op(const char* name, OpKind kind, const BlockShape& s) {
  const double a = activation_bytes(s.precision);
  const int64_t dh = s.d_head();
  const int64_t batch = s.chunk > 0 ? s.batch * (s.seq / s.chunk) : s.batch, seq_len = s.chunk > 0 ? s.chunk : s.seq;
  const double b = static_cast<double>(batch), h = static_cast<double>(s.n_heads);
  const double seq = static_cast<double>(seq_len);
  const double t = static_cast<double>(s.tokens());
  const double tq = t * static_cast<double>(s.q_dim()), tk = t * static_cast<double>(s.kv_dim());
  const double tv = t * static_cast<double>(s.v_dim()), to = t * static_cast<double>(s.o_dim());
  const double lse = b * h * seq * 4.0;  // fp32 log-sum-exp per row
  Op op = blank_op(name, kind, OpCategory::kAttention);
  op.dtype = other_gemm_dtype(s.precision);
  op.batch = batch;
  op.heads = s.n_heads;
  op.seq = seq_len;
  op.head_dim = dh;
  if (s.v_head() != dh) op.n = s.v_head();
  op.native_kernel = s.native_attention;
  double forward_flops = s.v_head() == dh ? 2.0 * b * h * seq * seq * static_cast<double>(dh)
                                          : b * h * seq * seq * static_cast<double>(dh + s.v_head());
  if (s.window > 0) {
    forward_flops *= sliding_window_fraction(s.seq, s.window);
    op.k = s.window;
  }
  if (kind == OpKind::kAttentionFwd) {
    op.flops = forward_flops;
    op.bytes_read = (tq + tk + tv) * a;
    op.bytes_written = to * a + lse;
    op.saved_bytes = attention_input_bytes(s) + to * a + lse;  // q, k, v, output, log-sum-exp
  } else {
    op.flops = 2.5 * forward_flops;
    op.bytes_read = (tq + tk + tv + 2.0 * to) * a + lse;  // q, k, v, o, dO
    op.bytes_written = (tq + tk + tv) * a;                // dQ, dK, dV
  }
  return op;
}

// One transformer block: pre-norm attention and feed-forward with residuals.
// Forward: norm_1 (LayerNorm or RMSNorm), Wqkv (n = q_dim + 2*kv_dim), RoPE on q and k (RoPE
// models), causal flash attention, out_proj (k = q_dim), residual, norm_2, the feed-forward,
// residual. Feed-forward: MLP up, activation (GELU, SiLU or ReLU), down; GLU gate and up (two
// GEMMs, as Hugging Face's Llama, llm-foundry's MPTGLU and torchtitan run them), activation of the
// gate, their product, down; mixture of experts: router GEMM, softmax and top-k, permutation of the
// tokens into expert order, the routed experts' FFNs as grouped GEMMs, the weighted un-permutation,
// and the shared experts as a dense FFN beside them (Qwen2-MoE: times a sigmoid gate).
// Backward: for every linear a data-gradient and a weight-gradient GEMM (and a bias reduction where
// the model has biases), attention backward, RoPE backward on dq and dk, the elementwise backwards,
// and the gradient sums (residuals, GLU's two branches, the router's and experts' inputs).
// amp_fp8 adds TransformerEngine's cast-transposes of inputs, weights and output gradients.
void block_forward_ops(const BlockShape& s, OpSink& out);
void block_backward_ops(const BlockShape& s, OpSink& out);

// A Mamba-2 mixer's chunked scan (SSD; Dao and Gu 2024, Sec. 6, the four steps of its block
// decomposition as mamba_ssm's Triton kernels run them), forward, over the shape's tokens and this
// rank's heads and groups. FLOPs per token: the chunk's C B^T per group (2 Q N G, Q the chunk), its
// masked product with x per head (2 Q d_inner), the chunk states (2 N d_inner), the states passed
// between chunks (2 N d_inner / Q) and the output from the states (2 N d_inner); the causal mask's
// unneeded half of the first two is counted (the kernels compute whole chunk tiles). Bytes: x, B, C
// and dt read, y written (activations); in fp32 the chunk's cumulative decay (written and read), C B^T
// (written and read) and the chunk states (written, read and written by the state passing, read by
// the output): PyTorch's Mamba-2 kernel-fusion study finds these kernels bound by memory bandwidth and
// launch latency, not by their FLOPs (five kernels).
double mamba_scan_flops(const BlockShape& s);

// A Gated DeltaNet's chunked delta rule (Yang et al. 2024, Sec. 3, the chunkwise WY form as
// flash-linear-attention's chunk_gated_delta_rule runs it), forward, over the shape's tokens and this
// rank's value heads, per token and value head, in multiply-adds times 2: K K^T within the chunk
// (C dk), the triangular solve (C^2 / 3), W = T K (C dk) and U = T V (C dv), W S (dk dv), the
// intra-chunk Q K^T (C dk) and its product with U - W S (C dv), Q S (dk dv) and the state update
// K^T (U - W S) (dk dv); C the chunk, dk and dv the head dims. Bytes: q, k, v, the gate and the
// write strength read, o written; W and U written and read; the fp32 chunk states written and read.
// Timed by its bytes, as the Mamba-2 scan (an assumption: nothing measured).
double gated_delta_rule_flops(const BlockShape& s);

// Rows the routed experts' GEMMs run over `tokens` tokens: dropless (capacity_factor 0), every
// token's top_k choices, t * top_k (the mean expert takes t * top_k / experts); with a capacity
// factor c, every expert's ceil(c * t * top_k / experts) slots, padded (Switch Transformer, GShard).
int64_t moe_routed_rows(const MoeConfig& e, int64_t tokens);

// Selective activation checkpointing (Checkpointing::kSelective): the attention core's forward run
// again before the block's backward (Korthikanti et al. 2022, Megatron-LM's recompute of core
// attention, torchtitan's `selective` AC). Keeps nothing: its outputs are consumed by the backward.
void attention_recompute_ops(const BlockShape& s, OpSink& out);

// Multi-token prediction's own ops of one depth (Layout::mtp_layers), beyond the embedding, the layer
// and the logits it runs as the model's: the RMSNorms of the next tokens' embedding and of the hidden
// state (enorm, hnorm) and the projection of their concatenation (eh_proj, 2h to h, column-parallel),
// which keeps its input (megatron/core/transformer/multi_token_prediction.py). The concatenation's
// copy (2 t x h elements written) is not counted.
void mtp_forward_ops(const BlockShape& s, OpSink& out);
void mtp_backward_ops(const BlockShape& s, OpSink& out);

// What a block's forward keeps for backward only because the attention kernel alone needs it,
// i.e. what selective checkpointing stops keeping: with flash attention, the fp32 log-sum-exp (q,
// k and v are the recomputed region's inputs and o the out projection's input, so they stay).
double attention_only_saved_bytes(const BlockShape& s);

// Token embedding lookup (and learned positions, when the model has them), and its gradient
// scatter into the embedding tables.
void embedding_forward_ops(const BlockShape& s, OpSink& out);
void embedding_backward_ops(const BlockShape& s, OpSink& out);

// Final norm, logits GEMM (t x V) and fused cross-entropy (loss and gradient computed in place in
// the bf16 logits buffer, as the flash-attn cross-entropy llm-foundry's MPT uses). The logits'
// weight gradient goes to the tied token embedding, or to the untied lm_head (same FLOPs).
void head_forward_ops(const BlockShape& s, OpSink& out);
void head_backward_ops(const BlockShape& s, OpSink& out);

// Decoupled AdamW with gradient-norm clipping over `local_params` fp32 parameters, its two moments of
// `moment_bytes` each (4: fp32; 2: Megatron-Core's precision-aware optimizer with bf16 moments).
void adam_ops(double local_params, double moment_bytes, OpSink& out);
// adam_ops with fp32 moments.
void optimizer_ops(double local_params, OpSink& out);

// FSDP's casts around collectives, per FSDP unit of `unit_params` parameters sharded `shard` ways:
// the local fp32 shard cast to the gather dtype before each all-gather, and (DEFAULT) the
// unsharded bf16 gradient cast to fp32 before the reduce-scatter plus the accumulation into the
// sharded gradient after it.
void fsdp_pre_gather_ops(double unit_params, double shard, double gather_bytes, OpSink& out);
void fsdp_pre_reduce_ops(double unit_params, double shard, double grad_compute_bytes, double reduce_bytes, OpSink& out);

// Sums of the ops' fields.
double total_flops(const OpList& ops);
double total_saved_bytes(const OpList& ops);

}  // namespace tpsim
