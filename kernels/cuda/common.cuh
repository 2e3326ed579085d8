// What every CUDA source of the GPU backend shares, and what lets hipcc compile the same sources
// (ggml's approach): under TPSIM_HIP the CUDA runtime names are renamed to HIP's by
// kernels/hip/cuda_to_hip.hpp, and the few things that differ (warp shuffles, fp16 headers) are
// wrapped here.
//
// Element formats are our own plain structs where the platforms' types differ (bf16, fp8 e4m3),
// converted with the bit operations of formats.hpp, which give the same bits on the host, on CUDA
// and on HIP; fp16 uses the platform's __half.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#if !defined(TPSIM_HIP)
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#endif

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/formats.hpp"

namespace tpsim::TPSIM_GPU_NS {

// Storage formats of device buffers.
enum class Elem : uint8_t { kF32, kBf16, kF16, kE4m3, kI64, kF64 };

inline size_t elem_bytes(Elem e) {
  switch (e) {
    case Elem::kF32: return 4;
    case Elem::kBf16: return 2;
    case Elem::kF16: return 2;
    case Elem::kE4m3: return 1;
    case Elem::kI64: return 8;
    case Elem::kF64: return 8;
  }
  return 0;
}

inline const char* elem_name(Elem e) {
  switch (e) {
    case Elem::kF32: return "fp32";
    case Elem::kBf16: return "bf16";
    case Elem::kF16: return "fp16";
    case Elem::kE4m3: return "fp8 e4m3";
    case Elem::kI64: return "int64";
    case Elem::kF64: return "fp64";
  }
  return "?";
}

// bf16: the upper half of an IEEE fp32 bit pattern, as the reference kernels store it.
struct bf16 {
  uint16_t bits;
};
// fp8 e4m3 (OCP E4M3FN: bias 7, no infinities, 0x7f/0xff NaN, largest finite 448).
struct e4m3 {
  uint8_t bits;
};

// Conversions (formats.hpp) used unqualified by the kernels.
using gpu::bf16_to_float;
using gpu::bits_to_float;
using gpu::e4m3_to_float;
using gpu::float_to_bf16;
using gpu::float_to_bits;
using gpu::float_to_e4m3;
using gpu::half_bits_to_float;

// ---- element loads and stores in fp32 ----

__device__ inline float load_f32(const float* p, int64_t i) { return p[i]; }
__device__ inline float load_f32(const bf16* p, int64_t i) { return bf16_to_float(p[i].bits); }
__device__ inline float load_f32(const __half* p, int64_t i) { return __half2float(p[i]); }
__device__ inline float load_f32(const e4m3* p, int64_t i) { return e4m3_to_float(p[i].bits); }

__device__ inline void store_f32(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store_f32(bf16* p, int64_t i, float v) { p[i].bits = float_to_bf16(v); }
__device__ inline void store_f32(__half* p, int64_t i, float v) { p[i] = __float2half_rn(v); }
__device__ inline void store_f32(e4m3* p, int64_t i, float v) { p[i].bits = float_to_e4m3(v); }

// Butterfly exchange within groups of up to 32 lanes: every lane of the group gets the result.
// All lanes of the warp (CUDA) or wavefront (HIP) must reach the call.
__device__ inline float shfl_xor(float v, int lane_mask) {
#if defined(TPSIM_HIP)
  return __shfl_xor(v, lane_mask);
#else
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
#endif
}

// Sum over a group of `width` consecutive lanes (width a power of two, at most 32).
template <int width>
__device__ inline float group_sum(float v) {
#pragma unroll
  for (int o = width / 2; o > 0; o /= 2) v += shfl_xor(v, o);
  return v;
}
template <int width>
__device__ inline float group_max(float v) {
#pragma unroll
  for (int o = width / 2; o > 0; o /= 2) v = fmaxf(v, shfl_xor(v, o));
  return v;
}

// Blocks of 1-D grid-stride kernels: enough to fill any current GPU, capped by the work.
inline unsigned grid_for(int64_t items, int threads, int64_t max_blocks = 4096) {
  int64_t blocks = (items + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

// Device memory, freed when it goes out of scope (movable, not copyable).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes_ > 0) CUDA_CHECK(cudaMalloc(&p_, bytes_));
  }
  ~DeviceBuffer() {
    if (p_) (void)cudaFree(p_);  // nothing to report from a destructor
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tpsim::TPSIM_GPU_NS
