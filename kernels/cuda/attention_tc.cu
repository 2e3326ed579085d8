// Causal attention on tensor cores, bf16 and fp16 on sm_80 and later: FlashAttention-2's algorithm
// (Dao 2023) with WMMA 16x16x16 fragments, fp32 accumulation and an fp32 softmax. CUDA only (hipcc
// has no nvcuda::wmma): attention.cu's CUDA-core kernels run fp32, HIP, older GPUs and head sizes
// over 128, and they are the reference these are checked against on a GPU (test_kernels_gpu's
// every_op_matches_the_reference compares both with the CPU reference).
//
// Layout as attention.cu: q, k, v, o, dO, dQ, dK, dV [batch*heads, seq, head_dim]; lse and delta
// [batch*heads, seq]. head_dim is padded with zeros to DP (32, 64 or 128) in shared memory, and rows
// past the sequence are zeros and masked, so that any sequence length and head size up to 128 runs.
//
// Forward: a block owns 64 queries, each of its 4 warps 16 of them; key/value tiles of 64 rows pass
// through shared memory. A warp computes S = Q K^T (16 x 64) on tensor cores, its softmax online in
// base 2 (two lanes per query row, 32 keys each), P rounded to the input format, and O += P V with
// the 16 x DP accumulator kept in shared memory, where each row is rescaled by its new maximum.
// Backward: a block owns 64 keys (16 per warp, dK and dV accumulated in fragments) and walks the
// query tiles from the diagonal down: S^T = K Q^T, P^T = exp(S^T - lse), dP^T = V dO^T,
// dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q, and dQ += dS K for the tile's 64 queries,
// added to the fp32 dq_accum with atomics (attention.cu zeroes it, computes delta, and converts).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>

#include "kernels/cuda/gpu_kernels.cuh"

namespace tpsim::TPSIM_GPU_NS {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 64;  // queries per block and keys per tile (forward); keys per block, queries per tile (backward)
constexpr int kF = 16;     // fragment side
constexpr int kHalf = kTile / 2;  // columns of a score row per lane (two lanes per row)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Row stride of the bf16/fp16 tiles in shared memory: 8 elements of padding spread a fragment's
// rows over the banks (WMMA needs a multiple of 8 elements and 32-byte aligned fragment pointers).
template <int DP>
constexpr int kLdt = DP + 8;
constexpr int kLdS = kTile + 8;  // the block's dS^T tile (backward)

template <class T>
__device__ inline T from_float(float x);
template <>
__device__ inline __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}
template <>
__device__ inline __half from_float<__half>(float x) {
  return __float2half(x);
}

// 64 rows of head_dim elements from src (rows row0.., of seq) into a [64][ldt] tile, zeros past the
// sequence and past head_dim. 16-byte loads where every row starts 16-byte aligned (`vec`).
template <class T, int DP>
__device__ void load_tile(T* dst, const T* __restrict__ src, int64_t row0, int64_t seq, int dh, bool vec) {
  constexpr int ld = kLdt<DP>;
  if (vec) {
    constexpr int kVec = DP / 8;
    for (int idx = threadIdx.x; idx < kTile * kVec; idx += kThreads) {
      const int r = idx / kVec, d = (idx % kVec) * 8;
      const int64_t row = row0 + r;
      uint4 val = make_uint4(0, 0, 0, 0);
      if (row < seq && d < dh) val = *reinterpret_cast<const uint4*>(src + row * dh + d);
      *reinterpret_cast<uint4*>(dst + r * ld + d) = val;
    }
  } else {
    for (int idx = threadIdx.x; idx < kTile * DP; idx += kThreads) {
      const int r = idx / DP, d = idx % DP;
      const int64_t row = row0 + r;
      dst[r * ld + d] = (row < seq && d < dh) ? src[row * dh + d] : from_float<T>(0.0f);
    }
  }
}

// The column a lane visits at step c of a walk over its `width` columns of a row: rotated by the
// lane, so that at each step the 32 lanes (two per row, rows 64 or DP floats apart) reach 32
// different banks instead of one.
template <int width>
__device__ inline int rotated(int c, int lane) {
  return (c + lane) % width;
}

