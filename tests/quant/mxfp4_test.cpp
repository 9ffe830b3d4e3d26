// MXFP4 (quant/mxfp4.h) known answers: the 16 E2M1 codes and the E8M0 scales of OCP MX v1.0, the
// release-layout decoder, the repacking into GGUF blocks (byte for byte what llama.cpp's
// convert_hf_to_gguf.py transform_nibble_layout writes, re-expressed here step by step), a round
// trip through quant's dequantize_row(MXFP4), the section 6.3 quantizer, and the errors.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/blocks.h"
#include "quant/mxfp4.h"
#include "quant/quant.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace ft {
namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

TEST(Mxfp4, AllSixteenE2M1Codes) {
  const float want[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(bits(e2m1_to_f32(static_cast<uint8_t>(c))), bits(want[c])) << "code " << c;
    EXPECT_EQ(bits(e2m1_to_f32(static_cast<uint8_t>(c | 0xf0))), bits(want[c])) << "high bits are ignored";
  }
  EXPECT_TRUE(std::signbit(e2m1_to_f32(8)));  // -0.0
}

TEST(Mxfp4, E8M0Scales) {
  EXPECT_EQ(bits(e8m0_to_f32(0)), 0x00400000u);  // 2^-127, a subnormal
  EXPECT_EQ(bits(e8m0_to_f32(1)), 0x00800000u);  // 2^-126, the smallest normal
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(126), 0.5f);
  EXPECT_EQ(bits(e8m0_to_f32(254)), 0x7f000000u);  // 2^127
  EXPECT_TRUE(std::isnan(e8m0_to_f32(255)));
  for (int e = 0; e < 255; ++e) EXPECT_EQ(e8m0_to_f32(static_cast<uint8_t>(e)), std::ldexp(1.0, e - 127)) << e;
}

TEST(Mxfp4, OcpLayoutDecodesLowNibbleFirst) {
  // One block: byte j = (code 2j + 1) << 4 | code 2j with codes k % 16; scale 2^1.
  uint8_t blk[16], scale = 128;
  for (int j = 0; j < 16; ++j) blk[j] = static_cast<uint8_t>(((2 * j + 1) % 16) << 4 | ((2 * j) % 16));
  float y[32];
  mxfp4_ocp_to_f32(blk, &scale, 1, 32, y);
  for (int k = 0; k < 32; ++k) EXPECT_EQ(bits(y[k]), bits(2.0f * e2m1_to_f32(static_cast<uint8_t>(k % 16)))) << k;
  EXPECT_EQ(y[7], 12.0f);
  EXPECT_EQ(y[15], -12.0f);
  scale = 255;  // NaN scale: NaN values (the reference decode does not refuse it)
  mxfp4_ocp_to_f32(blk, &scale, 1, 32, y);
  EXPECT_TRUE(std::isnan(y[3]));
}

/** llama.cpp convert_hf_to_gguf.py GptOssModel.transform_nibble_layout, step by step on one block of
 *  16 bytes: swap nibbles; split into halves a (bytes 0-7), b (8-15); a -> pairs (a & 0xf0, a << 4),
 *  b -> pairs (b >> 4, b & 0x0f), interleaved; out = a | b; swap nibbles again. */
void transform_nibble_layout(const uint8_t* in, uint8_t* out) {
  uint8_t t[16], a[16], b[16];
  for (int j = 0; j < 16; ++j) t[j] = static_cast<uint8_t>((in[j] & 0x0f) << 4 | (in[j] & 0xf0) >> 4);
  for (int j = 0; j < 8; ++j) {
    a[2 * j] = t[j] & 0xf0, a[2 * j + 1] = static_cast<uint8_t>(t[j] << 4);
    b[2 * j] = t[8 + j] >> 4, b[2 * j + 1] = t[8 + j] & 0x0f;
  }
  for (int j = 0; j < 16; ++j) {
    const uint8_t o = a[j] | b[j];
    out[j] = static_cast<uint8_t>((o & 0xf0) >> 4 | (o & 0x0f) << 4);
  }
}

