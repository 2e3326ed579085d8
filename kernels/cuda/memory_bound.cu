// The memory-bound kernels of a training step (model/ops.hpp MemKind), the input generators, the
// L2 flush and the copy kernel. Plain CUDA C++ that hipcc also compiles (kernels/hip/).
//
// Every kernel reads and writes its tensors once where the op allows (row-wise ops keep the row
// in L1/L2 between passes), accumulates in fp32 and stores in the tensor's format. Elementwise
// kernels move 16 bytes per load and store, the widths the vendor libraries use.
#include <cmath>

#include "kernels/cuda/gpu_kernels.cuh"

namespace tpsim::TPSIM_GPU_NS {

void throw_cuda_error(cudaError_t status, const char* statement, const char* file, int line) {
#if defined(TPSIM_HIP)
  const std::string api = "HIP error ";
#else
  const std::string api = "CUDA error ";
#endif
  throw_api_error(api + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")", statement, file, line);
}

namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 32;  // lanes that share a row (one warp on NVIDIA)
constexpr int kRowsPerBlock = kThreads / kGroup;

#define TPSIM_DISPATCH_FLOAT(e, T, ...)                                                                       \
  switch (e) {                                                                                                \
    case Elem::kF32: {                                                                                        \
      using T = float;                                                                                        \
      __VA_ARGS__;                                                                                            \
      break;                                                                                                  \
    }                                                                                                         \
    case Elem::kBf16: {                                                                                       \
      using T = bf16;                                                                                         \
      __VA_ARGS__;                                                                                            \
      break;                                                                                                  \
    }                                                                                                         \
    case Elem::kF16: {                                                                                        \
      using T = __half;                                                                                       \
      __VA_ARGS__;                                                                                            \
      break;                                                                                                  \
    }                                                                                                         \
    default: throw Error(std::string("GPU kernel: activations in ") + elem_name(e) + " are not implemented"); \
  }

__device__ inline int64_t global_thread() { return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; }
__device__ inline int64_t grid_threads() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

// V elements of T moved as one 16-byte (or 8-byte) access.
template <class T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};
template <class T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));

// ---- inputs and housekeeping ----

__device__ inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

template <class T>
__global__ void fill_uniform_kernel(T* p, int64_t count, uint64_t seed, float lo, float span) {
  for (int64_t i = global_thread(); i < count; i += grid_threads()) {
    const float u = static_cast<float>(splitmix64(seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull)) >> 40) *
                    (1.0f / 16777216.0f);
    store_f32(p, i, lo + span * u);
  }
}

__global__ void fill_ids_kernel(int64_t* ids, int64_t count, int64_t rows, uint64_t seed) {
  for (int64_t i = global_thread(); i < count; i += grid_threads())
    ids[i] = static_cast<int64_t>(splitmix64(seed ^ (static_cast<uint64_t>(i) * 0xd1342543de82ef95ull)) %
                                  static_cast<uint64_t>(rows));
}

__global__ void fill_positions_kernel(int64_t* ids, int64_t count, int64_t period) {
  for (int64_t i = global_thread(); i < count; i += grid_threads()) ids[i] = i % period;
}

__global__ void flush_kernel(uint4* p, int64_t count, uint32_t value) {
  const uint4 v = make_uint4(value, value + 1, value + 2, value + 3);
  for (int64_t i = global_thread(); i < count; i += grid_threads()) p[i] = v;
}

__global__ void copy_kernel(uint4* __restrict__ dst, const uint4* __restrict__ src, int64_t count) {
  for (int64_t i = global_thread(); i < count; i += grid_threads()) dst[i] = src[i];
}

// ---- elementwise ----

template <class T, class F>
__global__ void map1_kernel(int64_t count, const T* x, T* y, F f) {
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  const int64_t packs = count / V;
  for (int64_t i = global_thread(); i < packs; i += grid_threads()) {
    const P in = reinterpret_cast<const P*>(x)[i];
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) store_f32(out.v, j, f(load_f32(in.v, j)));
    reinterpret_cast<P*>(y)[i] = out;
  }
  for (int64_t i = packs * V + global_thread(); i < count; i += grid_threads()) store_f32(y, i, f(load_f32(x, i)));
}