template <int DP>
constexpr size_t forward_smem_bytes() {
  // Q, K, V tiles; per warp: S (fp32), P (T), O (fp32).
  return 3 * kTile * kLdt<DP> * 2 + kWarps * kF * kTile * 4 + kWarps * kF * kTile * 2 + kWarps * kF * DP * 4;
}

template <int DP>
constexpr size_t backward_smem_bytes() {
  // K, V, Q, dO tiles; per warp: S^T then dP^T (fp32), P^T (T), a 16x16 dQ fragment (fp32); the
  // block's dS^T (T); lse and delta of the query tile.
  return 4 * kTile * kLdt<DP> * 2 + kWarps * kF * kTile * 4 + kWarps * kF * kTile * 2 + kWarps * kF * kF * 4 +
         kTile * kLdS * 2 + 2 * kTile * 4;
}

// acc += A B over kSteps x kF of the shared dimension: A's fragments at a + kk * a_step (leading
// dimension lda, layout LA), B's at b + kk * b_step (leading dimension ldb, layout LB).
template <class T, class LA, class LB, int kSteps>
__device__ void mma_steps(wmma::fragment<wmma::accumulator, kF, kF, kF, float>& acc, const T* a, int a_step, int lda,
                          const T* b, int b_step, int ldb) {
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    wmma::fragment<wmma::matrix_a, kF, kF, kF, T, LA> af;
    wmma::fragment<wmma::matrix_b, kF, kF, kF, T, LB> bf;
    wmma::load_matrix_sync(af, a + kk * a_step, lda);
    wmma::load_matrix_sync(bf, b + kk * b_step, ldb);
    wmma::mma_sync(acc, af, bf, acc);
  }
}

template <class T, int DP>
__global__ void __launch_bounds__(kThreads)
    attention_forward_tc_kernel(int64_t seq, int dh, bool vec, float scale_log2, const T* __restrict__ q,
                                const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
                                float* __restrict__ lse) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int ld = kLdt<DP>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem);
  T* ks = qs + kTile * ld;
  T* vs = ks + kTile * ld;
  float* ss = reinterpret_cast<float*>(vs + kTile * ld);
  T* ps = reinterpret_cast<T*>(ss + kWarps * kF * kTile);
  float* os = reinterpret_cast<float*>(ps + kWarps * kF * kTile);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x;
  const int64_t q0 = (gridDim.y - 1 - blockIdx.y) * static_cast<int64_t>(kTile);  // longest rows first
  const int64_t base = bh * seq * dh;
  float* sw = ss + warp * kF * kTile;
  T* pw = ps + warp * kF * kTile;
  float* ow = os + warp * kF * DP;
  const int r = lane / 2, h = lane % 2;  // this lane's row of the warp's 16, and its half of the columns
  const int64_t qi = q0 + kF * warp + r;
  const int64_t warp_last_q = q0 + kF * warp + kF - 1;
  const int64_t block_last_q = q0 + kTile - 1 < seq - 1 ? q0 + kTile - 1 : seq - 1;

#pragma unroll
  for (int c = 0; c < DP / 2; ++c) ow[r * DP + h * (DP / 2) + rotated<DP / 2>(c, lane)] = 0.0f;
  load_tile<T, DP>(qs, q + base, q0, seq, dh, vec);
  __syncthreads();
  wmma::fragment<wmma::matrix_a, kF, kF, kF, T, wmma::row_major> qf[DP / kF];