TEST(Mxfp4, RepackMatchesLlamaCppBytes) {
  const int64_t rows = 3, cols = 96, nb = rows * cols / 32;
  std::mt19937 rng(1);
  std::vector<uint8_t> blocks(static_cast<size_t>(nb * 16)), scales(static_cast<size_t>(nb));
  for (uint8_t& b : blocks) b = static_cast<uint8_t>(rng());
  for (uint8_t& s : scales) s = static_cast<uint8_t>(rng() % 255);
  std::vector<uint8_t> got(static_cast<size_t>(rows * dtype_bytes(DType::MXFP4, cols)));
  ASSERT_EQ(got.size(), static_cast<size_t>(nb * 17));
  mxfp4_rows_from_ocp(blocks.data(), scales.data(), rows, cols, got.data());
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t want[17];
    want[0] = scales[static_cast<size_t>(b)];  // repack_mxfp4: concat(scales, blocks) per block
    transform_nibble_layout(blocks.data() + b * 16, want + 1);
    EXPECT_EQ(std::memcmp(got.data() + b * 17, want, 17), 0) << "block " << b;
  }
  // The layout spelled out: GGUF byte j = element j (low) | element j + 16 (high).
  uint8_t ocp[16], scale = 127, gguf[17];
  for (int j = 0; j < 16; ++j) ocp[j] = static_cast<uint8_t>(((2 * j + 1) % 16) << 4 | ((2 * j) % 16));
  mxfp4_rows_from_ocp(ocp, &scale, 1, 32, gguf);
  const auto blk = quant::load_block<quant::BlockMXFP4>(gguf, 0);
  EXPECT_EQ(blk.e, 127);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(blk.qs[j], static_cast<uint8_t>((j % 16) | (((j + 16) % 16) << 4))) << j;
}

// The repacked rows decode (quant's GGUF dequantizer) to the OCP values, at every scale but 255.
TEST(Mxfp4, RoundTripThroughDequantizeRow) {
  const int64_t cols = 256, per_row = cols / 32, rows = 255 / per_row + 1;
  std::mt19937 rng(2);
  std::vector<uint8_t> blocks(static_cast<size_t>(rows * per_row * 16)), scales(static_cast<size_t>(rows * per_row));
  for (uint8_t& b : blocks) b = static_cast<uint8_t>(rng());
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(i % 255);  // 0, 1, .., 254, 0, ..
  scales[0] = 0, scales[1] = 127, scales[2] = 254;
  for (int j = 0; j < 16; ++j) blocks[static_cast<size_t>(16 + j)] = static_cast<uint8_t>(j << 4 | j);  // element 2j, 2j + 1: code j
  std::vector<float> want(static_cast<size_t>(rows * cols)), got(want.size());
  mxfp4_ocp_to_f32(blocks.data(), scales.data(), rows, cols, want.data());
  std::vector<uint8_t> gguf(static_cast<size_t>(rows * dtype_bytes(DType::MXFP4, cols)));
  mxfp4_rows_from_ocp(blocks.data(), scales.data(), rows, cols, gguf.data());
  dequantize_row(DType::MXFP4, gguf.data(), got.data(), rows * cols);
  int64_t infinite = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    // Equal values; the one difference in bits is code 8, -0.0 in OCP and +0.0 in ggml's table.
    EXPECT_EQ(got[i], want[i]) << "element " << i << " (scale byte " << int{scales[i / 32]} << ")";
    if (want[i] == 0.0f) EXPECT_FALSE(std::signbit(got[i]));
    else EXPECT_EQ(bits(got[i]), bits(want[i])) << i;
    infinite += std::isinf(want[i]);
  }
  EXPECT_GT(infinite, 0);  // 6 * 2^127 and 4 * 2^127 overflow float32 in both decoders
  EXPECT_EQ(want[32 + 5], 1.0f);
}

TEST(Mxfp4, BadInputsAreRefused) {
  std::vector<uint8_t> blocks(4 * 16, 0x21), scales(4, 127), out(4 * 17);
  scales[3] = 255;
  try {
    mxfp4_rows_from_ocp(blocks.data(), scales.data(), 2, 64, out.data());
    FAIL() << "scale 255 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("row 1 block 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
  }
  for (int64_t cols : {int64_t{48}, int64_t{0}, int64_t{-32}}) {
    try {
      mxfp4_rows_from_ocp(blocks.data(), scales.data(), 1, cols, out.data());
      FAIL() << cols << " columns accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
    }
  }
  std::vector<float> f(64);
  EXPECT_THROW(mxfp4_ocp_to_f32(blocks.data(), scales.data(), 1, 40, f.data()), Error);
  EXPECT_THROW(mxfp4_rows_from_ocp(nullptr, scales.data(), 1, 32, out.data()), Error);
  mxfp4_rows_from_ocp(nullptr, nullptr, 0, 32, nullptr);  // no rows: nothing to read
  f[5] = std::nanf("");
  try {
    mxfp4_ocp_quantize(f.data(), 1, 64, blocks.data(), scales.data());
    FAIL() << "NaN accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("column 5"), std::string::npos) << e.what();
  }
}