template <class T, class F>
__global__ void map2_kernel(int64_t count, const T* a, const T* b, T* y, F f) {
  constexpr int V = kVec<T>;
  using P = Pack<T, V>;
  const int64_t packs = count / V;
  for (int64_t i = global_thread(); i < packs; i += grid_threads()) {
    const P pa = reinterpret_cast<const P*>(a)[i];
    const P pb = reinterpret_cast<const P*>(b)[i];
    P out;
#pragma unroll
    for (int j = 0; j < V; ++j) store_f32(out.v, j, f(load_f32(pa.v, j), load_f32(pb.v, j)));
    reinterpret_cast<P*>(y)[i] = out;
  }
  for (int64_t i = packs * V + global_thread(); i < count; i += grid_threads())
    store_f32(y, i, f(load_f32(a, i), load_f32(b, i)));
}

template <class S, class D>
__global__ void convert_kernel(int64_t count, const S* __restrict__ x, D* __restrict__ y) {
  constexpr int V = 4;
  using PS = Pack<S, V>;
  using PD = Pack<D, V>;
  const int64_t packs = count / V;
  for (int64_t i = global_thread(); i < packs; i += grid_threads()) {
    const PS in = reinterpret_cast<const PS*>(x)[i];
    PD out;
#pragma unroll
    for (int j = 0; j < V; ++j) store_f32(out.v, j, load_f32(in.v, j));
    reinterpret_cast<PD*>(y)[i] = out;
  }
  for (int64_t i = packs * V + global_thread(); i < count; i += grid_threads()) store_f32(y, i, load_f32(x, i));
}

// GELU, tanh approximation (PyTorch's approximate="tanh", the reference's).
constexpr float kGeluC = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluA = 0.044715f;