#pragma unroll
  for (int kk = 0; kk < DP / kF; ++kk) wmma::load_matrix_sync(qf[kk], qs + kF * warp * ld + kk * kF, ld);

  float m_row = -INFINITY, l_part = 0.0f;
  for (int64_t k0 = 0; k0 <= block_last_q; k0 += kTile) {
    __syncthreads();  // every warp is done with the previous K and V
    load_tile<T, DP>(ks, k + base, k0, seq, dh, vec);
    load_tile<T, DP>(vs, v + base, k0, seq, dh, vec);
    __syncthreads();
    if (k0 > warp_last_q) continue;  // the whole tile lies after this warp's queries

      // S = Q K^T: K's rows are B's columns (column-major B with the tile's row stride).
#pragma unroll
    for (int n = 0; n < kTile / kF; ++n) {
      wmma::fragment<wmma::accumulator, kF, kF, kF, float> acc;
      wmma::fill_fragment(acc, 0.0f);
#pragma unroll
      for (int kk = 0; kk < DP / kF; ++kk) {
        wmma::fragment<wmma::matrix_b, kF, kF, kF, T, wmma::col_major> kf;
        wmma::load_matrix_sync(kf, ks + n * kF * ld + kk * kF, ld);
        wmma::mma_sync(acc, qf[kk], kf, acc);
      }
      wmma::store_matrix_sync(sw + n * kF, acc, kTile, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax in base 2. Every warp's first tile holds key 0 <= its queries, so m_new is finite.
    float s[kHalf];
    float tile_max = -INFINITY;
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      const int col = h * kHalf + rotated<kHalf>(c, lane);
      const int64_t kj = k0 + col;
      s[c] = (kj <= qi && kj < seq) ? sw[r * kTile + col] * scale_log2 : -INFINITY;
      tile_max = fmaxf(tile_max, s[c]);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m_row, tile_max);
    const float correction = exp2f(m_row - m_new);  // 0 on the first tile (m_row = -inf)
    float p_sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      const float p = exp2f(s[c] - m_new);
      p_sum += p;
      pw[r * kTile + h * kHalf + rotated<kHalf>(c, lane)] = from_float<T>(p);
    }
    l_part = l_part * correction + p_sum;
    m_row = m_new;
#pragma unroll
    for (int c = 0; c < DP / 2; ++c) ow[r * DP + h * (DP / 2) + rotated<DP / 2>(c, lane)] *= correction;
    __syncwarp();

    // O += P V, the accumulator through shared memory (its rows were rescaled above).
#pragma unroll
    for (int n = 0; n < DP / kF; ++n) {
      wmma::fragment<wmma::accumulator, kF, kF, kF, float> acc;
      wmma::load_matrix_sync(acc, ow + n * kF, DP, wmma::mem_row_major);
      mma_steps<T, wmma::row_major, wmma::row_major, kTile / kF>(acc, pw, kF, kTile, vs + n * kF, kF * ld, ld);
      wmma::store_matrix_sync(ow + n * kF, acc, DP, wmma::mem_row_major);
    }
    __syncwarp();
  }

  const float l_row = l_part + __shfl_xor_sync(0xffffffffu, l_part, 1);
  if (qi >= seq) return;
  const float inv_l = 1.0f / l_row;
#pragma unroll
  for (int c = 0; c < DP / 2; ++c) {
    const int d = h * (DP / 2) + rotated<DP / 2>(c, lane);
    if (d < dh) o[base + qi * dh + d] = from_float<T>(ow[r * DP + d] * inv_l);
  }
  if (h == 0) lse[bh * seq + qi] = kLn2 * (m_row + log2f(l_row));
#endif
}

// A warp's 16 x DP accumulator (dK or dV), times `factor`, through its staging space in shared
// memory to rows row0.. of out.
// This warp's kF x kTile block of A_w B^T, to `out` (row-major, leading dimension kTile): A_w the
// warp's kF rows of a [*, DP] tile, B a [kTile, DP] tile, both row-major with leading dimension ld.
template <class T, int DP>
__device__ void warp_rows_times_tile_t(float* out, const T* a_w, const T* b, int ld) {
#pragma unroll
  for (int n = 0; n < kTile / kF; ++n) {
    wmma::fragment<wmma::accumulator, kF, kF, kF, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    mma_steps<T, wmma::row_major, wmma::col_major, DP / kF>(acc, a_w, kF, ld, b + n * kF * ld, kF, ld);
    wmma::store_matrix_sync(out + n * kF, acc, kTile, wmma::mem_row_major);
  }
}

