// ModelOpt NVFP4 (quant/nvfp4.h): E2M1 rounding, the repacking of ModelOpt rows (packed E2M1 codes low
// nibble first, E4M3 scales per 16 values, a float32 global scale) into NVFP4_G64 / NVFP4_G16, whose
// decode is e2m1(q) * (e4m3(s) * g) bit for bit, and the ModelOpt-style quantizer the checkpoint tests use.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/fp8.h"
#include "quant/mxfp4.h"
#include "quant/nvfp4.h"
#include "quant/quant.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace ft {
namespace {

/** ModelOpt's dequantization of rows [N, K] (NVFP4QTensor.dequantize): per_block_scale =
 *  float(scale) * scale_2, then code value * per_block_scale, both in float32. */
std::vector<float> modelopt_dequant(const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scales, float g,
                                    int64_t N, int64_t K) {
  std::vector<float> y(N * K);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t c = 0; c < K; ++c) {
      const uint8_t byte = packed[r * (K / 2) + c / 2];
      const uint8_t code = c % 2 == 0 ? (byte & 0x0f) : (byte >> 4);  // unpacked[..., 0::2] = input & 0x0F
      const float block_scale = e4m3_to_f32(scales[r * (K / 16) + c / 16]) * g;
      y[r * K + c] = e2m1_to_f32(code) * block_scale;
    }
  return y;
}

TEST(Nvfp4, E2m1RoundsToNearestTiesToEven) {
  // Exact values, midpoints (ties go to the even code, as ModelOpt's _cast_fp4), saturation, signs.
  const std::pair<float, uint8_t> cases[] = {
      {0.0f, 0},  {0.5f, 1},  {1.0f, 2},   {1.5f, 3},  {2.0f, 4},  {3.0f, 5},  {4.0f, 6},   {6.0f, 7},
      {0.25f, 0}, {0.75f, 2}, {1.25f, 2},  {1.75f, 4}, {2.5f, 4},  {3.5f, 6},  {5.0f, 6},   {0.26f, 1},
      {2.6f, 5},  {5.1f, 7},  {100.0f, 7}, {-0.0f, 8}, {-1.5f, 11}, {-7.0f, 15}, {-0.24f, 8}, {0.1f, 0}};
  for (const auto& [x, code] : cases) EXPECT_EQ(f32_to_e2m1(x), code) << x;
  for (int c = 0; c < 16; ++c) EXPECT_EQ(f32_to_e2m1(e2m1_to_f32(static_cast<uint8_t>(c))), c) << c;
}

TEST(Nvfp4, RowTypes) {
  EXPECT_EQ(nvfp4_row_type(64), DType::NVFP4_G64);
  EXPECT_EQ(nvfp4_row_type(7168), DType::NVFP4_G64);
  EXPECT_EQ(nvfp4_row_type(32), DType::NVFP4_G16);
  EXPECT_EQ(nvfp4_row_type(1408 + 16), DType::NVFP4_G16);
  for (int64_t K : {0, 8, 24, -64}) EXPECT_THROW(nvfp4_row_type(K), Error) << K;
  EXPECT_EQ(dtype_bytes(DType::NVFP4_G64, 128), 80);  // 5 bits a value
  EXPECT_EQ(dtype_bytes(DType::NVFP4_G16, 48), 39);
  EXPECT_EQ(dtype_from_name("nvfp4_g64"), DType::NVFP4_G64);
}

TEST(Nvfp4, KnownAnswerRow) {
  // One row of 16: every code in order, low nibble first; scale E4M3 0x40 = 2.0, global 0.25: d = 0.5.
  const std::vector<uint8_t> packed = {0x10, 0x32, 0x54, 0x76, 0x98, 0xba, 0xdc, 0xfe};
  const std::vector<uint8_t> scales = {0x40};
  std::vector<uint8_t> row(dtype_bytes(DType::NVFP4_G16, 16));
  nvfp4_rows_from_modelopt(packed.data(), scales.data(), 0.25f, 1, 16, row.data(), DType::NVFP4_G16);
  std::vector<float> y(16);
  dequantize_row(DType::NVFP4_G16, row.data(), y.data(), 16);
  const float want[16] = {0, 0.25f, 0.5f, 0.75f, 1, 1.5f, 2, 3, -0.0f, -0.25f, -0.5f, -0.75f, -1, -1.5f, -2, -3};
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(y[i], want[i]) << i;
    EXPECT_EQ(std::signbit(y[i]), std::signbit(want[i])) << i;
  }
  // The stored bytes: the global scale's float32, then the checkpoint's scale and codes unchanged.
  float g;
  std::memcpy(&g, row.data(), 4);
  EXPECT_EQ(g, 0.25f);
  EXPECT_EQ(row[4], 0x40);
  EXPECT_EQ(std::memcmp(row.data() + 5, packed.data(), 8), 0);
}

