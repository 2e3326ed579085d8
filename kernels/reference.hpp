// Plain reference kernels: naive loops with double accumulation, written to be obviously correct
// rather than fast. Every backend's kernels (cpu/, cuda/, hip/) are checked against these on the
// same inputs. They run one op kind each, on the layouts below; the backends use the same layouts.
//
// Layouts (all row-major, fp32 unless said):
//   GEMM         C[m,n] = op(A)[m,k] * op(B)[k,n]; A is [m,k], or [k,m] when trans_a (op(A) = A^T);
//                B is [k,n], or [n,k] when trans_b.
//   attention    q, k, v, o, dO, dQ, dK, dV: [batch, heads, seq, head_dim]; lse: [batch, heads, seq],
//                the natural log-sum-exp of each query's scaled causal scores.
//                scores[i,j] = q_i . k_j / sqrt(head_dim) for j <= i; o_i = softmax(scores_i) v.
//   layer norm   x, y, dy, dx: [m,n]; w, b, dw, db: [n]; mean, rstd: [m] (rstd = 1/sqrt(var + eps)).
//   cross-entropy logits: [m,n], targets: [m] class ids, loss: [m]; the gradient of each row's
//                loss (softmax - one_hot) replaces the logits.
//   embedding    table, dtable: [rows, n]; ids: [m] in [0, rows); y, dy: [m, n].
//   bf16         stored as uint16_t: the upper half of an IEEE fp32 bit pattern.
#pragma once

#include <cstdint>
#include <span>

namespace tpsim {

inline constexpr float kLayerNormEps = 1e-5f;  // PyTorch's LayerNorm default

// Decoupled AdamW as torch.optim.AdamW applies it: p -= lr * (wd * p + m_hat / (sqrt(v_hat) + eps)),
// with bias corrections by `step` (1-based).
struct AdamWParams {
  float lr = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 1e-5f;
  int64_t step = 10;
};

void gemm_reference(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, std::span<const float> a,
                    std::span<const float> b, std::span<float> c);

void attention_forward_reference(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                                 std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                 std::span<float> o, std::span<float> lse);
// Recomputes the softmax from q and k (it needs neither o nor lse) and differentiates it by its
// definition: dS = P * (dP - rowsum(P * dP)).
void attention_backward_reference(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim,
                                  std::span<const float> q, std::span<const float> k, std::span<const float> v,
                                  std::span<const float> d_o, std::span<float> dq, std::span<float> dk,
                                  std::span<float> dv);

void layer_norm_reference(int64_t m, int64_t n, std::span<const float> x, std::span<const float> w,
                          std::span<const float> b, std::span<float> y, std::span<float> mean, std::span<float> rstd);
void layer_norm_backward_reference(int64_t m, int64_t n, std::span<const float> dy, std::span<const float> x,
                                   std::span<const float> w, std::span<const float> mean, std::span<const float> rstd,
                                   std::span<float> dx, std::span<float> dw, std::span<float> db);

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_reference(std::span<const float> x, std::span<float> y);
void gelu_backward_reference(std::span<const float> dy, std::span<const float> x, std::span<float> dx);

void add_reference(std::span<const float> a, std::span<const float> b, std::span<float> y);
void bias_grad_reference(int64_t m, int64_t n, std::span<const float> dy, std::span<float> db);

void cross_entropy_reference(int64_t m, int64_t n, std::span<float> logits, std::span<const int64_t> targets,
                             std::span<float> loss);
void scale_reference(std::span<float> x, float c);  // also the cross-entropy backward

void embedding_reference(int64_t m, int64_t n, int64_t rows, std::span<const float> table,
                         std::span<const int64_t> ids, std::span<float> y);
// Zeroes dtable, then adds each row of dy into the row its id names.
void embedding_backward_reference(int64_t m, int64_t n, int64_t rows, std::span<const float> dy,
                                  std::span<const int64_t> ids, std::span<float> dtable);

// Round to nearest, ties to even (NaN stays NaN), and the exact widening back.
void cast_fp32_to_bf16_reference(std::span<const float> x, std::span<uint16_t> y);
void cast_bf16_to_fp32_reference(std::span<const uint16_t> x, std::span<float> y);

double sum_of_squares_reference(std::span<const float> x);

void adamw_reference(std::span<float> p, std::span<const float> g, std::span<float> m, std::span<float> v,
                     const AdamWParams& h);

// max |got - want| / max(max |want|, floor): the largest error relative to the output's scale.
inline constexpr double kErrorScaleFloor = 1e-30;
double max_relative_error(std::span<const float> got, std::span<const float> want);

}  // namespace tpsim