template <class T, int DP>
__device__ void write_rows(float* stage, wmma::fragment<wmma::accumulator, kF, kF, kF, float> (&acc)[DP / kF],
                           float factor, T* __restrict__ out, int64_t row0, int64_t seq, int dh) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int n = 0; n < DP / kF; ++n) wmma::store_matrix_sync(stage + n * kF, acc[n], DP, wmma::mem_row_major);
  __syncwarp();
  for (int e = lane; e < kF * DP; e += 32) {
    const int i = e / DP, d = e % DP;
    if (row0 + i < seq && d < dh) out[(row0 + i) * dh + d] = from_float<T>(stage[e] * factor);
  }
  __syncwarp();
}

template <class T, int DP>
__global__ void __launch_bounds__(kThreads)
    attention_backward_tc_kernel(int64_t seq, int dh, bool vec, float scale, const T* __restrict__ q,
                                 const T* __restrict__ k, const T* __restrict__ v, const T* __restrict__ d_o,
                                 const float* __restrict__ lse, const float* __restrict__ delta, T* __restrict__ dk,
                                 T* __restrict__ dv, float* __restrict__ dq_accum) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int ld = kLdt<DP>;
  extern __shared__ __align__(128) unsigned char smem[];
  T* ks = reinterpret_cast<T*>(smem);
  T* vs = ks + kTile * ld;
  T* qs = vs + kTile * ld;
  T* dos = qs + kTile * ld;
  float* sts = reinterpret_cast<float*>(dos + kTile * ld);
  T* pts = reinterpret_cast<T*>(sts + kWarps * kF * kTile);
  float* dq_frag = reinterpret_cast<float*>(pts + kWarps * kF * kTile);
  T* dst = reinterpret_cast<T*>(dq_frag + kWarps * kF * kF);
  float* lse_s = reinterpret_cast<float*>(dst + kTile * kLdS);
  float* delta_s = lse_s + kTile;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.x;
  const int64_t k0 = static_cast<int64_t>(blockIdx.y) * kTile;  // block 0 has the most query tiles: first
  const int64_t base = bh * seq * dh;
  float* stw = sts + warp * kF * kTile;
  T* ptw = pts + warp * kF * kTile;
  float* dqw = dq_frag + warp * kF * kF;
  const int r = lane / 2, h = lane % 2;
  const int64_t kj = k0 + kF * warp + r;  // this lane's key
  const float scale_log2 = scale * kLog2e;

  load_tile<T, DP>(ks, k + base, k0, seq, dh, vec);
  load_tile<T, DP>(vs, v + base, k0, seq, dh, vec);
  wmma::fragment<wmma::accumulator, kF, kF, kF, float> dk_acc[DP / kF], dv_acc[DP / kF];
#pragma unroll
  for (int n = 0; n < DP / kF; ++n) {
    wmma::fill_fragment(dk_acc[n], 0.0f);
    wmma::fill_fragment(dv_acc[n], 0.0f);
  }

  for (int64_t q0 = k0; q0 < seq; q0 += kTile) {  // query tiles before k0 see none of these keys
    __syncthreads();                              // every warp is done with the previous tile's Q, dO, dS^T
    load_tile<T, DP>(qs, q + base, q0, seq, dh, vec);
    load_tile<T, DP>(dos, d_o + base, q0, seq, dh, vec);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const bool in = q0 + i < seq;
      lse_s[i] = in ? lse[bh * seq + q0 + i] * kLog2e : INFINITY;  // past the end: P = 0
      delta_s[i] = in ? delta[bh * seq + q0 + i] : 0.0f;
    }
    __syncthreads();

    // S^T = K_w Q^T and, after P^T is taken from it, dP^T = V_w dO^T in the same buffer.
    warp_rows_times_tile_t<T, DP>(stw, ks + kF * warp * ld, qs, ld);
    __syncwarp();
    float p[kHalf];
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      const int col = h * kHalf + rotated<kHalf>(c, lane);
      const int64_t qi = q0 + col;
      p[c] = (qi >= kj && kj < seq) ? exp2f(stw[r * kTile + col] * scale_log2 - lse_s[col]) : 0.0f;
      ptw[r * kTile + col] = from_float<T>(p[c]);
    }
    __syncwarp();
    warp_rows_times_tile_t<T, DP>(stw, vs + kF * warp * ld, dos, ld);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kHalf; ++c) {
      const int col = h * kHalf + rotated<kHalf>(c, lane);
      dst[(kF * warp + r) * kLdS + col] = from_float<T>(p[c] * (stw[r * kTile + col] - delta_s[col]));
    }
    __syncwarp();

    // dV_w += P^T dO, dK_w += dS^T Q (scaled when written).
