// moe_local_ids (expert parallelism's routes masked to one rank's block of experts) on every backend:
// the block's ids become local ids, every other id -1, in place too; bad arguments are refused; an
// id >= n_expert is refused by the CPU (naming its entry) and routed nowhere by CUDA.
#include <string>

#include <fmt/format.h>

#include "op_harness.h"

namespace ft::testing {
namespace {

class MoeLocalIdsTest : public OpTest {};

// Experts 0..11 (n_expert 12): the routes of 4 tokens, 3 experts each, with -1 (no expert) among them.
const std::vector<int32_t> kIds = {0, 3, 4, 7, 8, 11, -1, 5, 6, -7, 10, 2};

TEST_P(MoeLocalIdsTest, MapsTheBlockAndMasksTheRest) {
  struct Case {
    int32_t begin, end;
    std::vector<int32_t> want;
  };
  const Case cases[] = {
      {4, 8, {-1, -1, 0, 3, -1, -1, -1, 1, 2, -1, -1, -1}},   // a middle block
      {0, 4, {0, 3, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2}},   // the first
      {8, 12, {-1, -1, -1, -1, 0, 3, -1, -1, -1, -1, 2, -1}},  // the last
      {0, 12, {0, 3, 4, 7, 8, 11, -1, 5, 6, -1, 10, 2}},       // every expert: negatives become -1
      {5, 5, std::vector<int32_t>(12, -1)},                    // no expert
  };
  for (const Case& c : cases) {
    const std::string what = fmt::format("[{}, {})", c.begin, c.end);
    const Tensor ids = arena().i32(kIds, {4, 3});
    Tensor out = arena().i32(std::vector<int32_t>(12, 99), {4, 3});
    ops().moe_local_ids(ids, c.begin, c.end, 12, out);
    EXPECT_EQ(arena().read_i32(out), c.want) << what;
    EXPECT_EQ(arena().read_i32(ids), kIds) << what << ": ids untouched";
    Tensor inplace = arena().i32(kIds, {4, 3});
    ops().moe_local_ids(inplace, c.begin, c.end, 12, inplace);
    EXPECT_EQ(arena().read_i32(inplace), c.want) << what << " in place";
  }
  // No entries: nothing to do.
  ops().moe_local_ids(arena().alloc(DType::I32, {0, 3}), 0, 4, 12, arena().alloc(DType::I32, {0, 3}));
}

TEST_P(MoeLocalIdsTest, BadArgumentsAreRefused) {
  const Tensor ids = arena().i32(kIds, {4, 3});
  auto refused = [&](const Tensor& i, int32_t begin, int32_t end, const Tensor& out, const char* what) {
    try {
      ops().moe_local_ids(i, begin, end, 12, out);
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << what;
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  refused(ids, 0, 4, arena().alloc(DType::I32, {3, 4}), "must have the shape of ids");
  refused(ids, 0, 4, arena().alloc(DType::I32, {12}), "must have the shape of ids");
  refused(ids, 0, 4, arena().alloc(DType::F32, {4, 3}), "moe_local_ids: out [4, 3]");
  refused(arena().alloc(DType::F32, {4, 3}), 0, 4, arena().alloc(DType::I32, {4, 3}), "moe_local_ids: ids [4, 3]");
  refused(ids, 8, 16, arena().alloc(DType::I32, {4, 3}), "experts [8, 16) are not a range inside [0, 12)");
  refused(ids, 4, 2, arena().alloc(DType::I32, {4, 3}), "experts [4, 2) are not a range inside [0, 12)");
  refused(ids, -1, 2, arena().alloc(DType::I32, {4, 3}), "experts [-1, 2) are not a range inside [0, 12)");
}

TEST_P(MoeLocalIdsTest, AnIdOutsideTheExperts) {
  std::vector<int32_t> bad = kIds;
  bad[4] = 12;  // token 1, slot 1: expert 12 of 12
  Tensor ids = arena().i32(bad, {4, 3});
  if (GetParam() == "cpu") {
    try {
      ops().moe_local_ids(ids, 8, 12, 12, ids);
      ADD_FAILURE() << "an id >= n_expert was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("moe_local_ids: entry 4 routes to expert 12 of 12"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(arena().read_i32(ids), bad) << "nothing written before the refusal";
  } else {  // a kernel cannot throw inside a graph: the id routes nowhere
    ops().moe_local_ids(ids, 8, 12, 12, ids);
    EXPECT_EQ(arena().read_i32(ids), (std::vector<int32_t>{-1, -1, -1, -1, -1, 3, -1, -1, -1, -1, 2, -1}));
  }
}

FT_INSTANTIATE_OP_TEST(MoeLocalIdsTest);

}  // namespace
}  // namespace ft::testing
