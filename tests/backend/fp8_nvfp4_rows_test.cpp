// FP8 (F8_E4M3_B32 / B16) and NVFP4 (NVFP4_G64 / G16) weight rows on the CPU: the SIMD decoders
// (cpu::to_f32) against quant::dequantize_row bit for bit (every E4M3 code incl. NaN, every E2M1 code,
// every finite E4M3 block scale, both global-scale forms), and the fused decode + dot
// (cpu::dot_rows_stored) against to_f32 + dot_rows bit for bit and against the scalar reference
// (dequantize_row, double sums) within float summation-order tolerance, over odd sizes (one block,
// a few blocks, rows that are not a multiple of the SIMD width) and unaligned strided rows.
// Fp8Nvfp4Rows.EveryLevel re-runs the suite with FT_CPU_SIMD=avx2 and scalar.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/simd.h"
#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/nvfp4.h"
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

/** `rows` FP8 rows of `type` with n values each: random codes (NaN codes only when `nan`), block
 *  scales log-uniform in [2^lo, 2^hi] with a random sign. */
std::vector<uint8_t> fp8_rows(DType type, int rows, int64_t n, uint32_t seed, bool nan, int lo = -12, int hi = 4) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> e(static_cast<float>(lo), static_cast<float>(hi));
  const int kb = type == DType::F8_E4M3_B32 ? 32 : 16;
  const int64_t bb = 4 + kb;
  std::vector<uint8_t> w(static_cast<size_t>(rows * dtype_bytes(type, n)));
  for (size_t b = 0; b < w.size(); b += static_cast<size_t>(bb)) {
    float d = std::exp2(e(rng));
    if (rng() & 1) d = -d;
    std::memcpy(w.data() + b, &d, 4);
    for (int j = 0; j < kb; ++j) {
      uint8_t q = static_cast<uint8_t>(rng());
      if (!nan && (q & 0x7f) == 0x7f) q ^= 1;
      w[b + 4 + static_cast<size_t>(j)] = q;
    }
  }
  return w;
}

/** `rows` NVFP4 rows of `type` with n values each: random codes and finite E4M3 block scales (scale
 *  bytes below 0x78, ~2^8, unless `any_scale`), global scale `g` (< 0: compressed-tensors' divisor -g). */
std::vector<uint8_t> nvfp4_rows(DType type, int rows, int64_t n, uint32_t seed, float g, bool any_scale = false) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> packed(static_cast<size_t>(rows * n / 2)), scales(static_cast<size_t>(rows * n / 16));
  for (uint8_t& q : packed) q = static_cast<uint8_t>(rng());
  for (uint8_t& s : scales) {
    s = static_cast<uint8_t>(any_scale ? rng() : rng() % 0x78);
    if ((s & 0x7f) == 0x7f) s ^= 1;
  }
  std::vector<uint8_t> w(static_cast<size_t>(rows * dtype_bytes(type, n)));
  nvfp4_rows_from_modelopt(packed.data(), scales.data(), std::fabs(g), rows, n, w.data(), type, g < 0);
  return w;
}

std::vector<float> dequantized(DType type, const std::vector<uint8_t>& w, int64_t n_values) {
  std::vector<float> v(static_cast<size_t>(n_values));
  dequantize_row(type, w.data(), v.data(), n_values);
  return v;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    ASSERT_EQ(a, b) << what << " element " << i << ": " << got[i] << " vs " << want[i] << " (" << cpu::simd_level()
                    << ")";
  }
}

TEST(Fp8Nvfp4Rows, EveryLevel) {
  if (std::getenv("FT_CPU_SIMD")) GTEST_SKIP() << "child run";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  for (const char* level : {"avx2", "scalar"}) {
    const std::string cmd = std::string("FT_CPU_SIMD=") + level + " " + self +
                            " --gtest_filter='Fp8Nvfp4Rows.*' --gtest_brief=1 > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "fails with FT_CPU_SIMD=" << level << " (" << cmd << ")";
  }
}

