// MXFP4 weight rows on the CPU: the SIMD decoder (cpu::to_f32) and the fused decode + dot
// (cpu::dot_rows_stored) against quant::dequantize_row and dot_rows, bit for bit; the int8 path
// (quantize_q8_row with a short last block, dot_rows_q8) against double-precision sums; the
// has_q8_dot predicate the expert executor asks. Mxfp4Rows.EveryLevel re-runs the suite with
// FT_CPU_SIMD=avx2 and scalar (the level is chosen once a process).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/q8_rows.h"
#include "backend/cpu/simd.h"
#include "quant/blocks.h"
#include "quant/mxfp4.h"
#include "quant/quant.h"
#include "tensor/dtype.h"
#include "util/error.h"

namespace ft::testing {
namespace {

std::vector<float> normal(int64_t n, uint32_t seed, float sigma) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = d(rng);
  return v;
}

/** `rows` GGUF MXFP4 rows of n elements each: random codes, scale bytes uniform in [lo, hi]. */
std::vector<uint8_t> random_rows(int rows, int64_t n, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> e(lo, hi);
  std::vector<uint8_t> w(static_cast<size_t>(rows * dtype_bytes(DType::MXFP4, n)));
  for (size_t b = 0; b < w.size(); b += sizeof(quant::BlockMXFP4)) {
    w[b] = static_cast<uint8_t>(e(rng));
    for (size_t j = 1; j < sizeof(quant::BlockMXFP4); ++j) w[b + j] = static_cast<uint8_t>(rng());
  }
  return w;
}

/** `rows` rows of n quantized from N(0, sigma) floats by the OCP quantizer, repacked to GGUF. */
std::vector<uint8_t> quantized_rows(int rows, int64_t n, uint32_t seed, float sigma) {
  const std::vector<float> f = normal(rows * n, seed, sigma);
  std::vector<uint8_t> blocks(static_cast<size_t>(rows * n / 2)), scales(static_cast<size_t>(rows * n / 32));
  mxfp4_ocp_quantize(f.data(), rows, n, blocks.data(), scales.data());
  std::vector<uint8_t> w(static_cast<size_t>(rows * dtype_bytes(DType::MXFP4, n)));
  mxfp4_rows_from_ocp(blocks.data(), scales.data(), rows, n, w.data());
  return w;
}

/** quant::dequantize_row of every block of w (rows back to back). */
std::vector<float> dequantized(const std::vector<uint8_t>& w) {
  std::vector<float> v(w.size() / sizeof(quant::BlockMXFP4) * 32);
  dequantize_row(DType::MXFP4, w.data(), v.data(), static_cast<int64_t>(v.size()));
  return v;
}

TEST(Mxfp4Rows, EveryLevel) {
  if (std::getenv("FT_CPU_SIMD")) GTEST_SKIP() << "child run";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  for (const char* level : {"avx2", "scalar"}) {
    const std::string cmd = std::string("FT_CPU_SIMD=") + level + " " + self +
                            " --gtest_filter='Mxfp4Rows.*' --gtest_brief=1 > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "fails with FT_CPU_SIMD=" << level << " (" << cmd << ")";
  }
}

// Every scale byte 0..254 (with 254 some values overflow to infinity in both decoders) and every code.
TEST(Mxfp4Rows, DecoderMatchesDequantizeRow) {
  const int64_t n = 255 * 32;
  std::vector<uint8_t> w = random_rows(1, n, 1, 0, 254);
  for (int64_t b = 0; b < 255; ++b) w[static_cast<size_t>(b * 17)] = static_cast<uint8_t>(b);
  const std::vector<float> want = dequantized(w);
  std::vector<float> got(want.size(), -1.0f);
  cpu::to_f32(DType::MXFP4, w.data(), got.data(), n);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * 4), 0) << cpu::simd_level();
  EXPECT_THROW(cpu::to_f32(DType::MXFP4, w.data(), got.data(), n - 16), Error);  // not whole blocks
  EXPECT_EQ(cpu::has_fused_dot(DType::MXFP4), std::string(cpu::simd_level()) != "scalar");
}

