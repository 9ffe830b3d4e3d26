// Legacy 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) and the 1-/2-bit Q1_0, Q2_0.
// Dequantizers follow ggml-quants.c dequantize_row_* operation for operation (int code
// converted to float, times the fp16 scale, plus the min), so results are bit-exact with ggml
// and gguf-py, including -0.0 from a zero code times a negative scale. The Q4_0 and Q8_0
// quantizers are ggml's reference (round-to-nearest) quantize_row_*_ref, made safe for
// non-finite input (a NaN or inf never reaches an out-of-range float->int conversion).
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "tensor/half.h"

namespace ft::quant {
namespace {

// Truncates f toward zero and clamps to [lo, hi]; NaN gives lo.
int trunc_clamp(float f, int lo, int hi) {
  if (!(f >= static_cast<float>(lo))) return lo;
  if (f >= static_cast<float>(hi)) return hi;
  return static_cast<int>(f);
}

}  // namespace

void dequant_q4_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += 32) {
    const auto b = load_block<BlockQ4_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>((b.qs[j] & 0x0f) - 8) * d;
      dst[j + 16] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += 32) {
    const auto b = load_block<BlockQ4_1>(src, i);
    const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
    for (int j = 0; j < 16; ++j) {
      dst[j] = static_cast<float>(b.qs[j] & 0x0f) * d + m;
      dst[j + 16] = static_cast<float>(b.qs[j] >> 4) * d + m;
    }
  }
}

void dequant_q5_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += 32) {
    const auto b = load_block<BlockQ5_0>(src, i);
    const float d = f16_to_f32(b.d);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1) << 4;         // bit j -> element j
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;  // bit j+16 -> element j+16
      dst[j] = static_cast<float>(((b.qs[j] & 0x0f) | hi0) - 16) * d;
      dst[j + 16] = static_cast<float>(((b.qs[j] >> 4) | hi1) - 16) * d;
    }
  }
}

void dequant_q5_1(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += 32) {
    const auto b = load_block<BlockQ5_1>(src, i);
    const float d = f16_to_f32(b.d), m = f16_to_f32(b.m);
    uint32_t qh;
    std::memcpy(&qh, b.qh, 4);
    for (int j = 0; j < 16; ++j) {
      const int hi0 = static_cast<int>((qh >> j) & 1) << 4;
      const int hi1 = static_cast<int>((qh >> (j + 16)) & 1) << 4;
      dst[j] = static_cast<float>((b.qs[j] & 0x0f) | hi0) * d + m;
      dst[j + 16] = static_cast<float>((b.qs[j] >> 4) | hi1) * d + m;
    }
  }
}

void dequant_q8_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += 32) {
    const auto b = load_block<BlockQ8_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < 32; ++j) dst[j] = static_cast<float>(b.qs[j]) * d;
  }
}

void dequant_q1_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += 128) {
    const auto b = load_block<BlockQ1_0>(src, i);
    const float d = f16_to_f32(b.d), neg_d = -d;
    for (int j = 0; j < 128; ++j) dst[j] = ((b.qs[j / 8] >> (j % 8)) & 1) ? d : neg_d;
  }
}

void dequant_q2_0(const uint8_t* src, float* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, dst += 64) {
    const auto b = load_block<BlockQ2_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < 64; ++j) {
      const int code = (b.qs[j / 4] >> (2 * (j % 4))) & 3;  // 0,1,2,3 -> -1,0,+1,+2
      dst[j] = static_cast<float>(code - 1) * d;
    }
  }
}

void quant_q4_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += 32) {
    float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, sign kept (first one wins)
    for (int j = 0; j < 32; ++j) {
      if (amax < std::fabs(src[j])) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    const float d = max / -8;  // the extreme value maps to code 0 (-8)
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 b;
    b.d = f32_to_f16(d);
    for (int j = 0; j < 16; ++j) {
      const int q0 = trunc_clamp(src[j] * id + 8.5f, 0, 15);
      const int q1 = trunc_clamp(src[j + 16] * id + 8.5f, 0, 15);
      b.qs[j] = static_cast<uint8_t>(q0 | q1 << 4);
    }
    store_block(dst, i, b);
  }
}

void quant_q8_0(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::fmax(amax, std::fabs(src[j]));
    const float d = amax / 127;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0 b;
    b.d = f32_to_f16(d);
    for (int j = 0; j < 32; ++j) {
      const float r = std::round(src[j] * id);  // half away from zero, as ggml's roundf
      b.qs[j] = static_cast<int8_t>(r >= 127.0f ? 127 : r <= -127.0f ? -127 : r == r ? static_cast<int>(r) : 0);
    }
    store_block(dst, i, b);
  }
}

}  // namespace ft::quant
