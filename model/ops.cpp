#include "model/ops.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "model/units.hpp"

namespace tpsim {
namespace {

double d(int64_t x) { return static_cast<double>(x); }
int64_t count(double x) { return round_count(x); }

// `op` marked in place as part of `role` (and, for a linear layer's GEMM, which of its three), for
// pushing as it is: a temporary lives to the end of the push's expression, and nothing is copied.
const Op& tagged(Op& op, OpRole role, OpPass pass = OpPass::kNone) {
  op.role = role;
  op.pass = pass;
  return op;
}
const Op& tagged(Op&& op, OpRole role, OpPass pass = OpPass::kNone) { return tagged(op, role, pass); }

// Passes ops on keeping nothing for the backward: what a checkpoint discards (BlockShape::recompute).
// `again`: the forward ops a recompute runs again in the backward, without those that run once a
// step (the cached low-precision weights).
class Unsaved final : public OpSink {
 public:
  explicit Unsaved(OpSink& out, bool again = false) : out_(out), again_(again) {}
  // Runs build(sink) with `out` itself, or with an Unsaved sink over it when `discard`. Two calls, not
  // one through a sink chosen at run time: where the builders are inlined into a costing
  // (cost_micro_batch_ops) the common path then pushes to a sink of known type, without a virtual call.
  template <typename Build>
  static void maybe(bool discard, OpSink& out, Build&& build) {
    if (discard) {
      Unsaved unsaved(out);
      build(static_cast<OpSink&>(unsaved));
    } else {
      build(out);
    }
  }
  void push(const Op& op) override {
    if (again_ && op.per_step) return;
    Op o = op;
    o.saved_bytes = 0;
    out_.push(o);
  }

