#include "dist/expert_parallel.h"

#include <algorithm>
#include <cstring>
#include <vector>

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

namespace {

void check_inputs(int n_expert, const Tensor& routes, const Tensor& weights, const Tensor& out) {
  if (routes.dtype != DType::I32 || routes.ndim != 2)
    fail(ErrorCode::kInvalidArgument, "expert_parallel_moe: routes must be [tokens, k] I32, not {}", routes.str());
  const int64_t T = routes.dim(0), k = routes.dim(1);
  if (weights.dtype != DType::F32 || !weights.has_shape({T, k}))
    fail(ErrorCode::kInvalidArgument, "expert_parallel_moe: weights must be [{}, {}] F32 like routes, not {}", T, k,
         weights.str());
  if (out.dtype != DType::F32 || out.ndim != 2 || out.dim(0) != T)
    fail(ErrorCode::kInvalidArgument, "expert_parallel_moe: out must be [{}, hidden] F32, not {}", T, out.str());
  for (const Tensor* t : {&routes, &weights, &out})
    if (t->device != Device::kCpu || (t->data == nullptr && t->numel() > 0))
      fail(ErrorCode::kInvalidArgument, "expert_parallel_moe: {} must be host memory", t->str());
  for (int64_t i = 0; i < T * k; ++i) {
    const int32_t e = routes.ptr<int32_t>()[i];
    if (e >= n_expert)  // e < 0: no expert (a graph-padding row), as in Ops::moe_experts
      fail(ErrorCode::kInvalidArgument, "expert_parallel_moe: token {} slot {} routes to expert {}, outside [0, {})",
           i / k, i % k, e, n_expert);
  }
}

}  // namespace

void expert_parallel_moe(Collective& comm, int n_expert, const Tensor& routes, const Tensor& weights,
                         const ExpertOutputFn& compute, const Tensor& out) {
  const ExpertRange mine = owned_experts(comm.rank(), n_expert, comm.group_size());
  check_inputs(n_expert, routes, weights, out);
  const int64_t T = routes.dim(0), k = routes.dim(1), H = out.dim(1);
  const int32_t* ids = routes.ptr<int32_t>();
  const float* w = weights.ptr<float>();
  float* acc = out.ptr<float>();  // [T, H]: this rank's partial, then the sum over ranks
  std::fill(acc, acc + T * H, 0.0f);

  // Dispatch: the (token, slot) pairs of each owned expert, tokens ascending.
  std::vector<std::vector<int32_t>> tokens(mine.end - mine.begin), slots(mine.end - mine.begin);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j)
      if (const int32_t e = ids[t * k + j]; e >= mine.begin && e < mine.end) {
        tokens[e - mine.begin].push_back(static_cast<int32_t>(t));
        slots[e - mine.begin].push_back(static_cast<int32_t>(j));
      }

  std::vector<float> rows;
  for (int e = mine.begin; e < mine.end; ++e) {
    const std::vector<int32_t>& toks = tokens[e - mine.begin];
    if (toks.empty()) continue;
    const int64_t n = static_cast<int64_t>(toks.size());
    rows.assign(static_cast<size_t>(n * H), 0.0f);
    compute(e, std::span<const int32_t>(toks), Tensor(rows.data(), DType::F32, {n, H}));
    for (int64_t i = 0; i < n; ++i) {  // combine: weighted, into the token's row
      const int64_t t = toks[i];
      const float wt = w[t * k + slots[e - mine.begin][i]];
      for (int64_t h = 0; h < H; ++h) acc[t * H + h] += wt * rows[i * H + h];
    }
  }
  comm.all_reduce(out, out);
}

}  // namespace ft::dist