struct GeluForward {
  __device__ float operator()(float x) const {
    const float u = kGeluC * (x + kGeluA * x * x * x);
    return 0.5f * x * (1.0f + tanhf(u));
  }
};
struct GeluBackward {
  __device__ float operator()(float dy, float x) const {
    const float u = kGeluC * (x + kGeluA * x * x * x);
    const float t = tanhf(u);
    const float du = kGeluC * (1.0f + 3.0f * kGeluA * x * x);
    return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct Scale {
  float c;
  __device__ float operator()(float x) const { return x * c; }
};

// ---- row-wise: one group of kGroup lanes per row ----

template <class T>
__global__ void layer_norm_forward_kernel(int64_t m, int64_t n, const T* __restrict__ x, const T* __restrict__ w,
                                          const T* __restrict__ b, T* __restrict__ y, float* __restrict__ mean,
                                          float* __restrict__ rstd) {
  const int lane = threadIdx.x % kGroup;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kGroup;
  if (row >= m) return;  // the whole group leaves together
  const T* xr = x + row * n;
  float s = 0;
  for (int64_t j = lane; j < n; j += kGroup) s += load_f32(xr, j);
  const float mu = group_sum<kGroup>(s) / static_cast<float>(n);
  float ss = 0;
  for (int64_t j = lane; j < n; j += kGroup) {
    const float d = load_f32(xr, j) - mu;
    ss += d * d;
  }
  const float r = rsqrtf(group_sum<kGroup>(ss) / static_cast<float>(n) + 1e-5f);
  T* yr = y + row * n;
  for (int64_t j = lane; j < n; j += kGroup)
    store_f32(yr, j, (load_f32(xr, j) - mu) * r * load_f32(w, j) + load_f32(b, j));
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = r;
  }
}

template <class T>
__global__ void layer_norm_dx_kernel(int64_t m, int64_t n, const T* __restrict__ dy, const T* __restrict__ x,
                                     const T* __restrict__ w, const float* __restrict__ mean,
                                     const float* __restrict__ rstd, T* __restrict__ dx) {
  const int lane = threadIdx.x % kGroup;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kGroup;
  if (row >= m) return;
  const T* dyr = dy + row * n;
  const T* xr = x + row * n;
  const float mu = mean[row], r = rstd[row];
  float s1 = 0, s2 = 0;
  for (int64_t j = lane; j < n; j += kGroup) {
    const float g = load_f32(dyr, j) * load_f32(w, j);
    s1 += g;
    s2 += g * (load_f32(xr, j) - mu) * r;
  }
  const float inv_n = 1.0f / static_cast<float>(n);
  const float mean_g = group_sum<kGroup>(s1) * inv_n;
  const float mean_gx = group_sum<kGroup>(s2) * inv_n;
  T* dxr = dx + row * n;
  for (int64_t j = lane; j < n; j += kGroup) {
    const float g = load_f32(dyr, j) * load_f32(w, j);
    const float xhat = (load_f32(xr, j) - mu) * r;
    store_f32(dxr, j, r * (g - mean_g - xhat * mean_gx));
  }
}

// ---- column sums: blocks of 32 columns x a slice of rows, partial sums per slice ----

constexpr int kColTile = 32;
constexpr int kColRowsPerBlock = kThreads / kColTile;  // 8 lanes of rows

// partials[slice, c] = sum over the slice's rows of dy[r, c] (and, for LayerNorm weights,
// partials[slices + slice, c] = sum of dy * xhat).
template <class T, bool kLayerNormWeights>
__global__ void column_partials_kernel(int64_t m, int64_t n, int64_t slices, const T* __restrict__ dy,
                                       const T* __restrict__ x, const float* __restrict__ mean,
                                       const float* __restrict__ rstd, float* __restrict__ partials) {
  __shared__ float sum_dy[kColRowsPerBlock][kColTile];
  __shared__ float sum_dyx[kColRowsPerBlock][kColTile];
  const int tx = threadIdx.x % kColTile, ty = threadIdx.x / kColTile;
  const int64_t c = blockIdx.x * static_cast<int64_t>(kColTile) + tx;
  const int64_t slice = blockIdx.y;
  const int64_t rows_per_slice = (m + slices - 1) / slices;
  const int64_t r0 = slice * rows_per_slice;
  const int64_t r1 = r0 + rows_per_slice < m ? r0 + rows_per_slice : m;
  float a = 0, g = 0;
  if (c < n) {
    for (int64_t r = r0 + ty; r < r1; r += kColRowsPerBlock) {
      const float d = load_f32(dy, r * n + c);
      a += d;
      if constexpr (kLayerNormWeights) g += d * (load_f32(x, r * n + c) - mean[r]) * rstd[r];
    }
  }
  sum_dy[ty][tx] = a;
  sum_dyx[ty][tx] = g;
  __syncthreads();
  if (ty == 0 && c < n) {
    for (int i = 1; i < kColRowsPerBlock; ++i) {
      a += sum_dy[i][tx];
      g += sum_dyx[i][tx];
    }
    partials[slice * n + c] = a;
    if constexpr (kLayerNormWeights) partials[(slices + slice) * n + c] = g;
  }
}

// out[c] = sum over slices of partials[slice, c].
template <class T>
__global__ void column_finish_kernel(int64_t n, int64_t slices, const float* __restrict__ partials,
                                     T* __restrict__ out) {
  const int64_t c = global_thread();
  if (c >= n) return;
  float s = 0;
  for (int64_t i = 0; i < slices; ++i) s += partials[i * n + c];
  store_f32(out, c, s);
}

// ---- cross-entropy: one block per row, online softmax ----

struct MaxSum {
  float m, s;
};

__device__ inline MaxSum combine(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * __expf(a.m - m) + b.s * __expf(b.m - m)};
}

template <class T>
__global__ void cross_entropy_kernel(int64_t n, T* logits, const int64_t* __restrict__ targets,
                                     float* __restrict__ loss) {
  __shared__ MaxSum partial[kThreads / kGroup];
  __shared__ float lse_shared;
  const int64_t row = blockIdx.x;
  T* xr = logits + row * n;
  const int64_t target = targets[row];
  const float target_logit = threadIdx.x == 0 ? load_f32(xr, target) : 0.0f;  // before anyone writes
  MaxSum t{-INFINITY, 0.0f};
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float v = load_f32(xr, j);
    if (v > t.m) {
      t.s = t.s * __expf(t.m - v) + 1.0f;
      t.m = v;
    } else {
      t.s += __expf(v - t.m);
    }
  }
