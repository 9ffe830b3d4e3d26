// Hand-built blocks for the types the fixtures do not cover (Q1_0, Q2_0, integer/F64/FP8
// element types), codebook spot checks against ggml-common.h, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "quant/iq_grids.h"
#include "quant/quant.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft {
namespace {

uint64_t row_u64(const std::array<uint8_t, 8>& r) {
  uint64_t v;
  std::memcpy(&v, r.data(), 8);
  return v;
}

// Q1_0 (ggml-common.h block_q1_0): fp16 d + 128 sign bits, bit j of byte j/8: 1 -> +d, 0 -> -d.
TEST(QuantFormats, Q1_0) {
  uint8_t blk[18] = {0x00, 0x38};  // d = 0.5
  for (int i = 0; i < 16; ++i) blk[2 + i] = static_cast<uint8_t>(0xa5 ^ i);
  std::vector<float> y(128);
  dequantize_row(DType::Q1_0, blk, y.data(), 128);
  for (int j = 0; j < 128; ++j) EXPECT_EQ(y[j], ((blk[2 + j / 8] >> (j % 8)) & 1) ? 0.5f : -0.5f) << j;
}

// Q2_0 (ggml-common.h block_q2_0, 64 elements): fp16 d + 2-bit codes, element j in bits
// 2*(j%4) of byte j/4; code c -> (c - 1) * d.
TEST(QuantFormats, Q2_0) {
  uint8_t blk[36] = {0x00, 0x40};  // block 0: d = 2
  for (int i = 0; i < 16; ++i) blk[2 + i] = 0xe4;  // codes 0,1,2,3 -> -2, 0, 2, 4
  blk[18] = 0x00;
  blk[19] = 0xbc;  // block 1: d = -1
  for (int i = 0; i < 16; ++i) blk[20 + i] = 0x55;  // code 1 everywhere -> 0 * -1 = -0.0 (as in ggml)
  std::vector<float> y(128);
  dequantize_row(DType::Q2_0, blk, y.data(), 128);
  const float want[4] = {-2.0f, 0.0f, 2.0f, 4.0f};
  for (int j = 0; j < 64; ++j) EXPECT_EQ(y[j], want[j % 4]) << j;
  for (int j = 64; j < 128; ++j) EXPECT_TRUE(y[j] == 0.0f && std::signbit(y[j])) << j;
  EXPECT_EQ(dtype_bytes(DType::Q2_0, 128), 36);
  EXPECT_EQ(dtype_bytes(DType::Q1_0, 128), 18);
}

TEST(QuantFormats, IntegerAndDoubleElements) {
  const int8_t i8[3] = {-128, 0, 127};
  const int16_t i16[2] = {-32768, 1234};
  const int32_t i32[2] = {-7, 16777217};  // 2^24 + 1 rounds to 2^24 in float
  const int64_t i64[1] = {int64_t{1} << 40};
  const double f64[2] = {0.1, -1e300};
  const uint8_t u8[2] = {0, 255}, b[3] = {0, 1, 7};
  float y[3];
  dequantize_row(DType::I8, i8, y, 3);
  EXPECT_EQ(y[0], -128.0f);
  EXPECT_EQ(y[2], 127.0f);
  dequantize_row(DType::I16, i16, y, 2);
  EXPECT_EQ(y[0], -32768.0f);
  EXPECT_EQ(y[1], 1234.0f);
  dequantize_row(DType::I32, i32, y, 2);
  EXPECT_EQ(y[0], -7.0f);
  EXPECT_EQ(y[1], 16777216.0f);
  dequantize_row(DType::I64, i64, y, 1);
  EXPECT_EQ(y[0], 1099511627776.0f);
  dequantize_row(DType::F64, f64, y, 2);
  EXPECT_EQ(y[0], 0.1f);
  EXPECT_EQ(y[1], -INFINITY);
  dequantize_row(DType::U8, u8, y, 2);
  EXPECT_EQ(y[1], 255.0f);
  dequantize_row(DType::BOOL, b, y, 3);
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 1.0f);
}