 private:
  OpSink& out_;
  bool again_;
};

}  // namespace

void OpList::push(const Op& op) {
  if (size_ == kCapacity) [[unlikely]]
    throw std::length_error("OpList: more than " + std::to_string(kCapacity) + " ops in one list (pushing " +
                            std::string(op.name ? op.name : "an unnamed op") + "); raise OpList::kCapacity");
  ops_[size_++] = op;
}

BlockShape block_shape(const ModelConfig& m, int64_t micro_batch, int64_t seq_len, Precision p) {
  require_uniform(m, "block_shape");
  BlockShape s;
  s.batch = micro_batch;
  s.seq = seq_len;
  s.d_model = m.d_model;
  s.n_heads = m.n_heads;
  s.d_ffn = m.d_ffn();
  s.vocab = m.vocab_size;
  s.bias = m.linear_bias;
  s.precision = p;
  s.kv_heads = m.kv_heads();
  s.head_dim = m.d_head();
  s.qkv_bias = m.qkv_bias;
  s.norm = m.norm;
  s.norm_bias = m.norm_bias;
  s.ffn = m.ffn;
  s.activation = m.activation;
  s.positions = m.positions;
  s.tie_embeddings = m.tie_embeddings;
  s.window = m.sliding_window > 0 && m.sliding_window < seq_len ? m.sliding_window : 0;
  s.chunk = m.attention_chunk > 0 && m.attention_chunk < seq_len ? m.attention_chunk : 0;
  s.moe = m.moe;
  s.qk_norm = m.qk_norm;
  s.mla = m.mla;
  s.post_norms = m.post_norms;
  s.mixer = m.mixer;
  s.no_ffn = m.no_ffn;
  s.mamba = m.mamba;
  s.gdn = m.gdn;
  s.attention_output_gate = m.attention_output_gate;
  s.unfused_attention = m.unfused_attention;
  s.torch_attention = m.unfused_attention && m.torch_attention;
  s.attention_dropout_per_mille = static_cast<int64_t>(std::lround(m.attention_dropout * 1000.0));
  return s;
}

BlockShape tensor_parallel_shape(BlockShape s, int64_t tp, bool sequence_parallel, int64_t padded_vocab) {
  s.vocab = padded_vocab;  // Megatron pads the vocabulary at tp = 1 too (50257 to 50304)
  if (tp <= 1) return s;
  s.kv_heads = s.n_kv_heads() / tp;
  s.n_heads /= tp;
  s.d_ffn /= tp;
  s.mamba.heads /= tp;  // Megatron-Core's MambaMixer: heads and groups split (check_config: tp divides both)
  s.mamba.groups /= tp;
  s.gdn.key_heads /= tp;  // Megatron-Core's gated_delta_net: heads split (check_config: tp divides both)
  s.gdn.value_heads /= tp;
  s.vocab = (padded_vocab + tp - 1) / tp;
  s.tp = tp;
  s.sequence_parallel = sequence_parallel;
  return s;
}

int64_t megatron_padded_vocab(int64_t vocab, int64_t tp) {
  const int64_t multiple = 128 * tp;
  return (vocab + multiple - 1) / multiple * multiple;
}

namespace {

// The ops' names of one linear layer (static storage).
struct LinearNames {
  const char* fwd;
  const char* dgrad;
  const char* wgrad;
  const char* bgrad;
  const char* cast_in;
  const char* cast_grad;
  const char* cast_weight;  // the weight's own cast (BlockShape::fp8_weight_cache)
  // Its LoRA adapter's (BlockShape::lora).
  const char* lora_dropout_fwd;
  const char* lora_a_fwd;
  const char* lora_b_fwd;
  const char* lora_add_fwd;
  const char* lora_scale_bwd;
  const char* lora_b_dgrad;
  const char* lora_b_wgrad;
  const char* lora_a_dgrad;
  const char* lora_a_wgrad;
  const char* lora_dropout_bwd;
  const char* lora_dx_sum;
  OpRole role;  // of every op of the layer
};
#define TPSIM_LINEAR(stem, role)                                                                            \
  {                                                                                                         \
    stem ".fwd", stem ".dgrad", stem ".wgrad", stem ".bgrad", stem ".fp8_cast", stem ".fp8_cast_grad",      \
        stem ".fp8_cast_weight", stem ".lora.dropout.fwd", stem ".lora_a.fwd", stem ".lora_b.fwd",          \
        stem ".lora.add.fwd", stem ".lora.scale.bwd", stem ".lora_b.dgrad", stem ".lora_b.wgrad",           \
        stem ".lora_a.dgrad", stem ".lora_a.wgrad", stem ".lora.dropout.bwd", stem ".lora.dx_sum.bwd", role \
  }

// The LoRA adapters on one linear: each one's output width (n), over the linear's rows and k.
struct Adapters {
  int count = 0;
  std::array<int64_t, 3> widths{};
  void add(int64_t n) { widths[static_cast<size_t>(count++)] = n; }
};

// A linear layer y[rows, n] = x[rows, k] W^T over `rows` tokens; `groups` > 1: one weight per group
// (the routed experts), run as grouped GEMMs.
struct Linear {
  LinearNames names;
  int64_t rows, n, k;
  int64_t groups;
  bool bias;
  int64_t saved_rows;   // rows of the input it keeps for backward (row_tokens() for a column-parallel
                        // linear under sequence parallelism; else rows)
  bool frozen = false;  // LoRA: no weight gradient, so its input is kept only for its adapters
  // Its input's low-precision copies written by the epilogue of the GEMM before it, and its output
  // gradient's by the GEMM after it in the backward (BlockShape::fused_expert_mlp): those casts
  // read nothing and launch nothing of their own.
  bool input_from_epilogue = false, grad_from_epilogue = false;
  Adapters adapters;
  // Whether its backward needs its input: for its weight gradient or its adapters'.
  bool needs_input() const { return !frozen || adapters.count > 0; }
};

// The adapters `s.lora` puts on the linear of the projections `bits` of output widths `widths` (in
// LoraTarget order among the bits), one over all of them when `fused`.
Adapters adapters_of(const BlockShape& s, uint8_t bits, bool fused, std::initializer_list<int64_t> widths) {
  Adapters a;
  if (!s.lora.active()) return a;
  uint8_t bit = 1;
  while (bit && !(bits & bit)) bit = static_cast<uint8_t>(bit << 1);
  int64_t fused_width = 0;
  for (const int64_t w : widths) {
    if (s.lora.target_bits & bits & bit) {
      if (fused) fused_width += w;
      else a.add(w);
    }
    bit = static_cast<uint8_t>(bit << 1);
  }
  if (fused && fused_width > 0) a.add(fused_width);
  return a;
}

Linear qkv(const BlockShape& s) {
  Linear l{TPSIM_LINEAR("attn.Wqkv", OpRole::kQkv),
           s.tokens(),
           s.q_dim() * (s.attention_output_gate ? 2 : 1) + 2 * s.kv_dim(),
           s.d_model,
           1,
           s.qkv_bias,
           s.row_tokens()};
  l.frozen = s.lora.active();
  l.adapters = adapters_of(s, kLoraQkv, s.lora.fused_qkv, {s.q_dim(), s.kv_dim(), s.kv_dim()});
  return l;
}
Linear out_proj(const BlockShape& s) {
  Linear l{TPSIM_LINEAR("attn.out_proj", OpRole::kAttnOut), s.tokens(), s.d_model, s.o_dim(), 1, s.bias, s.tokens()};
  l.frozen = s.lora.active();
  l.adapters = adapters_of(s, lora_bit(LoraTarget::kO), false, {s.d_model});
  return l;
}

// Latent attention's four projections (Megatron-Core's multi_latent_attention.py, with
// TransformerEngine): the down projections replicated on every tensor-parallel rank ("duplicated")
// over its own rows (row_tokens: s/tp under sequence parallelism), the up projections column-parallel
// over the heads, their inputs gathered to every token (each keeps its own rows for the backward).
// Under LoRA all four are frozen and carry no adapters (tpsim's targets are the standard projections').
// One of them: no bias, keeping its own rows of the input, frozen under LoRA.
Linear mla_linear(const BlockShape& s, const LinearNames& names, int64_t rows, int64_t n, int64_t k) {
  Linear l{names, rows, n, k, 1, false, s.row_tokens()};
  l.frozen = s.lora.active();
  return l;
}
Linear mla_q_down(const BlockShape& s) {
  return mla_linear(s, TPSIM_LINEAR("attn.q_down", OpRole::kQkv), s.row_tokens(), s.mla.q_lora_rank, s.d_model);
}
Linear mla_kv_down(const BlockShape& s) {
  return mla_linear(s, TPSIM_LINEAR("attn.kv_down", OpRole::kQkv), s.row_tokens(),
                    s.mla.kv_lora_rank + s.mla.qk_rope_head_dim, s.d_model);
}
// The query's up projection from the compressed query, or (q_lora_rank 0) its projection from the
// hidden state, column-parallel as the standard QKV.
Linear mla_q_up(const BlockShape& s) {
  return mla_linear(s, TPSIM_LINEAR("attn.q_up", OpRole::kQkv), s.tokens(), s.q_dim(),
                    s.mla.q_lora_rank == 0 ? s.d_model : s.mla.q_lora_rank);
}
Linear mla_kv_up(const BlockShape& s) {
  return mla_linear(s, TPSIM_LINEAR("attn.kv_up", OpRole::kQkv), s.tokens(),
                    s.n_heads * (s.mla.qk_nope_head_dim + s.v_head()), s.mla.kv_lora_rank);
}

// One feed-forward network (dense, the routed experts, or the shared experts): its ops' names
// (the activation's indexed by Activation) and sizes.
struct FfnNames {
  LinearNames gate, up, down;
  LinearNames fc1;  // the gate and up projections as one linear (BlockShape::fused_swiglu)
  const char* act_fwd[4];
  const char* act_bwd[4];
  const char* mul_fwd;
  const char* mul_bwd;
  const char* dx_sum;  // GLU backward: the gate's and up's input gradients summed
  OpRole role;         // of its activation, product and sum
};
// The dense feed-forward's linears each have a role of their own; every op of the routed or the
// shared experts has the experts' role.
#define TPSIM_FFN(stem, gate_role, up_role, fc1_role, down_role, role)                                               \
  {                                                                                                                  \
    TPSIM_LINEAR(stem ".gate_proj", gate_role), TPSIM_LINEAR(stem ".up_proj", up_role),                              \
        TPSIM_LINEAR(stem ".down_proj", down_role), TPSIM_LINEAR(stem ".fc1", fc1_role),                             \
        {stem ".gelu.fwd", stem ".silu.fwd", stem ".relu.fwd", stem ".relu2.fwd"},                                   \
        {stem ".gelu.bwd", stem ".silu.bwd", stem ".relu.bwd", stem ".relu2.bwd"}, stem ".mul.fwd", stem ".mul.bwd", \
        stem ".dx_sum.bwd", role                                                                                     \
  }
#define TPSIM_EXPERTS(stem, role) TPSIM_FFN(stem, role, role, role, role, role)
constexpr FfnNames kDenseFfn =
    TPSIM_FFN("ffn", OpRole::kFfnGate, OpRole::kFfnUp, OpRole::kFfnFc1, OpRole::kFfnDown, OpRole::kOther);
constexpr FfnNames kExpertFfn = TPSIM_EXPERTS("moe.experts", OpRole::kRoutedExpert);
constexpr FfnNames kSharedFfn = TPSIM_EXPERTS("moe.shared", OpRole::kSharedExpert);
#undef TPSIM_EXPERTS
#undef TPSIM_FFN

struct Ffn {
  const FfnNames* names;
  int64_t rows;    // tokens through it
  int64_t width;   // hidden width
  int64_t groups;  // experts (grouped GEMMs), or 1
  bool bias;
  bool input_saved_elsewhere;  // another op keeps its input for backward
  int64_t d_model;
  int64_t input_rows;            // rows of its input kept for backward (row_tokens() for the dense FFN)
  const BlockShape* lora_shape;  // the dense feed-forward under LoRA: its adapters' shape; else null
  bool frozen;                   // LoRA: every weight frozen
  // Megatron-Core's output-discarding recomputes (BlockShape::recompute): the norm's output that the
  // first linear(s) read is discarded (layernorm), the activation's output that the down projection
  // reads is discarded and the activation run again in the backward (moe_act).
  bool input_discarded = false;
  bool activation_recomputed = false;
  // The routed rows weighted by their routing probability in the activation (BlockShape::
  // moe_probs_in_activation): its last kernel reads the fp32 probabilities and keeps them, its
  // backward writes their gradient.
  bool probs_in_activation = false;
  // The activation (and its probability product) in the first linear's GEMM epilogue, which writes
  // the down projection's quantized input; its backward in the down projection's data-gradient
  // epilogue, which writes the first linear's quantized output gradient (BlockShape::
  // fused_expert_mlp).
  bool in_gemm_epilogues = false;
  Linear with(Linear l, uint8_t bits, bool fused, std::initializer_list<int64_t> widths) const {
    l.frozen = frozen;
    if (lora_shape) l.adapters = adapters_of(*lora_shape, bits, fused, widths);
    return l;
  }
  // Megatron-Core's one linear_fc1 adapter over gate and up, where they run as two linears: on the gate.
  bool fused_fc1_adapter() const {
    return lora_shape && lora_shape->lora.fused_fc1 && lora_shape->ffn == FfnKind::kGlu;
  }
  Linear gate() const {
    if (fused_fc1_adapter())
      return with({names->gate, rows, width, d_model, groups, bias, input_rows}, kLoraGateUp, true, {width, width});
    return with({names->gate, rows, width, d_model, groups, bias, input_rows}, lora_bit(LoraTarget::kGate), false,
                {width});
  }
  Linear up() const {
    Linear l = with({names->up, rows, width, d_model, groups, bias, input_rows},
                    fused_fc1_adapter() ? uint8_t{0} : lora_bit(LoraTarget::kUp), false, {width});
    l.grad_from_epilogue = in_gemm_epilogues;
    return l;
  }
  Linear down() const {
    Linear l =
        with({names->down, rows, d_model, width, groups, bias, rows}, lora_bit(LoraTarget::kDown), false, {d_model});
    l.input_from_epilogue = in_gemm_epilogues;
    return l;
  }
  // Megatron-Core's linear_fc1 of a gated unit: [gate | up] = x [W_gate | W_up]^T, one GEMM (one per
  // expert) of twice the width, one cast of x and of the weight under fp8.
  Linear fc1() const {
    Linear l = with({names->fc1, rows, 2 * width, d_model, groups, bias, input_rows}, kLoraGateUp,
                    lora_shape && lora_shape->lora.fused_fc1, {width, width});
    l.grad_from_epilogue = in_gemm_epilogues;
    return l;
  }
};

Ffn dense_ffn(const BlockShape& s) {
  return {
      &kDenseFfn,     s.tokens(), s.d_ffn, 1, s.bias, false, s.d_model, s.row_tokens(), s.lora.active() ? &s : nullptr,
      s.lora.active()};
}

MemKind activation_kind(Activation act) {
  switch (act) {
    case Activation::kGelu: return MemKind::kGelu;
    case Activation::kSilu: return MemKind::kSilu;
    case Activation::kRelu:
    case Activation::kRelu2: return MemKind::kRelu;  // relu(x)^2: the same bytes, one kernel
  }
  return MemKind::kGelu;
}
MemKind activation_backward_kind(Activation act) {
  switch (act) {
    case Activation::kGelu: return MemKind::kGeluBackward;
    case Activation::kSilu: return MemKind::kSiluBackward;
    case Activation::kRelu:
    case Activation::kRelu2: return MemKind::kReluBackward;
  }
  return MemKind::kGeluBackward;
}

bool fused_swiglu(const BlockShape& s) {
  return s.fused_swiglu && s.ffn == FfnKind::kGlu && s.activation == Activation::kSilu;
}

// The routed experts' linear layers run their GEMMs grouped, one group per expert: the GEMM `g`
// (built as one dense GEMM over all rows, which keeps the dense path a plain gemm_op) made grouped
// along m (forward, data gradient) or k (weight gradient).
// Launched one per expert where the shape says so (BlockShape::per_expert_launches).
Op grouped(const BlockShape& s, const Op& g, const Linear& l, bool split_k, double in, double out) {
  Op op = grouped_gemm_op(g.name, l.groups, g.m, g.n, g.k, split_k, g.dtype, in, out, g.trans_a, g.trans_b);
  if (s.per_expert_launches) op.kernels = l.groups;
  return op;
}

// The launches of a low-precision cast of `kernels` kernels over a linear layer's operands: per
// expert on the per-expert path.
int64_t cast_launches(const BlockShape& s, const Linear& l, int64_t kernels) {
  return s.per_expert_launches ? kernels * l.groups : kernels;
}

// Bytes per element of a block linear layer's quantized operands, block scales included: fp8 1;
// MXFP8 1 + 1/32 (an e8m0 scale per 32 elements); NVFP4 0.5 + 1/16 (an e4m3 scale per 16; the
// per-tensor fp32 scale is negligible). 0: the precision does not quantize (bf16, fp16, fp32).
double quantized_bytes(Precision p) {
  const DType dt = block_gemm_dtype(p);
  if (dt != DType::kFp8 && dt != DType::kFp4) return 0.0;
  const double element = dt == DType::kFp4 ? 0.5 : 1.0;
  const int block = scale_block_elements(p);
  return element + (block > 0 ? 1.0 / block : 0.0);
}

// The LoRA adapters' forward on linear `l` (model/lora.hpp), each in the precision's non-block GEMM
// dtype (the adapters are plain linears beside the quantized base): a dropout of the input when the
// run has one (keeping its mask and the dropped copy), h = x A^T (keeping x, unless another op keeps
// it, for A's weight gradient), y_a = h B^T (keeping h for B's), and y += scale * y_a (a scale and an
// add kernel, as Hugging Face PEFT and Megatron-Bridge run it).
void lora_forward(const BlockShape& s, const Linear& l, bool input_saved_elsewhere, OpSink& out) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const DType dt = other_gemm_dtype(s.precision);
  const int64_t r = s.lora.rank;
  const double xk = d(l.rows) * d(l.k), kept_x = d(l.saved_rows) * d(l.k);
  bool x_kept = input_saved_elsewhere;
  for (int i = 0; i < l.adapters.count; ++i) {
    const int64_t n = l.adapters.widths[static_cast<size_t>(i)];
    const double yn = d(l.rows) * d(n);
    double saved_x = 0;
    if (s.lora.dropout_per_mille > 0) {
      Op drop = membound_op(l.names.lora_dropout_fwd, MemKind::kDropout, l.rows, l.k, act, xk * a, xk * (a + 1.0), 1,
                            kept_x * (a + 1.0));
      drop.k = s.lora.dropout_per_mille;
      out.push(tagged(drop, l.names.role));
    } else if (!x_kept) {
      saved_x = kept_x * a;
      x_kept = true;
    }
    Op fa = gemm_op(l.names.lora_a_fwd, l.rows, r, l.k, dt, a, a, false, true);
    fa.saved_bytes = saved_x;
    out.push(tagged(fa, l.names.role, OpPass::kForward));
    Op fb = gemm_op(l.names.lora_b_fwd, l.rows, n, r, dt, a, a, false, true);
    fb.saved_bytes = d(l.rows) * d(r) * a;
    out.push(tagged(fb, l.names.role, OpPass::kForward));
    out.push(tagged(membound_op(l.names.lora_add_fwd, MemKind::kAdd, l.rows, n, act, 3.0 * yn * a, 2.0 * yn * a, 2),
                    l.names.role));
  }
}

// Their backward: the output gradient scaled, dh = dy B and dB = dy^T h, dx_a = dh A and dA = dh^T x,
// the dropout's backward, and dx_a summed into the base linear's input gradient.
void lora_backward(const BlockShape& s, const Linear& l, OpSink& out) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const DType dt = other_gemm_dtype(s.precision);
  const int64_t r = s.lora.rank;
  const double xk = d(l.rows) * d(l.k);
  for (int i = 0; i < l.adapters.count; ++i) {
    const int64_t n = l.adapters.widths[static_cast<size_t>(i)];
    const double yn = d(l.rows) * d(n);
    out.push(
        tagged(membound_op(l.names.lora_scale_bwd, MemKind::kScale, l.rows, n, act, yn * a, yn * a), l.names.role));
    out.push(tagged(gemm_op(l.names.lora_b_dgrad, l.rows, r, n, dt, a, a), l.names.role, OpPass::kDataGrad));
    out.push(
        tagged(gemm_op(l.names.lora_b_wgrad, n, r, l.rows, dt, a, a, true, false), l.names.role, OpPass::kWeightGrad));
    out.push(tagged(gemm_op(l.names.lora_a_dgrad, l.rows, l.k, r, dt, a, a), l.names.role, OpPass::kDataGrad));
    out.push(tagged(gemm_op(l.names.lora_a_wgrad, r, l.k, l.rows, dt, a, a, true, false), l.names.role,
                    OpPass::kWeightGrad));
    if (s.lora.dropout_per_mille > 0) {
      Op drop =
          membound_op(l.names.lora_dropout_bwd, MemKind::kDropoutBackward, l.rows, l.k, act, xk * (a + 1.0), xk * a);
      drop.k = s.lora.dropout_per_mille;
      out.push(tagged(drop, l.names.role));
    }
    out.push(
        tagged(membound_op(l.names.lora_dx_sum, MemKind::kAdd, l.rows, l.k, act, 2.0 * xk * a, xk * a), l.names.role));
  }
}

