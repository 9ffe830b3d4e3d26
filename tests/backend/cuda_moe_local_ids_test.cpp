// CUDA vs CPU: moe_local_ids on random routes of several batch sizes, each rank's block of 4 ranks
// (exact: indices), and the op recorded in a graph, replayed on new routes.
#include <algorithm>
#include <random>
#include <string>

#include "backend/op_harness.h"

namespace ft::testing {
namespace {

class CudaMoeLocalIds : public GpuTest {
 protected:
  /** T x k random routes over E experts, about one in eight -1 (no expert). */
  static std::vector<int32_t> routes(int64_t T, int64_t k, int32_t E, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int32_t> pick(-E / 8, E - 1);
    std::vector<int32_t> v(static_cast<size_t>(T * k));
    for (int32_t& e : v) e = std::max(pick(rng), -1);
    return v;
  }
  /** The CPU twin's answer. */
  std::vector<int32_t> want(const std::vector<int32_t>& ids, int64_t T, int64_t k, int32_t begin, int32_t end,
                            int32_t E) {
    std::vector<int32_t> out(ids.size());
    cpu().moe_local_ids(arena().host_i32(ids, {T, k}), begin, end, E, Tensor(out.data(), DType::I32, {T, k}));
    return out;
  }
};

TEST_F(CudaMoeLocalIds, MatchesTheCpuOnEveryRanksBlock) {
  const int32_t E = 128, n_ranks = 4, per = E / n_ranks;
  uint32_t seed = 3;
  for (auto [T, k] : {std::pair<int64_t, int64_t>{1, 8}, {37, 6}, {4096, 8}}) {
    const std::vector<int32_t> ids = routes(T, k, E, seed++);
    const Tensor d_ids = arena().dev_i32(ids, {T, k});
    for (int32_t r = 0; r < n_ranks; ++r) {
      const std::string what = std::to_string(T) + "x" + std::to_string(k) + " rank " + std::to_string(r);
      Tensor out = arena().dev_poisoned(DType::I32, {T, k});
      gpu().moe_local_ids(d_ids, r * per, (r + 1) * per, E, out);
      EXPECT_EQ(arena().read_i32(out), want(ids, T, k, r * per, (r + 1) * per, E)) << what;
    }
    report("moe_local_ids", std::to_string(T) + "x" + std::to_string(k) + ", 4 blocks == cpu", 0.0);
  }
}

TEST_F(CudaMoeLocalIds, GraphReplayMasksEachReplaysRoutes) {
  const int64_t T = 16, k = 8;
  const int32_t E = 64, begin = 16, end = 32;
  std::vector<int32_t> ids = routes(T, k, E, 40);
  Tensor d_ids = arena().dev_i32(ids, {T, k}), out = arena().dev_poisoned(DType::I32, {T, k});
  gpu().moe_local_ids(d_ids, begin, end, E, out);  // eager first, as the graph runner does
  auto g = gpu().capture([&] { gpu().moe_local_ids(d_ids, begin, end, E, out); });
  ASSERT_TRUE(g);
  for (uint32_t rep = 0; rep < 3; ++rep) {
    ids = routes(T, k, E, 41 + rep);
    gpu().copy(arena().host_i32(ids, {T, k}), d_ids);  // new routes in the recorded buffer
    arena().poison(out);
    g->launch();
    gpu().synchronize();
    EXPECT_EQ(arena().read_i32(out), want(ids, T, k, begin, end, E)) << "replay " << rep;
  }
  report("moe_local_ids", "graph replay == cpu on new routes", 0.0);
}

}  // namespace
}  // namespace ft::testing
