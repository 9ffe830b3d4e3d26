// Which rank owns which experts (dist/expert_parallel.h): contiguous blocks, refusals for counts the
// ranks do not divide. Expert parallelism itself (ExpertParallelExperts) is tested in
// tests/moe/expert_parallel_test.cpp.
#include <gtest/gtest.h>

#include <string>

#include "dist/expert_parallel.h"
#include "util/error.h"

namespace ft::dist {
namespace {

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
  EXPECT_THROW(owner_of(-1, 8, 2), Error);
  EXPECT_THROW(owner_of(0, 8, 0), Error);
  EXPECT_THROW(owned_experts(2, 8, 2), Error);
  EXPECT_THROW(owned_experts(-1, 8, 2), Error);
  EXPECT_THROW(owned_experts(0, 0, 2), Error);
}

}  // namespace
}  // namespace ft::dist