// Forward of a linear layer. `input_saved_elsewhere`: another op already keeps the input alive;
// `adapter_input_kept`: ... the unquantized input its adapters read (the same but under fp8). A frozen linear (LoRA)
// keeps no input of its own (PyTorch's autograd and TransformerEngine keep a linear's input only for its weight
// gradient) and, quantized, casts its input without the transposed copy the weight gradient would read.
void linear_forward(const BlockShape& s, const Linear& l, bool input_saved_elsewhere, bool adapter_input_kept,
                    OpSink& out) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const double t = d(l.rows);
  const double w = d(l.groups) * d(l.n) * d(l.k);  // weight elements
  const DType dt = block_gemm_dtype(s.precision);
  const bool keeps_input = !l.frozen && !input_saved_elsewhere;
  double saved = keeps_input ? d(l.saved_rows) * d(l.k) * a : 0.0;
  if (const double q = quantized_bytes(s.precision); q > 0) {
    // TransformerEngine: cast (and transpose, for the weight gradient) the input and the weight to
    // fp8 (or MXFP8/NVFP4 with their block scales), computing amax on the way; the low-precision
    // copy of the input is what it keeps for backward.
    const double copies = l.frozen ? 1.0 : 2.0;
    const double input_read = l.input_from_epilogue ? 0.0 : t * d(l.k) * a;
    if (s.fp8_weight_cache) {  // the input every micro-batch; the weight once a step, into the cache
      out.push(tagged(membound_op(l.names.cast_in, MemKind::kCast, l.rows, l.k, act, input_read,
                                  copies * q * t * d(l.k), l.input_from_epilogue ? 0 : cast_launches(s, l, 1)),
                      l.names.role));
      Op weight = membound_op(l.names.cast_weight, MemKind::kCast, l.groups * l.n, l.k, act, w * a, 2.0 * q * w,
                              cast_launches(s, l, 1));
      weight.per_step = true;
      out.push(tagged(weight, l.names.role));
    } else {
      out.push(
          tagged(membound_op(l.names.cast_in, MemKind::kCast, l.rows, l.k, act, input_read + w * a,
                             copies * q * t * d(l.k) + 2.0 * q * w, cast_launches(s, l, l.input_from_epilogue ? 1 : 2)),
                 l.names.role));
    }
    saved = l.frozen ? 0.0 : d(l.saved_rows) * d(l.k) * q;
    Op g = gemm_op(l.names.fwd, l.rows, l.n, l.k, dt, q, a, false, true);
    if (l.groups != 1) g = grouped(s, g, l, false, q, a);
    g.saved_bytes = saved;
    out.push(tagged(g, l.names.role, OpPass::kForward));
    lora_forward(s, l, adapter_input_kept, out);
    return;
  }
  Op g = gemm_op(l.names.fwd, l.rows, l.n, l.k, dt, a, a, false, true);  // y = x W^T
  if (l.groups != 1) g = grouped(s, g, l, false, a, a);
  g.saved_bytes = saved;
  out.push(tagged(g, l.names.role, OpPass::kForward));
  lora_forward(s, l, adapter_input_kept, out);
}
void linear_forward(const BlockShape& s, const Linear& l, bool input_saved_elsewhere, OpSink& out) {
  linear_forward(s, l, input_saved_elsewhere, input_saved_elsewhere, out);
}

void linear_backward(const BlockShape& s, const Linear& l, OpSink& out) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const double t = d(l.rows);
  const DType dt = block_gemm_dtype(s.precision);
  const double q = quantized_bytes(s.precision);
  const double in_bytes = q > 0 ? q : a;
  lora_backward(s, l, out);
  if (q > 0)  // cast-transpose of the output gradient (frozen: only the copy the data gradient reads)
    out.push(tagged(
        membound_op(l.names.cast_grad, MemKind::kCast, l.rows, l.n, act, l.grad_from_epilogue ? 0.0 : t * d(l.n) * a,
                    (l.frozen ? 1.0 : 2.0) * q * t * d(l.n), l.grad_from_epilogue ? 0 : cast_launches(s, l, 1)),
        l.names.role));
  // dX[t,K] = dY[t,N] W[N,K];  dW[N,K] = dY^T[N,t] X[t,K]; the parameter gradient is written in
  // the parameter dtype (bf16 under FSDP mixed precision). Grouped: each expert's rows.
  Op dgrad = gemm_op(l.names.dgrad, l.rows, l.k, l.n, dt, in_bytes, a);  // dX = dY W
  if (l.groups != 1) dgrad = grouped(s, dgrad, l, false, in_bytes, a);
  out.push(tagged(dgrad, l.names.role, OpPass::kDataGrad));
  if (l.frozen) return;
  Op wgrad = gemm_op(l.names.wgrad, l.n, l.k, l.rows, dt, in_bytes, a, true, false);  // dW = dY^T X
  if (l.groups != 1) wgrad = grouped(s, wgrad, l, true, in_bytes, a);
  out.push(tagged(wgrad, l.names.role, OpPass::kWeightGrad));
  if (l.bias)
    out.push(tagged(membound_op(l.names.bgrad, MemKind::kBiasGrad, l.rows, l.n, act, t * d(l.n) * a, d(l.n) * a),
                    l.names.role));
}

// The output layer as a block-format linear (BlockShape::fp8_head): tokens x vocab (the rank's
// vocabulary slice) from d_model, no bias, its input kept for its weight gradient (frozen under LoRA).
Linear output_linear(const BlockShape& s) {
  Linear l{TPSIM_LINEAR("lm_head", OpRole::kOther), s.tokens(), s.vocab, s.d_model, 1, false, s.row_tokens()};
  l.frozen = s.lora.active();
  return l;
}

// What torch.compile makes of a norm (BlockShape::torch_compile): nothing (outside a compiled block
// or without compile), its own fused kernel, or one kernel with the residual add before it (forward)
// or the residual gradient sum after it (backward).
enum class NormFusion : uint8_t { kNone, kAlone, kWithAdd };

NormFusion block_norm_fusion(const BlockShape& s, bool after_add) {
  if (!s.torch_compile) return NormFusion::kNone;
  return after_add ? NormFusion::kWithAdd : NormFusion::kAlone;
}

// torchtitan's RMSNorm run eagerly (BlockShape::eager_rms_norm): x.float(), pow(2), mean, rsqrt,
// the product, type_as and the weight's product, each a kernel over the [rows, d] tensor in fp32 or
// the activation dtype, by bytes per element.
double eager_rms_read(double a) { return a + 4.0 + 4.0 + 4.0 + 4.0 + a; }  // of each kernel in turn
double eager_rms_written(double a) { return 4.0 + 4.0 + 4.0 + a + a; }
// Autograd's backward of the same ops: the weight's product (input and weight gradients), type_as,
// the product's two inputs' gradients, pow's, their sum and the cast back.
double eager_rms_bwd_read(double a) { return 3.0 * a + a + 4.0 + 8.0 + 4.0 + 8.0 + 4.0; }
double eager_rms_bwd_written(double a) { return a + 4.0 + 4.0 + 4.0 + 4.0 + a; }
constexpr int64_t kEagerRmsKernels = 8, kEagerRmsBwdKernels = 9;

Op norm_forward(const char* name, const BlockShape& s, NormFusion fusion = NormFusion::kNone) {
  const double a = activation_bytes(s.precision);
  const double td = d(s.row_tokens()) * d(s.d_model);
  const DType act = activation_dtype(s.precision);
  // Fused with the residual add before it, which writes the sum and the norm's input stays on chip.
  const double input = fusion == NormFusion::kWithAdd ? 0.0 : td * a;
  const int64_t kernels = fusion == NormFusion::kWithAdd ? 0 : 1;
  if (s.norm == NormKind::kRmsNorm) {
    const double rstd = d(s.row_tokens()) * 4.0;
    if (s.eager_rms_norm && fusion == NormFusion::kNone) {
      // Eager: the passes above; autograd keeps x in fp32 (for pow and the product), the rstd and
      // the normalised bf16 tensor (for the weight's product).
      const double e = d(s.row_tokens()) * d(s.d_model);
      return membound_op(name, MemKind::kRmsNorm, s.row_tokens(), s.d_model, act,
                         e * eager_rms_read(a) + d(s.d_model) * a, e * eager_rms_written(a) + rstd, kEagerRmsKernels,
                         e * (4.0 + a) + rstd);
    }
    // RMSNorm: reads x and w, writes y and an fp32 rstd per row; keeps x and the rstd.
    return membound_op(name, MemKind::kRmsNorm, s.row_tokens(), s.d_model, act, input + d(s.d_model) * a, td * a + rstd,
                       kernels, td * a + rstd);
  }
  const double stats = d(s.row_tokens()) * 8.0;   // fp32 mean and rstd per token
  const double params = s.norm_bias ? 2.0 : 1.0;  // weight, and bias
  // Keeps its input and statistics for backward.
  return membound_op(name, MemKind::kLayerNorm, s.row_tokens(), s.d_model, act, input + params * d(s.d_model) * a,
                     td * a + stats, kernels, td * a + stats);
}

Op norm_backward(const char* name, const BlockShape& s, NormFusion fusion = NormFusion::kNone) {
  const double a = activation_bytes(s.precision);
  const double td = d(s.row_tokens()) * d(s.d_model);
  const bool rms = s.norm == NormKind::kRmsNorm;
  const double stats = d(s.row_tokens()) * (rms ? 4.0 : 8.0);
  const double params = rms || !s.norm_bias ? 1.0 : 2.0;
  const MemKind kind = rms ? MemKind::kRmsNormBackward : MemKind::kLayerNormBackward;
  if (rms && s.eager_rms_norm && fusion == NormFusion::kNone) {
    const double e = d(s.row_tokens()) * d(s.d_model);
    return membound_op(name, kind, s.row_tokens(), s.d_model, activation_dtype(s.precision),
                       e * eager_rms_bwd_read(a) + stats, e * eager_rms_bwd_written(a) + d(s.d_model) * 4.0,
                       kEagerRmsBwdKernels);
  }
  // Input gradient (reads dY, x, stats) and weight/bias gradients (reads dY, x again): two kernels.
  // Fused with the residual gradient sum after it, the input gradient is summed on chip, not
  // written for the add to read (residual_add_backward).
  const double dx = fusion == NormFusion::kWithAdd ? 0.0 : td * a;
  return membound_op(name, kind, s.row_tokens(), s.d_model, activation_dtype(s.precision), 4.0 * td * a + 2.0 * stats,
                     dx + params * d(s.d_model) * 4.0, 2);
}

Op residual_add(const char* name, const BlockShape& s) {
  const double a = activation_bytes(s.precision);
  const double td = d(s.row_tokens()) * d(s.d_model);
  return membound_op(name, MemKind::kAdd, s.row_tokens(), s.d_model, activation_dtype(s.precision), 2.0 * td * a,
                     td * a);
}

// The skip and branch gradients of a residual summed; under torch.compile inside the norm's
// backward kernel before it (NormFusion::kWithAdd): it reads the skip's gradient only, no launch.
Op residual_add_backward(const char* name, const BlockShape& s) {
  Op op = residual_add(name, s);
  if (s.torch_compile) {
    op.bytes_read /= 2.0;
    op.kernels = 0;
  }
  return op;
}

// RoPE on q and k (in place) after the QKV GEMM, and on dq and dk in the backward: reads and
// writes t * (q_dim + kv_dim), plus the fp32 cos and sin tables (seq x head_dim/2 each).
// Eager under eager_rope (torchtitan's apply_rotary_emb on q and on k): float() (reads a,
// writes 4 bytes an element), the complex product with freqs_cis (reads 4, writes 4) and type_as
// (reads 4, writes a): three kernels each; its backward the same passes in reverse.
Op rope(const char* name, const BlockShape& s) {
  const double a = activation_bytes(s.precision);
  const double tqk = d(s.tokens()) * d(s.q_dim() + s.kv_dim());
  const bool eager = s.eager_rope && !s.torch_compile;
  Op op = membound_op(name, MemKind::kRope, s.tokens(), s.q_dim() + s.kv_dim(), activation_dtype(s.precision),
                      (eager ? a + 8.0 : a) * tqk + d(s.seq) * d(s.d_head()) * 4.0, (eager ? a + 8.0 : a) * tqk,
                      eager ? 6 : 1);
  op.k = s.d_head();
  return op;
}

