#pragma once
// Which rank owns which experts under expert parallelism (EP): contiguous blocks, n_expert / n_ranks
// experts a rank. moe/expert_parallel_experts.h is EP itself (each rank computes its block's share of
// a MoE layer behind ExpertCompute and all_reduces it); the engine and Model::keep_owned_experts use
// these ranges to keep only a rank's block.
namespace ft::dist {

/** Experts [begin, end) of one rank. */
struct ExpertRange {
  int begin = 0;
  int end = 0;
};

/** The rank that owns `expert`: rank r owns experts [r * n_expert / n_ranks, (r + 1) * n_expert / n_ranks).
 *  Throws ft::Error(kInvalidArgument) when n_ranks < 1, n_expert is not a positive multiple of n_ranks,
 *  or expert is outside [0, n_expert). */
int owner_of(int expert, int n_expert, int n_ranks);

/** The experts rank `rank` owns (see owner_of). Throws as owner_of does, or for rank outside [0, n_ranks). */
ExpertRange owned_experts(int rank, int n_expert, int n_ranks);

}  // namespace ft::dist
