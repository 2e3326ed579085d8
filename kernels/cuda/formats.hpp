// Number formats as bit operations that give the same bits on the host (g++), under nvcc and
// under hipcc: bf16 (the upper half of an fp32), IEEE fp16 (reading only) and fp8 e4m3 (OCP
// E4M3FN: bias 7, no infinities, 0x7f/0xff NaN, largest finite 448). No CUDA headers needed, so
// the host tests check the device code's rounding (tests/test_kernels_gpu.cpp).
#pragma once

#include <cstdint>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define TPSIM_HD __host__ __device__
#else
#define TPSIM_HD
#endif

namespace tpsim::gpu {

// The same 4 bytes as another type (std::bit_cast, which device code cannot call): a register move
// under nvcc and hipcc.
template <class To, class From>
TPSIM_HD inline To same_bits(From x) {
  static_assert(sizeof(To) == sizeof(From));
  To y;
  __builtin_memcpy(&y, &x, sizeof y);
  return y;
}

TPSIM_HD inline float bits_to_float(uint32_t u) { return same_bits<float>(u); }
TPSIM_HD inline uint32_t float_to_bits(float f) { return same_bits<uint32_t>(f); }

TPSIM_HD inline float bf16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// Round to nearest, ties to even; NaN stays a (quiet) NaN.
TPSIM_HD inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// IEEE binary16 bits to fp32 (exact), for reading fp16 buffers back on the host.
TPSIM_HD inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31, exp = (h >> 10) & 31u, mant = h & 1023u;
  float v;
  if (exp == 0u) {
    v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // subnormal: mant * 2^-24
  } else if (exp == 31u) {
    v = bits_to_float(mant ? 0x7fc00000u : 0x7f800000u);
  } else {
    v = bits_to_float(((exp + 112u) << 23) | (mant << 13));
  }
  return sign ? -v : v;
}

TPSIM_HD inline float e4m3_to_float(uint8_t c) {
  const uint32_t sign = c >> 7, exp = (c >> 3) & 15u, mant = c & 7u;
  float v;
  if (exp == 15u && mant == 7u) {
    v = bits_to_float(0x7fc00000u);
  } else if (exp == 0u) {
    v = static_cast<float>(mant) * (1.0f / 512.0f);  // subnormal: mant * 2^-9
  } else {
    v = bits_to_float(((exp + 120u) << 23) | (mant << 20));  // (1 + mant/8) * 2^(exp-7)
  }
  return sign ? -v : v;
}

// Round to nearest, ties to even, saturating to +-448 (cuBLASLt/TransformerEngine SATFINITE).
// Works on the fp32 bit pattern: no library call, so host and device agree bit for bit.
TPSIM_HD inline uint8_t float_to_e4m3(float f) {
  const uint32_t u = float_to_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7f;               // NaN
  if (a >= 0x43e80000u) return sign | 0x7e;       // >= 464 (halfway past 448) and inf: saturate
  const int e = static_cast<int>(a >> 23) - 127;  // unbiased fp32 exponent
  if (e < -6) {
    // Subnormal in e4m3: multiples of 2^-9. Shift the 24-bit significand so that its units are
    // 2^-9, rounding to nearest even; a result of 8 is the smallest normal (code 0x08).
    if (e < -11) return sign;                          // below 2^-11: less than half the smallest subnormal (2^-9)
    const uint32_t sig = (a & 0x7fffffu) | 0x800000u;  // value = sig * 2^(e-23)
    const int shift = 23 - 9 - e;                      // to units of 2^-9: sig >> (14 - e)
    const uint32_t q = sig >> shift;
    const uint32_t rem = sig & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    const uint32_t r = q + ((rem > half || (rem == half && (q & 1u))) ? 1u : 0u);
    return sign | static_cast<uint8_t>(r);
  }
  // Normal: keep 3 mantissa bits, rounding the other 20 to nearest even; a carry into the
  // exponent is the right result.
  uint32_t m = a & 0x7fffffu;
  uint32_t exp = static_cast<uint32_t>(e + 7);
  uint32_t q = m >> 20;
  const uint32_t rem = m & 0xfffffu;
  if (rem > 0x80000u || (rem == 0x80000u && (q & 1u))) ++q;
  if (q == 8u) {
    q = 0;
    ++exp;
  }
  if (exp > 15u || (exp == 15u && q > 6u)) return sign | 0x7e;  // past 448: saturate
  return sign | static_cast<uint8_t>((exp << 3) | q);
}

}  // namespace tpsim::gpu