// QK-norm: RMSNorm of q and of k after the QKV GEMM, before RoPE, over each head's head_dim
// elements (Qwen3's q_norm and k_norm) or over the whole q and k widths (OLMo 2). Forward: reads
// q, k and the weights, writes them normalised and an fp32 rstd per row; keeps its inputs and the
// rstd (the attention keeps the normalised q and k). Backward: the input and weight gradients.
// Without a weight (Llama 4's L2Norm), neither the weight's read nor its gradient's kernel.
void qk_norm_ops(const BlockShape& s, bool forward, OpSink& out) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const bool weight = s.qk_norm != QkNorm::kPerHeadNoWeight;
  const bool per_head = s.qk_norm == QkNorm::kPerHead || !weight;
  const int64_t q_rows = per_head ? s.tokens() * s.n_heads : s.tokens();
  const int64_t k_rows = per_head ? s.tokens() * s.n_kv_heads() : s.tokens();
  const int64_t q_cols = per_head ? s.d_head() : s.q_dim(), k_cols = per_head ? s.d_head() : s.kv_dim();
  for (const auto& [name_fwd, name_bwd, rows, cols] :
       {std::tuple{"attn.q_norm.fwd", "attn.q_norm.bwd", q_rows, q_cols},
        std::tuple{"attn.k_norm.fwd", "attn.k_norm.bwd", k_rows, k_cols}}) {
    const double e = d(rows) * d(cols), rstd = d(rows) * 4.0;
    const double w = weight ? d(cols) : 0.0;
    if (forward)
      out.push(membound_op(name_fwd, MemKind::kRmsNorm, rows, cols, act, e * a + w * a, e * a + rstd, 1, e * a + rstd));
    else
      out.push(membound_op(name_bwd, MemKind::kRmsNormBackward, rows, cols, act, 4.0 * e * a + 2.0 * rstd,
                           e * a + w * 4.0, weight ? 2 : 1));
  }
}

// An RMSNorm over rows of `cols` (latent attention's compressed query and key/value): reads x and
// the weight, writes y and an fp32 rstd per row, keeps x and the rstd; its backward the input and
// weight gradients (two kernels), as norm_forward and norm_backward's.
Op rms_norm(const char* name, const BlockShape& s, int64_t rows, int64_t cols, bool forward) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const double e = d(rows) * d(cols), rstd = d(rows) * 4.0;
  if (forward)
    return membound_op(name, MemKind::kRmsNorm, rows, cols, act, e * a + d(cols) * a, e * a + rstd, 1, e * a + rstd);
  return membound_op(name, MemKind::kRmsNormBackward, rows, cols, act, 4.0 * e * a + 2.0 * rstd, e * a + d(cols) * 4.0,
                     2);
}

// Latent attention's RoPE with the assembly of the attention's inputs (Megatron-Core's
// apply_rope_fusion: fused_apply_mla_rope_for_q and fused_apply_mla_rope_for_kv, two kernels): reads
// the up projections' query and key/value and the shared RoPE key, writes the query, the key (the
// shared RoPE part repeated per head) and the value; the backward the reverse (the shared part's
// gradient summed over the heads), with the fp32 cos and sin tables.
Op mla_rope(const char* name, const BlockShape& s, bool forward) {
  const double a = activation_bytes(s.precision);
  const double t = d(s.tokens());
  const double up = t * d(s.q_dim() + s.n_heads * (s.mla.qk_nope_head_dim + s.v_head()) + s.mla.qk_rope_head_dim);
  const double assembled = t * d(s.q_dim() + s.kv_dim() + s.v_dim());
  const double tables = d(s.seq) * d(s.mla.qk_rope_head_dim) * 4.0;
  Op op = membound_op(name, MemKind::kRope, s.tokens(), s.q_dim() + s.kv_dim(), activation_dtype(s.precision),
                      (forward ? up : assembled) * a + tables, (forward ? assembled : up) * a, 2);
  op.k = s.d_head();
  return op;
}

// Latent attention's query, key and value, forward: the down projections over the rank's rows (each
// keeping the norm's output it reads, once), their norms, the up projections over every token, and
// the RoPE that assembles the attention's inputs. The attention keeps q, k and v; nothing else here.
// The up projections from the latents (the query's only with a query latent) and the RoPE: what
// Megatron-Core's mla_up_proj recompute runs again.
void mla_up_forward(const BlockShape& s, OpSink& out) {
  if (s.mla.q_lora_rank > 0) linear_forward(s, mla_q_up(s), false, out);
  linear_forward(s, mla_kv_up(s), false, out);
  out.push(mla_rope("attn.rope.fwd", s, true));
}

void mla_forward(const BlockShape& s, OpSink& out) {
  const bool q_lora = s.mla.q_lora_rank > 0;
  // Under the layernorm recompute the input norm's output, which the first projections keep, is
  // discarded (BlockShape::recompute).
  const bool discarded = s.recomputes(RecomputeModule::kLayernorm);
  if (q_lora) {
    Unsaved::maybe(discarded, out, [&](OpSink& first) { linear_forward(s, mla_q_down(s), false, first); });
    out.push(rms_norm("attn.q_norm.fwd", s, s.row_tokens(), s.mla.q_lora_rank, true));
  } else {  // from the hidden state, which it keeps
    Unsaved::maybe(discarded, out, [&](OpSink& first) { linear_forward(s, mla_q_up(s), false, first); });
  }
  Unsaved::maybe(discarded, out,
                 [&](OpSink& first) { linear_forward(s, mla_kv_down(s), /*input_saved_elsewhere=*/true, first); });
  out.push(rms_norm("attn.kv_norm.fwd", s, s.row_tokens(), s.mla.kv_lora_rank, true));
  mla_up_forward(s, out);
}

// Its backward: the RoPE's, each linear's gradients, the norms', and the two down projections'
// input gradients summed.
void mla_backward(const BlockShape& s, OpSink& out) {
  const bool q_lora = s.mla.q_lora_rank > 0;
  out.push(mla_rope("attn.rope.bwd", s, false));
  linear_backward(s, mla_kv_up(s), out);
  if (q_lora) linear_backward(s, mla_q_up(s), out);
  out.push(rms_norm("attn.kv_norm.bwd", s, s.row_tokens(), s.mla.kv_lora_rank, false));
  linear_backward(s, mla_kv_down(s), out);
  if (q_lora) {
    out.push(rms_norm("attn.q_norm.bwd", s, s.row_tokens(), s.mla.q_lora_rank, false));
    linear_backward(s, mla_q_down(s), out);
  } else {
    linear_backward(s, mla_q_up(s), out);
  }
  const double a = activation_bytes(s.precision), td = d(s.row_tokens()) * d(s.d_model);
  out.push(membound_op("attn.dx_sum.bwd", MemKind::kAdd, s.row_tokens(), s.d_model, activation_dtype(s.precision),
                       2.0 * td * a, td * a));
}

// Unfused causal attention over r = batch x heads x seq query rows of seq keys (Megatron-LM's
// CoreAttention: baddbmm of Q and K^T, the fused upper-triangular scaled masked softmax, dropout,
// bmm with V). Every product runs over the whole seq x seq square (the mask is applied after the
// scores are computed): 2*r*seq*head_dim FLOPs each, twice the causal flash kernel's executed work.
// The GEMMs are reported as attention. Keeps q, k, the softmax output, the dropout mask and the
// dropped probabilities, and v: the 5as/h term of Korthikanti et al.'s activations.
struct UnfusedSizes {
  int64_t rows, seq, dh;
  double a, scores, q, kv;  // bytes per element, elements of the scores, of q, of k (and of v)
};
UnfusedSizes unfused_sizes(const BlockShape& s) {
  const int64_t rows = s.batch * s.n_heads * s.seq;
  return {rows,
          s.seq,
          s.d_head(),
          activation_bytes(s.precision),
          d(rows) * d(s.seq),
          d(rows) * d(s.d_head()),
          d(s.batch) * d(s.n_kv_heads()) * d(s.seq) * d(s.d_head())};
}

// Megatron's fused upper-triangular softmax kernel runs only where its launch shape allows
// (megatron/model/fused_softmax.py, FusedScaleMaskSoftmax.is_kernel_available, in the
// Megatron-DeepSpeed code vTrain's rows ran): half-precision input, 16 < keys <= 2048, queries a
// multiple of 4, and batch x local heads a multiple of 4 and of the kernel's batches per block (four
// warps per 128-thread block, two rows per warp at up to 128 keys). Otherwise it falls back to
// PyTorch: in fp32 (query-key layer scaling, on by default, forces the softmax into fp32), a cast
// up, the scale, the in-place mask, the softmax and a cast down, each its own kernel; the backward
// runs their five gradients. The softmax keeps its fp32 output. (Tensor parallelism 8 over 16 heads
// at micro-batch 1 leaves 2 local heads: vTrain's 32 such runs are this path.)
bool fused_softmax_available(const BlockShape& s) {
  if (s.precision == Precision::kFp32 || s.torch_attention) return false;
  const auto pow2 = static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(s.seq, 1))));
  const int64_t warp = std::min<int64_t>(pow2, 32);
  const int64_t per_block = (128 / warp) * (pow2 <= 128 ? 2 : 1);
  const int64_t batches = s.batch * s.n_heads;
  return s.seq > 16 && s.seq <= 2048 && s.seq % 4 == 0 && batches % 4 == 0 && batches % per_block == 0;
}

// Bytes read and written per score, kernels and bytes saved per score of the softmax as it runs.
struct SoftmaxTraffic {
  double fwd_read, fwd_written, bwd_read, bwd_written, saved;
  int64_t kernels, bwd_kernels;
};
SoftmaxTraffic softmax_traffic(const BlockShape& s, double a) {
  if (fused_softmax_available(s)) return {a, a, 2.0 * a, a, a, 1, 1};
  constexpr double f = 4.0;
  if (s.torch_attention) {
    // llm-foundry's attn_impl: torch, per score: the scale (a -> a), the causal masked_fill (a -> a),
    // ALiBi's bias add (a -> a), autocast's cast up (a -> f), the softmax (f -> f), the cast down
    // (f -> a) that the context matmul reads and saves; in fp32 no casts. Backward: the cast down's
    // (a -> f), the softmax's (reads y and dy: 2f -> f), the cast up's (f -> a), the masked_fill's
    // (a -> a), the scale's (a -> a); the bias add passes the gradient through. Saved: the softmax's
    // fp32 output and the cast-down output (one tensor in fp32).
    const bool alibi = s.positions == PositionKind::kAlibi;
    const double bias = alibi ? 1.0 : 0.0;
    const int64_t extra = alibi ? 1 : 0;
    if (a == f) return {(3.0 + bias) * f, (3.0 + bias) * f, 4.0 * f, 3.0 * f, f, 3 + extra, 3};
    return {(3.0 + bias) * a + 2.0 * f,
            (3.0 + bias) * a + 2.0 * f,
            3.0 * a + 3.0 * f,
            3.0 * a + 2.0 * f,
            f + a,
            5 + extra,
            5};
  }
  if (a == f) return {3.0 * f, 3.0 * f, 4.0 * f, 3.0 * f, f, 3, 3};  // fp32: no casts
  return {a + 4.0 * f, 4.0 * f + a, a + 5.0 * f, 4.0 * f + a, f, 5, 5};
}

Op attention_gemm(const char* name, const UnfusedSizes& u, int64_t m, int64_t n, int64_t k, DType dt, double read,
                  double written, double saved, bool trans_a = false, bool trans_b = false) {
  Op g = gemm_op(name, m, n, k, dt, u.a, u.a, trans_a, trans_b);
  g.category = OpCategory::kAttention;
  g.bytes_read = read;  // every head's own operands (gemm_op counts one B for all rows)
  g.bytes_written = written;
  g.saved_bytes = saved;
  return g;
}

