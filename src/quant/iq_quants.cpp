// I-quant dequantization (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, IQ4_NL, IQ4_XS).
// Each group of 8 (or 4) weights is a codebook entry (iq_grids.h) with per-weight signs and a
// sub-block scale. Follows ggml-quants.c dequantize_row_iq* operation for operation
// (scale * grid value * (+-1), or scale * (grid value + delta)), so results are bit-exact
// with ggml / gguf-py.
#include <cstring>

#include "quant/blocks.h"
#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "tensor/half.h"

namespace ft::quant {
namespace {

uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

float sign_of(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.0f : 1.0f; }

// y[0..7] = db * grid[j] * sign_j for one 8-weight group.
void emit8(float* y, float db, const std::array<uint8_t, 8>& grid, uint8_t signs) {
  for (int j = 0; j < 8; ++j) y[j] = db * static_cast<float>(grid[j]) * sign_of(signs, j);
}

// y[0..7] from two 4-weight entries sharing one sign byte.
void emit4x2(float* y, float db, const std::array<uint8_t, 4>& g1, const std::array<uint8_t, 4>& g2, uint8_t signs) {
  for (int j = 0; j < 4; ++j) {
    y[j] = db * static_cast<float>(g1[j]) * sign_of(signs, j);
    y[j + 4] = db * static_cast<float>(g2[j]) * sign_of(signs, j + 4);
  }
}

}  // namespace

void dequant_iq2_xxs(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockIQ2_XXS>(src, i);
    const float d = f16_to_f32(b.d);
    uint8_t qs[64];
    std::memcpy(qs, b.qs, 64);
    for (int ib = 0; ib < 8; ++ib) {  // 32 weights: 4 grid bytes, then 4x7 sign bits + 4-bit scale
      const uint8_t* idx = qs + 8 * ib;
      const uint32_t aux = load_u32(qs + 8 * ib + 4);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.25f;
      for (int l = 0; l < 4; ++l, y += 8) emit8(y, db, iq2xxs_grid[idx[l]], ksigns_iq2xs[(aux >> (7 * l)) & 127]);
    }
  }
}

void dequant_iq2_xs(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockIQ2_XS>(src, i);
    const float d = f16_to_f32(b.d);
    for (int ib = 0; ib < 8; ++ib) {
      const float db[2] = {d * (0.5f + static_cast<float>(b.scales[ib] & 0x0f)) * 0.25f,
                           d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint16_t q = b.qs[4 * ib + l];  // 9-bit grid index, 7-bit sign index
        emit8(y, db[l / 2], iq2xs_grid[q & 511], ksigns_iq2xs[q >> 9]);
      }
    }
  }
}

void dequant_iq2_s(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockIQ2_S>(src, i);
    const float d = f16_to_f32(b.d);
    const uint8_t* qs = b.qs;
    const uint8_t* signs = b.qs + 32;
    for (int ib = 0; ib < 8; ++ib, qs += 4, signs += 4) {
      const float db[2] = {d * (0.5f + static_cast<float>(b.scales[ib] & 0x0f)) * 0.25f,
                           d * (0.5f + static_cast<float>(b.scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const int idx = qs[l] | ((b.qh[ib] << (8 - 2 * l)) & 0x300);  // 2 high bits per group from qh
        emit8(y, db[l / 2], iq2s_grid[idx], signs[l]);
      }
    }
  }
}

void dequant_iq3_xxs(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockIQ3_XXS>(src, i);
    const float d = f16_to_f32(b.d);
    const uint8_t* qs = b.qs;
    for (int ib = 0; ib < 8; ++ib, qs += 8) {
      const uint32_t aux = load_u32(b.qs + 64 + 4 * ib);  // 4x7 sign bits + 4-bit scale
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      for (int l = 0; l < 4; ++l, y += 8)
        emit4x2(y, db, iq3xxs_grid[qs[2 * l]], iq3xxs_grid[qs[2 * l + 1]], ksigns_iq2xs[(aux >> (7 * l)) & 127]);
    }
  }
}

