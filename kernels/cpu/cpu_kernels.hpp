// The CPU backend's kernels: Eigen GEMMs and OpenMP-parallel, vectorised loops for attention and
// the memory-bound ops, fp32. Layouts and semantics are those of kernels/reference.hpp, which
// checks every one of them. Pointers are to contiguous buffers of the sizes the layouts imply.
#pragma once

#include <cstdint>

#include "kernels/reference.hpp"

namespace tpsim::cpu {

// Threads the kernels use (Eigen's GEMM and the OpenMP loops); set once by the backend.
void set_threads(int threads);
int threads();
// OpenMP's default: OMP_NUM_THREADS when set, else every hardware thread this process may run on.
int default_threads();

// C[m,n] = op(A)[m,k] * op(B)[k,n], row-major, Eigen's blocked GEMM over all threads, in column
// panels of at most kGemmPanelColumns (cpu_kernels.cpp says why).
inline constexpr int64_t kGemmPanelColumns = 8192;
void gemm_eigen(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, const float* a, const float* b, float* c);

// Causal attention, FlashAttention-2's blocking (Dao 2023): each thread takes a block of queries
// and streams the key blocks up to the diagonal through an online softmax, so the scratch is
// O(block * block + block * head_dim) per thread and never O(seq^2).
void attention_forward_cpu(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const float* q, const float* k,
                           const float* v, float* o, float* lse);
// Recomputes each block's probabilities from lse; one (batch, head) per thread, key blocks in the
// outer loop so dK and dV accumulate in registers-sized scratch and dQ without races.
void attention_backward_cpu(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const float* q, const float* k,
                            const float* v, const float* o, const float* lse, const float* d_o, float* dq, float* dk,
                            float* dv);

void layer_norm_cpu(int64_t m, int64_t n, const float* x, const float* w, const float* b, float* y, float* mean,
                    float* rstd);
void layer_norm_backward_cpu(int64_t m, int64_t n, const float* dy, const float* x, const float* w, const float* mean,
                             const float* rstd, float* dx, float* dw, float* db);

void gelu_cpu(int64_t elements, const float* x, float* y);
void gelu_backward_cpu(int64_t elements, const float* dy, const float* x, float* dx);
void add_cpu(int64_t elements, const float* a, const float* b, float* y);
void bias_grad_cpu(int64_t m, int64_t n, const float* dy, float* db);

void cross_entropy_cpu(int64_t m, int64_t n, float* logits, const int64_t* targets, float* loss);
void scale_cpu(int64_t elements, float* x, float c);

void embedding_cpu(int64_t m, int64_t n, const float* table, const int64_t* ids, float* y);
void embedding_backward_cpu(int64_t m, int64_t n, int64_t rows, const float* dy, const int64_t* ids, float* dtable);

void rms_norm_cpu(int64_t m, int64_t n, const float* x, const float* w, float* y, float* rstd);
void rms_norm_backward_cpu(int64_t m, int64_t n, const float* dy, const float* x, const float* w, const float* rstd,
                           float* dx, float* dw);

void silu_cpu(int64_t elements, const float* x, float* y);
void silu_backward_cpu(int64_t elements, const float* dy, const float* x, float* dx);
void relu_cpu(int64_t elements, const float* x, float* y);
void relu_backward_cpu(int64_t elements, const float* dy, const float* x, float* dx);
void mul_cpu(int64_t elements, const float* a, const float* b, float* y);
void mul_backward_cpu(int64_t elements, const float* dy, const float* a, const float* b, float* da, float* db);

void rope_cpu(int64_t m, int64_t n, int64_t head_dim, const float* cos, const float* sin, float* x, bool inverse);

void router_cpu(int64_t m, int64_t n, int64_t k, const float* logits, float* probs, int64_t* ids, float* weights);
void router_backward_cpu(int64_t m, int64_t n, int64_t k, const float* probs, const int64_t* ids, const float* dweights,
                         float* dlogits);
void permute_cpu(int64_t m, int64_t n, int64_t k, const float* x, const int64_t* src, float* out);
void unpermute_cpu(int64_t m, int64_t n, int64_t k, const float* y, const int64_t* ids, const float* weights,
                   float* out);

// Unfused attention's softmax and dropout (reference.hpp: the causal softmax's rows, dropout's
// random stream, which dropout_cpu draws from `seed` as dropout_mask_reference does).
void causal_softmax_cpu(int64_t m, int64_t n, const float* x, float* y);
void causal_softmax_backward_cpu(int64_t m, int64_t n, const float* y, const float* dy, float* dx);
void dropout_cpu(int64_t elements, int64_t permille, uint64_t seed, const float* x, uint8_t* mask, float* y);
void dropout_backward_cpu(int64_t elements, int64_t permille, const float* dy, const uint8_t* mask, float* dx);

void cast_fp32_to_bf16_cpu(int64_t elements, const float* x, uint16_t* y);
void cast_bf16_to_fp32_cpu(int64_t elements, const uint16_t* x, float* y);

double sum_of_squares_cpu(int64_t elements, const float* x);
void adamw_cpu(int64_t elements, float* p, const float* g, float* m, float* v, const AdamWParams& h);

// Uniform values in [lo, hi) from (seed, index) alone, so the threads that fill a buffer do not
// change its contents; never exactly 0 when lo < 0 < hi (the grid is offset by half a step).
void fill_uniform(float* x, int64_t elements, float lo, float hi, uint64_t seed);
// Integers in [0, bound).
void fill_indices(int64_t* x, int64_t elements, int64_t bound, uint64_t seed);

}  // namespace tpsim::cpu