void unfused_attention_forward(const BlockShape& s, bool keep, OpSink& out) {
  const UnfusedSizes u = unfused_sizes(s);
  const DType dt = other_gemm_dtype(s.precision), act = activation_dtype(s.precision);
  const bool dropout = s.attention_dropout_per_mille > 0;
  const double k = keep ? 1.0 : 0.0;
  out.push(attention_gemm("attn.scores.fwd", u, u.rows, u.seq, u.dh, dt, (u.q + u.kv) * u.a, u.scores * u.a,
                          k * (u.q + u.kv) * u.a, false, true));
  const SoftmaxTraffic sm = softmax_traffic(s, u.a);
  out.push(membound_op("attn.softmax.fwd", MemKind::kSoftmax, u.rows, u.seq, act, u.scores * sm.fwd_read,
                       u.scores * sm.fwd_written, sm.kernels, k * u.scores * sm.saved));
  if (dropout) {
    Op drop = membound_op("attn.dropout.fwd", MemKind::kDropout, u.rows, u.seq, act, u.scores * u.a,
                          u.scores * u.a + u.scores, 1, k * u.scores * (1.0 + u.a));  // the mask and its output
    drop.k = s.attention_dropout_per_mille;
    out.push(drop);
  }
  out.push(attention_gemm("attn.context.fwd", u, u.rows, u.dh, u.seq, dt, (u.scores + u.kv) * u.a, u.q * u.a,
                          k * u.kv * u.a));
}

void unfused_attention_backward(const BlockShape& s, OpSink& out) {
  const UnfusedSizes u = unfused_sizes(s);
  const DType dt = other_gemm_dtype(s.precision), act = activation_dtype(s.precision);
  // dP = dO V^T and dV = P^T dO; then dropout's and the softmax's backward; dQ = dS K and dK = dS^T Q.
  out.push(attention_gemm("attn.context.dgrad", u, u.rows, u.seq, u.dh, dt, (u.q + u.kv) * u.a, u.scores * u.a, 0,
                          false, true));
  out.push(attention_gemm("attn.context.wgrad", u, u.rows, u.dh, u.seq, dt, (u.scores + u.q) * u.a, u.kv * u.a, 0, true,
                          false));
  if (s.attention_dropout_per_mille > 0) {
    Op drop = membound_op("attn.dropout.bwd", MemKind::kDropoutBackward, u.rows, u.seq, act, u.scores * (u.a + 1.0),
                          u.scores * u.a);
    drop.k = s.attention_dropout_per_mille;
    out.push(drop);
  }
  const SoftmaxTraffic sm = softmax_traffic(s, u.a);
  out.push(membound_op("attn.softmax.bwd", MemKind::kSoftmaxBackward, u.rows, u.seq, act, u.scores * sm.bwd_read,
                       u.scores * sm.bwd_written, sm.bwd_kernels));
  out.push(attention_gemm("attn.scores.dgrad", u, u.rows, u.dh, u.seq, dt, (u.scores + u.kv) * u.a, u.q * u.a, 0));
  out.push(attention_gemm("attn.scores.wgrad", u, u.rows, u.dh, u.seq, dt, (u.scores + u.q) * u.a, u.kv * u.a, 0, true,
                          false));
}

// An elementwise op of the feed-forward over its [rows, width] activations, reading, writing and
// keeping for backward (saved) the given multiples of that tensor's bytes.
// The activation's last kernel applies the routing probabilities (Ffn::probs_in_activation): forward
// it reads and keeps one fp32 probability per row; backward it reads them and writes their gradient.
enum class Probs : uint8_t { kNone, kForward, kBackward };

// In a GEMM's epilogue (Ffn::in_gemm_epilogues) it launches nothing and moves only `epilogue_read`
// times the tensor (what it reads that the GEMM does not hand it), keeping what it keeps.
Op ffn_elementwise(const BlockShape& s, const Ffn& f, const char* name, MemKind kind, double read, double written,
                   double saved = 0, Probs probs = Probs::kNone, double epilogue_read = 0) {
  const double bytes = d(f.rows) * d(f.width) * activation_bytes(s.precision);
  if (f.in_gemm_epilogues) read = epilogue_read, written = 0;
  Op op = tagged(membound_op(name, kind, f.rows, f.width, activation_dtype(s.precision), read * bytes, written * bytes,
                             f.in_gemm_epilogues ? 0 : 1, saved * bytes),
                 f.names->role);
  if (probs != Probs::kNone && f.probs_in_activation) {
    const double weights = d(f.rows) * 4.0;
    op.bytes_read += weights;
    (probs == Probs::kForward ? op.saved_bytes : op.bytes_written) += weights;
  }
  return op;
}

// The feed-forward's activation between its first linear(s) and its down projection, forward.
void ffn_activation_forward(const BlockShape& s, const Ffn& f, OpSink& out) {
  const int act = static_cast<int>(s.activation);
  if (fused_swiglu(s) || (s.ffn == FfnKind::kGlu && s.torch_compile)) {
    // One kernel reads [gate | up] and writes act(gate) * up, keeping [gate | up] for its backward
    // (Megatron-Core's fused SwiGLU; Inductor's fusion of the two).
    out.push(ffn_elementwise(s, f, f.names->mul_fwd, MemKind::kMul, 2, 1, 2, Probs::kForward));
  } else if (s.ffn == FfnKind::kGlu) {
    // The activation keeps its input (the gate's output); the product keeps both its factors.
    out.push(ffn_elementwise(s, f, f.names->act_fwd[act], activation_kind(s.activation), 1, 1, 1));
    out.push(ffn_elementwise(s, f, f.names->mul_fwd, MemKind::kMul, 2, 1, 2, Probs::kForward));
  } else {
    // The activation keeps its input for backward.
    out.push(ffn_elementwise(s, f, f.names->act_fwd[act], activation_kind(s.activation), 1, 1, 1, Probs::kForward));
  }
}

void ffn_forward(const BlockShape& s, const Ffn& f, OpSink& out) {
  // What the first linear(s) keep of their input (nothing when f.input_discarded).
  Unsaved::maybe(f.input_discarded, out, [&](OpSink& first) {
    if (fused_swiglu(s)) {
      linear_forward(s, f.fc1(), f.input_saved_elsewhere, first);
    } else if (s.ffn == FfnKind::kGlu) {
      const Linear gate = f.gate();
      linear_forward(s, gate, f.input_saved_elsewhere, first);
      // The gate keeps x (frozen under LoRA: only if its adapters do).
      linear_forward(s, f.up(), /*input_saved_elsewhere=*/f.input_saved_elsewhere || gate.needs_input(), first);
    } else {
      linear_forward(s, f.up(), f.input_saved_elsewhere, first);
    }
  });
  ffn_activation_forward(s, f, out);
  Unsaved::maybe(f.activation_recomputed, out,
                 [&](OpSink& down) { linear_forward(s, f.down(), /*input_saved_elsewhere=*/false, down); });
}

void ffn_backward(const BlockShape& s, const Ffn& f, OpSink& out) {
  const int act = static_cast<int>(s.activation);
  if (f.activation_recomputed) {
    Unsaved again(out, /*again=*/true);
    ffn_activation_forward(s, f, again);
  }
  linear_backward(s, f.down(), out);
  if (fused_swiglu(s)) {
    // The same kernel recomputes silu(gate) from the kept [gate | up] and writes both halves'
    // gradients (swiglu_back): the product's bytes, no silu kernel; then fc1's backward, whose one
    // data-gradient GEMM sums over both halves.
    out.push(ffn_elementwise(s, f, f.names->mul_bwd, MemKind::kMulBackward, 3, 2, 0, Probs::kBackward, 2));
    linear_backward(s, f.fc1(), out);
  } else if (s.ffn == FfnKind::kGlu) {
    // Under torch.compile one kernel reads gate, up and the gradient, and writes both gradients.
    out.push(ffn_elementwise(s, f, f.names->mul_bwd, MemKind::kMulBackward, 3, 2, 0, Probs::kBackward, 2));
    if (!s.torch_compile)
      out.push(ffn_elementwise(s, f, f.names->act_bwd[act], activation_backward_kind(s.activation), 2, 1));
    linear_backward(s, f.up(), out);
    linear_backward(s, f.gate(), out);
    const double rd = d(f.rows) * d(f.d_model), a = activation_bytes(s.precision);
    out.push(tagged(membound_op(f.names->dx_sum, MemKind::kAdd, f.rows, f.d_model, activation_dtype(s.precision),
                                2.0 * rd * a, rd * a),
                    f.names->role));
  } else {
    out.push(ffn_elementwise(s, f, f.names->act_bwd[act], activation_backward_kind(s.activation), 2, 1, 0,
                             Probs::kBackward, 1));
    linear_backward(s, f.up(), out);
  }
}

// Passes the ops on to `out` (or nowhere, without one), summing what they keep for the backward.
class KeptBytes final : public OpSink {
 public:
  explicit KeptBytes(OpSink* out) : out_(out) {}
  void push(const Op& op) override {
    bytes += op.saved_bytes;
    if (out_) out_->push(op);
  }
  double bytes = 0;

 private:
  OpSink* out_;
};

// Megatron-Core's paged stash (BlockShape::paged_stash) of the routed experts' kept activations
// (`kept` bytes): their copy into the stash's pages after the forward, or back before the backward,
// a row gather each way; the forward's op keeps the buffer beyond what the experts keep.
Op paged_stash_op(const BlockShape& s, double kept, bool forward) {
  Op op = membound_op(forward ? "moe.paged_stash.fwd" : "moe.paged_stash.bwd", MemKind::kPermute, s.expert_rows(),
                      s.moe.routed_width(s.d_model), activation_dtype(s.precision), kept, kept, 1,
                      forward ? (s.paged_stash - 1.0) * kept : 0.0);
  op.k = 1;
  return tagged(op, OpRole::kRoutedExpert);
}

Ffn expert_ffn(const BlockShape& s) {
  const int64_t rows = s.expert_rows();
  Ffn f{&kExpertFfn,
        rows,
        s.moe.d_expert,
        s.moe.experts / s.ep,
        s.moe.expert_bias,
        false,
        s.moe.routed_width(s.d_model),
        rows,
        nullptr,
        s.lora.active()};
  f.activation_recomputed = s.recomputes(RecomputeModule::kMoeAct);
  f.probs_in_activation = s.moe_probs_in_activation;
  f.in_gemm_epilogues = s.fused_expert_mlp && quantized_bytes(s.precision) > 0;
  return f;
}

// The routed experts' forward into Megatron-Core's paged stash, and what they keep: out of line,
// so that the common path (no stash) inlines as it did.
[[gnu::noinline]] void stashed_experts_forward(const BlockShape& s, OpSink& out) {
  KeptBytes kept(&out);
  ffn_forward(s, expert_ffn(s), kept);  // its first GEMM keeps the permuted x
  out.push(paged_stash_op(s, kept.bytes, true));
}
[[gnu::noinline]] double experts_kept_bytes(const BlockShape& s) {
  KeptBytes kept(nullptr);
  ffn_forward(s, expert_ffn(s), kept);
  return kept.bytes;
}
// Latent experts' projections (MoeConfig::latent) around the dispatch, over the router's tokens,
// whole on every rank (no biases; frozen under LoRA).
Linear latent_down(const BlockShape& s) {
  Linear l{TPSIM_LINEAR("moe.latent_down", OpRole::kRoutedExpert),
           s.tokens(),
           s.moe.latent,
           s.d_model,
           1,
           false,
           s.tokens()};
  l.frozen = s.lora.active();
  return l;
}
Linear latent_up(const BlockShape& s) {
  Linear l{
      TPSIM_LINEAR("moe.latent_up", OpRole::kRoutedExpert), s.tokens(), s.d_model, s.moe.latent, 1, false, s.tokens()};
  l.frozen = s.lora.active();
  return l;
}
Ffn shared_ffn(const BlockShape& s) {
  // The shared experts see every token: one dense FFN of their widths together (DeepSeek fuses
  // them so; Qwen2-MoE has one), with x kept by the router.
  Ffn f{&kSharedFfn, s.tokens(),     s.moe.shared_experts * s.moe.d_shared, 1, false, true, s.d_model, s.tokens(),
        nullptr,     s.lora.active()};
  f.input_discarded = s.recomputes(RecomputeModule::kLayernorm);
  return f;
}

