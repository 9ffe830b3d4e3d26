#include "dist/expert_parallel.h"

#include "util/error.h"

namespace ft::dist {

int owner_of(int expert, int n_expert, int n_ranks) {
  if (n_ranks < 1) fail(ErrorCode::kInvalidArgument, "expert parallelism needs at least 1 rank, not {}", n_ranks);
  if (n_expert < 1 || n_expert % n_ranks != 0)
    fail(ErrorCode::kInvalidArgument,
         "expert parallelism over {} ranks needs a number of experts that is a positive multiple of {}; this "
         "model has {}",
         n_ranks, n_ranks, n_expert);
  if (expert < 0 || expert >= n_expert)
    fail(ErrorCode::kInvalidArgument, "expert {} is outside [0, {})", expert, n_expert);
  return expert / (n_expert / n_ranks);
}

ExpertRange owned_experts(int rank, int n_expert, int n_ranks) {
  owner_of(0, n_expert, n_ranks);  // checks n_expert and n_ranks
  if (rank < 0 || rank >= n_ranks) fail(ErrorCode::kInvalidArgument, "rank {} is outside [0, {})", rank, n_ranks);
  const int per_rank = n_expert / n_ranks;
  return {rank * per_rank, (rank + 1) * per_rank};
}

}  // namespace ft::dist
