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
//   RMSNorm      x, y, dy, dx: [m,n]; w, dw: [n]; rstd: [m] (rstd = 1/sqrt(mean(x^2) + eps)).
//   RoPE         x: [m, n], each row n / head_dim heads of head_dim elements, rotated in place;
//                cos, sin: [m, head_dim / 2], the angles of each row's position. Pairs are
//                (j, j + head_dim / 2), Hugging Face's rotate_half convention (Llama, Mistral, Qwen2).
//   router       logits, probs, dlogits: [m, n experts]; ids, weights, dweights: [m, k], each row's
//                k largest probabilities in descending order (ties: the lower expert first).
//   permute      x: [m, n]; src: [m*k] rows of x in expert order; out: [m*k, n], out[r] = x[src[r]].
//   unpermute    y: [rows, n]; ids, weights: [m, k], the row of y of each (token, choice) and its
//                router weight; out: [m, n], out[i] = sum_c weights[i,c] * y[ids[i,c]].
//   causal softmax x, y, dy, dx: [m, n], m query rows of n keys; row r is query position r % n of its
//                sequence (rows run over batch * heads * seq, n = seq) and keeps its first r % n + 1
//                entries. Megatron-LM's scaled_upper_triang_masked_softmax, with the scale folded
//                into the scores' GEMM (scale 1 here).
//   dropout      x, y, dy, dx: [m, n] flattened; mask: one byte per element, 1 kept, 0 dropped.
//   bf16         stored as uint16_t: the upper half of an IEEE fp32 bit pattern.
#pragma once

#include <cstdint>
#include <span>

namespace tpsim {

inline constexpr float kLayerNormEps = 1e-5f;  // PyTorch's LayerNorm default
inline constexpr float kRmsNormEps = 1e-5f;    // rms_norm_eps of Llama 3's and Mistral's config.json

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

void attention_forward_reference(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, std::span<const float> q,
                                 std::span<const float> k, std::span<const float> v, std::span<float> o,
                                 std::span<float> lse);
// Recomputes the softmax from q and k (it needs neither o nor lse) and differentiates it by its
// definition: dS = P * (dP - rowsum(P * dP)).
void attention_backward_reference(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, std::span<const float> q,
                                  std::span<const float> k, std::span<const float> v, std::span<const float> d_o,
                                  std::span<float> dq, std::span<float> dk, std::span<float> dv);

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

void embedding_reference(int64_t m, int64_t n, int64_t rows, std::span<const float> table, std::span<const int64_t> ids,
                         std::span<float> y);
// Zeroes dtable, then adds each row of dy into the row its id names.
void embedding_backward_reference(int64_t m, int64_t n, int64_t rows, std::span<const float> dy,
                                  std::span<const int64_t> ids, std::span<float> dtable);

void rms_norm_reference(int64_t m, int64_t n, std::span<const float> x, std::span<const float> w, std::span<float> y,
                        std::span<float> rstd);
// With xhat = x * rstd and g = dy * w: dx = rstd * (g - xhat * mean(g * xhat)), dw = sum over rows of dy * xhat.
void rms_norm_backward_reference(int64_t m, int64_t n, std::span<const float> dy, std::span<const float> x,
                                 std::span<const float> w, std::span<const float> rstd, std::span<float> dx,
                                 std::span<float> dw);

// SiLU (swish): x * sigmoid(x); its derivative sigmoid(x) * (1 + x * (1 - sigmoid(x))).
void silu_reference(std::span<const float> x, std::span<float> y);
void silu_backward_reference(std::span<const float> dy, std::span<const float> x, std::span<float> dx);
void relu_reference(std::span<const float> x, std::span<float> y);
void relu_backward_reference(std::span<const float> dy, std::span<const float> x, std::span<float> dx);
// The elementwise product (a GLU's gate times its up projection) and its two gradients.
void mul_reference(std::span<const float> a, std::span<const float> b, std::span<float> y);
void mul_backward_reference(std::span<const float> dy, std::span<const float> a, std::span<const float> b,
                            std::span<float> da, std::span<float> db);

// Rotates each pair (x1, x2) to (x1 cos - x2 sin, x2 cos + x1 sin); `inverse` rotates by the
// negative angle (the backward: the transpose of a rotation is its inverse).
void rope_reference(int64_t m, int64_t n, int64_t head_dim, std::span<const float> cos, std::span<const float> sin,
                    std::span<float> x, bool inverse);

// Softmax over each row of n expert logits, then the k largest probabilities (Mixtral, DBRX and
// Qwen-MoE route so; the weights are the chosen probabilities, not renormalised).
void router_reference(int64_t m, int64_t n, int64_t k, std::span<const float> logits, std::span<float> probs,
                      std::span<int64_t> ids, std::span<float> weights);
// dlogits = P * (dP - sum_j P_j dP_j), where dP is dweights scattered to the chosen experts and 0
// elsewhere.
void router_backward_reference(int64_t m, int64_t n, int64_t k, std::span<const float> probs,
                               std::span<const int64_t> ids, std::span<const float> dweights, std::span<float> dlogits);

void permute_reference(int64_t m, int64_t n, int64_t k, std::span<const float> x, std::span<const int64_t> src,
                       std::span<float> out);
void unpermute_reference(int64_t m, int64_t n, int64_t k, int64_t rows, std::span<const float> y,
                         std::span<const int64_t> ids, std::span<const float> weights, std::span<float> out);

// y[r, j] = exp(x[r, j]) / sum over j' <= i of exp(x[r, j']) for j <= i = r % n, 0 beyond; the
// entries beyond i are never read (they may hold anything, the mask's -inf included).
void causal_softmax_reference(int64_t m, int64_t n, std::span<const float> x, std::span<float> y);
// dx = y * (dy - sum_j dy[r, j] * y[r, j]) over the whole row (y, the forward's output, is 0
// beyond position i, so dx is too).
void causal_softmax_backward_reference(int64_t m, int64_t n, std::span<const float> y, std::span<const float> dy,
                                       std::span<float> dx);

// SplitMix64 (Steele, Lea and Flood 2014, "Fast splittable pseudorandom number generators"; Java's
// SplittableRandom): a hash of a 64-bit counter, so any thread draws any element's number and a
// buffer's contents do not depend on the thread count.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// Dropout's random stream, which every backend draws the same way so that a seed names one mask:
// element i's draw is the 16 bits [16 (i % 4), 16 (i % 4) + 16) of splitmix64(splitmix64(seed) ^
// (i / 4)), and the element is kept when its draw is at least dropout_threshold(permille): the
// drop probability is p = permille / 1000 rounded to a multiple of 2^-16 (within 7.7e-6 of p).
// The kept values are scaled by 1 / (1 - p) with p unrounded, as torch.nn.functional.dropout does.
inline constexpr int64_t kDropoutPermilleMax = 999;  // p = 1 would divide by zero
inline uint32_t dropout_threshold(int64_t permille) { return static_cast<uint32_t>((permille * 65536 + 500) / 1000); }
inline double dropout_scale(int64_t permille) { return 1000.0 / static_cast<double>(1000 - permille); }
void dropout_mask_reference(int64_t permille, uint64_t seed, std::span<uint8_t> mask);
// y = x * mask / (1 - p), p = permille / 1000: dropout's forward on a drawn mask, and its backward
// (dx = dy * mask / (1 - p)) on the forward's mask.
void dropout_reference(int64_t permille, std::span<const float> x, std::span<const uint8_t> mask, std::span<float> y);

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