// The shared experts (and Qwen2-MoE's gate on their output), forward, before their sum into the
// block's output.
void shared_experts_forward(const BlockShape& s, OpSink& out) {
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double t = d(s.tokens()), td = t * d(s.d_model);
  ffn_forward(s, shared_ffn(s), out);
  if (!s.moe.shared_gate) return;
  // Qwen2-MoE: sigmoid(x w) scales the shared experts' output; keeps that output and the gate.
  out.push(
      tagged(gemm_op("moe.shared_gate.fwd", s.tokens(), 1, s.d_model, other_gemm_dtype(s.precision), a, a, false, true),
             OpRole::kSharedExpert, OpPass::kForward));
  out.push(tagged(membound_op("moe.shared_gate.mul.fwd", MemKind::kMul, s.tokens(), s.d_model, act, td * a + t * a,
                              td * a, 1, td * a + t * a),
                  OpRole::kSharedExpert));
}

// The mixture-of-experts feed-forward of one block, forward. Index tensors are int64 (torch.topk).
void moe_forward(const BlockShape& s, OpSink& out) {
  const MoeConfig& e = s.moe;
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double t = d(s.tokens()), td = t * d(s.d_model), te = t * d(e.experts), tk = t * d(e.top_k);
  const int64_t w = e.routed_width(s.d_model);  // the routed rows' width: d_model, or the latent width
  const double rd = d(s.expert_rows()) * d(w), tw = t * d(w);
  // The router: logits t x experts (kept in bf16 under fp8, as TransformerEngine recipes leave it),
  // keeping its input x for its weight gradient (and for the shared experts).
  // Under the layernorm recompute the norm's output, which the router, the latent projection and the
  // shared experts keep, is discarded (BlockShape::recompute).
  const bool input_discarded = s.recomputes(RecomputeModule::kLayernorm);
  Op router =
      gemm_op("moe.router.fwd", s.tokens(), e.experts, s.d_model, other_gemm_dtype(s.precision), a, a, false, true);
  router.saved_bytes = s.lora.active() || input_discarded ? 0.0 : td * a;  // frozen under LoRA: no weight gradient
  out.push(tagged(router, OpRole::kRouter, OpPass::kForward));
  // Softmax in fp32 and top-k: keeps the probabilities and the chosen indices.
  Op topk = membound_op("moe.router.topk.fwd", MemKind::kRouter, s.tokens(), e.experts, act, te * a,
                        te * 4.0 + tk * (4.0 + 8.0), 1, te * 4.0 + tk * 8.0);
  topk.k = e.top_k;
  out.push(tagged(topk, OpRole::kRouter));
  if (e.latent > 0)  // the router keeps x
    Unsaved::maybe(input_discarded, out,
                   [&](OpSink& sink) { linear_forward(s, latent_down(s), /*input_saved_elsewhere=*/true, sink); });
  Op permute = membound_op("moe.permute.fwd", MemKind::kPermute, s.tokens(), w, act, tw * a + tk * 8.0, rd * a);
  permute.k = e.top_k;
  out.push(permute);
  if (s.paged_stash > 0) stashed_experts_forward(s, out);
  else ffn_forward(s, expert_ffn(s), out);  // its first GEMM keeps the permuted x
  // The weighted sum back to t rows keeps the experts' outputs and weights for its weight gradient;
  // with the weights applied in the activation, a plain sum that keeps nothing.
  Op unpermute = s.moe_probs_in_activation
                     ? membound_op("moe.unpermute.fwd", MemKind::kUnpermute, s.tokens(), w, act,
                                   tk * d(w) * a + tk * 8.0, tw * a, 1)
                     : membound_op("moe.unpermute.fwd", MemKind::kUnpermute, s.tokens(), w, act,
                                   tk * d(w) * a + tk * (4.0 + 8.0), tw * a, 1, rd * a + tk * 4.0);
  unpermute.k = e.top_k;
  out.push(unpermute);
  if (e.latent > 0) linear_forward(s, latent_up(s), false, out);
  if (e.shared_experts == 0) return;
  // The shared experts' recompute keeps nothing of theirs (their input is the router's).
  Unsaved::maybe(s.recomputes(RecomputeModule::kSharedExperts), out,
                 [&](OpSink& sink) { shared_experts_forward(s, sink); });
  out.push(tagged(residual_add("moe.shared_add.fwd", s), OpRole::kSharedExpert));
}

void moe_backward(const BlockShape& s, OpSink& out) {
  const MoeConfig& e = s.moe;
  const DType act = activation_dtype(s.precision);
  const DType dt = other_gemm_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double t = d(s.tokens()), td = t * d(s.d_model), te = t * d(e.experts), tk = t * d(e.top_k);
  const int64_t w = e.routed_width(s.d_model);
  const double rd = d(s.expert_rows()) * d(w), tw = t * d(w);
  int64_t sums = 1;  // input gradients summed into dx: the router's and the experts'
  if (e.shared_experts > 0) {
    if (s.recomputes(RecomputeModule::kSharedExperts) && !s.recomputes(RecomputeModule::kMoe)) {
      Unsaved again(out, /*again=*/true);
      shared_experts_forward(s, again);
    }
    if (e.shared_gate) {
      out.push(tagged(membound_op("moe.shared_gate.mul.bwd", MemKind::kMulBackward, s.tokens(), s.d_model, act,
                                  (2.0 * td + t) * a, td * a + t * a),
                      OpRole::kSharedExpert));
      out.push(tagged(gemm_op("moe.shared_gate.dgrad", s.tokens(), s.d_model, 1, dt, a, a), OpRole::kSharedExpert,
                      OpPass::kDataGrad));
      if (!s.lora.active())
        out.push(tagged(gemm_op("moe.shared_gate.wgrad", 1, s.d_model, s.tokens(), dt, a, a, true, false),
                        OpRole::kSharedExpert, OpPass::kWeightGrad));
      ++sums;
    }
    ffn_backward(s, shared_ffn(s), out);
    ++sums;
  }
  if (e.output_bias && !s.lora.active())
    out.push(
        membound_op("moe.output_bias.bgrad", MemKind::kBiasGrad, s.tokens(), s.d_model, act, td * a, d(s.d_model) * a));
  // Un-permutation's backward is a permutation: each choice's row of dy times its weight, and the
  // weights' gradients (dot products with the kept expert outputs).
  if (e.latent > 0) linear_backward(s, latent_up(s), out);
  // (with the weights applied in the activation: the permutation alone)
  Op unpermute = s.moe_probs_in_activation ? membound_op("moe.unpermute.bwd", MemKind::kPermute, s.tokens(), w, act,
                                                         tw * a + tk * 8.0, rd * a)
                                           : membound_op("moe.unpermute.bwd", MemKind::kPermute, s.tokens(), w, act,
                                                         tw * a + tk * (4.0 + 8.0) + rd * a, rd * a + tk * 4.0, 2);
  unpermute.k = e.top_k;
  out.push(unpermute);
  if (s.paged_stash > 0) out.push(paged_stash_op(s, experts_kept_bytes(s), false));  // back out of the stash
  ffn_backward(s, expert_ffn(s), out);
  // Permutation's backward is an un-permutation: the top_k rows of each token summed.
  Op permute = membound_op("moe.permute.bwd", MemKind::kUnpermute, s.tokens(), w, act, rd * a + tk * 8.0, tw * a);
  permute.k = e.top_k;
  out.push(permute);
  if (e.latent > 0) linear_backward(s, latent_down(s), out);
  Op topk = membound_op("moe.router.topk.bwd", MemKind::kRouterBackward, s.tokens(), e.experts, act,
                        tk * (4.0 + 8.0) + te * 4.0, te * a);
  topk.k = e.top_k;
  out.push(tagged(topk, OpRole::kRouter));
  out.push(tagged(gemm_op("moe.router.dgrad", s.tokens(), s.d_model, e.experts, dt, a, a), OpRole::kRouter,
                  OpPass::kDataGrad));
  if (!s.lora.active())
    out.push(tagged(gemm_op("moe.router.wgrad", e.experts, s.d_model, s.tokens(), dt, a, a, true, false),
                    OpRole::kRouter, OpPass::kWeightGrad));
  out.push(membound_op("moe.dx_sum.bwd", MemKind::kAdd, s.tokens(), s.d_model, act, 2.0 * d(sums) * td * a,
                       d(sums) * td * a, sums));
}

// Multi-token prediction's projection of the normed hidden state and next tokens' embedding,
// column-parallel (its input gathered under sequence parallelism, each rank keeping its own rows).
Linear mtp_projection(const BlockShape& s) {
  return {TPSIM_LINEAR("mtp.eh_proj", OpRole::kOther),
          s.tokens(),
          s.d_model / s.tp,
          2 * s.d_model,
          1,
          false,
          s.row_tokens()};
}

// The Mamba-2 mixer's projections: the in projection column-parallel over the heads (its input
// gathered, each rank keeping its own rows), the out projection row-parallel (Megatron-Core's
// MambaMixer); no biases, no LoRA adapters (rules refuse LoRA on Mamba-2 layers).
Linear mamba_in(const BlockShape& s) {
  return {
      TPSIM_LINEAR("mamba.in_proj", OpRole::kQkv), s.tokens(), s.mamba.in_width(), s.d_model, 1, false, s.row_tokens()};
}
Linear mamba_out(const BlockShape& s) {
  return {
      TPSIM_LINEAR("mamba.out_proj", OpRole::kAttnOut), s.tokens(), s.d_model, s.mamba.d_inner(), 1, false, s.tokens()};
}

// The scan's fp32 intermediates per pass (mamba_scan_flops): the cumulative decay per head, C B^T
// per group over the chunk, the chunk states (H x P x N per chunk).
struct ScanSizes {
  double t, x, bc, dt, decay, cb, states;  // tokens; elements of x, of B and C, of dt; fp32 bytes
};
ScanSizes scan_sizes(const BlockShape& s) {
  const Mamba2Config& b = s.mamba;
  const double t = d(s.tokens()), q = d(std::min(b.chunk, s.seq));
  const double chunks = d(s.batch) * std::ceil(d(s.seq) / q);
  return {t,
          t * d(b.d_inner()),
          t * d(2 * b.groups * b.d_state),
          t * d(b.heads),
          t * d(b.heads) * 4.0,
          t * q * d(b.groups) * 4.0,
          chunks * d(b.d_inner()) * d(b.d_state) * 4.0};
}

// A linear-time mixer's ops between its two projections (the Mamba-2 mixer's, the Gated DeltaNet's):
// the causal convolution, the core (the chunked scan or delta rule), the gated norm, each with its
// names, sizes and bytes.
struct RecurrentMixer {
  const char *conv_fwd, *conv_again, *conv_bwd, *core_fwd, *core_again, *core_bwd, *norm_fwd, *norm_bwd;
  Linear in, out;
  int64_t channels, kernel;  // the convolution's channels and taps
  double taps;               // its weight (and bias) elements
  MemKind core, core_backward;
  int64_t core_n, core_k, core_kernels, core_bwd_kernels;
  double core_read, core_written, core_flops, core_bwd_read,
      core_bwd_written;                        // the backward's FLOPs twice the forward's
  int64_t norm_rows, norm_width, norm_weight;  // the gated norm's rows of norm_width and its weight
};

