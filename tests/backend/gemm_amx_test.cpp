// cpu::amx_pack_bf16 (runs anywhere: the B-tile layout against amx_packed_index) and
// cpu::gemm_nt_amx_bf16 (only where AMX-BF16 is granted, e.g. the GPU hosts' Xeons; skipped elsewhere):
// against a double reference over the same BF16 values, every element with the bits it has when its
// token is packed and computed alone, rows and tokens past whole tiles, strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/simd.h"
#include "tensor/half.h"
#include "test_util.h"
#include "util/error.h"

namespace ft::testing {
namespace {

/** n BF16 values of random_floats (test_util.h). */
std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  const std::vector<float> f = random_floats(n, seed);
  std::vector<uint16_t> v(n);
  cpu::to_bf16(f.data(), v.data(), static_cast<int64_t>(n));
  return v;
}

TEST(AmxPack, EveryValueLandsAtItsPackedIndexAndThePaddingIsZero) {
  const int64_t tokens = 19, n = 64, ldx = 70;
  std::vector<uint16_t> x(static_cast<size_t>(tokens * ldx));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint16_t>(i + 1);  // nonzero, distinct
  std::vector<uint16_t> xp(static_cast<size_t>(cpu::amx_packed_elems(tokens, n)), 0xffff);
  ASSERT_EQ(xp.size(), 2u * 2u * 512u);  // 2 blocks of 16 tokens x 2 tiles of 32 values
  cpu::amx_pack_bf16(x.data(), ldx, tokens, n, xp.data());
  std::vector<bool> hit(xp.size(), false);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t i = 0; i < n; ++i) {
      const auto at = static_cast<size_t>(cpu::amx_packed_index(t, i, n));
      ASSERT_LT(at, xp.size());
      EXPECT_EQ(xp[at], x[static_cast<size_t>(t * ldx + i)]) << t << ", " << i;
      hit[at] = true;
    }
  // Token 5's values 2 and 3 (one pair) sit side by side in tile row 1, column 5.
  EXPECT_EQ(cpu::amx_packed_index(5, 2, n), 1 * 32 + 5 * 2);
  EXPECT_EQ(cpu::amx_packed_index(5, 3, n), 1 * 32 + 5 * 2 + 1);
  for (size_t j = 0; j < xp.size(); ++j) {
    if (!hit[j]) EXPECT_EQ(xp[j], 0) << "padding at " << j;
  }
  EXPECT_THROW(cpu::amx_pack_bf16(x.data(), ldx, tokens, 48, xp.data()), Error);
  // A gather: token t is x's row `row[t]` (an expert's tokens in the step's activations).
  const std::vector<int32_t> row = {18, 3, 3, 0, 7};
  std::vector<uint16_t> gp(static_cast<size_t>(cpu::amx_packed_elems(5, n)), 0xffff);
  cpu::amx_pack_bf16(x.data(), ldx, 5, n, gp.data(), row.data());
  for (int64_t t = 0; t < 5; ++t)
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(gp[static_cast<size_t>(cpu::amx_packed_index(t, i, n))], x[static_cast<size_t>(row[static_cast<size_t>(t)] * ldx + i)])
          << t << ", " << i;
  EXPECT_EQ(gp[static_cast<size_t>(cpu::amx_packed_index(5, 0, n))], 0) << "the token past the last";
}

TEST(GemmAmx, BlocksMatchTheReferenceAndEachTokenAlone) {
  if (!cpu::has_amx_bf16()) GTEST_SKIP() << "no AMX-BF16 on this machine";
  for (int64_t n : {32, 96, 2048}) {
    for (int64_t tokens : {1, 15, 16, 17, 40, 70}) {  // 1 to 4 token blocks a weight tile, and 5
      const int64_t R = 37, ldx = n + 8, ldw = n + 32, ldy = R + 3;
      SCOPED_TRACE(::testing::Message() << "n " << n << " tokens " << tokens);
      const std::vector<uint16_t> x = random_bf16(static_cast<size_t>(tokens * ldx), 5);
      const std::vector<uint16_t> w = random_bf16(static_cast<size_t>(R * ldw), 6);
      std::vector<uint16_t> xp(static_cast<size_t>(cpu::amx_packed_elems(tokens, n)));
      cpu::amx_pack_bf16(x.data(), ldx, tokens, n, xp.data());
      std::vector<float> y(static_cast<size_t>(tokens * ldy), -7.0f);
      cpu::gemm_nt_amx_bf16(xp.data(), tokens, w.data(), ldw, R, n, y.data(), ldy);
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<uint16_t> xp1(static_cast<size_t>(cpu::amx_packed_elems(1, n)));
        cpu::amx_pack_bf16(x.data() + t * ldx, ldx, 1, n, xp1.data());
        std::vector<float> alone(static_cast<size_t>(R));
        cpu::gemm_nt_amx_bf16(xp1.data(), 1, w.data(), ldw, R, n, alone.data(), R);
        for (int64_t r = 0; r < ldy; ++r) {
          const float got = y[static_cast<size_t>(t * ldy + r)];
          if (r >= R) {
            EXPECT_EQ(got, -7.0f) << "wrote outside the block at " << t << ", " << r;
            continue;
          }
          double want = 0, mag = 0;
          for (int64_t i = 0; i < n; ++i) {
            const double p = static_cast<double>(bf16_to_f32(x[static_cast<size_t>(t * ldx + i)])) *
                             bf16_to_f32(w[static_cast<size_t>(r * ldw + i)]);
            want += p, mag += std::fabs(p);
          }
          EXPECT_NEAR(got, want, 2e-5 * mag + 1e-30) << t << ", " << r;  // fp32 sums of exact products
          EXPECT_EQ(std::memcmp(&got, &alone[static_cast<size_t>(r)], 4), 0) << t << ", " << r;
        }
      }
    }
  }
}

TEST(GemmAmx, RefusesRowsThatAreNotWholeTiles) {
  if (!cpu::has_amx_bf16()) GTEST_SKIP() << "no AMX-BF16 on this machine";
  std::vector<uint16_t> xp(512), w(48);
  float y[1];
  EXPECT_THROW(cpu::gemm_nt_amx_bf16(xp.data(), 1, w.data(), 48, 1, 48, y, 1), Error);
}

}  // namespace
}  // namespace ft::testing