#pragma unroll
  for (int o = kGroup / 2; o > 0; o /= 2) {
    MaxSum other{shfl_xor(t.m, o), shfl_xor(t.s, o)};
    t = combine(t, other);
  }
  if (threadIdx.x % kGroup == 0) partial[threadIdx.x / kGroup] = t;
  __syncthreads();
  if (threadIdx.x == 0) {
    MaxSum all = partial[0];
    for (int i = 1; i < kThreads / kGroup; ++i) all = combine(all, partial[i]);
    const float lse = all.m + logf(all.s);
    lse_shared = lse;
    loss[row] = lse - target_logit;
  }
  __syncthreads();
  const float lse = lse_shared;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    store_f32(xr, j, __expf(load_f32(xr, j) - lse) - (j == target ? 1.0f : 0.0f));
}

// ---- embeddings ----

template <class T>
__global__ void embedding_forward_kernel(int64_t m, int64_t n, const T* __restrict__ table,
                                         const int64_t* __restrict__ ids, T* __restrict__ y) {
  const int lane = threadIdx.x % kGroup;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kGroup;
  if (row >= m) return;
  const T* src = table + ids[row] * n;
  T* dst = y + row * n;
  for (int64_t j = lane; j < n; j += kGroup) dst[j] = src[j];
}

__global__ void histogram_kernel(int64_t m, const int64_t* __restrict__ ids, int64_t* counts) {
  for (int64_t i = global_thread(); i < m; i += grid_threads())
    atomicAdd(reinterpret_cast<unsigned long long*>(counts + ids[i]), 1ull);
}

constexpr int kScanThreads = 1024;

// offsets[r] = sum of counts[0..r); counts[r] becomes the same value (the scatter's cursor);
// offsets[rows] = m. One block.
__global__ void exclusive_scan_kernel(int64_t rows, int64_t* counts, int64_t* offsets) {
  __shared__ int64_t s[kScanThreads];
  int64_t carry = 0;
  for (int64_t base = 0; base < rows; base += kScanThreads) {
    const int64_t i = base + threadIdx.x;
    const int64_t v = i < rows ? counts[i] : 0;
    s[threadIdx.x] = v;
    __syncthreads();
    for (int o = 1; o < kScanThreads; o *= 2) {
      const int64_t t = static_cast<int>(threadIdx.x) >= o ? s[threadIdx.x - o] : 0;
      __syncthreads();
      s[threadIdx.x] += t;
      __syncthreads();
    }
    if (i < rows) {
      const int64_t excl = carry + s[threadIdx.x] - v;
      offsets[i] = excl;
      counts[i] = excl;
    }
    carry += s[kScanThreads - 1];
    __syncthreads();
  }
  if (threadIdx.x == 0) offsets[rows] = carry;
}

__global__ void scatter_kernel(int64_t m, const int64_t* __restrict__ ids, int64_t* cursor,
                               int64_t* __restrict__ order) {
  for (int64_t i = global_thread(); i < m; i += grid_threads()) {
    const unsigned long long pos = atomicAdd(reinterpret_cast<unsigned long long*>(cursor + ids[i]), 1ull);
    order[pos] = i;
  }
}

template <class T>
__global__ void segment_sum_kernel(int64_t rows, int64_t n, const T* __restrict__ dy,
                                   const int64_t* __restrict__ offsets, const int64_t* __restrict__ order,
                                   T* __restrict__ dtable) {
  const int lane = threadIdx.x % kGroup;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.x / kGroup;
  if (row >= rows) return;
  const int64_t t0 = offsets[row], t1 = offsets[row + 1];
  T* dst = dtable + row * n;
  for (int64_t j = lane; j < n; j += kGroup) {
    float acc = 0;
    for (int64_t t = t0; t < t1; ++t) acc += load_f32(dy, order[t] * n + j);
    store_f32(dst, j, acc);
  }
}

// ---- fp8 cast-transpose: 32 x 32 tiles through shared memory ----

