// K-quants: 256-element super-blocks with per-sub-block scales (Q2_K .. Q6_K).
// Dequantizers follow ggml-quants.c dequantize_row_q{2..6}_K operation for operation, so the
// float32 results are bit-exact with ggml / gguf-py (see ../shared/fixtures/quant/README.md).
// The Q4_K quantizer is our own round-to-nearest scheme (see quant_q4_k below), not ggml's
// iterative search; its output is a valid Q4_K block that any Q4_K reader decodes.
#include <algorithm>
#include <cmath>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "tensor/half.h"

namespace ft::quant {
namespace {

// Signed 6-bit scale j (0..15) of Q3_K: low nibble from byte j (j < 8) or the high nibble of
// byte j-8, the top 2 bits from byte 8 + j%4 at bit 2*(j/4); stored with a +32 bias.
int q3k_scale(int j, const uint8_t* s) {
  const int lo = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
  const int hi = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | hi << 4) - 32;
}

// Smallest fp16 value >= v (v >= 0, finite), so a scale derived from it never undershoots.
uint16_t f16_at_least(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v && h < 0x7bff) ++h;
  return h;
}

// Smallest integer >= v, clamped to [0, hi]; NaN gives 0.
int ceil_clamp(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::ceil(v));
}

// Nearest integer (ties away from zero), clamped to [0, hi]; NaN gives 0.
int round_clamp(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(std::lround(v));
}

}  // namespace

void dequant_q2_k(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ2_K>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    int is = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2) {
        for (int part = 0; part < 2; ++part) {  // 16 elements from q[0..15], then q[16..31]
          const uint8_t sc = b.scales[is++];
          const float dl = d * static_cast<float>(sc & 0x0f), ml = dmin * static_cast<float>(sc >> 4);
          for (int l = 0; l < 16; ++l) *y++ = dl * static_cast<float>((q[l + 16 * part] >> shift) & 3) - ml;
        }
      }
    }
  }
}

void dequant_q3_k(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ3_K>(src, i);
    const float d_all = f16_to_f32(b.d);
    int is = 0;
    uint8_t m = 1;  // hmask bit for the current 32-element group
    for (int half = 0; half < 2; ++half) {
      const uint8_t* q = b.qs + 32 * half;
      for (int shift = 0; shift < 8; shift += 2, m = static_cast<uint8_t>(m << 1)) {
        for (int part = 0; part < 2; ++part) {
          const float dl = d_all * static_cast<float>(q3k_scale(is++, b.scales));
          for (int l = 16 * part; l < 16 * part + 16; ++l) {
            const int v = ((q[l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4);
            *y++ = dl * static_cast<float>(v);
          }
        }
      }
    }
  }
}

void dequant_q4_k(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ4_K>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    const uint8_t* q = b.qs;
    for (int is = 0; is < 8; is += 2, q += 32) {
      int sc, m;
      scale_min_k4(is, b.scales, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      scale_min_k4(is + 1, b.scales, sc, m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequant_q5_k(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ5_K>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    const uint8_t* ql = b.qs;
    unsigned u1 = 1, u2 = 2;  // qh bits of the two 32-element groups
    for (int is = 0; is < 8; is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
      int sc, m;
      scale_min_k4(is, b.scales, sc, m);
      const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
      scale_min_k4(is + 1, b.scales, sc, m);
      const float d2 = d * static_cast<float>(sc), m2 = dmin * static_cast<float>(m);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>((ql[l] & 0x0f) + ((b.qh[l] & u1) ? 16 : 0)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>((ql[l] >> 4) + ((b.qh[l] & u2) ? 16 : 0)) - m2;
    }
  }
}

void dequant_q6_k(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockQ6_K>(src, i);
    const float d = f16_to_f32(b.d);
    for (int half = 0; half < 2; ++half, y += 128) {
      const uint8_t* ql = b.ql + 64 * half;
      const uint8_t* qh = b.qh + 32 * half;
      const int8_t* sc = b.scales + 8 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0x0f) | ((qh[l] >> 0) & 3) << 4) - 32;
        const int q2 = ((ql[l + 32] & 0x0f) | ((qh[l] >> 2) & 3) << 4) - 32;
        const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
        const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
        y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
        y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
        y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
        y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
      }
    }
  }
}

// Round-to-nearest Q4_K. Each 32-element sub-block j is coded as x ~ dq_j * L - mq_j with
// L in 0..15, dq_j = d * ls_j and mq_j = dmin * lm_j (6-bit ls, lm; fp16 d, dmin). The scales
// are rounded *up* (mins first, then scales that cover max(x) + mq_j), so every x of the
// sub-block lies in [-mq_j, 15 dq_j - mq_j] and rounds to the nearest level:
// |x - x_hat| <= dq_j / 2 (up to float rounding). As in ggml, the offset is 0 for a sub-block
// with no negative values.
void quant_q4_k(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, src += kQK_K) {
    float need_min[8], max_min = 0.0f;
    float hi[8];
    for (int j = 0; j < 8; ++j) {
      float mn = 0.0f, mx = 0.0f;
      for (int l = 0; l < 32; ++l) {
        mn = std::min(mn, src[32 * j + l]);
        mx = std::max(mx, src[32 * j + l]);
      }
      need_min[j] = -mn;
      hi[j] = mx;
      max_min = std::max(max_min, need_min[j]);
    }
    BlockQ4_K b{};
    b.dmin = f16_at_least(max_min / 63);
    const float dmin = f16_to_f32(b.dmin);
    int ls[8], lm[8];
    float mq[8], need_scale[8], max_scale = 0.0f;
    for (int j = 0; j < 8; ++j) {
      lm[j] = dmin > 0.0f ? ceil_clamp(need_min[j] / dmin, 63) : 0;
      mq[j] = dmin * static_cast<float>(lm[j]);
      need_scale[j] = (hi[j] + mq[j]) / 15;
      max_scale = std::max(max_scale, need_scale[j]);
    }
    b.d = f16_at_least(max_scale / 63);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < 8; ++j) {
      ls[j] = d > 0.0f ? ceil_clamp(need_scale[j] / d, 63) : 0;
      if (j < 4) {
        b.scales[j] = static_cast<uint8_t>(ls[j]);
        b.scales[j + 4] = static_cast<uint8_t>(lm[j]);
      } else {
        b.scales[j + 4] = static_cast<uint8_t>((ls[j] & 0x0f) | (lm[j] & 0x0f) << 4);
        b.scales[j - 4] = static_cast<uint8_t>(b.scales[j - 4] | (ls[j] >> 4) << 6);
        b.scales[j] = static_cast<uint8_t>(b.scales[j] | (lm[j] >> 4) << 6);
      }
    }
    for (int j = 0; j < 8; ++j) {
      const float dq = d * static_cast<float>(ls[j]);
      for (int l = 0; l < 32; ++l) {
        const int q = dq > 0.0f ? round_clamp((src[32 * j + l] + mq[j]) / dq, 15) : 0;
        // sub-blocks 2k and 2k+1 share bytes qs[32k .. 32k+31]: low nibble, high nibble
        uint8_t& byte = b.qs[32 * (j / 2) + l];
        byte = static_cast<uint8_t>(byte | (j % 2 ? q << 4 : q));
      }
    }
    store_block(dst, i, b);
  }
}

}  // namespace ft::quant
