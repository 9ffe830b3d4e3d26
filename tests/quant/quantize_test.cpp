// Quantizers (Q8_0, Q4_0, Q4_K, F16/BF16/F32): known inputs give known bytes, and
// quantize -> dequantize round trips stay within the stated per-element error bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft {
namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Test rows: Gaussian blocks at several scales, plus all-zero, single-spike, all-positive and
// all-negative blocks. n is a multiple of 256.
std::vector<float> test_rows() {
  std::vector<float> v = gaussian(4096, 7, 1.0f);
  for (size_t i = 512; i < 1024; ++i) v[i] *= 1e-3f;
  for (size_t i = 1024; i < 1536; ++i) v[i] *= 300.0f;
  std::fill(v.begin() + 1536, v.begin() + 1792, 0.0f);  // zero super-block
  v[1800] = 5.0f;                                       // spike in an otherwise small block
  for (size_t i = 2048; i < 2304; ++i) v[i] = std::fabs(v[i]);
  for (size_t i = 2304; i < 2560; ++i) v[i] = -std::fabs(v[i]);
  return v;
}

float f16_round(float x) { return f16_to_f32(f32_to_f16(x)); }

std::vector<float> round_trip(DType t, const std::vector<float>& x, std::vector<uint8_t>* bytes = nullptr) {
  std::vector<uint8_t> q(static_cast<size_t>(dtype_bytes(t, static_cast<int64_t>(x.size()))));
  quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  std::vector<float> y(x.size());
  dequantize_row(t, q.data(), y.data(), static_cast<int64_t>(x.size()));
  if (bytes) *bytes = q;
  return y;
}

// ---- known bytes ----

TEST(Quantize, Q8_0KnownBytes) {
  // amax = 127 -> d = 1 (fp16 0x3c00); codes = roundf(x), halves away from zero.
  std::vector<float> x(32, 0.0f);
  const float head[] = {127.0f, -127.0f, 0.0f, 1.5f, -1.5f, 2.5f, 0.49f, -0.5f, 100.25f};
  std::copy(std::begin(head), std::end(head), x.begin());
  uint8_t q[34];
  quantize_row(DType::Q8_0, x.data(), q, 32);
  const uint8_t want[] = {0x00, 0x3c, 0x7f, 0x81, 0x00, 0x02, 0xfe, 0x03, 0x00, 0xff, 0x64};
  EXPECT_EQ(std::memcmp(q, want, sizeof(want)), 0);
  for (int j = 9; j < 32; ++j) EXPECT_EQ(q[2 + j], 0) << j;
}

TEST(Quantize, Q4_0KnownBytes) {
  // The value of largest magnitude (-8, first seen) sets d = -8 / -8 = 1; code = trunc(x + 8.5)
  // clamped to 15, so +8 saturates at 15 (= +7) and halves round up.
  std::vector<float> x(32, 0.0f);
  const float head[] = {-8.0f, 8.0f, 7.0f, 0.5f, -0.5f, 3.2f, -2.6f};
  std::copy(std::begin(head), std::end(head), x.begin());
  x[16] = 1.0f;
  x[17] = -1.0f;
  uint8_t q[18];
  quantize_row(DType::Q4_0, x.data(), q, 32);
  EXPECT_EQ(q[0], 0x00);
  EXPECT_EQ(q[1], 0x3c);
  // byte j = code(x[j]) | code(x[j+16]) << 4
  const uint8_t want[16] = {0x90, 0x7f, 0x8f, 0x89, 0x88, 0x8b, 0x85, 0x88,
                            0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88};
  EXPECT_EQ(std::memcmp(q + 2, want, 16), 0);
}