template <class T>
__global__ void cast_transpose_kernel(int64_t m, int64_t n, const T* __restrict__ x, e4m3* __restrict__ y,
                                      e4m3* __restrict__ yt, uint32_t* amax_bits) {
  __shared__ float tile[32][33];
  __shared__ float block_max[kThreads / kGroup];
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;  // 32 x 8
  const int64_t r0 = blockIdx.y * 32ll, c0 = blockIdx.x * 32ll;
  float amax = 0;
  for (int i = ty; i < 32; i += 8) {
    const int64_t r = r0 + i, c = c0 + tx;
    float v = 0;
    if (r < m && c < n) {
      v = load_f32(x, r * n + c);
      y[r * n + c].bits = float_to_e4m3(v);
      amax = fmaxf(amax, fabsf(v));
    }
    tile[i][tx] = v;
  }
  __syncthreads();
  for (int i = ty; i < 32; i += 8) {
    const int64_t c = c0 + i, r = r0 + tx;  // yt[c, r] = x[r, c]
    if (r < m && c < n) yt[c * m + r].bits = float_to_e4m3(tile[tx][i]);
  }
  amax = group_max<32>(amax);
  if (tx == 0) block_max[ty] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < 8; ++i) amax = fmaxf(amax, block_max[i]);
    atomicMax(amax_bits, float_to_bits(amax));  // non-negative floats order as their bits
  }
}

// ---- optimizer ----

constexpr int kNormBlocks = 1024;

__global__ void sum_of_squares_kernel(int64_t count, const float* __restrict__ x, double* __restrict__ partials) {
  __shared__ float group_sums[kThreads / kGroup];
  float s = 0;
  for (int64_t i = global_thread(); i < count; i += grid_threads()) {
    const float v = x[i];
    s += v * v;
  }
  s = group_sum<kGroup>(s);
  if (threadIdx.x % kGroup == 0) group_sums[threadIdx.x / kGroup] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    double b = 0;
    for (int i = 0; i < kThreads / kGroup; ++i) b += group_sums[i];
    partials[blockIdx.x] = b;
  }
}

__global__ void sum_partials_kernel(int count, const double* __restrict__ partials, double* __restrict__ result) {
  __shared__ double s[kThreads];
  double a = 0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) a += partials[i];
  s[threadIdx.x] = a;
  __syncthreads();
  for (int o = kThreads / 2; o > 0; o /= 2) {
    if (static_cast<int>(threadIdx.x) < o) s[threadIdx.x] += s[threadIdx.x + o];
    __syncthreads();
  }
  if (threadIdx.x == 0) *result = s[0];
}

struct AdamWDevice {
  float lr, beta1, beta2, eps, weight_decay, inv_c1, inv_c2;
};

__device__ inline void adamw_one(float& p, float g, float& m, float& v, const AdamWDevice& h) {
  m = h.beta1 * m + (1.0f - h.beta1) * g;
  v = h.beta2 * v + (1.0f - h.beta2) * g * g;
  const float update = (m * h.inv_c1) / (sqrtf(v * h.inv_c2) + h.eps) + h.weight_decay * p;
  p -= h.lr * update;
}

__global__ void adamw_kernel(int64_t count, float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, AdamWDevice h) {
  using P = Pack<float, 4>;
  const int64_t packs = count / 4;
  for (int64_t i = global_thread(); i < packs; i += grid_threads()) {
    P pp = reinterpret_cast<P*>(p)[i], pm = reinterpret_cast<P*>(m)[i], pv = reinterpret_cast<P*>(v)[i];
    const P pg = reinterpret_cast<const P*>(g)[i];
#pragma unroll
    for (int j = 0; j < 4; ++j) adamw_one(pp.v[j], pg.v[j], pm.v[j], pv.v[j], h);
    reinterpret_cast<P*>(p)[i] = pp;
    reinterpret_cast<P*>(m)[i] = pm;
    reinterpret_cast<P*>(v)[i] = pv;
  }
  for (int64_t i = packs * 4 + global_thread(); i < count; i += grid_threads()) adamw_one(p[i], g[i], m[i], v[i], h);
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

void check_grid_rows(int64_t rows, const char* what) {
  if ((rows + kRowsPerBlock - 1) / kRowsPerBlock > 0x7fffffffll)
    throw Error(std::string(what) + ": " + std::to_string(rows) + " rows exceed one launch");
}

}  // namespace

// ---- launchers ----

