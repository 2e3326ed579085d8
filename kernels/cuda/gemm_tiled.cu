// A GEMM without a vendor library, for the HIP backend (Debian 12 packages no hipBLAS/rocBLAS):
// C[m,n] = op(A)[m,k] * op(B)[k,n], row-major, the layouts of kernels/reference.hpp.
//
// Classic shared-memory tiling (as CUTLASS's "simt" SGEMM): a block of 256 threads computes a
// 64 x 64 tile of C, stepping through K in slices of 16; each slice of op(A) and op(B) is staged
// in shared memory as fp32, and each thread accumulates a 4 x 4 sub-tile (rows ty + 16 r, columns
// tx + 16 c) in fp32 registers. Edges are bounds-checked, so every shape is correct. No matrix
// cores: on MI250X/MI300X this reaches a small fraction of rocBLAS, and docs/backends.md says so.
#include "kernels/cuda/gpu_kernels.cuh"

namespace tpsim::TPSIM_GPU_NS {
namespace {

constexpr int kTile = 64;
constexpr int kSlice = 16;
constexpr int kThreads = 256;
constexpr int kPerThread = 4;

// Stages element idx of a kSlice x kTile slice: s[kk][t] = X[t0 + t, k0 + kk] of an operand X with
// `outer` rows and k columns, stored [k, outer] (k_major) or [outer, k]. Consecutive threads walk the
// dimension that is contiguous in memory; elements past the edges are zero.
template <class T>
__device__ void stage(float (&s)[kSlice][kTile + 1], int idx, const T* __restrict__ x, int64_t t0, int64_t outer,
                      int64_t k0, int64_t k, bool k_major) {
  int kk, t;
  if (k_major) {  // t fastest
    kk = idx / kTile;
    t = idx % kTile;
  } else {  // kk fastest
    t = idx / kSlice;
    kk = idx % kSlice;
  }
  const int64_t o = t0 + t, kx = k0 + kk;
  s[kk][t] = o < outer && kx < k ? load_f32(x, k_major ? kx * outer + o : o * k + kx) : 0.0f;
}

template <class T>
__global__ void __launch_bounds__(kThreads)
    gemm_tiled_kernel(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, const T* __restrict__ a,
                      const T* __restrict__ b, T* __restrict__ c) {
  __shared__ float as[kSlice][kTile + 1];  // as[kk][i] = op(A)[row0 + i, k0 + kk]
  __shared__ float bs[kSlice][kTile + 1];  // bs[kk][j] = op(B)[k0 + kk, col0 + j]
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t row0 = blockIdx.y * static_cast<int64_t>(kTile);
  const int64_t col0 = blockIdx.x * static_cast<int64_t>(kTile);
  float acc[kPerThread][kPerThread] = {};

  for (int64_t k0 = 0; k0 < k; k0 += kSlice) {
    for (int idx = threadIdx.x; idx < kSlice * kTile; idx += kThreads) {
      stage(as, idx, a, row0, m, k0, k, /*k_major=*/trans_a);   // A is [k, m] when transposed
      stage(bs, idx, b, col0, n, k0, k, /*k_major=*/!trans_b);  // B is [k, n] unless transposed
    }
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kSlice; ++kk) {
      float ar[kPerThread], br[kPerThread];
#pragma unroll
      for (int r = 0; r < kPerThread; ++r) ar[r] = as[kk][ty + 16 * r];
#pragma unroll
      for (int q = 0; q < kPerThread; ++q) br[q] = bs[kk][tx + 16 * q];
#pragma unroll
      for (int r = 0; r < kPerThread; ++r)
#pragma unroll
        for (int q = 0; q < kPerThread; ++q) acc[r][q] += ar[r] * br[q];
    }
    __syncthreads();
  }

#pragma unroll
  for (int r = 0; r < kPerThread; ++r) {
    const int64_t row = row0 + ty + 16 * r;
    if (row >= m) continue;
#pragma unroll
    for (int q = 0; q < kPerThread; ++q) {
      const int64_t col = col0 + tx + 16 * q;
      if (col < n) store_f32(c, row * n + col, acc[r][q]);
    }
  }
}

}  // namespace

void gemm_tiled(Elem e, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, const void* a, const void* b,
                void* c, cudaStream_t stream) {
  const int64_t tiles_m = (m + kTile - 1) / kTile, tiles_n = (n + kTile - 1) / kTile;
  if (tiles_m > 65535 || tiles_n > 0x7fffffffll)
    throw Error("tiled GEMM: m = " + std::to_string(m) + " exceeds one launch (65535 tiles of 64 rows)");
  const dim3 grid(static_cast<unsigned>(tiles_n), static_cast<unsigned>(tiles_m));
  switch (e) {
    case Elem::kF32:
      gemm_tiled_kernel<float><<<grid, kThreads, 0, stream>>>(m, n, k, trans_a, trans_b, static_cast<const float*>(a),
                                                              static_cast<const float*>(b), static_cast<float*>(c));
      break;
    case Elem::kBf16:
      gemm_tiled_kernel<bf16><<<grid, kThreads, 0, stream>>>(m, n, k, trans_a, trans_b, static_cast<const bf16*>(a),
                                                             static_cast<const bf16*>(b), static_cast<bf16*>(c));
      break;
    case Elem::kF16:
      gemm_tiled_kernel<__half><<<grid, kThreads, 0, stream>>>(m, n, k, trans_a, trans_b, static_cast<const __half*>(a),
                                                               static_cast<const __half*>(b), static_cast<__half*>(c));
      break;
    default: throw Error(std::string("tiled GEMM in ") + elem_name(e) + " is not implemented");
  }
  CUDA_CHECK_LAUNCH();
}

}  // namespace tpsim::TPSIM_GPU_NS
