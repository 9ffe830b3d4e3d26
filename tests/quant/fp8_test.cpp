// FP8 E4M3 codes (OCP OFP8 rev 1.0, the e4m3fn variant torch uses) and F8_E4M3_B32, FreeToken's stored
// form of FP8 checkpoints (quant/fp8.h): every code's value, rounding, and the repacking of tile-scaled
// weights at ragged edges (dimensions not multiples of 128).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/quant.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace ft {
namespace {

// Codes 0x00..0x7e: m * 2^-9 for e = 0, (1 + m/8) * 2^(e-7) otherwise (written out by hand from the
// spec's table, not by the decoder); 0x7f is NaN; codes 0x80.. are the negatives.
constexpr float kPositive[127] = {
    0x0.0p+0f, 0x1p-9f, 0x1p-8f, 0x1.8p-8f, 0x1p-7f, 0x1.4p-7f, 0x1.8p-7f, 0x1.cp-7f, 0x1p-6f, 0x1.2p-6f,
    0x1.4p-6f, 0x1.6p-6f, 0x1.8p-6f, 0x1.ap-6f, 0x1.cp-6f, 0x1.ep-6f, 0x1p-5f, 0x1.2p-5f, 0x1.4p-5f, 0x1.6p-5f,
    0x1.8p-5f, 0x1.ap-5f, 0x1.cp-5f, 0x1.ep-5f, 0x1p-4f, 0x1.2p-4f, 0x1.4p-4f, 0x1.6p-4f, 0x1.8p-4f, 0x1.ap-4f,
    0x1.cp-4f, 0x1.ep-4f, 0x1p-3f, 0x1.2p-3f, 0x1.4p-3f, 0x1.6p-3f, 0x1.8p-3f, 0x1.ap-3f, 0x1.cp-3f, 0x1.ep-3f,
    0x1p-2f, 0x1.2p-2f, 0x1.4p-2f, 0x1.6p-2f, 0x1.8p-2f, 0x1.ap-2f, 0x1.cp-2f, 0x1.ep-2f, 0x1p-1f, 0x1.2p-1f,
    0x1.4p-1f, 0x1.6p-1f, 0x1.8p-1f, 0x1.ap-1f, 0x1.cp-1f, 0x1.ep-1f, 0x1p+0f, 0x1.2p+0f, 0x1.4p+0f, 0x1.6p+0f,
    0x1.8p+0f, 0x1.ap+0f, 0x1.cp+0f, 0x1.ep+0f, 0x1p+1f, 0x1.2p+1f, 0x1.4p+1f, 0x1.6p+1f, 0x1.8p+1f, 0x1.ap+1f,
    0x1.cp+1f, 0x1.ep+1f, 0x1p+2f, 0x1.2p+2f, 0x1.4p+2f, 0x1.6p+2f, 0x1.8p+2f, 0x1.ap+2f, 0x1.cp+2f, 0x1.ep+2f,
    0x1p+3f, 0x1.2p+3f, 0x1.4p+3f, 0x1.6p+3f, 0x1.8p+3f, 0x1.ap+3f, 0x1.cp+3f, 0x1.ep+3f, 0x1p+4f, 0x1.2p+4f,
    0x1.4p+4f, 0x1.6p+4f, 0x1.8p+4f, 0x1.ap+4f, 0x1.cp+4f, 0x1.ep+4f, 0x1p+5f, 0x1.2p+5f, 0x1.4p+5f, 0x1.6p+5f,
    0x1.8p+5f, 0x1.ap+5f, 0x1.cp+5f, 0x1.ep+5f, 0x1p+6f, 0x1.2p+6f, 0x1.4p+6f, 0x1.6p+6f, 0x1.8p+6f, 0x1.ap+6f,
    0x1.cp+6f, 0x1.ep+6f, 0x1p+7f, 0x1.2p+7f, 0x1.4p+7f, 0x1.6p+7f, 0x1.8p+7f, 0x1.ap+7f, 0x1.cp+7f, 0x1.ep+7f,
    0x1p+8f, 0x1.2p+8f, 0x1.4p+8f, 0x1.6p+8f, 0x1.8p+8f, 0x1.ap+8f, 0x1.cp+8f,
};

TEST(Fp8E4m3, EveryCodeDecodes) {
  for (int c = 0; c < 256; ++c) {
    SCOPED_TRACE(c);
    const float got = e4m3_to_f32(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(got));  // S.1111.111: no infinities in e4m3fn
      continue;
    }
    const float want = (c & 0x80) ? -kPositive[c & 0x7f] : kPositive[c & 0x7f];
    EXPECT_EQ(got, want);
    EXPECT_EQ(std::signbit(got), (c & 0x80) != 0);  // 0x80 is -0.0
  }
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * std::ldexp(1.0f, -9));  // largest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), std::ldexp(1.0f, -6));  // smallest normal
  // The plain element decoder (quant/plain.cpp) agrees on every code.
  uint8_t all[256];
  float plain[256];
  for (int c = 0; c < 256; ++c) all[c] = static_cast<uint8_t>(c);
  dequantize_row(DType::F8_E4M3, all, plain, 256);
  for (int c = 0; c < 256; ++c) {
    const float mine = e4m3_to_f32(static_cast<uint8_t>(c));
    EXPECT_TRUE(std::memcmp(&mine, &plain[c], 4) == 0 || (std::isnan(mine) && std::isnan(plain[c]))) << c;
  }
}