// The fused dot equals to_f32 + dot_rows bit for bit: 1-4 rows, gpt-oss's 2880 (90 blocks), one
// block, and rows at an odd unaligned stride.
TEST(Mxfp4Rows, FusedDotMatchesDecodeThenDot) {
  for (int64_t n : {int64_t{32}, int64_t{96}, int64_t{2880}, int64_t{4096}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const int64_t rb = dtype_bytes(DType::MXFP4, n);
    for (int pass = 0; pass < 2; ++pass) {
      const std::vector<uint8_t> w = pass == 0 ? quantized_rows(4, n, 7, 0.03f) : random_rows(4, n, 8, 110, 140);
      const std::vector<float> x = normal(n, 9, 1.0f), v = dequantized(w);
      if (!cpu::has_fused_dot(DType::MXFP4)) {
        float y;
        EXPECT_THROW(cpu::dot_rows_stored(DType::MXFP4, x.data(), w.data(), rb, 1, n, &y), Error);
        continue;
      }
      for (int rows = 1; rows <= 4; ++rows) {
        float want[4], got[4];
        cpu::dot_rows(x.data(), v.data(), n, rows, n, want);
        cpu::dot_rows_stored(DType::MXFP4, x.data(), w.data(), rb, rows, n, got);
        EXPECT_EQ(std::memcmp(got, want, static_cast<size_t>(rows) * 4), 0) << rows << " rows, pass " << pass;
      }
      // The same rows at a stride of rb + 5 bytes, starting at an odd address.
      std::vector<uint8_t> strided(static_cast<size_t>(4 * (rb + 5) + 1));
      for (int r = 0; r < 4; ++r) std::memcpy(strided.data() + 1 + r * (rb + 5), w.data() + r * rb, static_cast<size_t>(rb));
      float want[4], got[4];
      cpu::dot_rows(x.data(), v.data(), n, 4, n, want);
      cpu::dot_rows_stored(DType::MXFP4, x.data(), strided.data() + 1, rb + 5, 4, n, got);
      EXPECT_EQ(std::memcmp(got, want, 16), 0) << "strided, pass " << pass;
    }
  }
}

TEST(Mxfp4Rows, Int8FormTakesAShortLastBlock) {
  const int64_t n = 2880;  // 11 blocks of 256 and one of 64
  EXPECT_EQ(cpu::q8_row_bytes(n), 2 * n + 12 * 4 + 90 * 4 + 180 * 4);
  EXPECT_EQ(cpu::q8_row_bytes(2048), 2 * 2048 + 8 * 4 + 64 * 4 + 128 * 4);  // unchanged for whole blocks
  std::vector<float> x = normal(n, 3, 0.5f);
  x[2850] = 5.0f;  // the last block's scale
  std::vector<uint8_t> buf(static_cast<size_t>(cpu::q8_row_bytes(n)));
  const cpu::Q8Row q = cpu::quantize_q8_row(x.data(), n, buf.data());
  EXPECT_EQ(q.n, n);
  EXPECT_FLOAT_EQ(q.d[11], 5.0f / 127.0f);
  for (int64_t i = 2816; i < n; ++i) {
    const double v = static_cast<double>(q.d[11]) * (q.q1[i] + q.q2[i] / 254.0);
    EXPECT_NEAR(v, x[static_cast<size_t>(i)], q.d[11] / 254.0 * 0.5 + 1e-7 * q.d[11]) << i;
  }
  int mismatches = 0;  // the terms exactly as specified (scalar and AVX-512 forms agree: EveryLevel)
  for (int64_t i = 2816; i < n; ++i) {
    const float d = q.d[11], v = x[static_cast<size_t>(i)];
    auto rc = [](float f) { return static_cast<int>(std::nearbyint(std::fmin(127.0f, std::fmax(-127.0f, f)))); };
    const int a = rc(v / d), c = rc((v - d * static_cast<float>(a)) * (254.0f / d));
    mismatches += q.q1[i] != a || q.q2[i] != c;
  }
  EXPECT_EQ(mismatches, 0);
  double s = 0.0;
  for (int64_t i = 2848; i < 2880; ++i) s += static_cast<double>(q.d[11]) * (q.q1[i] + q.q2[i] / 254.0);
  EXPECT_NEAR(q.sums[89], s, 1e-5);
  EXPECT_THROW(cpu::quantize_q8_row(x.data(), 2880 - 16, buf.data()), Error);
  // The predicate: whole blocks of the weight type and of 32.
  const bool vnni = cpu::has_q8_dot(DType::Q4_K);
  EXPECT_EQ(cpu::has_q8_dot(DType::MXFP4), vnni);
  EXPECT_EQ(cpu::has_q8_dot(DType::MXFP4, 2880), vnni);
  EXPECT_EQ(cpu::has_q8_dot(DType::MXFP4, 32), vnni);
  EXPECT_FALSE(cpu::has_q8_dot(DType::MXFP4, 48));
  EXPECT_FALSE(cpu::has_q8_dot(DType::MXFP4, 0));
  EXPECT_FALSE(cpu::has_q8_dot(DType::Q4_K, 2880));
  EXPECT_EQ(cpu::has_q8_dot(DType::Q6_K, 2048), vnni);
  EXPECT_FALSE(cpu::has_q8_dot(DType::Q8_0, 2048));
}

// dot_rows_q8 on MXFP4 rows: against the exact sum of dequantized weight times quantized activation
// (float rounding only), and within 1e-4 of the float activations' dot.
TEST(Mxfp4Rows, Int8DotMatchesTheDequantizedSum) {
  if (!cpu::has_q8_dot(DType::MXFP4)) GTEST_SKIP() << "no AVX-512 VNNI at this level";
  for (int64_t n : {int64_t{32}, int64_t{64}, int64_t{96}, int64_t{160}, int64_t{256}, int64_t{2880}, int64_t{4096}}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const int64_t rb = dtype_bytes(DType::MXFP4, n);
    const std::vector<uint8_t> w = quantized_rows(4, n, 11 + static_cast<uint32_t>(n), 0.05f);
    const std::vector<float> wd = dequantized(w);
    std::vector<float> x = normal(n, 5, 1.0f);
    x[static_cast<size_t>(n / 3)] = -7.0f;  // an outlier: a block scale larger than the rest
    std::vector<uint8_t> buf(static_cast<size_t>(cpu::q8_row_bytes(n)));
    const cpu::Q8Row q = cpu::quantize_q8_row(x.data(), n, buf.data());
    float all[4];
    cpu::dot_rows_q8(DType::MXFP4, q, w.data(), rb, 4, all);
    for (int r = 0; r < 4; ++r) {
      double exact = 0.0, mag = 0.0, fp = 0.0, fmag = 0.0;
      for (int64_t i = 0; i < n; ++i) {
        const double wi = wd[static_cast<size_t>(r * n + i)];
        const double xq = static_cast<double>(q.d[i / 256]) * (q.q1[i] + q.q2[i] / 254.0);
        exact += wi * xq, mag += std::fabs(wi * xq);
        fp += wi * x[static_cast<size_t>(i)], fmag += std::fabs(wi * x[static_cast<size_t>(i)]);
      }
      EXPECT_NEAR(all[r], exact, 2e-6 * mag) << "row " << r;
      EXPECT_NEAR(all[r], fp, 1e-4 * fmag) << "row " << r << ": against the float activations";
      float one;  // a row's result does not depend on the rows dotted with it
      cpu::dot_rows_q8(DType::MXFP4, q, w.data() + r * rb, rb, 1, &one);
      EXPECT_EQ(std::memcmp(&one, &all[r], 4), 0) << "row " << r;
    }
  }
  // Random codes at scales 2^-27 .. 2^12 (e8m0 100 .. 140), 3 rows.
  const int64_t n = 2880, rb = dtype_bytes(DType::MXFP4, n);
  const std::vector<uint8_t> w = random_rows(3, n, 12, 100, 140);
  const std::vector<float> wd = dequantized(w), x = normal(n, 13, 1.0f);
  std::vector<uint8_t> buf(static_cast<size_t>(cpu::q8_row_bytes(n)));
  const cpu::Q8Row q = cpu::quantize_q8_row(x.data(), n, buf.data());
  float got[3];
  cpu::dot_rows_q8(DType::MXFP4, q, w.data(), rb, 3, got);
  for (int r = 0; r < 3; ++r) {
    double fp = 0.0, fmag = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double wi = wd[static_cast<size_t>(r * n + i)];
      fp += wi * x[static_cast<size_t>(i)], fmag += std::fabs(wi * x[static_cast<size_t>(i)]);
    }
    EXPECT_NEAR(got[r], fp, 1e-4 * fmag) << "random codes, row " << r;
  }
}

}  // namespace
}  // namespace ft::testing