TEST(Quantize, Q4_KKnownBytes) {
  // Every sub-block is 0..15 twice: no negative values -> dmin = 0, all mins 0. Each sub-block
  // needs scale 1 = d * 63; d is rounded *up* to fp16: 1/63 -> 0x2411 (0.0158768), ls = 63.
  std::vector<float> x(256);
  for (int i = 0; i < 256; ++i) x[i] = static_cast<float>(i % 16);
  uint8_t q[144];
  quantize_row(DType::Q4_K, x.data(), q, 256);
  const uint8_t head[16] = {0x11, 0x24, 0x00, 0x00,  // d, dmin
                            0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x0f, 0x0f, 0x0f, 0x0f};
  EXPECT_EQ(std::memcmp(q, head, 16), 0);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(q[16 + i], (i % 16) * 0x11) << i;
  std::vector<float> y(256);
  dequantize_row(DType::Q4_K, q, y.data(), 256);
  for (int i = 0; i < 256; ++i) EXPECT_NEAR(y[i], x[i], 15 * 1e-3f) << i;  // codes exact; dq = 1.0002
}

TEST(Quantize, FloatPassThrough) {
  const float x[4] = {1.0f, -2.5f, 65504.0f, 1e-8f};
  uint8_t f32[16], f16[8], bf16[8];
  quantize_row(DType::F32, x, f32, 4);
  EXPECT_EQ(std::memcmp(f32, x, 16), 0);
  quantize_row(DType::F16, x, f16, 4);
  const uint8_t want16[8] = {0x00, 0x3c, 0x00, 0xc1, 0xff, 0x7b, 0x00, 0x00};  // 1e-8 underflows to +0
  EXPECT_EQ(std::memcmp(f16, want16, 8), 0);
  quantize_row(DType::BF16, x, bf16, 4);
  uint16_t b[4];
  std::memcpy(b, bf16, 8);
  EXPECT_EQ(b[0], 0x3f80);
  EXPECT_EQ(b[1], 0xc020);
  EXPECT_EQ(b[2], 0x4780);  // 65504 rounds to 65536 in bf16
}

// ---- round-trip bounds ----

// Q8_0: d = amax/127 and codes round(x/d), so |x - x_hat| <= d/2 with the exact d; the stored
// d16 = fp16(d) adds at most 127 * |d - d16|.
TEST(Quantize, Q8_0RoundTripBound) {
  const std::vector<float> x = test_rows();
  const std::vector<float> y = round_trip(DType::Q8_0, x);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    const float d = amax / 127, d16 = f16_round(d);
    const float bound = d / 2 + 127 * std::fabs(d - d16) + 1e-6f * amax;
    for (int j = 0; j < 32; ++j) ASSERT_LE(std::fabs(x[32 * b + j] - y[32 * b + j]), bound) << b << " " << j;
  }
}

// Q4_0: d = -max/8 (max = the signed value of largest magnitude), code = round-half-up(x/d) + 8
// clamped to 15. Error <= |d|/2, except x/d in (7.5, 8] (the opposite extreme) saturates at
// +7: error <= |d|. fp16 rounding of d adds at most 8 * |d - d16|.
TEST(Quantize, Q4_0RoundTripBound) {
  const std::vector<float> x = test_rows();
  const std::vector<float> y = round_trip(DType::Q4_0, x);
  for (size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; ++j)
      if (std::fabs(x[32 * b + j]) > amax) amax = std::fabs(x[32 * b + j]), max = x[32 * b + j];
    const float d = max / -8, d16 = f16_round(d);
    for (int j = 0; j < 32; ++j) {
      const float xv = x[32 * b + j];
      const float ratio = d != 0.0f ? xv / d : 0.0f;
      const float bound = (ratio > 7.5f ? std::fabs(d) : std::fabs(d) / 2) + 8 * std::fabs(d - d16) + 1e-6f * amax;
      ASSERT_LE(std::fabs(xv - y[32 * b + j]), bound) << b << " " << j;
    }
  }
}