void dequant_iq3_s(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockIQ3_S>(src, i);
    const float d = f16_to_f32(b.d);
    const uint8_t* qs = b.qs;
    const uint8_t* signs = b.signs;
    for (int ib = 0; ib < 8; ++ib, qs += 8, signs += 4) {  // 32 weights; scale nibble per 32
      const uint8_t sc = b.scales[ib / 2];
      const float db = d * static_cast<float>(1 + 2 * (ib % 2 ? sc >> 4 : sc & 0x0f));
      const int qh = b.qh[ib];  // 9th index bit of each of the 8 entries
      for (int l = 0; l < 4; ++l, y += 8) {
        const int i1 = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
        const int i2 = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
        emit4x2(y, db, iq3s_grid[i1], iq3s_grid[i2], signs[l]);
      }
    }
  }
}

void dequant_iq1_s(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockIQ1_S>(src, i);
    const float d = f16_to_f32(b.d);
    const uint8_t* qs = b.qs;
    for (int ib = 0; ib < 8; ++ib, qs += 4) {
      const unsigned qh = b.qh[ib];  // 4x3 high index bits, 3-bit scale, delta sign
      const float dl = d * static_cast<float>(2 * ((qh >> 12) & 7) + 1);
      const float delta = (qh & 0x8000) ? -kIq1sDelta : kIq1sDelta;
      for (int l = 0; l < 4; ++l, y += 8) {
        const auto& grid = iq1s_grid[qs[l] | (((qh >> (3 * l)) & 7) << 8)];
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(grid[j]) + delta);
      }
    }
  }
}

void dequant_iq1_m(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockIQ1_M>(src, i);
    uint16_t sc[4];
    std::memcpy(sc, b.scales, 8);
    // The fp16 super-block scale is spread over the top nibbles of the four scale words.
    const uint16_t d16 = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) |
                                               (sc[3] & 0xf000));
    const float d = f16_to_f32(d16);
    const uint8_t* qs = b.qs;
    const uint8_t* qh = b.qh;
    for (int ib = 0; ib < 8; ++ib, qs += 4, qh += 2) {
      const float dl1 = d * static_cast<float>(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 7) + 1);
      const float dl2 = d * static_cast<float>(2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1);
      const int idx[4] = {qs[0] | ((qh[0] << 8) & 0x700), qs[1] | ((qh[0] << 4) & 0x700),
                          qs[2] | ((qh[1] << 8) & 0x700), qs[3] | ((qh[1] << 4) & 0x700)};
      const float delta[4] = {(qh[0] & 0x08) ? -kIq1sDelta : kIq1sDelta, (qh[0] & 0x80) ? -kIq1sDelta : kIq1sDelta,
                              (qh[1] & 0x08) ? -kIq1sDelta : kIq1sDelta, (qh[1] & 0x80) ? -kIq1sDelta : kIq1sDelta};
      for (int l = 0; l < 4; ++l, y += 8) {
        const float dl = l < 2 ? dl1 : dl2;
        const auto& grid = iq1s_grid[idx[l]];
        for (int j = 0; j < 8; ++j) y[j] = dl * (static_cast<float>(grid[j]) + delta[l]);
      }
    }
  }
}

void dequant_iq4_nl(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += 32) {
    const auto b = load_block<BlockIQ4_NL>(src, i);
    const float d = f16_to_f32(b.d);
    for (int j = 0; j < 16; ++j) {
      y[j] = d * static_cast<float>(kvalues_iq4nl[b.qs[j] & 0x0f]);
      y[j + 16] = d * static_cast<float>(kvalues_iq4nl[b.qs[j] >> 4]);
    }
  }
}

void dequant_iq4_xs(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = load_block<BlockIQ4_XS>(src, i);
    const float d = f16_to_f32(b.d);
    const uint8_t* qs = b.qs;
    for (int ib = 0; ib < 8; ++ib, y += 32, qs += 16) {
      // 6-bit sub-block scale: low nibble from scales_l, 2 high bits from scales_h; bias 32
      const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((b.scales_h >> (2 * ib)) & 3) << 4);
      const float dl = d * static_cast<float>(ls - 32);
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kvalues_iq4nl[qs[j] & 0x0f]);
        y[j + 16] = dl * static_cast<float>(kvalues_iq4nl[qs[j] >> 4]);
      }
    }
  }
}

}  // namespace ft::quant