// Forward, as Megatron-Core's MambaMixer runs it on mamba_ssm's memory-efficient path
// (mamba_split_conv1d_scan_combined with the gated norm): the in projection keeps its input; the
// combined function keeps the in projection's output (z, x, B, C, dt) and the norm's rstd and
// recomputes the convolution and the scan's output in its backward; the out projection keeps the
// norm's output. The Gated DeltaNet's are kept and recomputed alike (an assumption).
void recurrent_forward(const BlockShape& s, const RecurrentMixer& r, OpSink& out) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const double t = d(s.tokens()), conv = t * d(r.channels), width = d(r.norm_rows) * d(r.norm_width);
  linear_forward(s, r.in, false, out);
  Op c = membound_op(r.conv_fwd, MemKind::kCausalConv1d, s.tokens(), r.channels, act, conv * a + r.taps * a, conv * a,
                     1, t * d(r.in.n) * a);
  c.k = r.kernel;
  out.push(c);
  Op core = membound_op(r.core_fwd, r.core, s.tokens(), r.core_n, act, r.core_read, r.core_written, r.core_kernels);
  core.k = r.core_k;
  core.flops = r.core_flops;
  out.push(core);
  out.push(membound_op(r.norm_fwd, MemKind::kGatedRmsNorm, r.norm_rows, r.norm_width, act,
                       2.0 * width * a + d(r.norm_weight) * a, width * a + d(r.norm_rows) * 4.0, 1,
                       d(r.norm_rows) * 4.0));
  linear_forward(s, r.out, false, out);
}

// Backward: the out projection's; the convolution and the core's output run again; the gated norm's,
// the core's (its states recomputed: twice its forward's FLOPs, an assumption of the same order as
// attention's 2.5) and the convolution's backward; the in projection's.
void recurrent_backward(const BlockShape& s, const RecurrentMixer& r, OpSink& out) {
  const double a = activation_bytes(s.precision);
  const DType act = activation_dtype(s.precision);
  const double t = d(s.tokens()), conv = t * d(r.channels), width = d(r.norm_rows) * d(r.norm_width);
  linear_backward(s, r.out, out);
  Op again =
      membound_op(r.conv_again, MemKind::kCausalConv1d, s.tokens(), r.channels, act, conv * a + r.taps * a, conv * a);
  again.k = r.kernel;
  out.push(again);
  Op y = membound_op(r.core_again, r.core, s.tokens(), r.core_n, act, r.core_read, r.core_written, r.core_kernels);
  y.k = r.core_k;
  y.flops = r.core_flops;
  out.push(y);
  out.push(membound_op(r.norm_bwd, MemKind::kGatedRmsNormBackward, r.norm_rows, r.norm_width, act,
                       3.0 * width * a + d(r.norm_rows) * 4.0 + d(r.norm_weight) * a,
                       2.0 * width * a + d(r.norm_weight) * 4.0, 2));
  Op core = membound_op(r.core_bwd, r.core_backward, s.tokens(), r.core_n, act, r.core_bwd_read, r.core_bwd_written,
                        r.core_bwd_kernels);
  core.k = r.core_k;
  core.flops = 2.0 * r.core_flops;
  out.push(core);
  Op c = membound_op(r.conv_bwd, MemKind::kCausalConv1dBackward, s.tokens(), r.channels, act,
                     2.0 * conv * a + r.taps * a, conv * a + r.taps * 4.0, 2);
  c.k = r.kernel;
  out.push(c);
  linear_backward(s, r.in, out);
}

// The Mamba-2 mixer: the convolution with its bias over x, B and C; the scan (5 kernels; its
// backward 10, reading and writing its intermediates twice); the norm per group of B and C.
RecurrentMixer mamba_mixer(const BlockShape& s) {
  const Mamba2Config& b = s.mamba;
  const double a = activation_bytes(s.precision);
  const ScanSizes z = scan_sizes(s);
  const double inter = z.decay + z.cb + 2.0 * z.states;
  return {"mamba.conv1d.fwd",
          "mamba.conv1d.recompute",
          "mamba.conv1d.bwd",
          "mamba.scan.fwd",
          "mamba.scan.recompute",
          "mamba.scan.bwd",
          "mamba.gated_norm.fwd",
          "mamba.gated_norm.bwd",
          mamba_in(s),
          mamba_out(s),
          b.conv_channels(),
          b.conv_kernel,
          d(b.conv_channels()) * d(b.conv_kernel + 1),
          MemKind::kSsdScan,
          MemKind::kSsdScanBackward,
          b.d_inner(),
          b.d_state,
          5,
          10,
          (z.x + z.bc + z.dt) * a + inter,
          z.x * a + inter,
          mamba_scan_flops(s),
          (2.0 * z.x + z.bc + z.dt) * a + 2.0 * inter,
          (z.x + z.bc + z.dt) * a + 2.0 * inter,
          s.tokens() * b.groups,
          b.d_inner() / b.groups,
          b.d_inner()};
}

// The Gated DeltaNet's projections (Megatron-Core's gated_delta_net: in projection column-parallel
// over the heads, out projection row-parallel); no biases, no LoRA adapters.
Linear gdn_in(const BlockShape& s) {
  return {TPSIM_LINEAR("gdn.in_proj", OpRole::kQkv), s.tokens(), s.gdn.in_width(), s.d_model, 1, false, s.row_tokens()};
}
Linear gdn_out(const BlockShape& s) {
  return {
      TPSIM_LINEAR("gdn.out_proj", OpRole::kAttnOut), s.tokens(), s.d_model, s.gdn.value_dim(), 1, false, s.tokens()};
}

// The delta rule's bytes one way: q and k (read), v (read), the decay and write strength per value
// head (fp32), o (written); W and U (written and read, activations); the fp32 chunk states (written
// and read).
struct DeltaRuleBytes {
  double read, written;
};
DeltaRuleBytes delta_rule_bytes(const BlockShape& s) {
  const GdnConfig& g = s.gdn;
  const double a = activation_bytes(s.precision), t = d(s.tokens());
  const double c = d(std::min(g.chunk, s.seq));
  const double chunks = d(s.batch) * std::ceil(d(s.seq) / c);
  const double wu = t * d(g.value_heads) * d(g.key_head_dim + g.value_head_dim) * a;
  const double states = chunks * d(g.value_heads) * d(g.key_head_dim) * d(g.value_head_dim) * 4.0;
  return {t * d(g.conv_channels()) * a + t * d(g.value_heads) * 8.0 + wu + states,
          t * d(g.value_dim()) * a + wu + states};
}

// The Gated DeltaNet: the convolution without bias over q, k and v; the delta rule (6 kernels; its
// backward 10, twice its forward's bytes); the norm per value head.
RecurrentMixer gdn_mixer(const BlockShape& s) {
  const GdnConfig& g = s.gdn;
  const DeltaRuleBytes b = delta_rule_bytes(s);
  return {"gdn.conv1d.fwd",
          "gdn.conv1d.recompute",
          "gdn.conv1d.bwd",
          "gdn.delta_rule.fwd",
          "gdn.delta_rule.recompute",
          "gdn.delta_rule.bwd",
          "gdn.gated_norm.fwd",
          "gdn.gated_norm.bwd",
          gdn_in(s),
          gdn_out(s),
          g.conv_channels(),
          g.conv_kernel,
          d(g.conv_channels()) * d(g.conv_kernel),
          MemKind::kGatedDeltaRule,
          MemKind::kGatedDeltaRuleBackward,
          g.value_dim(),
          g.key_head_dim,
          6,
          10,
          b.read,
          b.written,
          gated_delta_rule_flops(s),
          2.0 * b.read,
          2.0 * b.written,
          s.tokens() * g.value_heads,
          g.value_head_dim,
          g.value_head_dim};
}

// Gated attention's output gate, o * sigmoid(gate) (one kernel each way): reads the attention's
// output and the gate, writes the gated output; keeps the gate (the attention keeps its output).
Op output_gate(const BlockShape& s, bool forward) {
  const double a = activation_bytes(s.precision), o = d(s.tokens()) * d(s.o_dim());
  const DType act = activation_dtype(s.precision);
  if (forward)
    return membound_op("attn.output_gate.fwd", MemKind::kMul, s.tokens(), s.o_dim(), act, 2.0 * o * a, o * a, 1, o * a);
  return membound_op("attn.output_gate.bwd", MemKind::kMulBackward, s.tokens(), s.o_dim(), act, 3.0 * o * a,
                     2.0 * o * a);
}
#undef TPSIM_LINEAR

}  // namespace

double gated_delta_rule_flops(const BlockShape& s) {
  const GdnConfig& g = s.gdn;
  const double c = d(std::min(g.chunk, s.seq)), dk = d(g.key_head_dim), dv = d(g.value_head_dim);
  const double per_head = 3.0 * c * dk + 2.0 * c * dv + 3.0 * dk * dv + c * c / 3.0;
  return d(s.tokens()) * d(g.value_heads) * 2.0 * per_head;
}

double mamba_scan_flops(const BlockShape& s) {
  const Mamba2Config& b = s.mamba;
  const double q = d(std::min(b.chunk, s.seq)), n = d(b.d_state), di = d(b.d_inner());
  const double per_token = 2.0 * q * n * d(b.groups) + 2.0 * q * di + 2.0 * n * di + 2.0 * n * di / q + 2.0 * n * di;
  return d(s.tokens()) * per_token;
}

void block_forward_ops(const BlockShape& s, OpSink& out) {
  const bool fp8 = quantized_bytes(s.precision) > 0;
  if (s.mixer == Mixer::kMamba2) {
    out.push(norm_forward("norm_1.fwd", s, block_norm_fusion(s, /*after_add=*/false)));
    recurrent_forward(s, mamba_mixer(s), out);
    out.push(residual_add("resid_mamba.fwd", s));
  } else if (s.mixer == Mixer::kGatedDeltaNet) {
    out.push(norm_forward("norm_1.fwd", s, block_norm_fusion(s, /*after_add=*/false)));
    recurrent_forward(s, gdn_mixer(s), out);
    out.push(residual_add("resid_gdn.fwd", s));
  } else if (s.mixer == Mixer::kAttention) {
    out.push(norm_forward("norm_1.fwd", s, block_norm_fusion(s, /*after_add=*/false)));
    if (s.mla.active()) {
      mla_forward(s, out);
    } else {
      linear_forward(s, qkv(s), false, out);
      if (s.qk_norm != QkNorm::kNone) qk_norm_ops(s, /*forward=*/true, out);
      if (s.positions == PositionKind::kRope) out.push(rope("attn.rope.fwd", s));
    }
    if (s.unfused_attention) {
      unfused_attention_forward(s, /*keep=*/true, out);
    } else {
      Op attention = attention_op("attn.flash.fwd", OpKind::kAttentionFwd, s);
      // The mla_up_proj recompute discards the q, k and v the up projections and RoPE made.
      if (s.mla.active() && s.recomputes(RecomputeModule::kMlaUpProj))
        attention.saved_bytes -= attention_input_bytes(s);
      out.push(attention);
    }
    if (s.attention_output_gate) out.push(output_gate(s, /*forward=*/true));
    // Flash attention keeps its output, which is the out projection's input (in bf16: under fp8 the
    // out projection keeps its own quantized copy, and its LoRA adapters share the attention's).
    linear_forward(s, out_proj(s), /*input_saved_elsewhere=*/!fp8 && !s.unfused_attention && !s.attention_output_gate,
                   /*adapter_input_kept=*/!s.unfused_attention, out);
    if (s.post_norms) out.push(norm_forward("norm_post_attn.fwd", s));
    out.push(residual_add("resid_attn.fwd", s));
  }
  if (s.no_ffn) return;
  // A layer of a feed-forward alone has only this norm, the first of its block.
  Op norm = norm_forward("norm_2.fwd", s, block_norm_fusion(s, /*after_add=*/s.mixer != Mixer::kNone));
  const bool moe = s.moe.active();
  if (moe ? s.recomputes(RecomputeModule::kMoe) : s.recomputes(RecomputeModule::kMlp)) {
    // The checkpoint keeps its input and nothing inside: the whole mixture of experts from the norm's
    // output (unless the layernorm recompute discards that too), the dense feed-forward with its
    // fused norm from the norm's input.
    const double a = activation_bytes(s.precision);
    if (!moe) norm.saved_bytes = d(s.row_tokens()) * d(s.d_model) * a;
    else if (!s.recomputes(RecomputeModule::kLayernorm)) norm.saved_bytes += d(s.tokens()) * d(s.d_model) * a;
    out.push(norm);
    Unsaved unsaved(out);
    if (moe) moe_forward(s, unsaved);
    else ffn_forward(s, dense_ffn(s), unsaved);
  } else {
    out.push(norm);
    if (moe) moe_forward(s, out);
    else ffn_forward(s, dense_ffn(s), out);
  }
  if (s.post_norms) out.push(norm_forward("norm_post_ffn.fwd", s));
  out.push(residual_add("resid_ffn.fwd", s));
}

