// Causal attention forward and backward: tiled, FlashAttention-2's algorithm (Dao 2023) in plain
// CUDA C++ with fp32 arithmetic on CUDA cores, so that it runs unchanged under hipcc.
//
// On CUDA GPUs of compute capability 8.0 and later, bf16 and fp16 run attention_tc.cu's tensor-core
// kernels instead (the same algorithm on WMMA fragments); these run everything else.
//
// Why not cuDNN's fused SDPA: it needs either the cudnn-frontend C++ headers (not shipped with the
// toolkit here) or a hand-built backend-API operation graph whose acceptance by cuDNN can only be
// learned on a GPU; without one to develop against, a kernel that is checked by reading is the
// robust choice. These kernels do not use tensor cores and reach a small fraction of
// FlashAttention's rate; attention_tc.cu's are 3.3-5x faster on an H200 (docs/backends.md).
//
// Layout: q, k, v, o, dO, dQ, dK, dV [batch*heads, seq, head_dim]; lse, delta [batch*heads, seq].
// Scores s_ij = q_i . k_j / sqrt(head_dim) for j <= i.
//
// Forward: a block owns 32 queries; 8 lanes share a query, each holding head_dim/8 of q and of
// the output accumulator in registers (element d on lane d % 8). Key/value tiles of 32 rows pass
// through shared memory; the softmax is computed online in base 2 (scores pre-scaled by log2 e).
// Backward: a block owns 32 keys (8 lanes per key holding k, v, dK, dV slices) and walks the query
// tiles at or below its keys' diagonal: P = exp(s - lse), dP = dO v^T, dS = P (dP - delta) with
// delta_i = dO_i . o_i, dV += P^T dO, dK += dS^T q, and dQ += dS k accumulated over key blocks
// with fp32 atomics, converted to the output format by a last kernel.
#include <cmath>

#include "kernels/cuda/gpu_kernels.cuh"

namespace tpsim::TPSIM_GPU_NS {
namespace {

constexpr int kLanes = 8;  // lanes per query (forward) or key (backward)
constexpr int kThreads = 256;
constexpr int kRows = kThreads / kLanes;  // 32 queries or keys per block
constexpr int kKeyTile = 32;              // keys per shared-memory tile (forward)
constexpr int kQueryTile = 16;            // queries per shared-memory tile (backward)
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <class T, int EPT>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(int64_t seq, int dh, float scale_log2, const T* __restrict__ q, const T* __restrict__ k,
                             const T* __restrict__ v, T* __restrict__ o, float* __restrict__ lse) {
  constexpr int D = kLanes * EPT;
  __shared__ float ks[kKeyTile][D];
  __shared__ float vs[kKeyTile][D];
  const int64_t bh = blockIdx.x;
  const int64_t q_tile = gridDim.y - 1 - blockIdx.y;  // longest rows first
  const int row = threadIdx.x / kLanes, sub = threadIdx.x % kLanes;
  const int64_t qi = q_tile * kRows + row;
  const bool valid = qi < seq;
  const int64_t base = bh * seq * dh;

  float qr[EPT], acc[EPT];
#pragma unroll
  for (int e = 0; e < EPT; ++e) {
    const int d = sub + kLanes * e;
    qr[e] = (valid && d < dh) ? load_f32(q, base + qi * dh + d) * scale_log2 : 0.0f;
    acc[e] = 0.0f;
  }
  float m_row = -INFINITY, l_row = 0.0f;
  const int64_t last_key = (q_tile + 1) * kRows - 1 < seq - 1 ? (q_tile + 1) * kRows - 1 : seq - 1;

  for (int64_t k0 = 0; k0 <= last_key; k0 += kKeyTile) {
    __syncthreads();  // the previous tile is consumed
    for (int idx = threadIdx.x; idx < kKeyTile * D; idx += kThreads) {
      const int j = idx / D, d = idx % D;
      const int64_t kj = k0 + j;
      const bool in = kj < seq && d < dh;
      ks[j][d] = in ? load_f32(k, base + kj * dh + d) : 0.0f;
      vs[j][d] = in ? load_f32(v, base + kj * dh + d) : 0.0f;
    }
    __syncthreads();

    float s[kKeyTile];
    float tile_max = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeyTile; ++j) {
      float dot = 0.0f;
#pragma unroll
      for (int e = 0; e < EPT; ++e) dot += qr[e] * ks[j][sub + kLanes * e];
      dot = group_sum<kLanes>(dot);
      const int64_t kj = k0 + j;
      s[j] = (kj <= qi && kj < seq) ? dot : -INFINITY;
      tile_max = fmaxf(tile_max, s[j]);
    }
    const float m_new = fmaxf(m_row, tile_max);
    if (m_new == -INFINITY) continue;  // every key so far masked (rows past the end only)
    const float correction = exp2f(m_row - m_new);
    l_row *= correction;
#pragma unroll
    for (int e = 0; e < EPT; ++e) acc[e] *= correction;
#pragma unroll
    for (int j = 0; j < kKeyTile; ++j) {
      const float p = exp2f(s[j] - m_new);
      l_row += p;
#pragma unroll
      for (int e = 0; e < EPT; ++e) acc[e] += p * vs[j][sub + kLanes * e];
    }
    m_row = m_new;
  }