TEST(Fp8E4m3, EncodesToNearestTiesToEven) {
  for (int c = 0; c < 256; ++c) {  // every value encodes to its own code
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);  // halfway 1 (0x38) .. 1.125 (0x39): even code
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3a);  // halfway 1.125 .. 1.25 (0x3a): even code
  EXPECT_EQ(f32_to_e4m3(1.07f), 0x39);
  EXPECT_EQ(f32_to_e4m3(-1.07f), 0xb9);
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.0f, -10)), 0x00);  // halfway 0 .. 2^-9: even (0)
  EXPECT_EQ(f32_to_e4m3(std::ldexp(1.5f, -10)), 0x01);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(440.0f), 0x7e);  // halfway 416 .. 448 is 432
  EXPECT_EQ(f32_to_e4m3(420.0f), 0x7d);
  EXPECT_EQ(f32_to_e4m3(1e6f), 0x7e);    // saturates
  EXPECT_EQ(f32_to_e4m3(-INFINITY), 0xfe);
  EXPECT_EQ(f32_to_e4m3(NAN), 0x7f);
}

TEST(Fp8BlockRows, TypeLayout) {
  EXPECT_EQ(dtype_info(DType::F8_E4M3_B32).block_size, 32);
  EXPECT_EQ(dtype_bytes(DType::F8_E4M3_B32, 96), 3 * 36);
  EXPECT_TRUE(dtype_info(DType::F8_E4M3_B32).is_quantized);
  EXPECT_TRUE(can_dequantize(DType::F8_E4M3_B32));
}