TEST(Nvfp4, ScaleProductIsFormedFirst) {
  // e4m3 0x33 (0.6875) * 0.1f rounds in float32; 3 * that product differs from (3 * 0.6875) * 0.1f, and
  // the decode must give ModelOpt's (scale * scale_2) first.
  const float g = 0.1f;
  volatile float d = e4m3_to_f32(0x33) * g, t = 3.0f * 0.6875f;
  ASSERT_EQ(e4m3_to_f32(0x33), 0.6875f);
  ASSERT_NE(3.0f * d, t * g);
  std::vector<uint8_t> packed(32, 0x55), scales(4, 0x33);  // code 5 = 3.0 everywhere
  std::vector<uint8_t> row(dtype_bytes(DType::NVFP4_G64, 64));
  nvfp4_rows_from_modelopt(packed.data(), scales.data(), g, 1, 64, row.data(), DType::NVFP4_G64);
  std::vector<float> y(64);
  dequantize_row(DType::NVFP4_G64, row.data(), y.data(), 64);
  for (float v : y) EXPECT_EQ(v, 3.0f * d);
}

TEST(Nvfp4, CompressedTensorsGlobalScaleDivides) {
  // compressed-tensors: value = e2m1 * (e4m3(s) / weight_global_scale). Stored as g = -global; decoded
  // with a division, which differs from multiplying by the reciprocal (0.5625 / 10 != 0.5625 * 0.1f).
  const float gs = 10.0f;
  volatile float by_div = e4m3_to_f32(0x31) / gs, by_mul = e4m3_to_f32(0x31) * (1.0f / gs);
  ASSERT_NE(by_div, by_mul);
  std::vector<uint8_t> packed(8, 0x77), scales(1, 0x31);  // code 7 = 6.0
  std::vector<uint8_t> row(dtype_bytes(DType::NVFP4_G16, 16));
  nvfp4_rows_from_modelopt(packed.data(), scales.data(), gs, 1, 16, row.data(), DType::NVFP4_G16, true);
  float g;
  std::memcpy(&g, row.data(), 4);
  EXPECT_EQ(g, -10.0f);
  std::vector<float> y(16);
  dequantize_row(DType::NVFP4_G16, row.data(), y.data(), 16);
  for (float v : y) EXPECT_EQ(v, 6.0f * by_div);
  // A global scale of 0 (division) or a negative one (either way) is refused.
  EXPECT_THROW(nvfp4_rows_from_modelopt(packed.data(), scales.data(), 0.0f, 1, 16, row.data(), DType::NVFP4_G16, true),
               Error);
  EXPECT_THROW(nvfp4_rows_from_modelopt(packed.data(), scales.data(), -1.0f, 1, 16, row.data(), DType::NVFP4_G16),
               Error);
  EXPECT_THROW(nvfp4_rows_from_modelopt(packed.data(), scales.data(), -0.0f, 1, 16, row.data(), DType::NVFP4_G16),
               Error);
}

TEST(Nvfp4, RepackIsLosslessForEveryCodeAndScale) {
  // Random codes and scales (every E4M3 byte but NaN) in both row types: the decode equals ModelOpt's.
  std::mt19937 rng(7);
  for (auto [N, K] : {std::pair<int64_t, int64_t>{5, 192}, {3, 48}, {4, 16}}) {
    const DType type = nvfp4_row_type(K);
    std::vector<uint8_t> packed(N * K / 2), scales(N * K / 16);
    for (auto& b : packed) b = static_cast<uint8_t>(rng());
    for (auto& s : scales) {
      s = static_cast<uint8_t>(rng());
      if ((s & 0x7f) == 0x7f) s = 0x38;
    }
    const float g = 0.000123f;
    std::vector<uint8_t> rows(N * dtype_bytes(type, K));
    nvfp4_rows_from_modelopt(packed.data(), scales.data(), g, N, K, rows.data(), type);
    std::vector<float> got(N * K);
    dequantize_row(type, rows.data(), got.data(), N * K);
    const std::vector<float> want = modelopt_dequant(packed, scales, g, N, K);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << dtype_name(type) << " K " << K;
  }
}

