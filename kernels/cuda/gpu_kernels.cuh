// Host-side launchers of the GPU backend's own kernels (memory_bound.cu, attention.cu,
// gemm_tiled.cu). Every launcher enqueues on `stream` and returns at once; launch errors are
// checked (CUDA_CHECK_LAUNCH), execution errors surface at the caller's next synchronisation.
//
// Layouts are those of kernels/reference.hpp (row-major; attention [batch, heads, seq, head_dim];
// row statistics, log-sum-exp, losses and ids per row). `Elem e` is the storage format of the
// activation tensors named `T` below; statistics, optimizer state and the LayerNorm weight
// gradients are fp32; ids are int64.
#pragma once

#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace tpsim::TPSIM_GPU_NS {

// ---- inputs and housekeeping ----

// count elements of format e, uniform in [lo, hi) from a counter-based hash of (seed, index):
// fresh, reproducible and never all zeros.
void fill_uniform(void* p, Elem e, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream);
// count ids uniform in [0, rows).
void fill_ids(int64_t* ids, int64_t count, int64_t rows, uint64_t seed, cudaStream_t stream);
// ids[i] = i % period (positions of a [batch, seq] block of tokens).
void fill_positions(int64_t* ids, int64_t count, int64_t period, cudaStream_t stream);
// Writes `bytes` (a buffer larger than L2) so that the next kernel starts with a cold cache.
void flush_write(void* p, size_t bytes, uint32_t value, cudaStream_t stream);
// dst = src over `bytes` (multiple of 16, both 16-byte aligned): the achieved-bandwidth probe.
void copy_bytes(void* dst, const void* src, size_t bytes, cudaStream_t stream);

// ---- memory-bound ops (model/ops.hpp MemKind) ----

// y[m,n] = (x - mean) * rstd * w + b per row; mean, rstd: [m] fp32.
void layer_norm_forward(Elem e, int64_t m, int64_t n, const void* x, const void* w, const void* b, void* y, float* mean,
                        float* rstd, cudaStream_t stream);
// dx (T) per row; dw, db [n] fp32 through `partials` (fp32, column_partial_rows(m) * 2n).
void layer_norm_backward(Elem e, int64_t m, int64_t n, const void* dy, const void* x, const void* w, const float* mean,
                         const float* rstd, void* dx, float* dw, float* db, float* partials, cudaStream_t stream);
int64_t column_partial_rows(int64_t m);

void gelu_forward(Elem e, int64_t count, const void* x, void* y, cudaStream_t stream);
void gelu_backward(Elem e, int64_t count, const void* dy, const void* x, void* dx, cudaStream_t stream);
void add(Elem e, int64_t count, const void* a, const void* b, void* y, cudaStream_t stream);
void scale(Elem e, int64_t count, void* x, float c, cudaStream_t stream);
// db[n] (T) = sum over m rows of dy[m,n] (T), through `partials` (fp32, column_partial_rows(m) * n).
void bias_grad(Elem e, int64_t m, int64_t n, const void* dy, void* db, float* partials, cudaStream_t stream);
// Row-wise softmax cross-entropy: loss[m] fp32; logits (T) replaced by softmax - one_hot.
void cross_entropy(Elem e, int64_t m, int64_t n, void* logits, const int64_t* targets, float* loss,
                   cudaStream_t stream);
// y[m,n] = table[ids[i], :], table [rows, n].
void embedding_forward(Elem e, int64_t m, int64_t n, const void* table, const int64_t* ids, void* y,
                       cudaStream_t stream);
// dtable[rows, n] = sum of the rows of dy whose id is that row (0 where none): a counting sort of
// the ids (counts, offsets, order: int64 workspaces of rows + 1, rows + 1 and m), then one pass
// per table row summing its tokens in fp32. Four kernels and a memset.
void embedding_backward(Elem e, int64_t m, int64_t n, int64_t rows, const void* dy, const int64_t* ids, void* dtable,
                        int64_t* counts, int64_t* offsets, int64_t* order, cudaStream_t stream);
// Format conversion of count elements (src format -> dst format), e.g. fp32 <-> bf16.
void convert(Elem src_e, const void* src, Elem dst_e, void* dst, int64_t count, cudaStream_t stream);
// TransformerEngine's cast-transpose: x[m,n] (T) -> fp8 e4m3 y[m,n] and yt[n,m], and amax = max |x|
// (fp32 bit pattern in *amax_bits, which the caller zeroes).
void cast_transpose_e4m3(Elem e, int64_t m, int64_t n, const void* x, e4m3* y, e4m3* yt, uint32_t* amax_bits,
                         cudaStream_t stream);
// *result = sum of x[i]^2 (fp32 per thread, fp64 across blocks); partials: fp64, grad_norm_blocks().
void sum_of_squares(int64_t count, const float* x, double* partials, double* result, cudaStream_t stream);
int grad_norm_blocks();
struct AdamW {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;
};
void adamw(int64_t count, float* p, const float* g, float* m, float* v, const AdamW& h, cudaStream_t stream);

// ---- attention (attention.cu): causal, softmax scale 1/sqrt(head_dim) ----

// head_dim this implementation runs (1..128).
bool attention_head_dim_supported(int64_t head_dim);
// o (T) and lse (fp32 natural log-sum-exp per query).
void attention_forward(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q,
                       const void* k, const void* v, void* o, float* lse, cudaStream_t stream);
// dq, dk, dv (T) from q, k, v, o, dO and the forward's lse; workspaces: delta fp32 [batch*heads*seq],
// dq_accum fp32 [batch*heads*seq*head_dim].
void attention_backward(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q,
                        const void* k, const void* v, const void* o, const void* d_o, const float* lse, void* dq,
                        void* dk, void* dv, float* delta, float* dq_accum, cudaStream_t stream);

#if !defined(TPSIM_HIP)
// The tensor-core kernels (attention_tc.cu) run this: bf16 or fp16, head_dim up to 128, a GPU of
// compute capability 8.0 or later. attention_forward and attention_backward use them then.
bool attention_tc_runs(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim);
void attention_forward_tc(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q,
                          const void* k, const void* v, void* o, float* lse, cudaStream_t stream);
// dk, dv, and dq_accum (zeroed by the caller) += dQ; delta as attention_backward computes it.
void attention_backward_tc(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q,
                           const void* k, const void* v, const void* d_o, const float* lse, const float* delta,
                           void* dk, void* dv, float* dq_accum, cudaStream_t stream);
#endif

// ---- GEMM without a vendor library (gemm_tiled.cu; the HIP backend's GEMM) ----

// C[m,n] = op(A)[m,k] * op(B)[k,n] row-major, fp32 accumulation; e in {fp32, bf16, fp16}.
void gemm_tiled(Elem e, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, const void* a, const void* b,
                void* c, cudaStream_t stream);

}  // namespace tpsim::TPSIM_GPU_NS
