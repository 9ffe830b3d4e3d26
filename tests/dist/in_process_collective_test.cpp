// The in-process collective against values known by construction, for groups of 1 to 4 ranks: NCCL's
// semantics for all_reduce, all_gather, reduce_scatter and broadcast; mismatched calls refused on every
// rank; a rank that throws or never arrives ends the others' waits; sums bit-identical run to run.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "dist/in_process_collective.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft::dist {
namespace {

Tensor f32(std::vector<float>& v) { return Tensor(v.data(), DType::F32, {static_cast<int64_t>(v.size())}); }

/** Rank r's value at element i: distinct per rank and element, exact in float32. */
float value(int r, int64_t i) { return static_cast<float>(100 * (r + 1) + i) * 0.5f; }

/** Sum over ranks 0..n-1 of value(r, i). */
float value_sum(int n, int64_t i) {
  float s = 0;
  for (int r = 0; r < n; ++r) s += value(r, i);
  return s;
}

class CollectiveSizes : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveSizes, AllReduceSumsEveryRanksBuffer) {
  const int n = GetParam();
  const int64_t count = 37;
  auto ranks = make_in_process_group(n);
  std::vector<std::vector<float>> got(n);
  run_ranks(ranks, [&](Collective& c) {
    EXPECT_EQ(c.group_size(), n);
    std::vector<float> send(count), recv(count, -1.0f);
    for (int64_t i = 0; i < count; ++i) send[i] = value(c.rank(), i);
    c.all_reduce(f32(send), f32(recv));
    c.all_reduce(f32(send), f32(send));  // in place
    EXPECT_EQ(send, recv);
    got[c.rank()] = recv;
  });
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(got[r][i], value_sum(n, i)) << "rank " << r << " element " << i;
}

TEST_P(CollectiveSizes, AllGatherAndReduceScatterRoundTrip) {
  const int n = GetParam();
  const int64_t count = 5;
  auto ranks = make_in_process_group(n);
  run_ranks(ranks, [&](Collective& c) {
    const int r = c.rank();
    std::vector<float> mine(count), gathered(count * n);
    for (int64_t i = 0; i < count; ++i) mine[i] = value(r, i);
    c.all_gather(f32(mine), f32(gathered));
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(gathered[q * count + i], value(q, i));

    // reduce_scatter of the gathered rows: block r = n * value(r, .), then all_gather it back.
    std::vector<float> block(count), whole(count * n);
    c.reduce_scatter(f32(gathered), f32(block));
    for (int64_t i = 0; i < count; ++i) ASSERT_EQ(block[i], static_cast<float>(n) * value(r, i));
    c.all_gather(f32(block), f32(whole));
    for (int q = 0; q < n; ++q)
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(whole[q * count + i], static_cast<float>(n) * value(q, i));

    // all_reduce == reduce_scatter + all_gather, in place (send = recv's block `rank`).
    std::vector<float> send(count * n), reduced(count * n), rs(count * n);
    for (int64_t i = 0; i < count * n; ++i) send[i] = value(r, i);
    c.all_reduce(f32(send), f32(reduced));
    c.reduce_scatter(f32(send), Tensor(rs.data() + r * count, DType::F32, {count}));
    c.all_gather(Tensor(rs.data() + r * count, DType::F32, {count}), f32(rs));
    EXPECT_EQ(rs, reduced);
  });
}

TEST_P(CollectiveSizes, BroadcastFromEveryRoot) {
  const int n = GetParam();
  auto ranks = make_in_process_group(n);
  run_ranks(ranks, [&](Collective& c) {
    for (int root = 0; root < n; ++root) {
      std::vector<float> buf(9);
      for (int64_t i = 0; i < 9; ++i) buf[i] = value(c.rank(), i);
      c.broadcast(f32(buf), root);
      for (int64_t i = 0; i < 9; ++i) ASSERT_EQ(buf[i], value(root, i)) << "root " << root;
    }
  });
}

TEST_P(CollectiveSizes, Bf16AllReduceSumsInFloatAndRoundsOnce) {
  const int n = GetParam();
  auto ranks = make_in_process_group(n);
  run_ranks(ranks, [&](Collective& c) {
    // 1 + (n - 1) * 2^-9: rounding after each rank's 2^-9 would stay at 1 (bf16's step at 1 is 2^-7);
    // one rounding of the float sum gives 1 + 2^-7 for n = 4.
    std::vector<uint16_t> v(4, f32_to_bf16(c.rank() == 0 ? 1.0f : 0.001953125f));
    c.all_reduce(Tensor(v.data(), DType::BF16, {4}), Tensor(v.data(), DType::BF16, {4}));
    for (uint16_t x : v) ASSERT_EQ(x, f32_to_bf16(1.0f + (n - 1) * 0.001953125f));
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectiveSizes, ::testing::Values(1, 2, 3, 4));

/** Runs `body` on a group of `n` and returns the message of the ft::Error each rank threw ("" if none). */
std::vector<std::string> errors_per_rank(int n, const std::function<void(Collective&)>& body,
                                         InProcessOptions options = {}) {
  auto ranks = make_in_process_group(n, options);
  std::vector<std::string> errors(n);
  run_ranks(ranks, [&](Collective& c) {
    try {
      body(c);
    } catch (const Error& e) {
      errors[c.rank()] = std::string(error_code_name(e.code())) + ": " + e.what();
    }
  });
  return errors;
}

TEST(InProcessCollective, MismatchedCountsAreRefusedOnEveryRank) {
  const auto errors = errors_per_rank(3, [](Collective& c) {
    std::vector<float> v(c.rank() == 1 ? 4 : 3, 1.0f);
    c.all_reduce(f32(v), f32(v));
  });
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("invalid_argument"), std::string::npos) << e;
    EXPECT_NE(e.find("all_reduce: rank 1 passes a count of 4 elements but rank 0 passes 3"), std::string::npos) << e;
  }
}