  if (!valid) return;
  const float inv_l = 1.0f / l_row;
#pragma unroll
  for (int e = 0; e < EPT; ++e) {
    const int d = sub + kLanes * e;
    if (d < dh) store_f32(o, base + qi * dh + d, acc[e] * inv_l);
  }
  if (sub == 0) lse[bh * seq + qi] = kLn2 * (m_row + log2f(l_row));
}

// delta[row] = dO_row . o_row, one group of 32 lanes per row.
template <class T>
__global__ void attention_delta_kernel(int64_t rows, int dh, const T* __restrict__ o, const T* __restrict__ d_o,
                                       float* __restrict__ delta) {
  const int lane = threadIdx.x % 32;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kThreads / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  float s = 0.0f;
  for (int d = lane; d < dh; d += 32) s += load_f32(o, row * dh + d) * load_f32(d_o, row * dh + d);
  s = group_sum<32>(s);
  if (lane == 0) delta[row] = s;
}

template <class T, int EPT>
__global__ void __launch_bounds__(kThreads)
    attention_backward_kernel(int64_t seq, int dh, float scale, const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, const T* __restrict__ d_o, const float* __restrict__ lse,
                              const float* __restrict__ delta, T* __restrict__ dk, T* __restrict__ dv,
                              float* __restrict__ dq_accum) {
  constexpr int D = kLanes * EPT;
  __shared__ float ks[kRows][D];
  __shared__ float qs[kQueryTile][D];
  __shared__ float dos[kQueryTile][D];
  __shared__ float dss[kQueryTile][kRows];
  __shared__ float lse_s[kQueryTile];
  __shared__ float delta_s[kQueryTile];
  const int64_t bh = blockIdx.x;
  const int64_t k_tile = blockIdx.y;
  const int key = threadIdx.x / kLanes, sub = threadIdx.x % kLanes;
  const int64_t k0 = k_tile * kRows;
  const int64_t kj = k0 + key;
  const bool valid = kj < seq;
  const int64_t base = bh * seq * dh;
  const float scale_log2 = scale * kLog2e;

  float kr[EPT], vr[EPT], dk_acc[EPT], dv_acc[EPT];
#pragma unroll
  for (int e = 0; e < EPT; ++e) {
    const int d = sub + kLanes * e;
    const bool in = valid && d < dh;
    kr[e] = in ? load_f32(k, base + kj * dh + d) : 0.0f;
    vr[e] = in ? load_f32(v, base + kj * dh + d) : 0.0f;
    dk_acc[e] = dv_acc[e] = 0.0f;
  }
  for (int idx = threadIdx.x; idx < kRows * D; idx += kThreads) {
    const int j = idx / D, d = idx % D;
    ks[j][d] = (k0 + j < seq && d < dh) ? load_f32(k, base + (k0 + j) * dh + d) : 0.0f;
  }

  // Queries at or after the block's first key; the first tile may start below it.
  for (int64_t q0 = (k0 / kQueryTile) * kQueryTile; q0 < seq; q0 += kQueryTile) {
    __syncthreads();  // ks written / previous tile consumed
    for (int idx = threadIdx.x; idx < kQueryTile * D; idx += kThreads) {
      const int i = idx / D, d = idx % D;
      const int64_t qi = q0 + i;
      const bool in = qi < seq && d < dh;
      qs[i][d] = in ? load_f32(q, base + qi * dh + d) : 0.0f;
      dos[i][d] = in ? load_f32(d_o, base + qi * dh + d) : 0.0f;
    }
    if (threadIdx.x < kQueryTile) {
      const int64_t qi = q0 + threadIdx.x;
      lse_s[threadIdx.x] = qi < seq ? lse[bh * seq + qi] * kLog2e : 0.0f;
      delta_s[threadIdx.x] = qi < seq ? delta[bh * seq + qi] : 0.0f;
    }
    __syncthreads();

    for (int i = 0; i < kQueryTile; ++i) {
      const int64_t qi = q0 + i;
      float sdot = 0.0f, pdot = 0.0f;
#pragma unroll
      for (int e = 0; e < EPT; ++e) {
        sdot += kr[e] * qs[i][sub + kLanes * e];
        pdot += vr[e] * dos[i][sub + kLanes * e];
      }
      sdot = group_sum<kLanes>(sdot);
      pdot = group_sum<kLanes>(pdot);
      const bool live = valid && qi < seq && kj <= qi;
      const float p = live ? exp2f(sdot * scale_log2 - lse_s[i]) : 0.0f;
      const float ds = p * (pdot - delta_s[i]);
#pragma unroll
      for (int e = 0; e < EPT; ++e) {
        dv_acc[e] += p * dos[i][sub + kLanes * e];
        dk_acc[e] += ds * qs[i][sub + kLanes * e];
      }
      if (sub == 0) dss[i][key] = ds;
    }
    __syncthreads();

    // dQ[q0 + i, d] += scale * sum over this block's keys of dS[i, j] k[j, d].
    for (int idx = threadIdx.x; idx < kQueryTile * D; idx += kThreads) {
      const int i = idx / D, d = idx % D;
      const int64_t qi = q0 + i;
      if (d >= dh || qi >= seq) continue;
      float a = 0.0f;
#pragma unroll 8
      for (int j = 0; j < kRows; ++j) a += dss[i][j] * ks[j][d];
      atomicAdd(dq_accum + base + qi * dh + d, a * scale);
    }
  }

  if (!valid) return;
#pragma unroll
  for (int e = 0; e < EPT; ++e) {
    const int d = sub + kLanes * e;
    if (d >= dh) continue;
    store_f32(dk, base + kj * dh + d, dk_acc[e] * scale);
    store_f32(dv, base + kj * dh + d, dv_acc[e]);
  }
}

template <class T>
__global__ void dq_store_kernel(int64_t count, const float* __restrict__ dq_accum, T* __restrict__ dq) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    store_f32(dq, i, dq_accum[i]);
}

