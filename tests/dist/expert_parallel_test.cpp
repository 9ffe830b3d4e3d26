// Owner-local expert parallelism (all-gather + all-reduce form) against a plain single-rank MoE sum:
// random routes and weights, each expert a random linear map (out += w * x @ W_e); one rank gives the
// same bits, two and four ranks the same values up to float summation order.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "dist/expert_parallel.h"
#include "dist/in_process_collective.h"
#include "util/error.h"

namespace ft::dist {
namespace {

/** One step of a toy MoE layer: x [T, D], experts W [E, D, H], routes/weights [T, k]. */
struct ToyMoe {
  int T = 13, D = 16, H = 12, E = 8, k = 3;
  std::vector<float> x, W, weights;
  std::vector<int32_t> routes;

  explicit ToyMoe(uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    x.resize(T * D);
    W.resize(static_cast<size_t>(E) * D * H);
    weights.resize(T * k);
    routes.resize(T * k);
    for (float& v : x) v = u(rng);
    for (float& v : W) v = u(rng);
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < k; ++j) {
        routes[t * k + j] = static_cast<int32_t>(rng() % E);  // repeats allowed: a token may pick one expert twice
        weights[t * k + j] = 0.5f + 0.5f * u(rng);
      }
  }

  /** Expert e's unweighted output for token t, element h: x[t] . W[e][:, h]. */
  float expert_out(int e, int t, int h) const {
    float s = 0;
    for (int d = 0; d < D; ++d) s += x[t * D + d] * W[(static_cast<size_t>(e) * D + d) * H + h];
    return s;
  }

  ExpertOutputFn compute() const {
    return [this](int e, std::span<const int32_t> tokens, const Tensor& out) {
      ASSERT_TRUE(out.has_shape({static_cast<int64_t>(tokens.size()), H}));
      for (size_t i = 0; i < tokens.size(); ++i)
        for (int h = 0; h < H; ++h) out.ptr<float>()[i * H + h] = expert_out(e, tokens[i], h);
    };
  }

  /** The single-rank MoE output: experts ascending, tokens ascending, as one rank does it. */
  std::vector<float> reference() const {
    std::vector<float> out(T * H, 0.0f);
    for (int e = 0; e < E; ++e)
      for (int t = 0; t < T; ++t)
        for (int j = 0; j < k; ++j)
          if (routes[t * k + j] == e)
            for (int h = 0; h < H; ++h) out[t * H + h] += weights[t * k + j] * expert_out(e, t, h);
    return out;
  }

  /** expert_parallel_moe over `n` in-process ranks; every rank's output. */
  std::vector<std::vector<float>> run(int n) {
    auto ranks = make_in_process_group(n);
    std::vector<std::vector<float>> outs(n, std::vector<float>(T * H, -7.0f));
    run_ranks(ranks, [&](Collective& c) {
      expert_parallel_moe(c, E, Tensor(routes.data(), DType::I32, {T, k}), Tensor(weights.data(), DType::F32, {T, k}),
                          compute(), Tensor(outs[c.rank()].data(), DType::F32, {T, H}));
    });
    return outs;
  }
};

TEST(ExpertParallel, OwnersAreContiguousBlocks) {
  EXPECT_EQ(owner_of(0, 8, 2), 0);
  EXPECT_EQ(owner_of(3, 8, 2), 0);
  EXPECT_EQ(owner_of(4, 8, 2), 1);
  EXPECT_EQ(owner_of(7, 8, 4), 3);
  EXPECT_EQ(owner_of(5, 8, 1), 0);
  const ExpertRange r = owned_experts(2, 128, 4);
  EXPECT_EQ(r.begin, 64);
  EXPECT_EQ(r.end, 96);
  for (int e = 0; e < 12; ++e) {
    const ExpertRange mine = owned_experts(owner_of(e, 12, 3), 12, 3);
    EXPECT_TRUE(e >= mine.begin && e < mine.end) << e;
  }
}

TEST(ExpertParallel, RefusesExpertCountsNotDivisibleByRanks) {
  try {
    owner_of(0, 6, 4);
    FAIL() << "6 experts over 4 ranks accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("positive multiple of 4; this model has 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(owner_of(8, 8, 2), Error);
  EXPECT_THROW(owned_experts(2, 8, 2), Error);

  // Every rank refuses before any collective, so none waits.
  ToyMoe moe(1);
  moe.E = 6;
  auto ranks = make_in_process_group(4);
  std::vector<int> refused(4, 0);
  run_ranks(ranks, [&](Collective& c) {
    std::vector<float> out(moe.T * moe.H);
    EXPECT_THROW(expert_parallel_moe(c, moe.E, Tensor(moe.routes.data(), DType::I32, {moe.T, moe.k}),
                                     Tensor(moe.weights.data(), DType::F32, {moe.T, moe.k}), moe.compute(),
                                     Tensor(out.data(), DType::F32, {moe.T, moe.H})),
                 Error);
    refused[c.rank()] = 1;
  });
  EXPECT_EQ(refused, std::vector<int>(4, 1));
}

TEST(ExpertParallel, RefusesBadRoutesAndShapes) {
  ToyMoe moe(2);
  moe.routes[5] = moe.E;  // token 1, slot 2
  auto ranks = make_in_process_group(1);
  std::vector<float> out(moe.T * moe.H);
  const Tensor routes(moe.routes.data(), DType::I32, {moe.T, moe.k});
  const Tensor weights(moe.weights.data(), DType::F32, {moe.T, moe.k});
  const Tensor o(out.data(), DType::F32, {moe.T, moe.H});
  try {
    expert_parallel_moe(*ranks[0], moe.E, routes, weights, moe.compute(), o);
    FAIL() << "out-of-range expert accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 1 slot 2 routes to expert 8, outside [0, 8)"), std::string::npos)
        << e.what();
  }
  moe.routes[5] = 0;
  EXPECT_THROW(expert_parallel_moe(*ranks[0], moe.E, routes, Tensor(moe.weights.data(), DType::F32, {moe.T, 2}),
                                   moe.compute(), o),
               Error);
  EXPECT_THROW(expert_parallel_moe(*ranks[0], moe.E, routes, weights, moe.compute(),
                                   Tensor(out.data(), DType::F32, {moe.T - 1, moe.H})),
               Error);
}

