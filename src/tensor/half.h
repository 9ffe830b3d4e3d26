#pragma once
// Scalar conversions between float32 and the 16/8-bit float formats (IEEE 754 binary16,
// bfloat16, OCP FP8 E4M3/E5M2, E8M0 and UE4M3 scales). Bit-exact with ggml's reference
// conversions (ggml-impl.h: ggml_compute_fp16_to_fp32, ggml_compute_bf16_to_fp32).
#include <cstdint>
#include <cstring>

namespace ft {

inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

/** IEEE binary16 -> float32, exact (subnormals, inf, NaN preserved). */
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) {
    if (mant == 0) return bits_to_f32(sign);
    // subnormal: normalise
    int e = -1;
    do { ++e; mant <<= 1; } while ((mant & 0x400) == 0);
    mant &= 0x3ff;
    return bits_to_f32(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | mant << 13);
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | mant << 13);
  return bits_to_f32(sign | (exp + 127 - 15) << 23 | mant << 13);
}

/** float32 -> IEEE binary16, round to nearest even, overflow to inf, NaN kept NaN. */
inline uint16_t f32_to_f16(float f) {
  uint32_t x = f32_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  x &= 0x7fffffff;
  if (x >= 0x7f800000) return sign | 0x7c00 | (x > 0x7f800000 ? 0x200 : 0);
  if (x >= 0x477ff000) return sign | 0x7c00;  // rounds to >= 65520 -> inf
  if (x < 0x38800000) {                        // result is subnormal or zero
    if (x < 0x33000000) return sign;           // < half the smallest subnormal
    uint32_t mant = (x & 0x7fffff) | 0x800000;
    int shift = 113 - static_cast<int>(x >> 23) + 13;  // 126-14 ... into 10-bit mantissa
    uint32_t r = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1))) ++r;
    return sign | static_cast<uint16_t>(r);
  }
  uint32_t r = x - 0x38000000;  // rebias exponent 127 -> 15
  uint32_t h = r >> 13, rem = r & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return sign | static_cast<uint16_t>(h);
}

/** bfloat16 -> float32, exact. */
inline float bf16_to_f32(uint16_t b) { return bits_to_f32(static_cast<uint32_t>(b) << 16); }

/** float32 -> bfloat16, round to nearest even; NaN stays a quiet NaN. */
inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);
  return static_cast<uint16_t>((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

}  // namespace ft