// OCP FP8: E4M3 (bias 7, 0x7e = 448 max, 0x7f NaN, 0x01 = 2^-9) and E5M2 (IEEE-like, bias 15).
TEST(QuantFormats, Fp8) {
  const uint8_t e4m3[6] = {0x38, 0x7e, 0x01, 0xb8, 0x7f, 0x80};
  float y[6];
  dequantize_row(DType::F8_E4M3, e4m3, y, 6);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 448.0f);
  EXPECT_EQ(y[2], std::ldexp(1.0f, -9));
  EXPECT_EQ(y[3], -1.0f);
  EXPECT_TRUE(std::isnan(y[4]));
  EXPECT_TRUE(y[5] == 0.0f && std::signbit(y[5]));
  const uint8_t e5m2[4] = {0x3c, 0x7b, 0x7c, 0x01};
  dequantize_row(DType::F8_E5M2, e5m2, y, 4);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 57344.0f);
  EXPECT_EQ(y[2], INFINITY);
  EXPECT_EQ(y[3], std::ldexp(1.0f, -16));
}

// Spot checks against the uint64 literals of ggml-common.h (the build itself checks that the
// packed entries are strictly increasing and every code is in range).
TEST(QuantFormats, CodebooksMatchGgml) {
  EXPECT_EQ(row_u64(quant::iq2xxs_grid[0]), 0x0808080808080808u);
  EXPECT_EQ(row_u64(quant::iq2xxs_grid[1]), 0x080808080808082bu);
  EXPECT_EQ(row_u64(quant::iq2xxs_grid[64]), 0x08082b0819081908u);
  EXPECT_EQ(row_u64(quant::iq2xxs_grid[255]), 0x2b2b2b1908081908u);
  EXPECT_EQ(row_u64(quant::iq2xs_grid[100]), 0x0808192b08081908u);
  EXPECT_EQ(row_u64(quant::iq2xs_grid[375]), 0x19192b2b2b081919u);
  EXPECT_EQ(row_u64(quant::iq2s_grid[0]), 0x0808080808080808u);
  std::array<uint8_t, 8> r;
  std::memcpy(r.data(), quant::iq1s_grid[240].data(), 8);
  EXPECT_EQ(row_u64(r), 0xff00ff0001ff00ffu);
  std::memcpy(r.data(), quant::iq1s_grid[992].data(), 8);
  EXPECT_EQ(row_u64(r), 0x000000ff01000001u);
  uint32_t w;
  std::memcpy(&w, quant::iq3xxs_grid[1].data(), 4);
  EXPECT_EQ(w, 0x04040414u);
  std::memcpy(&w, quant::iq3s_grid[1].data(), 4);
  EXPECT_EQ(w, 0x01010103u);
  const uint8_t ksigns_head[16] = {0, 129, 130, 3, 132, 5, 6, 135, 136, 9, 10, 139, 12, 141, 142, 15};
  EXPECT_EQ(std::memcmp(quant::ksigns_iq2xs.data(), ksigns_head, 16), 0);
  EXPECT_EQ(quant::ksigns_iq2xs[127], 255);
}

TEST(QuantFormats, SupportedTypes) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1,
                  DType::Q8_0, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ2_XXS,
                  DType::IQ2_XS, DType::IQ3_XXS, DType::IQ1_S, DType::IQ4_NL, DType::IQ3_S, DType::IQ2_S,
                  DType::IQ4_XS, DType::I8, DType::I16, DType::I32, DType::I64, DType::F64, DType::IQ1_M,
                  DType::TQ1_0, DType::TQ2_0, DType::MXFP4, DType::NVFP4, DType::Q1_0, DType::Q2_0})
    EXPECT_TRUE(can_dequantize(t)) << dtype_name(t);
  EXPECT_FALSE(can_dequantize(DType::Q8_1));
  EXPECT_FALSE(can_dequantize(DType::Q8_K));
}

TEST(QuantFormats, DequantizeErrors) {
  std::vector<uint8_t> src(4096);
  std::vector<float> dst(1024);
  try {
    dequantize_row(DType::Q4_K, src.data(), dst.data(), 100);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("Q4_K"), std::string::npos) << e.what();
  }
  EXPECT_THROW(dequantize_row(DType::Q8_0, src.data(), dst.data(), 48), Error);
  EXPECT_THROW(dequantize_row(DType::IQ2_XXS, src.data(), dst.data(), 255), Error);
  EXPECT_THROW(dequantize_row(DType::F32, src.data(), dst.data(), -1), Error);
  EXPECT_THROW(dequantize_row(DType::Q4_0, nullptr, dst.data(), 32), Error);
  try {
    dequantize_row(DType::Q8_K, src.data(), dst.data(), 256);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
  EXPECT_NO_THROW(dequantize_row(DType::Q4_K, nullptr, nullptr, 0));
}

}  // namespace
}  // namespace ft