// A [200, 160] weight with [128, 128] tiles: scales [2, 2], the last tile row 72 rows and the last
// tile column 32 wide. Every element decodes to e4m3(w) * scale[r / 128][c / 128], bit for bit.
TEST(Fp8BlockRows, RaggedTilesRepackLosslessly) {
  const int64_t N = 200, K = 160;
  std::mt19937 rng(7);
  std::vector<uint8_t> w(N * K);
  for (auto& b : w) {
    b = static_cast<uint8_t>(rng());
    if ((b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
  }
  const float scales[4] = {0.5f, 3.0e-3f, 1.25f, 7.0f};  // [2, 2]
  std::vector<uint8_t> rows(N * dtype_bytes(DType::F8_E4M3_B32, K));
  fp8_rows_from_scaled(w.data(), scales, N, K, Fp8ScaleGrid{128, 128}, rows.data());
  std::vector<float> got(N * K);
  dequantize_row(DType::F8_E4M3_B32, rows.data(), got.data(), N * K);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < K; ++c) {
      const float want = e4m3_to_f32(w[r * K + c]) * scales[(r / 128) * 2 + c / 128];
      ASSERT_EQ(got[r * K + c], want) << r << "," << c;
    }
  // Spot: row 199, column 159 lies in the ragged corner tile (scale 7).
  EXPECT_EQ(got[199 * K + 159], e4m3_to_f32(w[199 * K + 159]) * 7.0f);
  // The block holding columns 128..159 of row 130 carries scale [1][1].
  quant::BlockF8E4M3B32 b;
  std::memcpy(&b, rows.data() + (130 * (K / 32) + 4) * 36, 36);
  EXPECT_EQ(b.d, 7.0f);
  std::memcpy(&b, rows.data() + (127 * (K / 32) + 3) * 36, 36);
  EXPECT_EQ(b.d, 0.5f);
}

TEST(Fp8BlockRows, RowTypeFollowsTheRowLength) {
  EXPECT_EQ(fp8_row_type(7168), DType::F8_E4M3_B32);
  EXPECT_EQ(fp8_row_type(96), DType::F8_E4M3_B32);
  EXPECT_EQ(fp8_row_type(48), DType::F8_E4M3_B16);  // DeepSeek-V3 fixture's q_lora_rank
  EXPECT_EQ(fp8_row_type(16), DType::F8_E4M3_B16);
  EXPECT_THROW(fp8_row_type(40), Error);
  EXPECT_THROW(fp8_row_type(0), Error);
  EXPECT_EQ(dtype_bytes(DType::F8_E4M3_B16, 48), 3 * 20);
}

// B16 rows: [40, 48] under one ragged [128, 128] tile, and under [16, 32] tiles (scales [3, 2], the
// last tile row 8 rows, the last tile column 16 wide).
TEST(Fp8BlockRows, B16RowsRepackLosslessly) {
  const int64_t N = 40, K = 48;
  std::vector<uint8_t> w(N * K);
  for (int64_t i = 0; i < N * K; ++i) w[i] = static_cast<uint8_t>((i * 53 + 11) % 0x7e) | ((i & 1) << 7);
  const float scales[6] = {0.5f, 2.0f, 0.75f, 1.5e-2f, 9.0f, 0.3f};
  std::vector<uint8_t> rows(N * dtype_bytes(DType::F8_E4M3_B16, K));
  std::vector<float> got(N * K);
  fp8_rows_from_scaled(w.data(), scales, N, K, Fp8ScaleGrid{128, 128}, rows.data(), DType::F8_E4M3_B16);
  dequantize_row(DType::F8_E4M3_B16, rows.data(), got.data(), N * K);
  for (int64_t i = 0; i < N * K; ++i) ASSERT_EQ(got[i], e4m3_to_f32(w[i]) * 0.5f) << i;
  fp8_rows_from_scaled(w.data(), scales, N, K, Fp8ScaleGrid{16, 32}, rows.data(), DType::F8_E4M3_B16);
  dequantize_row(DType::F8_E4M3_B16, rows.data(), got.data(), N * K);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < K; ++c)
      ASSERT_EQ(got[r * K + c], e4m3_to_f32(w[r * K + c]) * scales[(r / 16) * 2 + c / 32]) << r << "," << c;
  std::vector<float> x(K, 0.5f);
  double ref = 0;
  for (int64_t c = 0; c < K; ++c) ref += 0.5 * got[39 * K + c];
  EXPECT_NEAR(quant::dot_f8_e4m3_row(DType::F8_E4M3_B16, x.data(), rows.data() + 39 * 3 * 20, K), ref,
              1e-4 * (1 + std::fabs(ref)));
}

TEST(Fp8BlockRows, PerTensorAndPerChannelGrids) {
  const int64_t N = 3, K = 64;
  std::vector<uint8_t> w(N * K);
  for (int64_t i = 0; i < N * K; ++i) w[i] = static_cast<uint8_t>((i * 37) % 0x7e);
  std::vector<uint8_t> rows(N * dtype_bytes(DType::F8_E4M3_B32, K));
  std::vector<float> got(N * K);
  const float tensor_scale = 0.25f;
  fp8_rows_from_scaled(w.data(), &tensor_scale, N, K, Fp8ScaleGrid{N, K}, rows.data());
  dequantize_row(DType::F8_E4M3_B32, rows.data(), got.data(), N * K);
  for (int64_t i = 0; i < N * K; ++i) EXPECT_EQ(got[i], e4m3_to_f32(w[i]) * 0.25f);
  const float channel[3] = {2.0f, 0.125f, 3.5f};
  fp8_rows_from_scaled(w.data(), channel, N, K, Fp8ScaleGrid{1, K}, rows.data());
  dequantize_row(DType::F8_E4M3_B32, rows.data(), got.data(), N * K);
  for (int64_t i = 0; i < N * K; ++i) EXPECT_EQ(got[i], e4m3_to_f32(w[i]) * channel[i / K]);
}