int ept_for(int64_t head_dim) {
  if (head_dim <= 16) return 2;
  if (head_dim <= 32) return 4;
  if (head_dim <= 64) return 8;
  return 16;
}

dim3 attention_grid(int64_t batch, int64_t heads, int64_t seq) {
  const int64_t bh = batch * heads;
  const int64_t tiles = (seq + kRows - 1) / kRows;
  if (bh > 0x7fffffffll || tiles > 65535)
    throw Error("attention: batch*heads " + std::to_string(bh) + " or sequence " + std::to_string(seq) +
                " exceeds one launch (at most 65535 tiles of 32 rows)");
  return dim3(static_cast<unsigned>(bh), static_cast<unsigned>(tiles));
}

template <class T>
void forward_typed(int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const T* q, const T* k, const T* v,
                   T* o, float* lse, cudaStream_t stream) {
  const dim3 grid = attention_grid(batch, heads, seq);
  const float scale_log2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))) * kLog2e;
  const int dh = static_cast<int>(head_dim);
  switch (ept_for(head_dim)) {
    case 2: attention_forward_kernel<T, 2><<<grid, kThreads, 0, stream>>>(seq, dh, scale_log2, q, k, v, o, lse); break;
    case 4: attention_forward_kernel<T, 4><<<grid, kThreads, 0, stream>>>(seq, dh, scale_log2, q, k, v, o, lse); break;
    case 8: attention_forward_kernel<T, 8><<<grid, kThreads, 0, stream>>>(seq, dh, scale_log2, q, k, v, o, lse); break;
    default:
      attention_forward_kernel<T, 16><<<grid, kThreads, 0, stream>>>(seq, dh, scale_log2, q, k, v, o, lse);
      break;
  }
  CUDA_CHECK_LAUNCH();
}

template <class T>
void backward_typed(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const T* q, const T* k,
                    const T* v, const T* o, const T* d_o, const float* lse, T* dq, T* dk, T* dv, float* delta,
                    float* dq_accum, cudaStream_t stream) {
  const dim3 grid = attention_grid(batch, heads, seq);
  const int64_t rows = batch * heads * seq;
  const int dh = static_cast<int>(head_dim);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim)));
  CUDA_CHECK(cudaMemsetAsync(dq_accum, 0, static_cast<size_t>(rows * head_dim) * sizeof(float), stream));
  attention_delta_kernel<T>
      <<<static_cast<unsigned>((rows + kThreads / 32 - 1) / (kThreads / 32)), kThreads, 0, stream>>>(rows, dh, o, d_o,
                                                                                                     delta);
  CUDA_CHECK_LAUNCH();
#if !defined(TPSIM_HIP)
  if (attention_tc_runs(e, batch, heads, seq, head_dim)) {
    attention_backward_tc(e, batch, heads, seq, head_dim, q, k, v, d_o, lse, delta, dk, dv, dq_accum, stream);
    const int64_t count = rows * head_dim;
    dq_store_kernel<T><<<grid_for(count, kThreads), kThreads, 0, stream>>>(count, dq_accum, dq);
    CUDA_CHECK_LAUNCH();
    return;
  }