void fill_uniform(void* p, Elem e, int64_t count, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  const unsigned blocks = grid_for(count, kThreads);
  switch (e) {
    case Elem::kF32:
      fill_uniform_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(p), count, seed, lo, hi - lo);
      break;
    case Elem::kBf16:
      fill_uniform_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<bf16*>(p), count, seed, lo, hi - lo);
      break;
    case Elem::kF16:
      fill_uniform_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<__half*>(p), count, seed, lo, hi - lo);
      break;
    case Elem::kE4m3:
      fill_uniform_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<e4m3*>(p), count, seed, lo, hi - lo);
      break;
    case Elem::kI64:
    case Elem::kF64:
      throw Error(std::string("fill_uniform: ") + elem_name(e) + " buffers are not filled with random values");
  }
  CUDA_CHECK_LAUNCH();
}

void fill_ids(int64_t* ids, int64_t count, int64_t rows, uint64_t seed, cudaStream_t stream) {
  fill_ids_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(ids, count, rows, seed);
  CUDA_CHECK_LAUNCH();
}

void fill_positions(int64_t* ids, int64_t count, int64_t period, cudaStream_t stream) {
  fill_positions_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(ids, count, period);
  CUDA_CHECK_LAUNCH();
}

void flush_write(void* p, size_t bytes, uint32_t value, cudaStream_t stream) {
  const int64_t count = static_cast<int64_t>(bytes / sizeof(uint4));
  flush_kernel<<<grid_for(count, kThreads, 8192), kThreads, 0, stream>>>(static_cast<uint4*>(p), count, value);
  CUDA_CHECK_LAUNCH();
}

void copy_bytes(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (bytes % sizeof(uint4) != 0)
    throw Error("copy_bytes: " + std::to_string(bytes) + " bytes is not a multiple of 16");
  const int64_t count = static_cast<int64_t>(bytes / sizeof(uint4));
  copy_kernel<<<grid_for(count, kThreads, 8192), kThreads, 0, stream>>>(static_cast<uint4*>(dst),
                                                                        static_cast<const uint4*>(src), count);
  CUDA_CHECK_LAUNCH();
}

void layer_norm_forward(Elem e, int64_t m, int64_t n, const void* x, const void* w, const void* b, void* y, float* mean,
                        float* rstd, cudaStream_t stream) {
  check_grid_rows(m, "layer norm");
  TPSIM_DISPATCH_FLOAT(e, T,
                       layer_norm_forward_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(
                           m, n, static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b),
                           static_cast<T*>(y), mean, rstd));
  CUDA_CHECK_LAUNCH();
}

int64_t column_partial_rows(int64_t m) {
  const int64_t slices = (m + 63) / 64;
  return slices < 1 ? 1 : (slices > 128 ? 128 : slices);
}

void layer_norm_backward(Elem e, int64_t m, int64_t n, const void* dy, const void* x, const void* w, const float* mean,
                         const float* rstd, void* dx, float* dw, float* db, float* partials, cudaStream_t stream) {
  check_grid_rows(m, "layer norm backward");
  const int64_t slices = column_partial_rows(m);
  const dim3 grid(static_cast<unsigned>((n + kColTile - 1) / kColTile), static_cast<unsigned>(slices));
  TPSIM_DISPATCH_FLOAT(e, T, {
    layer_norm_dx_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(m, n, static_cast<const T*>(dy),
                                                                    static_cast<const T*>(x), static_cast<const T*>(w),
                                                                    mean, rstd, static_cast<T*>(dx));
    CUDA_CHECK_LAUNCH();
    column_partials_kernel<T, true><<<grid, kThreads, 0, stream>>>(m, n, slices, static_cast<const T*>(dy),
                                                                   static_cast<const T*>(x), mean, rstd, partials);
    CUDA_CHECK_LAUNCH();
  });
  // db from the first set of partials, dw from the second.
  column_finish_kernel<float><<<grid_for(n, kThreads, 1ll << 30), kThreads, 0, stream>>>(n, slices, partials, db);
  CUDA_CHECK_LAUNCH();
  column_finish_kernel<float>
      <<<grid_for(n, kThreads, 1ll << 30), kThreads, 0, stream>>>(n, slices, partials + slices * n, dw);
  CUDA_CHECK_LAUNCH();
}