#pragma unroll
    for (int n = 0; n < DP / kF; ++n) {
#pragma unroll
      for (int kk = 0; kk < kTile / kF; ++kk) {
        wmma::fragment<wmma::matrix_a, kF, kF, kF, T, wmma::row_major> pf, sf;
        wmma::fragment<wmma::matrix_b, kF, kF, kF, T, wmma::row_major> df, qf;
        wmma::load_matrix_sync(pf, ptw + kk * kF, kTile);
        wmma::load_matrix_sync(df, dos + kk * kF * ld + n * kF, ld);
        wmma::mma_sync(dv_acc[n], pf, df, dv_acc[n]);
        wmma::load_matrix_sync(sf, dst + kF * warp * kLdS + kk * kF, kLdS);
        wmma::load_matrix_sync(qf, qs + kk * kF * ld + n * kF, ld);
        wmma::mma_sync(dk_acc[n], sf, qf, dk_acc[n]);
      }
    }
    __syncthreads();  // the block's dS^T is complete

    // dQ of the warp's 16 queries: dS (the transpose of dS^T, read column-major) times K.
    const int64_t qw = q0 + kF * warp;
    if (qw < seq) {
      for (int n = 0; n < DP / kF; ++n) {
        wmma::fragment<wmma::accumulator, kF, kF, kF, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        mma_steps<T, wmma::col_major, wmma::row_major, kTile / kF>(acc, dst + kF * warp, kF * kLdS, kLdS, ks + n * kF,
                                                                   kF * ld, ld);
        wmma::store_matrix_sync(dqw, acc, kF, wmma::mem_row_major);
        __syncwarp();
        for (int e = lane; e < kF * kF; e += 32) {
          const int i = e / kF, d = n * kF + e % kF;
          if (qw + i < seq && d < dh) atomicAdd(dq_accum + base + (qw + i) * dh + d, dqw[e] * scale);
        }
        __syncwarp();
      }
    }
  }

  // dK and dV through shared memory (the Q and dO tiles' space, no longer read) to the outputs.
  __syncthreads();
  float* stage = reinterpret_cast<float*>(qs) + warp * kF * DP;
  write_rows<T, DP>(stage, dv_acc, 1.0f, dv + base, k0 + kF * warp, seq, dh);
  write_rows<T, DP>(stage, dk_acc, scale, dk + base, k0 + kF * warp, seq, dh);
#endif
}

// The device's compute capability major, read once per device.
bool tensor_cores_available() {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  static int major[64] = {};
  if (device < 0 || device >= 64) return false;
  if (major[device] == 0) CUDA_CHECK(cudaDeviceGetAttribute(&major[device], cudaDevAttrComputeCapabilityMajor, device));
  return major[device] >= 8;
}

// Every row of 2-byte elements starts 16-byte aligned: 16-byte loads of the tiles.
bool rows_aligned(int64_t head_dim, std::initializer_list<const void*> pointers) {
  if (head_dim % 8 != 0) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

int padded_head_dim(int64_t head_dim) { return head_dim <= 32 ? 32 : head_dim <= 64 ? 64 : 128; }

dim3 tc_grid(int64_t batch, int64_t heads, int64_t seq) {
  return dim3(static_cast<unsigned>(batch * heads), static_cast<unsigned>((seq + kTile - 1) / kTile));
}

template <class T, int DP>
void forward_tc(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q, const void* k,
                const void* v, void* o, float* lse, cudaStream_t stream) {
  constexpr size_t bytes = forward_smem_bytes<DP>();
  auto* kernel = attention_forward_tc_kernel<T, DP>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const float scale_log2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))) * kLog2e;
  kernel<<<tc_grid(batch, heads, seq), kThreads, bytes, stream>>>(
      seq, static_cast<int>(head_dim), rows_aligned(head_dim, {q, k, v, o}), scale_log2, static_cast<const T*>(q),
      static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), lse);
  CUDA_CHECK_LAUNCH();
}

