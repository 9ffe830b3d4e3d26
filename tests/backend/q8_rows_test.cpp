// The CPU int8 activation form (quantize_q8_row) and the Q4_K / Q6_K x int8 dots (dot_rows_q8) against
// double-precision references: the quantized values, their layout and sums; the dot against the
// dequantized weights times the quantized activations, and against the float activations.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "backend/cpu/q8_rows.h"
#include "quant/quant.h"
#include "tensor/dtype.h"
#include "test_util.h"
#include "util/error.h"

namespace ft::testing {
namespace {

std::vector<float> random_floats(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = d(rng);
  return v;
}

/** Element i's quantized value d * (q1 + q2 / 254). */
double quantized(const cpu::Q8Row& q, int64_t i) { return static_cast<double>(q.d[i / 256]) * (q.q1[i] + q.q2[i] / 254.0); }

TEST(Q8Rows, QuantizeKeepsFifteenBitsAndTheSums) {
  const int64_t n = 768;
  std::vector<float> x = random_floats(n, 7, 0.5f);
  for (int64_t i = 256; i < 512; ++i) x[static_cast<size_t>(i)] = 0.0f;  // a block of zeros
  x[600] = 9.0f;                                                          // an outlier sets its block's scale
  std::vector<uint8_t> buf(static_cast<size_t>(cpu::q8_row_bytes(n)));
  const cpu::Q8Row q = cpu::quantize_q8_row(x.data(), n, buf.data());
  EXPECT_EQ(q.n, n);
  EXPECT_EQ(q.d[1], 0.0f);
  EXPECT_FLOAT_EQ(q.d[2], 9.0f / 127.0f);
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float d = q.d[i / 256];
    EXPECT_NEAR(quantized(q, i), x[static_cast<size_t>(i)], d / 254.0 * 0.5 + 1e-7 * d) << i;
    // The terms exactly as specified (the scalar and AVX-512 forms must agree: the SimdLevels test
    // runs this one on every level).
    const float v = x[static_cast<size_t>(i)];
    auto rc = [](float f) { return static_cast<int>(std::nearbyint(std::fmin(127.0f, std::fmax(-127.0f, f)))); };
    const int a = d > 0.0f ? rc(v / d) : 0;
    const float rest = v - d * static_cast<float>(a);
    const int c = d > 0.0f ? rc(rest * (254.0f / d)) : 0;
    mismatches += q.q1[i] != a || q.q2[i] != c;
  }
  EXPECT_EQ(mismatches, 0);
  for (int len : {16, 32})
    for (int64_t j = 0; j < n / len; ++j) {
      double s = 0.0, mag = 0.0;
      for (int64_t i = len * j; i < len * j + len; ++i) s += quantized(q, i), mag += std::fabs(quantized(q, i));
      EXPECT_NEAR(len == 16 ? q.sums16[j] : q.sums[j], s, 1e-6 * mag + 1e-12) << len << "-element group " << j;
    }
  EXPECT_EQ(q.sums[8], 0.0f);
}

TEST(Q8Rows, NonFiniteInputsAndBadLengthsAreHandled) {
  std::vector<float> x(256, 1.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[4] = std::numeric_limits<float>::infinity();
  std::vector<uint8_t> buf(static_cast<size_t>(cpu::q8_row_bytes(256)));
  const cpu::Q8Row q = cpu::quantize_q8_row(x.data(), 256, buf.data());  // no trap
  EXPECT_TRUE(std::isnan(q.d[0]));  // the block's dots are NaN, as fp32 dots with it would be
  EXPECT_TRUE(std::isnan(q.sums[0]));
  x[3] = 1.0f;  // an infinity alone does the same
  EXPECT_TRUE(std::isnan(cpu::quantize_q8_row(x.data(), 256, buf.data()).d[0]));
  for (float& v : x) v = 5e-35f;  // so small that 254 / d overflows (d is still normal): q1 alone
  const cpu::Q8Row t = cpu::quantize_q8_row(x.data(), 256, buf.data());
  EXPECT_GT(t.d[0], 0.0f);
  EXPECT_EQ(t.q1[7], 127);
  EXPECT_EQ(t.q2[7], 0);
  EXPECT_TRUE(std::isfinite(t.sums[0]));
  try {
    cpu::quantize_q8_row(x.data(), 100, buf.data());
    FAIL() << "100 elements accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
}

TEST(Q8Rows, Q4KAndQ6KDotsEqualTheDequantizedSum) {
  if (!cpu::has_q8_dot(DType::Q4_K)) GTEST_SKIP() << "no AVX-512 VNNI on this machine";
  EXPECT_TRUE(cpu::has_q8_dot(DType::Q6_K));
  EXPECT_FALSE(cpu::has_q8_dot(DType::Q5_K));
  for (DType type : {DType::Q4_K, DType::Q6_K})
  for (int64_t K : {256, 2048}) {
    SCOPED_TRACE(std::string(dtype_name(type)) + " K " + std::to_string(K));
    const int rows = 4;
    const int64_t rb = dtype_bytes(type, K);
    std::vector<float> wf = random_floats(rows * K, 11 + static_cast<uint32_t>(K), 0.05f);
    std::vector<uint8_t> w(static_cast<size_t>(rows * rb));
    std::mt19937 rng(5);
    for (int r = 0; r < rows; ++r) {
      if (type == DType::Q6_K) random_q6_k(rng, w.data() + r * rb, K / 256, 0.05f);  // quant/ has no Q6_K quantizer
      else quantize_row(type, wf.data() + r * K, w.data() + r * rb, K);
    }
    std::vector<float> x = random_floats(K, 3, 1.0f);
    std::vector<uint8_t> buf(static_cast<size_t>(cpu::q8_row_bytes(K)));
    const cpu::Q8Row q = cpu::quantize_q8_row(x.data(), K, buf.data());
    float all[4];
    cpu::dot_rows_q8(type, q, w.data(), rb, rows, all);
    std::vector<float> wd(static_cast<size_t>(K));
    for (int r = 0; r < rows; ++r) {
      dequantize_row(type, w.data() + r * rb, wd.data(), K);
      double exact = 0.0, mag = 0.0, fp = 0.0, fmag = 0.0;
      for (int64_t i = 0; i < K; ++i) {
        exact += wd[static_cast<size_t>(i)] * quantized(q, i), mag += std::fabs(wd[static_cast<size_t>(i)] * quantized(q, i));
        fp += static_cast<double>(wd[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
        fmag += std::fabs(static_cast<double>(wd[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)]);
      }
      EXPECT_NEAR(all[r], exact, 2e-6 * mag) << "row " << r;
      EXPECT_NEAR(all[r], fp, 1e-4 * fmag) << "row " << r << ": against the float activations";
      float one;  // a row's result does not depend on the rows dotted with it
      cpu::dot_rows_q8(type, q, w.data() + r * rb, rb, 1, &one);
      EXPECT_EQ(std::memcmp(&one, &all[r], 4), 0) << "row " << r;
    }
  }
}

TEST(Q8Rows, GemmBlocksHaveEachDotsBits) {
  // gemm_q8: any token and row count (Q4_K and MXFP4 rows unpacked once per block for up to 4
  // tokens; Q6_K token by token), every element dot_rows_q8's bits for its token and row, written at
  // t * ldo + r. MXFP4 also with rows ending in a partial chunk of 4 blocks (K 480: 3 blocks).
  if (!cpu::has_q8_dot(DType::Q4_K)) GTEST_SKIP() << "no AVX-512 VNNI on this machine";
  const int64_t rows = 7, T = 6, ldo = 9;
  for (auto [type, K] : {std::pair{DType::Q4_K, int64_t{512}}, std::pair{DType::Q6_K, int64_t{512}},
                         std::pair{DType::MXFP4, int64_t{512}}, std::pair{DType::MXFP4, int64_t{480}}}) {
    SCOPED_TRACE(std::string(dtype_name(type)) + " K " + std::to_string(K));
    const int64_t rb = dtype_bytes(type, K);
    std::vector<uint8_t> w(static_cast<size_t>(rows * rb));
    std::mt19937 rng(9);
    std::vector<float> wf = random_floats(rows * K, 12, 0.05f);
    for (int64_t r = 0; r < rows; ++r) {
      if (type == DType::Q6_K) {
        random_q6_k(rng, w.data() + r * rb, K / 256, 0.05f);
      } else if (type == DType::MXFP4) {  // quant/ has no MXFP4 quantizer: random codes, scales 2^-9 .. 2^2
        for (int64_t b = 0; b < K / 32; ++b) {
          uint8_t* blk = w.data() + r * rb + b * 17;
          blk[0] = static_cast<uint8_t>(118 + rng() % 12);
          for (int i = 1; i < 17; ++i) blk[i] = static_cast<uint8_t>(rng());
        }
      } else {
        quantize_row(type, wf.data() + r * K, w.data() + r * rb, K);
      }
    }
    std::vector<float> x = random_floats(T * K, 13, 1.0f);
    std::vector<uint8_t> buf(static_cast<size_t>(T * cpu::q8_row_bytes(K)));
    std::vector<cpu::Q8Row> xs;
    for (int64_t t = 0; t < T; ++t)
      xs.push_back(cpu::quantize_q8_row(x.data() + t * K, K, buf.data() + t * cpu::q8_row_bytes(K)));
    for (int64_t tokens : {1, 3, 6}) {
      std::vector<float> y(static_cast<size_t>(T * ldo), -5.0f);
      cpu::gemm_q8(type, xs.data(), tokens, w.data(), rb, rows, y.data(), ldo);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t r = 0; r < ldo; ++r) {
          const float got = y[static_cast<size_t>(t * ldo + r)];
          if (t >= tokens || r >= rows) {
            EXPECT_EQ(got, -5.0f) << "wrote outside the block at " << t << ", " << r;
            continue;
          }
          float want;
          cpu::dot_rows_q8(type, xs[static_cast<size_t>(t)], w.data() + r * rb, rb, 1, &want);
          EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << "tokens " << tokens << " at " << t << ", " << r;
        }
    }
  }
}

TEST(Q8Rows, UnsupportedTypesAreRefused) {
  std::vector<float> x(256, 0.5f);
  std::vector<uint8_t> buf(static_cast<size_t>(cpu::q8_row_bytes(256))), w(64 * 256);
  const cpu::Q8Row q = cpu::quantize_q8_row(x.data(), 256, buf.data());
  float out;
  try {
    cpu::dot_rows_q8(DType::Q8_0, q, w.data(), 272, 1, &out);
    FAIL() << "Q8_0 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
  }
}

}  // namespace
}  // namespace ft::testing