// Every code 0..255 (NaN at 0x7f and 0xff, subnormals, +-448) in each block position, scales from
// float32 subnormal to 2^100, negative ones too.
TEST(Fp8Nvfp4Rows, Fp8DecoderMatchesDequantizeRow) {
  for (DType type : {DType::F8_E4M3_B32, DType::F8_E4M3_B16}) {
    const int kb = type == DType::F8_E4M3_B32 ? 32 : 16;
    const int64_t n = 256 * 3;
    std::vector<uint8_t> w = fp8_rows(type, 1, n, 3, true);
    for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>((i / kb) * (kb + 4) + 4 + i % kb)] = static_cast<uint8_t>(i % 256);
    const float special[] = {1e-40f, -3e-39f, 0x1p100f, -0x1p-120f, 1.0f, 0.0f};
    for (size_t k = 0; k < std::size(special); ++k) std::memcpy(w.data() + k * static_cast<size_t>(kb + 4), &special[k], 4);
    const std::vector<float> want = dequantized(type, w, n);
    std::vector<float> got(want.size(), -1.0f);
    cpu::to_f32(type, w.data(), got.data(), n);
    expect_same_bits(got, want, dtype_name(type));
    EXPECT_THROW(cpu::to_f32(type, w.data(), got.data(), n - 8), Error);  // not whole blocks
    EXPECT_EQ(cpu::has_fused_dot(type), std::string(cpu::simd_level()) != "scalar");
  }
}

// Every code in each position, every finite E4M3 block scale (sign bit included), ModelOpt's
// multiplying and compressed-tensors' dividing global scale.
TEST(Fp8Nvfp4Rows, Nvfp4DecoderMatchesDequantizeRow) {
  for (DType type : {DType::NVFP4_G64, DType::NVFP4_G16}) {
    for (float g : {0.0123f, -37.5f, 3e-30f}) {
      const int64_t n = 64 * 40;
      const std::vector<uint8_t> w = nvfp4_rows(type, 1, n, 5, g, true);
      const std::vector<float> want = dequantized(type, w, n);
      std::vector<float> got(want.size(), -1.0f);
      cpu::to_f32(type, w.data(), got.data(), n);
      expect_same_bits(got, want, std::string(dtype_name(type)) + " g " + std::to_string(g));
    }
    EXPECT_EQ(cpu::has_fused_dot(type), std::string(cpu::simd_level()) != "scalar");
  }
}

/** Checks dot_rows_stored of the `rows_n` rows w (n values each) against to_f32 + dot_rows (bits) and
 *  against double sums of x * dequantize_row (summation-order tolerance). */
void check_dots(DType type, const std::vector<uint8_t>& w, int64_t n, const std::string& what) {
  SCOPED_TRACE(what + " n=" + std::to_string(n));
  const int64_t rb = dtype_bytes(type, n);
  const std::vector<float> x = normal(n, 9, 1.0f), v = dequantized(type, w, 4 * n);
  std::vector<float> dec(static_cast<size_t>(4 * n));
  cpu::to_f32(type, w.data(), dec.data(), 4 * n);
  if (!cpu::has_fused_dot(type)) {
    float y;
    EXPECT_THROW(cpu::dot_rows_stored(type, x.data(), w.data(), rb, 1, n, &y), Error);
    return;
  }
  for (int rows = 1; rows <= 4; ++rows) {
    float want[4], got[4];
    cpu::dot_rows(x.data(), dec.data(), n, rows, n, want);
    cpu::dot_rows_stored(type, x.data(), w.data(), rb, rows, n, got);
    EXPECT_EQ(std::memcmp(got, want, static_cast<size_t>(rows) * 4), 0) << rows << " rows";
    for (int r = 0; r < rows; ++r) {
      double ref = 0, mag = 0;
      for (int64_t i = 0; i < n; ++i) {
        ref += static_cast<double>(x[static_cast<size_t>(i)]) * v[static_cast<size_t>(r * n + i)];
        mag += std::fabs(static_cast<double>(x[static_cast<size_t>(i)]) * v[static_cast<size_t>(r * n + i)]);
      }
      EXPECT_NEAR(got[r], ref, static_cast<double>(n) * 0x1p-24 * mag + 1e-30) << "row " << r << " of " << rows;
    }
  }
  // The same rows at a stride of rb + 5 bytes, starting at an odd address.
  std::vector<uint8_t> strided(static_cast<size_t>(4 * (rb + 5) + 1));
  for (int r = 0; r < 4; ++r) std::memcpy(strided.data() + 1 + r * (rb + 5), w.data() + r * rb, static_cast<size_t>(rb));
  float want[4], got[4];
  cpu::dot_rows(x.data(), dec.data(), n, 4, n, want);
  cpu::dot_rows_stored(type, x.data(), strided.data() + 1, rb + 5, 4, n, got);
  EXPECT_EQ(std::memcmp(got, want, 16), 0) << "strided";
}