TEST(Nvfp4, QuantizerFollowsModelOpt) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const int64_t N = 8, K = 64;
  std::vector<float> x(N * K);
  for (auto& v : x) v = nd(rng);
  x[5] = 0.2f;  // the tensor's amax
  for (int k = 0; k < 16; ++k) x[K + 16 + k] = 0;  // an all-zero block: scale 1.0
  std::vector<uint8_t> packed(N * K / 2), scales(N * K / 16);
  float g = 0;
  nvfp4_quantize_modelopt(x.data(), N, K, packed.data(), scales.data(), &g);
  EXPECT_EQ(g, 0.2f / 2688.0f);
  EXPECT_EQ(scales[0], f32_to_e4m3(0.2f / (6.0f * g)));  // the amax block's scale: ~448
  EXPECT_EQ(scales[K / 16 + 1], f32_to_e4m3(1.0f));
  const std::vector<float> y = modelopt_dequant(packed, scales, g, N, K);
  EXPECT_NEAR(y[5], 0.2f, 1e-6f);  // the amax: code 6.0 at a block scale of ~448
  double num = 0, den = 0;
  for (int64_t i = 0; i < N * K; ++i) {
    num += (y[i] - x[i]) * (y[i] - x[i]);
    den += x[i] * x[i];
    // Every value within half a step of its block's grid (steps are at most 2 * d apart).
    const float d = e4m3_to_f32(scales[i / 16]) * g;
    EXPECT_LE(std::fabs(y[i] - x[i]), d * 1.0f + 1e-9f) << i;
  }
  EXPECT_LT(std::sqrt(num / den), 0.15);
}

TEST(Nvfp4, BadInputIsRefused) {
  std::vector<uint8_t> packed(32, 0), scales(4, 0x38), row(80);
  scales[2] = 0xff;  // NaN
  try {
    nvfp4_rows_from_modelopt(packed.data(), scales.data(), 1.0f, 1, 64, row.data(), DType::NVFP4_G64);
    FAIL() << "a NaN scale was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("values 32..47"), std::string::npos) << e.what();
  }
  scales[2] = 0x38;
  EXPECT_THROW(nvfp4_rows_from_modelopt(packed.data(), scales.data(), NAN, 1, 64, row.data(), DType::NVFP4_G64),
               Error);
  EXPECT_THROW(nvfp4_rows_from_modelopt(packed.data(), scales.data(), 1.0f, 1, 48, row.data(), DType::NVFP4_G64),
               Error);
  EXPECT_THROW(nvfp4_rows_from_modelopt(packed.data(), scales.data(), 1.0f, 1, 64, row.data(), DType::NVFP4), Error);
  EXPECT_THROW(nvfp4_rows_from_modelopt(nullptr, scales.data(), 1.0f, 1, 64, row.data(), DType::NVFP4_G64), Error);
  float g;
  EXPECT_THROW(nvfp4_quantize_modelopt(nullptr, 1, 24, packed.data(), scales.data(), &g), Error);
}

// ---- GGUF NVFP4 (llama.cpp's layout) with its per-tensor scale, into NVFP4_G64 ----

/** E2M1 magnitudes and signs by code, from the format's definition (sign bit 3; 1 exponent bit pair). */
constexpr double kE2m1Ref[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

/** GGUF's UE4M3 block scale: 4 exponent bits (bias 7) above 3 mantissa bits, subnormals at exponent
 *  0, bit 7 outside both; the byte 0x7f (NaN in E4M3) decodes as 0 in ggml. */
double ue4m3_ref(uint8_t x) {
  if (x == 0x7f) return 0;
  const int e = (x >> 3) & 0x0f, m = x & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
}

/** Value i of GGUF NVFP4 rows (36-byte blocks of 64: d[4], then qs[32] where sub-block k's byte j holds
 *  value j low and value j + 8 high) times g, in double. */
double gguf_ref(const std::vector<uint8_t>& blocks, int64_t i, double g) {
  const uint8_t* b = blocks.data() + (i / 64) * 36;
  const int k = static_cast<int>(i % 64) / 16, j = static_cast<int>(i % 16);
  const uint8_t byte = b[4 + 8 * k + j % 8];
  return kE2m1Ref[j < 8 ? byte & 0x0f : byte >> 4] * ue4m3_ref(b[k]) * g;
}

TEST(Nvfp4Gguf, KnownAnswerBlock) {
  // Sub-block k's byte j = code j | code j + 8 << 4, so its values are codes 0..15 in order. Scales:
  // 0x38 = 1.0, 0xc0 = 2.0 (bit 7 ignored), 0x7f (GGUF decodes 0), 0x00; global 0.5.
  std::vector<uint8_t> block = {0x38, 0xc0, 0x7f, 0x00};
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 8; ++j) block.push_back(static_cast<uint8_t>(j | (j + 8) << 4));
  ASSERT_EQ(block.size(), 36u);
  std::vector<uint8_t> row(dtype_bytes(DType::NVFP4_G64, 64));
  nvfp4_rows_from_gguf(block.data(), 0.5f, 1, 64, row.data());
  std::vector<float> y(64);
  dequantize_row(DType::NVFP4_G64, row.data(), y.data(), 64);
  for (int i = 0; i < 64; ++i) {
    const double d = i < 16 ? 1.0 : i < 32 ? 2.0 : 0.0;
    EXPECT_EQ(y[i], static_cast<float>(kE2m1Ref[i % 16] * d * 0.5)) << i;
  }
  // Stored: the float32 global scale, E4M3 scales (bit 7 cleared, 0x7f as 0), codes in ModelOpt's order.
  float g;
  std::memcpy(&g, row.data(), 4);
  EXPECT_EQ(g, 0.5f);
  EXPECT_EQ(row[4], 0x38);
  EXPECT_EQ(row[5], 0x40);
  EXPECT_EQ(row[6], 0x00);
  EXPECT_EQ(row[7], 0x00);
  for (int k = 0; k < 4; ++k)
    for (int m = 0; m < 8; ++m) EXPECT_EQ(row[8 + 8 * k + m], (2 * m) | (2 * m + 1) << 4) << k << " " << m;
}

