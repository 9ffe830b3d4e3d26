// ProfilingOps forwards every op unchanged to the wrapped backend and counts calls per op key.
#include <gtest/gtest.h>

#include "backend/cpu/cpu_ops.h"
#include "backend/profiling_ops.h"

namespace ft::testing {
namespace {

TEST(ProfilingOps, ForwardsAndCountsPerKey) {
  ProfilingOps ops(std::make_unique<CpuOps>(1));
  EXPECT_STREQ(ops.name(), "cpu");
  EXPECT_FALSE(ops.supports_graphs());
  std::vector<float> x = {1, 2, 3, 4}, w = {1, 0, 0, 1, 2, 2}, y(6, 0.0f), z(6, 0.0f);
  const Tensor tx(x.data(), DType::F32, {2, 2}), tw(w.data(), DType::F32, {3, 2});
  Tensor ty(y.data(), DType::F32, {2, 3}), tz(z.data(), DType::F32, {2, 3});
  ops.matmul(tx, tw, ty, Tensor());
  ops.matmul(tx, tw, ty, Tensor());
  ops.add(ty, ty, tz);
  EXPECT_EQ(y, (std::vector<float>{1, 2, 6, 3, 4, 14}));
  EXPECT_EQ(z, (std::vector<float>{2, 4, 12, 6, 8, 28}));
  const std::vector<OpProfileRow> rows = ops.rows();
  ASSERT_EQ(rows.size(), 2u);
  int64_t matmuls = 0, adds = 0;
  for (const OpProfileRow& r : rows) {
    EXPECT_GE(r.seconds, 0.0);
    if (r.key == "matmul [3x2] F32") matmuls = r.calls;
    if (r.key == "add") adds = r.calls;
  }
  EXPECT_EQ(matmuls, 2);
  EXPECT_EQ(adds, 1);
  ops.reset();
  EXPECT_TRUE(ops.rows().empty());
}

}  // namespace
}  // namespace ft::testing