TEST(Fp8Nvfp4Rows, Fp8FusedDotMatchesDecodeThenDot) {
  for (int64_t n : {int64_t{32}, int64_t{96}, int64_t{160}, int64_t{2080}})
    check_dots(DType::F8_E4M3_B32, fp8_rows(DType::F8_E4M3_B32, 4, n, 11, false), n, "F8_E4M3_B32");
  for (int64_t n : {int64_t{16}, int64_t{48}, int64_t{80}, int64_t{784}})
    check_dots(DType::F8_E4M3_B16, fp8_rows(DType::F8_E4M3_B16, 4, n, 12, false), n, "F8_E4M3_B16");
  // A checkpoint's scaled weights repacked at [128, 128] tiles, K with a ragged last tile.
  const int64_t K = 352;
  const std::vector<float> f = normal(4 * K, 13, 0.02f);
  std::vector<uint8_t> codes(static_cast<size_t>(4 * K)), w(static_cast<size_t>(4 * dtype_bytes(DType::F8_E4M3_B32, K)));
  std::vector<float> scales(3);
  fp8_quantize_scaled(f.data(), 4, K, Fp8ScaleGrid{}, codes.data(), scales.data());
  fp8_rows_from_scaled(codes.data(), scales.data(), 4, K, Fp8ScaleGrid{}, w.data());
  check_dots(DType::F8_E4M3_B32, w, K, "F8_E4M3_B32 from tiles");
}

TEST(Fp8Nvfp4Rows, Nvfp4FusedDotMatchesDecodeThenDot) {
  for (float g : {0.01f, -400.0f}) {
    for (int64_t n : {int64_t{64}, int64_t{192}, int64_t{2048}})
      check_dots(DType::NVFP4_G64, nvfp4_rows(DType::NVFP4_G64, 4, n, 14, g), n, "NVFP4_G64");
    for (int64_t n : {int64_t{16}, int64_t{48}, int64_t{80}, int64_t{1040}})
      check_dots(DType::NVFP4_G16, nvfp4_rows(DType::NVFP4_G16, 4, n, 15, g), n, "NVFP4_G16");
  }
  // ModelOpt-quantized rows.
  const int64_t K = 320;
  const std::vector<float> f = normal(4 * K, 16, 0.02f);
  std::vector<uint8_t> packed(static_cast<size_t>(4 * K / 2)), scales(static_cast<size_t>(4 * K / 16));
  float g = 0;
  nvfp4_quantize_modelopt(f.data(), 4, K, packed.data(), scales.data(), &g);
  std::vector<uint8_t> w(static_cast<size_t>(4 * dtype_bytes(DType::NVFP4_G64, K)));
  nvfp4_rows_from_modelopt(packed.data(), scales.data(), g, 4, K, w.data(), DType::NVFP4_G64);
  check_dots(DType::NVFP4_G64, w, K, "NVFP4_G64 ModelOpt");
}

}  // namespace
}  // namespace ft::testing