TEST(Nvfp4Gguf, RandomRowsDecodeToGgufTimesTheScale) {
  // Random blocks (every scale byte, 0x7f and bit 7 included): the NVFP4_G64 decode equals
  // e2m1(q) * ue4m3(d) * g computed from the raw bytes, and GGUF's own decode times g, within float32
  // rounding (the scale product e4m3(s) * g is rounded once).
  std::mt19937 rng(11);
  const int64_t N = 6, K = 192;
  std::vector<uint8_t> blocks(N * dtype_bytes(DType::NVFP4, K));
  for (auto& b : blocks) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < N * (K / 64); ++i)
    for (int k = 0; k < 4; ++k)
      if (blocks[i * 36 + k] == 0xff) blocks[i * 36 + k] = 0xfe;  // refused (BadInputIsRefused)
  blocks[0] = 0x7f, blocks[1] = 0x80, blocks[2] = 0x00, blocks[3] = 0x7f;  // all decode 0 (NaN code, signed zero)
  blocks[36] = 0xf9, blocks[37] = 0x01, blocks[38] = 0x7e;  // bit 7 set, the smallest subnormal, the largest
  for (const float g : {0.0173f, 1.0f, 3.5e-5f}) {
    std::vector<uint8_t> rows(N * dtype_bytes(DType::NVFP4_G64, K));
    nvfp4_rows_from_gguf(blocks.data(), g, N, K, rows.data());
    std::vector<float> got(N * K), plain(N * K);
    dequantize_row(DType::NVFP4_G64, rows.data(), got.data(), N * K);
    dequantize_row(DType::NVFP4, blocks.data(), plain.data(), N * K);
    int nonzero = 0;
    for (int64_t i = 0; i < N * K; ++i) {
      const double want = gguf_ref(blocks, i, g);
      nonzero += want != 0;
      ASSERT_LE(std::fabs(got[i] - want), std::fabs(want) * 0x1p-23) << i << " g " << g;
      ASSERT_LE(std::fabs(got[i] - static_cast<double>(plain[i]) * g), std::fabs(want) * 0x1p-23) << i;
    }
    EXPECT_GT(nonzero, N * K / 2);
    for (int64_t i = 0; i < 64; ++i) EXPECT_EQ(got[i], 0.0f) << i;  // the first block's scales all decode 0
  }
}

TEST(Nvfp4Gguf, BadInputIsRefused) {
  std::vector<uint8_t> blocks(72, 0x38), row(160);
  for (const float g : {-1.0f, -0.0f, NAN, INFINITY}) {
    try {
      nvfp4_rows_from_gguf(blocks.data(), g, 1, 64, row.data());
      FAIL() << "global scale " << g << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << g;
    }
  }
  blocks[36 + 2] = 0xff;  // row 1's third scale: 480 in ggml, no E4M3 value
  try {
    nvfp4_rows_from_gguf(blocks.data(), 1.0f, 1, 128, row.data());
    FAIL() << "scale byte 0xff was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("row 0, values 96..111"), std::string::npos) << e.what();
  }
  EXPECT_THROW(nvfp4_rows_from_gguf(blocks.data(), 1.0f, 1, 32, row.data()), Error);
  EXPECT_THROW(nvfp4_rows_from_gguf(nullptr, 1.0f, 1, 64, row.data()), Error);
  EXPECT_THROW(nvfp4_rows_from_gguf(blocks.data(), 1.0f, -1, 64, row.data()), Error);
}

}  // namespace
}  // namespace ft
