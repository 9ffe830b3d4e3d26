// cpu::gemm_nt and cpu::gemm_nt_bf16: GEMM blocks of any token and row count whose every element has
// the bits it has when computed alone (dot_rows; a 1 x 1 bf16 block), with strides and SIMD tails;
// the bf16 kernel against a double reference over the same bf16 values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/simd.h"
#include "tensor/half.h"
#include "test_util.h"

namespace ft::testing {
namespace {

TEST(GemmNt, EveryElementHasItsSingleDotBits) {
  for (int64_t n : {1, 17, 100, 768}) {
    const int64_t T = 9, R = 18, ldx = n + 3, ldw = n + 5, ldy = R + 2;
    std::vector<float> x = random_floats(static_cast<size_t>(T * ldx), 1), w = random_floats(static_cast<size_t>(R * ldw), 2);
    for (int64_t tokens : {1, 3, 4, 9})
      for (int64_t rows : {1, 4, 7, 18}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " tokens " << tokens << " rows " << rows);
        std::vector<float> y(static_cast<size_t>(T * ldy), -7.0f);
        cpu::gemm_nt(x.data(), ldx, tokens, w.data(), ldw, rows, n, y.data(), ldy);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t r = 0; r < ldy; ++r) {
            const float got = y[static_cast<size_t>(t * ldy + r)];
            if (t >= tokens || r >= rows) {
              EXPECT_EQ(got, -7.0f) << "wrote outside the block at " << t << ", " << r;
              continue;
            }
            float want;
            cpu::dot_rows(x.data() + t * ldx, w.data() + r * ldw, ldw, 1, n, &want);
            EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << t << ", " << r;
          }
      }
  }
}

TEST(GemmNt, Bf16BlocksMatchTheReferenceAndTheirSingleDots) {
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "no AVX-512 BF16 on this machine";
  for (int64_t n : {1, 31, 64, 101, 2048}) {
    const int64_t T = 6, R = 9, ldx = n + 1, ldw = n + 3, ldy = R;
    std::vector<float> xf = random_floats(static_cast<size_t>(T * ldx), 3), wf = random_floats(static_cast<size_t>(R * ldw), 4);
    std::vector<uint16_t> x(xf.size()), w(wf.size());
    cpu::to_bf16(xf.data(), x.data(), static_cast<int64_t>(xf.size()));
    cpu::to_bf16(wf.data(), w.data(), static_cast<int64_t>(wf.size()));
    EXPECT_EQ(x[5], f32_to_bf16(xf[5]));
    std::vector<float> y(static_cast<size_t>(T * ldy));
    cpu::gemm_nt_bf16(x.data(), ldx, T, w.data(), ldw, R, n, y.data(), ldy);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < R; ++r) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " at " << t << ", " << r);
        double want = 0, mag = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double p = static_cast<double>(bf16_to_f32(x[static_cast<size_t>(t * ldx + i)])) *
                           bf16_to_f32(w[static_cast<size_t>(r * ldw + i)]);
          want += p, mag += std::fabs(p);
        }
        const float got = y[static_cast<size_t>(t * ldy + r)];
        EXPECT_NEAR(got, want, 2e-5 * mag + 1e-30);  // fp32 sums of exact products
        float alone;
        cpu::gemm_nt_bf16(x.data() + t * ldx, ldx, 1, w.data() + r * ldw, ldw, 1, n, &alone, 1);
        EXPECT_EQ(std::memcmp(&got, &alone, 4), 0);
      }
  }
}

}  // namespace
}  // namespace ft::testing