TEST(Fp8BlockRows, RefusesRowsThatAreNotWholeBlocks) {
  std::vector<uint8_t> w(100), rows(1000);
  const float s = 1;
  EXPECT_THROW(fp8_rows_from_scaled(w.data(), &s, 1, 100, Fp8ScaleGrid{128, 128}, rows.data()), Error);
  EXPECT_THROW(fp8_rows_from_scaled(w.data(), &s, 1, 96, Fp8ScaleGrid{1, 48}, rows.data()), Error);
  EXPECT_THROW(fp8_rows_from_scaled(w.data(), &s, 1, 64, Fp8ScaleGrid{0, 128}, rows.data()), Error);
  EXPECT_THROW(quant::dot_f8_e4m3_row(DType::F8_E4M3_B32, nullptr, rows.data(), 33), Error);
  EXPECT_THROW(quant::dot_f8_e4m3_row(DType::Q8_0, nullptr, rows.data(), 32), Error);
  // B16 rows take 16-wide blocks only, and a 32-block type is not B16's grid.
  EXPECT_THROW(fp8_rows_from_scaled(w.data(), &s, 1, 40, Fp8ScaleGrid{128, 128}, rows.data(), DType::F8_E4M3_B16),
               Error);
  EXPECT_THROW(fp8_rows_from_scaled(w.data(), &s, 1, 64, Fp8ScaleGrid{1, 24}, rows.data(), DType::F8_E4M3_B16), Error);
  EXPECT_THROW(fp8_rows_from_scaled(w.data(), &s, 1, 64, Fp8ScaleGrid{1, 64}, rows.data(), DType::BF16), Error);
}

TEST(Fp8BlockRows, QuantizeTilesAndDot) {
  // Tile quantization (amax / 448 per tile) of a ragged [70, 96] matrix with [64, 64] tiles, then
  // the repacked rows: each value within half an E4M3 step (2^-4 relative) of the input, and the
  // dot kernel equal to the dot of the decoded row.
  const int64_t N = 70, K = 96;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(N * K), act(K);
  for (auto& v : x) v = nd(rng);
  for (auto& v : act) v = nd(rng);
  const Fp8ScaleGrid g{64, 64};
  std::vector<uint8_t> w(N * K);
  std::vector<float> sc(2 * 2);
  fp8_quantize_scaled(x.data(), N, K, g, w.data(), sc.data());
  std::vector<uint8_t> rows(N * dtype_bytes(DType::F8_E4M3_B32, K));
  fp8_rows_from_scaled(w.data(), sc.data(), N, K, g, rows.data());
  std::vector<float> y(N * K);
  dequantize_row(DType::F8_E4M3_B32, rows.data(), y.data(), N * K);
  for (int64_t r = 0; r < N; ++r) {
    double ref = 0;
    for (int64_t c = 0; c < K; ++c) {
      const float s = sc[(r / 64) * 2 + c / 64];
      EXPECT_LE(std::fabs(y[r * K + c] - x[r * K + c]), std::max(std::fabs(x[r * K + c]) / 16, s * 0x1p-9f))
          << r << "," << c;
      ref += static_cast<double>(act[c]) * y[r * K + c];
    }
    const float got =
        quant::dot_f8_e4m3_row(DType::F8_E4M3_B32, act.data(), rows.data() + r * dtype_bytes(DType::F8_E4M3_B32, K), K);
    EXPECT_NEAR(got, ref, 1e-4 * (1 + std::fabs(ref)));
  }
  // quantize_row: one scale per 32-block, the same bound.
  std::vector<uint8_t> q(dtype_bytes(DType::F8_E4M3_B32, K));
  std::vector<float> back(K);
  quantize_row(DType::F8_E4M3_B32, x.data(), q.data(), K);
  dequantize_row(DType::F8_E4M3_B32, q.data(), back.data(), K);
  for (int64_t c = 0; c < K; ++c) EXPECT_LE(std::fabs(back[c] - x[c]), std::fabs(x[c]) / 16 + 1e-3f) << c;
}

}  // namespace
}  // namespace ft