/** Element k of OCP block `b`'s codes. */
uint8_t code_at(const std::vector<uint8_t>& blocks, int64_t b, int k) {
  const uint8_t byte = blocks[static_cast<size_t>(b * 16 + k / 2)];
  return (k % 2) ? byte >> 4 : byte & 0x0f;
}

// OCP MX v1.0 section 6.3: shared exponent floor(log2(amax)) - 2, nearest E2M1 with ties to even,
// saturation at 6.
TEST(Mxfp4, QuantizerKnownAnswers) {
  // Block 0: amax 6 -> exponent 0 (byte 127); the midpoints tie to the even code.
  const float in0[] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 5.5f, 6.0f, -0.1f, -3.0f, 0.26f, 4.9f, 0.0f, -6.0f, 1.5f};
  const uint8_t want0[] = {0, 2, 2, 4, 4, 6, 6, 7, 7, 0, 13, 1, 6, 0, 15, 3};
  std::vector<float> x(4 * 32, 0.0f);
  for (int k = 0; k < 16; ++k) x[static_cast<size_t>(k)] = in0[k];
  // Block 1: amax 7.9 -> exponent 0, +-7.9 saturate to +-6.
  x[32] = 7.9f, x[33] = -7.9f, x[34] = 0.3f;
  // Block 2: all zero -> byte 0, codes 0. Block 3: amax 1e-40 (subnormal) -> clamped to 2^-127.
  x[96] = 1e-40f;
  std::vector<uint8_t> blocks(4 * 16), scales(4);
  mxfp4_ocp_quantize(x.data(), 1, 128, blocks.data(), scales.data());
  EXPECT_EQ(scales[0], 127);
  for (int k = 0; k < 16; ++k) EXPECT_EQ(code_at(blocks, 0, k), want0[k]) << "value " << in0[k];
  EXPECT_EQ(scales[1], 127);
  EXPECT_EQ(code_at(blocks, 1, 0), 7);
  EXPECT_EQ(code_at(blocks, 1, 1), 15);
  EXPECT_EQ(code_at(blocks, 1, 2), 1);  // 0.3 -> 0.5 (nearest)
  EXPECT_EQ(scales[2], 0);
  for (int k = 0; k < 32; ++k) EXPECT_EQ(code_at(blocks, 2, k), 0);
  EXPECT_EQ(scales[3], 0);
  EXPECT_EQ(code_at(blocks, 3, 0), 0);  // 1e-40 / 2^-127 = 0.017: rounds to 0
  // The exponent follows amax: 3e38 -> floor(log2) 127 -> 125; 0.1 -> -4 - 2 = -6.
  std::vector<float> y(64, 0.0f);
  y[0] = 3e38f, y[32] = 0.1f;
  mxfp4_ocp_quantize(y.data(), 2, 32, blocks.data(), scales.data());
  EXPECT_EQ(scales[0], 125 + 127);
  EXPECT_EQ(scales[1], 127 - 6);
}

// Quantize then decode: every element within half a step of its block's E2M1 grid (or saturated).
TEST(Mxfp4, QuantizerRoundTripError) {
  const int64_t rows = 8, cols = 128;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> x(static_cast<size_t>(rows * cols)), y(x.size());
  for (float& v : x) v = nd(rng);
  std::vector<uint8_t> blocks(static_cast<size_t>(rows * cols / 2)), scales(static_cast<size_t>(rows * cols / 32));
  mxfp4_ocp_quantize(x.data(), rows, cols, blocks.data(), scales.data());
  mxfp4_ocp_to_f32(blocks.data(), scales.data(), rows, cols, y.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = e8m0_to_f32(scales[i / 32]);
    const float a = std::fabs(x[i]) / s;
    const float step = a < 2.0f ? 0.5f : (a < 4.0f ? 1.0f : 2.0f);
    if (a <= 6.0f) EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * step * s) << i;
    else EXPECT_EQ(std::fabs(y[i]), 6.0f * s) << i;
  }
}

}  // namespace
}  // namespace ft