void block_backward_ops(const BlockShape& s, OpSink& out) {
  if (!s.no_ffn) {
    // The skip and branch gradients summed (under torch.compile in norm_1's backward kernel).
    out.push(residual_add_backward("resid_ffn.bwd", s));
    if (s.post_norms) out.push(norm_backward("norm_post_ffn.bwd", s));
    // The recomputes of the feed-forward (BlockShape::recompute): the norm (a mixture of experts'
    // under the layernorm recompute, a dense feed-forward's fused one under mlp) and the module.
    const bool moe = s.moe.active();
    Unsaved again(out, /*again=*/true);
    if (moe ? s.recomputes(RecomputeModule::kLayernorm) : s.recomputes(RecomputeModule::kMlp))
      again.push(norm_forward("norm_2.fwd", s, block_norm_fusion(s, /*after_add=*/s.mixer != Mixer::kNone)));
    if (moe && s.recomputes(RecomputeModule::kMoe)) moe_forward(s, again);
    if (!moe && s.recomputes(RecomputeModule::kMlp)) ffn_forward(s, dense_ffn(s), again);
    if (moe) moe_backward(s, out);
    else ffn_backward(s, dense_ffn(s), out);
    out.push(norm_backward("norm_2.bwd", s, block_norm_fusion(s, /*after_add=*/true)));
  }
  if (s.mixer == Mixer::kMamba2) {
    out.push(residual_add_backward("resid_mamba.bwd", s));
    recurrent_backward(s, mamba_mixer(s), out);
    out.push(norm_backward("norm_1.bwd", s, block_norm_fusion(s, /*after_add=*/true)));
    return;
  }
  if (s.mixer == Mixer::kGatedDeltaNet) {
    out.push(residual_add_backward("resid_gdn.bwd", s));
    recurrent_backward(s, gdn_mixer(s), out);
    out.push(norm_backward("norm_1.bwd", s, block_norm_fusion(s, /*after_add=*/true)));
    return;
  }
  if (s.mixer == Mixer::kNone) return;
  out.push(residual_add_backward("resid_attn.bwd", s));
  if (s.mla.active()) {  // latent attention's recomputes: its separate input norm, its up projections
    Unsaved again(out, /*again=*/true);
    if (s.recomputes(RecomputeModule::kLayernorm))
      again.push(norm_forward("norm_1.fwd", s, block_norm_fusion(s, /*after_add=*/false)));
    if (s.recomputes(RecomputeModule::kMlaUpProj)) mla_up_forward(s, again);
  }
  if (s.post_norms) out.push(norm_backward("norm_post_attn.bwd", s));
  linear_backward(s, out_proj(s), out);
  if (s.attention_output_gate) out.push(output_gate(s, /*forward=*/false));
  if (s.unfused_attention) unfused_attention_backward(s, out);
  else out.push(attention_op("attn.flash.bwd", OpKind::kAttentionBwd, s));
  if (s.mla.active()) {
    mla_backward(s, out);
  } else {
    if (s.positions == PositionKind::kRope) out.push(rope("attn.rope.bwd", s));
    if (s.qk_norm != QkNorm::kNone) qk_norm_ops(s, /*forward=*/false, out);
    linear_backward(s, qkv(s), out);
  }
  out.push(norm_backward("norm_1.bwd", s, block_norm_fusion(s, /*after_add=*/true)));
}

void mtp_forward_ops(const BlockShape& s, OpSink& out) {
  out.push(rms_norm("mtp.enorm.fwd", s, s.row_tokens(), s.d_model, true));
  out.push(rms_norm("mtp.hnorm.fwd", s, s.row_tokens(), s.d_model, true));
  linear_forward(s, mtp_projection(s), /*input_saved_elsewhere=*/false, out);
}

void mtp_backward_ops(const BlockShape& s, OpSink& out) {
  linear_backward(s, mtp_projection(s), out);
  out.push(rms_norm("mtp.hnorm.bwd", s, s.row_tokens(), s.d_model, false));
  out.push(rms_norm("mtp.enorm.bwd", s, s.row_tokens(), s.d_model, false));
}

void attention_recompute_ops(const BlockShape& s, OpSink& out) {
  if (s.mixer != Mixer::kAttention) return;
  if (s.unfused_attention) {
    unfused_attention_forward(s, /*keep=*/false, out);
    return;
  }
  Op op = attention_op("attn.flash.recompute", OpKind::kAttentionFwd, s);
  op.saved_bytes = 0;
  out.push(op);
}

double lora_block_params(const BlockShape& s, int* adapters) {
  if (adapters) *adapters = 0;
  if (!s.lora.active()) return 0.0;
  double p = 0;
  const auto add = [&](const Linear& l) {
    for (int i = 0; i < l.adapters.count; ++i)
      p += d(s.lora.rank) * (d(l.k) + d(l.adapters.widths[static_cast<size_t>(i)]));
    if (adapters) *adapters += l.adapters.count;
  };
  if (s.mixer == Mixer::kAttention) {
    if (!s.mla.active()) add(qkv(s));  // latent attention's projections carry none (lora-targets-modelled)
    add(out_proj(s));
  }
  if (!s.moe.active() && !s.no_ffn) {
    const Ffn f = dense_ffn(s);
    if (fused_swiglu(s)) add(f.fc1());
    else if (s.ffn == FfnKind::kGlu) {
      add(f.gate());
      add(f.up());
    } else add(f.up());
    add(f.down());
  }
  return p;
}

double lora_model_block_params(const ModelConfig& m, const Lora& lora) {
  BlockShape s = block_shape(m, 1, 1, Precision::kAmpBf16);
  s.lora = lora;
  return lora_block_params(s);
}

int64_t BlockShape::expert_rows() const {
  const int64_t rows = moe_routed_rows(moe, tokens());
  const int64_t etp = expert_tensor_parallel();
  return etp == tp ? rows : rows * etp / tp;
}

int64_t moe_routed_rows(const MoeConfig& e, int64_t tokens) {
  const int64_t choices = tokens * e.top_k;
  if (e.capacity_factor <= 0) return choices;
  const double per_expert = std::ceil(e.capacity_factor * d(choices) / d(e.experts));
  return static_cast<int64_t>(per_expert) * e.experts;
}

double attention_only_saved_bytes(const BlockShape& s) {
  if (s.mixer != Mixer::kAttention) return 0.0;
  if (s.unfused_attention) {  // the softmax output, and the dropout's mask and output
    const UnfusedSizes u = unfused_sizes(s);
    return u.scores * softmax_traffic(s, u.a).saved +
           (s.attention_dropout_per_mille > 0 ? u.scores * (1.0 + u.a) : 0.0);
  }
  return d(s.batch) * d(s.n_heads) * d(s.seq) * 4.0;  // the fp32 log-sum-exp per row (attention_op)
}

void embedding_forward_ops(const BlockShape& s, OpSink& out) {
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double t = d(s.tokens());
  const double td = t * d(s.d_model);
  Op wte = membound_op("wte.fwd", MemKind::kEmbedding, s.tokens(), s.d_model, act, td * a + t * 8.0, td * a, 1,
                       s.lora.active() ? 0.0 : t * 8.0);  // keeps the token ids for its gradient
  wte.k = s.vocab;                                        // table rows
  out.push(wte);
  if (s.positions != PositionKind::kLearned) return;  // ALiBi and RoPE act in the attention
  out.push(
      membound_op("wpe.fwd", MemKind::kAdd, s.tokens(), s.d_model, act, td * a + d(s.seq) * d(s.d_model) * a, td * a));
}

void embedding_backward_ops(const BlockShape& s, OpSink& out) {
  if (s.lora.active()) return;  // frozen: the embeddings' gradients are not computed
  const DType act = activation_dtype(s.precision);
  const double a = activation_bytes(s.precision);
  const double t = d(s.tokens());
  const double td = t * d(s.d_model);
  if (s.positions == PositionKind::kLearned) {
    Op wpe = membound_op("wpe.bwd", MemKind::kEmbeddingBackward, s.tokens(), s.d_model, act, td * a,
                         d(s.seq) * d(s.d_model) * a);
    wpe.k = s.seq;  // table rows: one per position
    out.push(wpe);
  }
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
  out.push(norm_forward("norm_f.fwd", s));
  if (s.fp8_head) {
    linear_forward(s, output_linear(s), false, out);
  } else {
    Op logits = gemm_op("logits.fwd", s.tokens(), s.vocab, s.d_model, other_gemm_dtype(s.precision), a, a, false, true);
    // its input, for the weight gradient (none under LoRA: frozen)
    logits.saved_bytes = s.lora.active() ? 0.0 : d(s.row_tokens()) * d(s.d_model) * a;
    out.push(logits);
  }
  if (s.fp32_vocab_parallel_xent) {
    // Megatron-LM's vocab_parallel_cross_entropy(logits.float()) (core/tensor_parallel/cross_entropy.py,
    // fp16_lm_cross_entropy off by default): the cast to fp32, the row max, its subtraction, exp in
    // place, the row sum and the division in place, six kernels streaming t x V/tp fp32 elements;
    // the softmax stays alive, in fp32, until the backward. The max and the sum are all-reduced over
    // the tensor-parallel group (costed with the head's collectives).
    out.push(membound_op("loss.xent.fwd", MemKind::kCrossEntropy, s.tokens(), s.vocab, DType::kFp32,
                         tv * (a + 5.0 * 4.0), tv * 4.0 * 4.0 + t * 4.0, 6, tv * 4.0));
    return;
  }
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
  if (s.fp32_vocab_parallel_xent)  // the stored softmax times dL in place, then the cast back to fp16
    out.push(membound_op("loss.xent.bwd", MemKind::kCrossEntropyBackward, s.tokens(), s.vocab, DType::kFp32, tv * 8.0,
                         tv * (4.0 + a), 2));
  else
    out.push(membound_op("loss.xent.bwd", MemKind::kCrossEntropyBackward, s.tokens(), s.vocab, act, tv * a,
                         tv * a));  // scale the stored gradient by dL
  if (s.fp8_head) {
    linear_backward(s, output_linear(s), out);
  } else {
    out.push(gemm_op("logits.dgrad", s.tokens(), s.d_model, s.vocab, dt, a, a));
    // Into the tied wte gradient, or the untied lm_head's: the same GEMM (frozen under LoRA: none).
    if (!s.lora.active())
      out.push(gemm_op(s.tie_embeddings ? "logits.wgrad" : "lm_head.wgrad", s.vocab, s.d_model, s.tokens(), dt, a, a,
                       true, false));
  }
  out.push(norm_backward("norm_f.bwd", s));
}

void adam_ops(double p, double moment_bytes, OpSink& out) {
  // fp32 master parameters and gradients, and both Adam moments.
  const int64_t n = count(p);
  out.push(membound_op("optim.grad_norm", MemKind::kGradNorm, n, 1, DType::kFp32, 4.0 * p, 0.0, 1, 0.0,
                       OpCategory::kOptimizer));
  out.push(
      membound_op("optim.clip", MemKind::kScale, n, 1, DType::kFp32, 4.0 * p, 4.0 * p, 1, 0.0, OpCategory::kOptimizer));
  const double moments = 2.0 * moment_bytes * p;
  out.push(membound_op("optim.adamw", MemKind::kAdamW, n, 1, DType::kFp32, 8.0 * p + moments, 4.0 * p + moments, 1, 0.0,
                       OpCategory::kOptimizer));
}

void optimizer_ops(double p, OpSink& out) { adam_ops(p, 4.0, out); }

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