void gelu_forward(Elem e, int64_t count, const void* x, void* y, cudaStream_t stream) {
  TPSIM_DISPATCH_FLOAT(e, T,
                       map1_kernel<<<grid_for(count / kVec<T> + 1, kThreads), kThreads, 0, stream>>>(
                           count, static_cast<const T*>(x), static_cast<T*>(y), GeluForward{}));
  CUDA_CHECK_LAUNCH();
}

void gelu_backward(Elem e, int64_t count, const void* dy, const void* x, void* dx, cudaStream_t stream) {
  TPSIM_DISPATCH_FLOAT(
      e, T,
      map2_kernel<<<grid_for(count / kVec<T> + 1, kThreads), kThreads, 0, stream>>>(
          count, static_cast<const T*>(dy), static_cast<const T*>(x), static_cast<T*>(dx), GeluBackward{}));
  CUDA_CHECK_LAUNCH();
}

void add(Elem e, int64_t count, const void* a, const void* b, void* y, cudaStream_t stream) {
  TPSIM_DISPATCH_FLOAT(e, T,
                       map2_kernel<<<grid_for(count / kVec<T> + 1, kThreads), kThreads, 0, stream>>>(
                           count, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(y), Add{}));
  CUDA_CHECK_LAUNCH();
}

void scale(Elem e, int64_t count, void* x, float c, cudaStream_t stream) {
  TPSIM_DISPATCH_FLOAT(e, T,
                       map1_kernel<<<grid_for(count / kVec<T> + 1, kThreads), kThreads, 0, stream>>>(
                           count, static_cast<const T*>(x), static_cast<T*>(x), Scale{c}));
  CUDA_CHECK_LAUNCH();
}

void bias_grad(Elem e, int64_t m, int64_t n, const void* dy, void* db, float* partials, cudaStream_t stream) {
  const int64_t slices = column_partial_rows(m);
  const dim3 grid(static_cast<unsigned>((n + kColTile - 1) / kColTile), static_cast<unsigned>(slices));
  TPSIM_DISPATCH_FLOAT(e, T, {
    column_partials_kernel<T, false>
        <<<grid, kThreads, 0, stream>>>(m, n, slices, static_cast<const T*>(dy), nullptr, nullptr, nullptr, partials);
    CUDA_CHECK_LAUNCH();
    column_finish_kernel<T>
        <<<grid_for(n, kThreads, 1ll << 30), kThreads, 0, stream>>>(n, slices, partials, static_cast<T*>(db));
  });
  CUDA_CHECK_LAUNCH();
}

void cross_entropy(Elem e, int64_t m, int64_t n, void* logits, const int64_t* targets, float* loss,
                   cudaStream_t stream) {
  if (m > 0x7fffffffll) throw Error("cross-entropy: " + std::to_string(m) + " rows exceed one launch");
  TPSIM_DISPATCH_FLOAT(e, T,
                       cross_entropy_kernel<T>
                       <<<static_cast<unsigned>(m), kThreads, 0, stream>>>(n, static_cast<T*>(logits), targets, loss));
  CUDA_CHECK_LAUNCH();
}

void embedding_forward(Elem e, int64_t m, int64_t n, const void* table, const int64_t* ids, void* y,
                       cudaStream_t stream) {
  check_grid_rows(m, "embedding");
  TPSIM_DISPATCH_FLOAT(e, T,
                       embedding_forward_kernel<T><<<row_blocks(m), kThreads, 0, stream>>>(
                           m, n, static_cast<const T*>(table), ids, static_cast<T*>(y)));
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(Elem e, int64_t m, int64_t n, int64_t rows, const void* dy, const int64_t* ids, void* dtable,
                        int64_t* counts, int64_t* offsets, int64_t* order, cudaStream_t stream) {
  check_grid_rows(rows, "embedding backward");
  CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(rows + 1) * sizeof(int64_t), stream));
  histogram_kernel<<<grid_for(m, kThreads), kThreads, 0, stream>>>(m, ids, counts);
  CUDA_CHECK_LAUNCH();
  exclusive_scan_kernel<<<1, kScanThreads, 0, stream>>>(rows, counts, offsets);
  CUDA_CHECK_LAUNCH();
  scatter_kernel<<<grid_for(m, kThreads), kThreads, 0, stream>>>(m, ids, counts, order);
  CUDA_CHECK_LAUNCH();
  TPSIM_DISPATCH_FLOAT(e, T,
                       segment_sum_kernel<T><<<row_blocks(rows), kThreads, 0, stream>>>(
                           rows, n, static_cast<const T*>(dy), offsets, order, static_cast<T*>(dtable)));
  CUDA_CHECK_LAUNCH();
}