TEST(InProcessCollective, MismatchedDtypesOpsRootsAndSizesAreRefused) {
  auto all_refused = [](const std::vector<std::string>& errors, const std::string& needle) {
    for (const std::string& e : errors)
      EXPECT_NE(e.find(needle), std::string::npos) << "wanted '" << needle << "' in: " << e;
  };
  all_refused(errors_per_rank(2,
                              [](Collective& c) {
                                std::vector<float> v(4, 1.0f);
                                const DType t = c.rank() == 0 ? DType::F32 : DType::BF16;
                                c.all_reduce(Tensor(v.data(), t, {2}), Tensor(v.data(), t, {2}));
                              }),
              "all_reduce: rank 1 passes BF16 but rank 0 passes F32");
  all_refused(errors_per_rank(2,
                              [](Collective& c) {
                                std::vector<float> v(2, 1.0f);
                                if (c.rank() == 0) c.all_reduce(f32(v), f32(v));
                                else c.broadcast(f32(v), 0);
                              }),
              "rank 1 called broadcast while rank 0 called all_reduce");
  all_refused(errors_per_rank(2, [](Collective& c) {
                std::vector<float> v(2, 1.0f);
                c.broadcast(f32(v), c.rank());
              }),
              "broadcast: rank 1 names root 1 but rank 0 names root 0");
  all_refused(errors_per_rank(2, [](Collective& c) {
                std::vector<float> send(3), recv(3);
                c.all_gather(f32(send), f32(recv));
              }),
              "all_gather: rank 0's send has 3 elements and its recv 3");
  all_refused(errors_per_rank(2, [](Collective& c) {
                std::vector<int32_t> v(2);
                c.all_reduce(Tensor(v.data(), DType::I32, {2}), Tensor(v.data(), DType::I32, {2}));
              }),
              "only F32 and BF16 are supported");
  // The group stays usable after a refused call.
  auto ranks = make_in_process_group(2);
  run_ranks(ranks, [](Collective& c) {
    std::vector<float> v(c.rank() + 1, 1.0f);
    EXPECT_THROW(c.all_reduce(f32(v), f32(v)), Error);
    std::vector<float> w(2, 1.0f);
    c.all_reduce(f32(w), f32(w));
    EXPECT_EQ(w[1], 2.0f);
  });
}

TEST(InProcessCollective, ARankThatThrowsAbortsTheOthersWaits) {
  auto ranks = make_in_process_group(4);
  std::atomic<int> aborted{0};
  try {
    run_ranks(ranks, [&](Collective& c) {
      if (c.rank() == 2) throw Error(ErrorCode::kIo, "rank 2 could not read its shard");
      std::vector<float> v(8, 1.0f);
      try {
        c.all_reduce(f32(v), f32(v));
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInternal);
        EXPECT_NE(std::string(e.what()).find("rank 2 threw: rank 2 could not read its shard"), std::string::npos)
            << e.what();
        ++aborted;
        throw;
      }
    });
    FAIL() << "run_ranks did not rethrow";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo) << e.what();  // the cause, not an "aborted" echo
  }
  EXPECT_EQ(aborted.load(), 3);
}

TEST(InProcessCollective, ARankThatNeverArrivesTimesOut) {
  const auto errors = errors_per_rank(
      3,
      [](Collective& c) {
        if (c.rank() == 1) return;  // takes another path
        std::vector<float> v(2, 1.0f);
        c.all_reduce(f32(v), f32(v));
      },
      InProcessOptions{std::chrono::milliseconds(100)});
  for (int r : {0, 2}) {
    EXPECT_NE(errors[r].find("internal_error: all_reduce: the collective group was aborted: rank "), std::string::npos)
        << errors[r];
    EXPECT_NE(errors[r].find("waited 100 ms in all_reduce for rank(s) 1, which never arrived"), std::string::npos)
        << errors[r];
  }
  EXPECT_EQ(errors[1], "");
}

TEST(InProcessCollective, SumsAreBitIdenticalRunToRun) {
  const int n = 4;
  const int64_t count = 1000;
  std::vector<std::vector<float>> inputs(n, std::vector<float>(count));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exp(-20, 20);
  for (auto& in : inputs)
    for (float& x : in) x = std::ldexp(mant(rng), exp(rng));  // magnitudes far apart: order matters
  std::vector<float> first;
  for (int run = 0; run < 20; ++run) {
    auto ranks = make_in_process_group(n);
    std::vector<std::vector<float>> got(n);
    run_ranks(ranks, [&](Collective& c) {
      std::vector<float> v = inputs[c.rank()];
      c.all_reduce(f32(v), f32(v));
      got[c.rank()] = v;
    });
    for (int r = 0; r < n; ++r)
      ASSERT_EQ(std::memcmp(got[r].data(), got[0].data(), count * 4), 0) << "rank " << r << " differs, run " << run;
    if (run == 0) first = got[0];
    ASSERT_EQ(std::memcmp(got[0].data(), first.data(), count * 4), 0) << "run " << run;
  }
  // Rank order: ((in0 + in1) + in2) + in3.
  for (int64_t i = 0; i < count; ++i)
    ASSERT_EQ(first[i], ((inputs[0][i] + inputs[1][i]) + inputs[2][i]) + inputs[3][i]);
}

TEST(InProcessCollective, RefusesAnEmptyGroup) { EXPECT_THROW(make_in_process_group(0), Error); }

}  // namespace
}  // namespace ft::dist
