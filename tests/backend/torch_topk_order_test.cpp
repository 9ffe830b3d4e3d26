// backend/torch_topk_order.h repeats libstdc++'s std::partial_sort / std::nth_element steps (what
// torch.topk on the CPU and CpuOps::indexer_topk run): on tie-heavy scores (a few distinct values,
// zeros, -inf tails, NaN) the index array it leaves equals the std algorithms' over (score, index)
// pairs with ATen's comparator, element for element, for sizes on both sides of 64 k <= n and past
// the insertion-sort cutoff and the heap fallback of introselect.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <utility>
#include <vector>

#include "backend/torch_topk_order.h"

namespace ft::testing {
namespace {

std::vector<int32_t> std_order(const std::vector<float>& s, int64_t k) {
  const int64_t n = static_cast<int64_t>(s.size());
  std::vector<std::pair<float, int32_t>> c(s.size());
  for (int64_t i = 0; i < n; ++i) c[static_cast<size_t>(i)] = {s[static_cast<size_t>(i)], static_cast<int32_t>(i)};
  auto better = [](const std::pair<float, int32_t>& x, const std::pair<float, int32_t>& y) {
    return (std::isnan(x.first) && !std::isnan(y.first)) || x.first > y.first;
  };
  if (k * 64 <= n) std::partial_sort(c.begin(), c.begin() + k, c.end(), better);
  else std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), better);
  std::vector<int32_t> ids;
  for (const auto& p : c) ids.push_back(p.second);
  return ids;
}

std::vector<int32_t> ported_order(const std::vector<float>& s, int64_t k) {
  std::vector<int32_t> a(s.size());
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int32_t>(i);
  topk_order::torch_topk_select(a.data(), s.data(), static_cast<int64_t>(s.size()), k);
  return a;
}

TEST(TorchTopkOrder, EqualsLibstdcxxOnTiedScores) {
  std::mt19937 rng(7);
  int cases = 0;
  for (int64_t n : {1, 2, 3, 4, 5, 8, 9, 13, 16, 17, 31, 64, 100, 257, 640, 1000, 5000}) {
    for (int64_t k : {1, 2, 3, 7, 8, 10, 16, 64, 100}) {
      if (k > n) continue;
      for (int rep = 0; rep < 6; ++rep) {
        const int distinct = 1 + rep * 2;  // few values: long runs of exact ties
        std::uniform_int_distribution<int> val(0, distinct - 1), pct(0, 99);
        std::vector<float> s(static_cast<size_t>(n));
        const int64_t tail = rep % 2 ? n / 3 : 0;  // invisible entries at -inf, as the indexer has them
        for (int64_t i = 0; i < n; ++i) {
          const int p = pct(rng);
          s[static_cast<size_t>(i)] = i >= n - tail ? -INFINITY
                                      : p < 40     ? 0.0f  // the ReLU's zeros
                                      : p == 99 && rep == 5 ? NAN
                                                            : 0.25f * static_cast<float>(val(rng));
        }
        ASSERT_EQ(ported_order(s, k), std_order(s, k)) << "n " << n << ", k " << k << ", rep " << rep;
        ++cases;
      }
    }
  }
  EXPECT_GT(cases, 400);
}

TEST(TorchTopkOrder, SortedScoresReachTheHeapFallback) {
  // An organ-pipe pattern drives median-of-three quickselect into its depth limit (heap_select).
  for (int64_t n : {200, 1000, 4096}) {
    std::vector<float> s(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) s[static_cast<size_t>(i)] = static_cast<float>(std::min(i, n - 1 - i) % 7);
    for (int64_t k : {n / 2, n / 3 + 1, n - 1})
      EXPECT_EQ(ported_order(s, k), std_order(s, k)) << "n " << n << ", k " << k;
  }
}

}  // namespace
}  // namespace ft::testing