TEST(ExpertParallel, NegativeIdsRouteToNoExpert) {
  ToyMoe moe(9);
  for (int j = 0; j < moe.k; ++j) moe.routes[(moe.T - 1) * moe.k + j] = -1;  // the last row: padding
  moe.routes[0] = -1;                                                      // and token 0's first slot
  const std::vector<float> want = moe.reference();
  for (int n : {1, 2}) {
    const auto outs = moe.run(n);
    for (int h = 0; h < moe.H; ++h) EXPECT_EQ(outs[0][(moe.T - 1) * moe.H + h], 0.0f);
    for (int i = 0; i < moe.T * moe.H; ++i) ASSERT_NEAR(outs[0][i], want[i], 1e-5f * (1.0f + std::fabs(want[i])));
  }
}

TEST(ExpertParallel, OneRankGivesTheSingleRankBits) {
  ToyMoe moe(3);
  const std::vector<float> want = moe.reference();
  const auto outs = moe.run(1);
  for (int i = 0; i < moe.T * moe.H; ++i) ASSERT_EQ(outs[0][i], want[i]) << "element " << i;
}

TEST(ExpertParallel, TwoAndFourRanksMatchOneRank) {
  for (uint32_t seed : {4u, 5u, 6u}) {
    ToyMoe moe(seed);
    const std::vector<float> want = moe.reference();
    for (int n : {2, 4}) {
      const auto outs = moe.run(n);
      for (int r = 0; r < n; ++r) {
        ASSERT_EQ(outs[r], outs[0]) << "rank " << r << " of " << n << " holds other bits";  // all_reduce: same bits
        for (int i = 0; i < moe.T * moe.H; ++i)
          ASSERT_NEAR(outs[r][i], want[i], 1e-5f * (1.0f + std::fabs(want[i])))
              << "seed " << seed << ", " << n << " ranks, element " << i;
      }
      EXPECT_EQ(moe.run(n), outs) << "not deterministic over " << n << " ranks";
    }
  }
}

TEST(ExpertParallel, EachRankComputesOnlyItsOwnExperts) {
  ToyMoe moe(8);
  auto ranks = make_in_process_group(4);
  std::vector<std::vector<int>> seen(4);
  run_ranks(ranks, [&](Collective& c) {
    std::vector<float> out(moe.T * moe.H);
    const ExpertOutputFn inner = moe.compute();
    expert_parallel_moe(c, moe.E, Tensor(moe.routes.data(), DType::I32, {moe.T, moe.k}),
                        Tensor(moe.weights.data(), DType::F32, {moe.T, moe.k}),
                        [&](int e, std::span<const int32_t> tokens, const Tensor& o) {
                          seen[c.rank()].push_back(e);
                          inner(e, tokens, o);
                        },
                        Tensor(out.data(), DType::F32, {moe.T, moe.H}));
  });
  for (int r = 0; r < 4; ++r)
    for (int e : seen[r]) EXPECT_EQ(owner_of(e, moe.E, 4), r) << "rank " << r << " computed expert " << e;
}

}  // namespace
}  // namespace ft::dist
