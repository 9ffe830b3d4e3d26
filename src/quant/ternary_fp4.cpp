// Ternary (TQ1_0, TQ2_0) and FP4 (MXFP4, NVFP4) dequantization, following ggml-quants.c
// dequantize_row_tq1_0 / tq2_0 / mxfp4 / nvfp4 and the scale decoders of ggml-impl.h
// (ggml_e8m0_to_fp32_half, ggml_ue4m3_to_fp32). Bit-exact with ggml / gguf-py.
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "tensor/half.h"

namespace ft::quant {
namespace {

// Trit n (0 = most significant) of a TQ1_0 byte, which stores 5 trits as ceil(v * 256 / 243):
// multiplying by 3^n (mod 256) shifts trit n to the top, and (q * 3) >> 8 reads it.
float trit(uint8_t byte, int n, float d) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const uint8_t q = static_cast<uint8_t>(byte * kPow3[n]);
  const int xi = (q * 3) >> 8;
  return static_cast<float>(xi - 1) * d;
}

// E8M0 exponent byte -> 2^(e - 127) / 2 (the half compensates kvalues_mxfp4 being doubled).
float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// UE4M3 scale byte (4-bit exponent, bias 7; 3-bit mantissa; bit 7 ignored) -> value / 2.
// 0x00 and 0x7f (the NaN code) decode to 0, as in ggml.
float ue4m3_half(uint8_t x) {
  if (x == 0 || x == 0x7f) return 0.0f;
  const int exp = (x >> 3) & 0x0f, man = x & 0x07;
  const float raw = exp == 0 ? std::ldexp(static_cast<float>(man), -9)
                             : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
  return raw * 0.5f;
}

}  // namespace

void dequant_tq1_0(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockTQ1_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int n = 0; n < 5; ++n)  // bytes 0..31: 5 trits each, element = 32 * n + m
      for (int m = 0; m < 32; ++m) *y++ = trit(b.qs[m], n, d);
    for (int n = 0; n < 5; ++n)  // bytes 32..47
      for (int m = 0; m < 16; ++m) *y++ = trit(b.qs[32 + m], n, d);
    for (int n = 0; n < 4; ++n)  // qh: 4 trits each (the 5th slot is unused)
      for (int m = 0; m < 4; ++m) *y++ = trit(b.qh[m], n, d);
  }
}

void dequant_tq2_0(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockTQ2_0>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < 64; j += 32)
      for (int shift = 0; shift < 8; shift += 2)
        for (int m = 0; m < 32; ++m) *y++ = static_cast<float>(((b.qs[j + m] >> shift) & 3) - 1) * d;
  }
}

void dequant_mxfp4(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += 32) {
    const auto b = load_block<BlockMXFP4>(src, i);
    const float d = e8m0_half(b.e);
    for (int j = 0; j < 16; ++j) {
      y[j] = static_cast<float>(kvalues_mxfp4[b.qs[j] & 0x0f]) * d;
      y[j + 16] = static_cast<float>(kvalues_mxfp4[b.qs[j] >> 4]) * d;
    }
  }
}

void dequant_nvfp4(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockNVFP4>(src, i);
    for (int s = 0; s < 4; ++s, y += 16) {  // 4 sub-blocks of 16, each with its own scale
      const float d = ue4m3_half(b.d[s]);
      for (int j = 0; j < 8; ++j) {
        const uint8_t q = b.qs[8 * s + j];
        y[j] = static_cast<float>(kvalues_mxfp4[q & 0x0f]) * d;
        y[j + 8] = static_cast<float>(kvalues_mxfp4[q >> 4]) * d;
      }
    }
  }
}

}  // namespace ft::quant
