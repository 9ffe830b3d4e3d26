// Collective::split on the in-process group (ncclCommSplit's semantics): one new group per color,
// ranked by (key, old rank), null for a negative color; the sub-groups run their collectives
// independently of each other and of the parent.
#include <gtest/gtest.h>

#include <vector>

#include "dist/in_process_collective.h"
#include "util/error.h"

namespace ft::dist {
namespace {

TEST(InProcessSplit, GroupsByColorRankedByKey) {
  const auto group = make_in_process_group(4);
  std::vector<int> tp_rank(4), tp_size(4), ep_rank(4), ep_size(4), none(4);
  std::vector<float> tp_sum(4), ep_sum(4), all_sum(4);
  run_ranks(group, [&](Collective& comm) {
    const int r = comm.rank();
    std::unique_ptr<Collective> tp = comm.split(r / 2, r);       // {0, 1}, {2, 3}
    std::unique_ptr<Collective> ep = comm.split(r % 2, -r);      // {2, 0}, {3, 1}: ranked by key
    std::unique_ptr<Collective> nothing = comm.split(r == 3 ? 0 : -1, 0);  // only rank 3
    tp_rank[r] = tp->rank(), tp_size[r] = tp->group_size();
    ep_rank[r] = ep->rank(), ep_size[r] = ep->group_size();
    none[r] = nothing ? nothing->group_size() : 0;
    float a = static_cast<float>(1 << r), b = a, c = a;
    // Interleaved collectives of the three groups, the same order on every rank.
    tp->all_reduce(Tensor(&a, DType::F32, {1}), Tensor(&a, DType::F32, {1}));
    ep->all_reduce(Tensor(&b, DType::F32, {1}), Tensor(&b, DType::F32, {1}));
    comm.all_reduce(Tensor(&c, DType::F32, {1}), Tensor(&c, DType::F32, {1}));
    tp_sum[r] = a, ep_sum[r] = b, all_sum[r] = c;
  });
  EXPECT_EQ(tp_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(tp_size, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(ep_rank, (std::vector<int>{1, 1, 0, 0}));
  EXPECT_EQ(ep_size, (std::vector<int>{2, 2, 2, 2}));
  EXPECT_EQ(none, (std::vector<int>{0, 0, 0, 1}));
  EXPECT_EQ(tp_sum, (std::vector<float>{3, 3, 12, 12}));
  EXPECT_EQ(ep_sum, (std::vector<float>{5, 10, 5, 10}));
  EXPECT_EQ(all_sum, (std::vector<float>{15, 15, 15, 15}));
}

TEST(InProcessSplit, ARankThatNeverSplitsAbortsTheGroup) {
  const auto group = make_in_process_group(2, InProcessOptions{std::chrono::milliseconds(200)});
  EXPECT_THROW(run_ranks(group,
                         [&](Collective& comm) {
                           if (comm.rank() == 0) comm.split(0, 0);
                         }),
               Error);
}

}  // namespace
}  // namespace ft::dist