template <class T, int DP>
void backward_tc(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q, const void* k,
                 const void* v, const void* d_o, const float* lse, const float* delta, void* dk, void* dv,
                 float* dq_accum, cudaStream_t stream) {
  constexpr size_t bytes = backward_smem_bytes<DP>();
  auto* kernel = attention_backward_tc_kernel<T, DP>;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  kernel<<<tc_grid(batch, heads, seq), kThreads, bytes, stream>>>(
      seq, static_cast<int>(head_dim), rows_aligned(head_dim, {q, k, v, d_o}), scale, static_cast<const T*>(q),
      static_cast<const T*>(k), static_cast<const T*>(v), static_cast<const T*>(d_o), lse, delta, static_cast<T*>(dk),
      static_cast<T*>(dv), dq_accum);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void forward_tc_dispatch(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q, const void* k,
                         const void* v, void* o, float* lse, cudaStream_t stream) {
  switch (padded_head_dim(head_dim)) {
    case 32: forward_tc<T, 32>(batch, heads, seq, head_dim, q, k, v, o, lse, stream); break;
    case 64: forward_tc<T, 64>(batch, heads, seq, head_dim, q, k, v, o, lse, stream); break;
    default: forward_tc<T, 128>(batch, heads, seq, head_dim, q, k, v, o, lse, stream); break;
  }
}

template <class T>
void backward_tc_dispatch(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q, const void* k,
                          const void* v, const void* d_o, const float* lse, const float* delta, void* dk, void* dv,
                          float* dq_accum, cudaStream_t stream) {
  switch (padded_head_dim(head_dim)) {
    case 32: backward_tc<T, 32>(batch, heads, seq, head_dim, q, k, v, d_o, lse, delta, dk, dv, dq_accum, stream); break;
    case 64: backward_tc<T, 64>(batch, heads, seq, head_dim, q, k, v, d_o, lse, delta, dk, dv, dq_accum, stream); break;
    default:
      backward_tc<T, 128>(batch, heads, seq, head_dim, q, k, v, d_o, lse, delta, dk, dv, dq_accum, stream);
      break;
  }
}

}  // namespace

bool attention_tc_runs(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim) {
  if (e != Elem::kBf16 && e != Elem::kF16) return false;
  if (head_dim < 1 || head_dim > 128 || seq < 1) return false;
  if (batch * heads > 0x7fffffffll || (seq + kTile - 1) / kTile > 65535) return false;
  return tensor_cores_available();
}

void attention_forward_tc(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q,
                          const void* k, const void* v, void* o, float* lse, cudaStream_t stream) {
  if (e == Elem::kBf16) forward_tc_dispatch<__nv_bfloat16>(batch, heads, seq, head_dim, q, k, v, o, lse, stream);
  else forward_tc_dispatch<__half>(batch, heads, seq, head_dim, q, k, v, o, lse, stream);
}

void attention_backward_tc(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q,
                           const void* k, const void* v, const void* d_o, const float* lse, const float* delta,
                           void* dk, void* dv, float* dq_accum, cudaStream_t stream) {
  if (e == Elem::kBf16)
    backward_tc_dispatch<__nv_bfloat16>(batch, heads, seq, head_dim, q, k, v, d_o, lse, delta, dk, dv, dq_accum,
                                        stream);
  else backward_tc_dispatch<__half>(batch, heads, seq, head_dim, q, k, v, d_o, lse, delta, dk, dv, dq_accum, stream);
}

}  // namespace tpsim::TPSIM_GPU_NS