// Decodes Q4_K sub-block j's step dq = d * ls and offset mq = dmin * lm from a 144-byte block
// (12 bytes of 6-bit scales after fp16 d and dmin).
void q4k_step(const uint8_t* blk, int j, float& dq, float& mq) {
  uint16_t dh, mh;
  std::memcpy(&dh, blk, 2);
  std::memcpy(&mh, blk + 2, 2);
  const uint8_t* s = blk + 4;
  const int ls = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
  const int lm = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
  dq = f16_to_f32(dh) * static_cast<float>(ls);
  mq = f16_to_f32(mh) * static_cast<float>(lm);
}

// Q4_K (round to nearest with scales rounded up): every element is within half a step of its
// sub-block, |x - x_hat| <= dq_j / 2; the step is never more than needed plus one unit of each
// super-block scale, dq_j <= (range_j + dmin) / 15 + d; and on Gaussian data the relative L2
// error ||x - x_hat|| / ||x|| is <= 0.09 (measured 0.080; uniform 4-bit steps over a 32-sample
// range of ~4 sigma give ~0.08).
TEST(Quantize, Q4_KRoundTripBound) {
  const std::vector<float> x = test_rows();
  std::vector<uint8_t> q;
  const std::vector<float> y = round_trip(DType::Q4_K, x, &q);
  for (size_t sb = 0; sb < x.size() / 256; ++sb) {
    const uint8_t* blk = q.data() + 144 * sb;
    uint16_t dh, mh;
    std::memcpy(&dh, blk, 2);
    std::memcpy(&mh, blk + 2, 2);
    const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
    for (int j = 0; j < 8; ++j) {
      float dq, mq;
      q4k_step(blk, j, dq, mq);
      const float* xs = x.data() + 256 * sb + 32 * j;
      const float* ys = y.data() + 256 * sb + 32 * j;
      float mn = 0.0f, mx = 0.0f;
      for (int l = 0; l < 32; ++l) mn = std::min(mn, xs[l]), mx = std::max(mx, xs[l]);
      EXPECT_LE(dq, (mx - mn + dmin) / 15 * (1 + 1e-5f) + d) << sb << " " << j;
      for (int l = 0; l < 32; ++l)
        ASSERT_LE(std::fabs(xs[l] - ys[l]), dq / 2 + 1e-6f * (std::fabs(xs[l]) + mq) + 1e-30f)
            << sb << " " << j << " " << l;
    }
  }
  const std::vector<float> g = gaussian(8192, 11, 1.0f);
  const std::vector<float> gy = round_trip(DType::Q4_K, g);
  double err = 0, ref = 0;
  for (size_t i = 0; i < g.size(); ++i) err += double(g[i] - gy[i]) * (g[i] - gy[i]), ref += double(g[i]) * g[i];
  EXPECT_LE(std::sqrt(err / ref), 0.09);
}

TEST(Quantize, ZerosStayZero) {
  const std::vector<float> x(512, 0.0f);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
    const std::vector<float> y = round_trip(t, x);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

TEST(Quantize, NonFiniteInputDoesNotCrash) {
  std::vector<float> x(256, 1.0f);
  x[3] = NAN;
  x[40] = INFINITY;
  x[77] = -INFINITY;
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_K}) {
    std::vector<uint8_t> q(static_cast<size_t>(dtype_bytes(t, 256)));
    EXPECT_NO_THROW(quantize_row(t, x.data(), q.data(), 256)) << dtype_name(t);
  }
}

TEST(Quantize, Errors) {
  std::vector<float> x(512, 1.0f);
  std::vector<uint8_t> q(2048);
  try {
    quantize_row(DType::Q8_0, x.data(), q.data(), 33);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("Q8_0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_row(DType::Q4_K, x.data(), q.data(), 128), Error);  // half a super-block
  EXPECT_THROW(quantize_row(DType::Q4_0, x.data(), q.data(), -32), Error);
  try {
    quantize_row(DType::Q5_K, x.data(), q.data(), 256);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
  EXPECT_NO_THROW(quantize_row(DType::Q8_0, nullptr, nullptr, 0));
}

}  // namespace
}  // namespace ft