#else
  (void)e;
#endif
  switch (ept_for(head_dim)) {
    case 2:
      attention_backward_kernel<T, 2>
          <<<grid, kThreads, 0, stream>>>(seq, dh, scale, q, k, v, d_o, lse, delta, dk, dv, dq_accum);
      break;
    case 4:
      attention_backward_kernel<T, 4>
          <<<grid, kThreads, 0, stream>>>(seq, dh, scale, q, k, v, d_o, lse, delta, dk, dv, dq_accum);
      break;
    case 8:
      attention_backward_kernel<T, 8>
          <<<grid, kThreads, 0, stream>>>(seq, dh, scale, q, k, v, d_o, lse, delta, dk, dv, dq_accum);
      break;
    default:
      attention_backward_kernel<T, 16>
          <<<grid, kThreads, 0, stream>>>(seq, dh, scale, q, k, v, d_o, lse, delta, dk, dv, dq_accum);
      break;
  }
  CUDA_CHECK_LAUNCH();
  const int64_t count = rows * head_dim;
  dq_store_kernel<T><<<grid_for(count, kThreads), kThreads, 0, stream>>>(count, dq_accum, dq);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool attention_head_dim_supported(int64_t head_dim) { return head_dim >= 1 && head_dim <= kLanes * 16; }

void attention_forward(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q,
                       const void* k, const void* v, void* o, float* lse, cudaStream_t stream) {
  if (!attention_head_dim_supported(head_dim))
    throw Error("attention: head_dim " + std::to_string(head_dim) + " > 128");
#if !defined(TPSIM_HIP)
  if (attention_tc_runs(e, batch, heads, seq, head_dim)) {
    attention_forward_tc(e, batch, heads, seq, head_dim, q, k, v, o, lse, stream);
    return;
  }
#endif
  switch (e) {
    case Elem::kF32:
      forward_typed(batch, heads, seq, head_dim, static_cast<const float*>(q), static_cast<const float*>(k),
                    static_cast<const float*>(v), static_cast<float*>(o), lse, stream);
      break;
    case Elem::kBf16:
      forward_typed(batch, heads, seq, head_dim, static_cast<const bf16*>(q), static_cast<const bf16*>(k),
                    static_cast<const bf16*>(v), static_cast<bf16*>(o), lse, stream);
      break;
    case Elem::kF16:
      forward_typed(batch, heads, seq, head_dim, static_cast<const __half*>(q), static_cast<const __half*>(k),
                    static_cast<const __half*>(v), static_cast<__half*>(o), lse, stream);
      break;
    default: throw Error(std::string("attention in ") + elem_name(e) + " is not implemented");
  }
}

void attention_backward(Elem e, int64_t batch, int64_t heads, int64_t seq, int64_t head_dim, const void* q,
                        const void* k, const void* v, const void* o, const void* d_o, const float* lse, void* dq,
                        void* dk, void* dv, float* delta, float* dq_accum, cudaStream_t stream) {
  if (!attention_head_dim_supported(head_dim))
    throw Error("attention: head_dim " + std::to_string(head_dim) + " > 128");
  switch (e) {
    case Elem::kF32:
      backward_typed(e, batch, heads, seq, head_dim, static_cast<const float*>(q), static_cast<const float*>(k),
                     static_cast<const float*>(v), static_cast<const float*>(o), static_cast<const float*>(d_o), lse,
                     static_cast<float*>(dq), static_cast<float*>(dk), static_cast<float*>(dv), delta, dq_accum,
                     stream);
      break;
    case Elem::kBf16:
      backward_typed(e, batch, heads, seq, head_dim, static_cast<const bf16*>(q), static_cast<const bf16*>(k),
                     static_cast<const bf16*>(v), static_cast<const bf16*>(o), static_cast<const bf16*>(d_o), lse,
                     static_cast<bf16*>(dq), static_cast<bf16*>(dk), static_cast<bf16*>(dv), delta, dq_accum, stream);
      break;
    case Elem::kF16:
      backward_typed(e, batch, heads, seq, head_dim, static_cast<const __half*>(q), static_cast<const __half*>(k),
                     static_cast<const __half*>(v), static_cast<const __half*>(o), static_cast<const __half*>(d_o), lse,
                     static_cast<__half*>(dq), static_cast<__half*>(dk), static_cast<__half*>(dv), delta, dq_accum,
                     stream);
      break;
    default: throw Error(std::string("attention in ") + elem_name(e) + " is not implemented");
  }
}

}  // namespace tpsim::TPSIM_GPU_NS
