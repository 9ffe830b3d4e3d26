#pragma once
// Owner-local expert parallelism, the all-gather + all-reduce form: experts are owned by ranks in
// contiguous blocks; every rank sees the whole step's routes (its tokens were all-gathered, or the
// step was broadcast), computes the weighted outputs of only the experts it owns into a [T, H] partial,
// and an all_reduce (sum) of the partials gives every rank the full MoE output. No expert's weights
// leave its owner; the activations cross ranks instead. The all-to-all form (send each token only to
// the owners of its experts, combine back) moves fewer bytes at large batch and is a later step; both
// give the same sums up to float order.
#include <cstdint>
#include <functional>
#include <span>

#include "dist/collective.h"
#include "tensor/tensor.h"

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

/** Computes expert `expert`'s output for the tokens `tokens` (row indices of the step's [T, ...] input,
 *  ascending, a token repeated if it routed to the expert twice): writes row i of `out` ([tokens.size(),
 *  H] F32) from token tokens[i]. Unweighted: the caller applies the routing weight. */
using ExpertOutputFn = std::function<void(int expert, std::span<const int32_t> tokens, const Tensor& out)>;

/** One MoE layer's expert outputs under expert parallelism: out[t] = sum over slots j of
 *  weights[t, j] * expert routes[t, j]'s output for token t, summed over the experts this rank owns and
 *  then across ranks with comm.all_reduce, so every rank ends with the full [T, H] output.
 *  routes: [T, k] I32 expert ids below n_expert, a negative id meaning no expert (a padding row's
 *  slot, as in Ops::moe_experts); weights: [T, k] F32; out: [T, H] F32 host memory,
 *  overwritten. Every rank must pass the same routes and weights (the collective's counts must agree).
 *  Within a rank, experts are done in ascending id and tokens in ascending row, so with one rank the
 *  result is the plain single-rank sum; with more, it differs only by float summation order.
 *  Throws ft::Error(kInvalidArgument) for bad shapes or dtypes, an expert id >= n_expert, or n_expert
 *  not a multiple of comm.group_size() (before any collective, so every rank throws alike); the
 *  collective's errors pass through. Allocates its gather lists and one scratch block per call. */
void expert_parallel_moe(Collective& comm, int n_expert, const Tensor& routes, const Tensor& weights,
                         const ExpertOutputFn& compute, const Tensor& out);

}  // namespace ft::dist
