// Element (non-block) types to and from float32: IEEE/bfloat/FP8 floats and integers.
// F16/BF16 use tensor/half.h (bit-exact with ggml's conversions). Integers and F64 convert with
// static_cast<float> (round to nearest). FP8 follows the OCP 8-bit floating point spec:
// E4M3 ("fn": bias 7, no infinities, S.1111.111 is NaN) and E5M2 (the top byte of an IEEE half).
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/kernels.h"
#include "tensor/half.h"

namespace ft::quant {
namespace {

template <typename T>
void ints_to_float(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, src + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
    dst[i] = static_cast<float>(v);
  }
}

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

}  // namespace

void dequant_f32(const uint8_t* src, float* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

void dequant_f16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(load_u16(src + 2 * i));
}

void dequant_bf16(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(load_u16(src + 2 * i));
}

void dequant_f64(const uint8_t* src, float* dst, int64_t n) { ints_to_float<double>(src, dst, n); }
void dequant_i8(const uint8_t* src, float* dst, int64_t n) { ints_to_float<int8_t>(src, dst, n); }
void dequant_i16(const uint8_t* src, float* dst, int64_t n) { ints_to_float<int16_t>(src, dst, n); }
void dequant_i32(const uint8_t* src, float* dst, int64_t n) { ints_to_float<int32_t>(src, dst, n); }
void dequant_i64(const uint8_t* src, float* dst, int64_t n) { ints_to_float<int64_t>(src, dst, n); }
void dequant_u8(const uint8_t* src, float* dst, int64_t n) { ints_to_float<uint8_t>(src, dst, n); }

void dequant_bool(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] ? 1.0f : 0.0f;
}

void dequant_f8_e4m3(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t b = src[i];
    const int exp = (b >> 3) & 0xf, man = b & 0x7;
    float mag;
    if (exp == 0xf && man == 0x7) {
      mag = std::numeric_limits<float>::quiet_NaN();
    } else if (exp == 0) {
      mag = std::ldexp(static_cast<float>(man), -9);  // subnormal: man * 2^-9
    } else {
      mag = std::ldexp(static_cast<float>(8 + man), exp - 10);  // (1 + man/8) * 2^(exp-7)
    }
    dst[i] = (b & 0x80) ? -mag : mag;
  }
}

void dequant_f8_e5m2(const uint8_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<uint16_t>(src[i] << 8));
}

void quant_f32(const float* src, uint8_t* dst, int64_t n) { std::memcpy(dst, src, static_cast<size_t>(n) * 4); }

void quant_f16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_f16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void quant_bf16(const float* src, uint8_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

}  // namespace ft::quant