namespace {
template <class S>
void convert_from(const S* src, Elem dst_e, void* dst, int64_t count, cudaStream_t stream) {
  const unsigned blocks = grid_for(count / 4 + 1, kThreads);
  switch (dst_e) {
    case Elem::kF32: convert_kernel<<<blocks, kThreads, 0, stream>>>(count, src, static_cast<float*>(dst)); break;
    case Elem::kBf16: convert_kernel<<<blocks, kThreads, 0, stream>>>(count, src, static_cast<bf16*>(dst)); break;
    case Elem::kF16: convert_kernel<<<blocks, kThreads, 0, stream>>>(count, src, static_cast<__half*>(dst)); break;
    case Elem::kE4m3: convert_kernel<<<blocks, kThreads, 0, stream>>>(count, src, static_cast<e4m3*>(dst)); break;
    case Elem::kI64:
    case Elem::kF64: throw Error(std::string("convert: no conversion to ") + elem_name(dst_e));
  }
  CUDA_CHECK_LAUNCH();
}
}  // namespace

void convert(Elem src_e, const void* src, Elem dst_e, void* dst, int64_t count, cudaStream_t stream) {
  switch (src_e) {
    case Elem::kF32: convert_from(static_cast<const float*>(src), dst_e, dst, count, stream); break;
    case Elem::kBf16: convert_from(static_cast<const bf16*>(src), dst_e, dst, count, stream); break;
    case Elem::kF16: convert_from(static_cast<const __half*>(src), dst_e, dst, count, stream); break;
    case Elem::kE4m3: convert_from(static_cast<const e4m3*>(src), dst_e, dst, count, stream); break;
    case Elem::kI64:
    case Elem::kF64: throw Error(std::string("convert: no conversion from ") + elem_name(src_e));
  }
}

void cast_transpose_e4m3(Elem e, int64_t m, int64_t n, const void* x, e4m3* y, e4m3* yt, uint32_t* amax_bits,
                         cudaStream_t stream) {
  if ((m + 31) / 32 > 65535) throw Error("fp8 cast-transpose: " + std::to_string(m) + " rows exceed one launch");
  const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>((m + 31) / 32));
  TPSIM_DISPATCH_FLOAT(
      e, T, cast_transpose_kernel<T><<<grid, kThreads, 0, stream>>>(m, n, static_cast<const T*>(x), y, yt, amax_bits));
  CUDA_CHECK_LAUNCH();
}

int grad_norm_blocks() { return kNormBlocks; }

void sum_of_squares(int64_t count, const float* x, double* partials, double* result, cudaStream_t stream) {
  sum_of_squares_kernel<<<kNormBlocks, kThreads, 0, stream>>>(count, x, partials);
  CUDA_CHECK_LAUNCH();
  sum_partials_kernel<<<1, kThreads, 0, stream>>>(kNormBlocks, partials, result);
  CUDA_CHECK_LAUNCH();
}

void adamw(int64_t count, float* p, const float* g, float* m, float* v, const AdamW& h, cudaStream_t stream) {
  AdamWDevice d;
  d.lr = h.lr;
  d.beta1 = h.beta1;
  d.beta2 = h.beta2;
  d.eps = h.eps;
  d.weight_decay = h.weight_decay;
  d.inv_c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(h.step))));
  d.inv_c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(h.step))));
  adamw_kernel<<<grid_for(count / 4 + 1, kThreads), kThreads, 0, stream>>>(count, p, g, m, v, d);
  CUDA_CHECK_LAUNCH();
}

}  // namespace tpsim::TPSIM_GPU_NS
