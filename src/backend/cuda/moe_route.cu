// moe_route: router logits [T, E] (F32 or BF16) -> ids I32 [T, k], weights F32 [T, k]. Scores are the
// softmax over all E (or the sigmoid) of each row; selection scores are the scores plus p.bias (F32 [E],
// DeepSeek-V3's e_score_correction_bias) when given; with p.n_group > 1 only the experts of the
// p.topk_group best groups (a group: E / n_group consecutive ids, scored by the sum of its two best
// selection scores, ties to the lower group) are eligible (transformers' DeepseekV3TopkRouter). The k
// best selection scores are picked (descending, ties to the lower id, block_topk in topk.cuh); their
// unbiased scores are optionally renormalised to sum 1, then multiplied by p.scaling. A row with a NaN
// or inf logit routes to experts 0..k-1 with zero weight.
// Up to 256 experts and 32 groups: one warp per token, scores in registers (route_warp.cuh); more: one
// block per token, scores staged in shared memory (E + 2 * n_group floats). Bias read from device
// memory (graph-capturable). Throws kInvalidArgument for shapes, bias or groups (op_checks::router).
// Bytes moved: T * E * element size (+ E * 4 bias) + 8 * T * k.
#include <algorithm>

#include "backend/op_checks.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/route_warp.cuh"
#include "backend/cuda/topk.cuh"

namespace ft {
namespace cuda {
namespace {

__global__ void moe_route_kernel(const void* logits, int code, RouteArgs r, int32_t* ids, float* weights) {
  extern __shared__ float smem[];
  float* score = smem;                                           // [E]
  float* gscore = smem + r.E;                                    // [n_group]
  int* kept = reinterpret_cast<int*>(gscore + max(r.n_group, 1));  // [n_group]
  __shared__ float red[32];
  const int E = r.E;
  const int64_t t = blockIdx.x;
  const int64_t base = t * E;
  int bad = 0;
  for (int e = threadIdx.x; e < E; e += blockDim.x) bad |= !isfinite(load_any(logits, code, base + e));
  if (__syncthreads_or(bad)) {  // a diverged token: valid, distinct ids with zero weight (as route_warp)
    if (threadIdx.x == 0)
      for (int j = 0; j < r.k; ++j) ids[t * r.k + j] = j, weights[t * r.k + j] = 0.0f;
    return;
  }
  if (r.sigmoid) {
    for (int e = threadIdx.x; e < E; e += blockDim.x) score[e] = 1.0f / (1.0f + expf(-load_any(logits, code, base + e)));
    __syncthreads();
  } else {
    float mx = -INFINITY;
    for (int e = threadIdx.x; e < E; e += blockDim.x) mx = fmaxf(mx, load_any(logits, code, base + e));
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
      const float v = expf(load_any(logits, code, base + e) - mx);
      score[e] = v;
      sum += v;
    }
    sum = block_sum(sum, red);  // also orders the score[] writes before the reads below
    const float inv = 1.0f / sum;
    for (int e = threadIdx.x; e < E; e += blockDim.x) score[e] *= inv;
    __syncthreads();
  }
  const bool groups = r.n_group > 1;
  const int per = groups ? E / r.n_group : E;
  auto biased = [&](int e) { return r.bias ? score[e] + r.bias[e] : score[e]; };
  if (groups) {
    for (int g = threadIdx.x; g < r.n_group; g += blockDim.x) {
      float a = -INFINITY, b = -INFINITY;  // the group's two best selection scores
      for (int e = g * per; e < (g + 1) * per; ++e) {
        const float c = biased(e);
        if (c > a) b = a, a = c;
        else if (c > b) b = c;
      }
      gscore[g] = a + b;
      kept[g] = 0;
    }
    __syncthreads();
    // block_topk ends with a barrier: the kept flags thread 0 sets are visible after it
    block_topk([&](int g) { return gscore[g]; }, r.n_group, r.topk_group, [&](int, int g, float) { kept[g] = 1; });
  }
  int32_t* it = ids + t * r.k;
  float* wt = weights + t * r.k;
  block_topk([&](int e) { return groups && !kept[e / per] ? -INFINITY : biased(e); }, E, r.k,
             [&](int j, int idx, float) {
               it[j] = idx;
               wt[j] = score[idx];
             });
  if (threadIdx.x == 0) {  // thread 0 wrote every entry above, so it reads them back coherently
    float sel = 0.0f;
    for (int j = 0; j < r.k; ++j) sel += wt[j];
    const float f = r.norm && sel > 0.0f ? r.scaling / sel : r.scaling;
    for (int j = 0; j < r.k; ++j) wt[j] *= f;
  }
}

/** The same for E <= 32 * kWarpRouteMax experts and n_group <= kWarpRouteMaxGroups, one warp per token
 *  (decode: no block barriers). */
__global__ void moe_route_warp_kernel(const void* logits, int code, int64_t T, RouteArgs r, int32_t* ids,
                                      float* weights) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= T) return;
  route_warp([&](int e) { return load_any(logits, code, t * r.E + e); }, r, ids + t * r.k, weights + t * r.k);
}

}  // namespace

RouteArgs route_args(const char* op, const RouterParams& p, int64_t E) {
  op_checks::router(op, p, E);
  RouteArgs r;
  r.E = static_cast<int>(E), r.k = p.n_expert_used;
  r.sigmoid = p.scoring == RouterScoring::kSigmoid, r.norm = p.norm_topk_prob, r.scaling = p.scaling;
  if (!p.bias.empty()) {
    check_dtype(op, "bias", p.bias, {DType::F32});
    r.bias = p.bias.ptr<float>();
  }
  if (p.n_group > 1) r.n_group = p.n_group, r.topk_group = p.topk_group;
  return r;
}

}  // namespace cuda

void CudaOps::moe_route(const RouterParams& p, const Tensor& logits, Tensor ids, Tensor weights) {
  cuda::check_act("moe_route", "logits", logits);
  cuda::check_dtype("moe_route", "ids", ids, {DType::I32});
  cuda::check_dtype("moe_route", "weights", weights, {DType::F32});
  const int64_t T = logits.rows(), E = logits.cols();
  const int32_t k = p.n_expert_used;
  if (k < 1 || k > E)
    fail(ErrorCode::kInvalidArgument, "moe_route: n_expert_used {} must be in [1, {}] (experts in logits {})", k, E,
         logits.str());
  if (E > 16384) fail(ErrorCode::kUnsupported, "moe_route: {} experts (at most 16384 supported)", E);
  if (ids.rows() != T || ids.cols() != k || weights.rows() != T || weights.cols() != k)
    fail(ErrorCode::kInvalidArgument, "moe_route: ids {} and weights {} must be [{}, {}]", ids.str(), weights.str(), T,
         k);
  const cuda::RouteArgs r = cuda::route_args("moe_route", p, E);
  if (T == 0) return;
  const int code = cuda::float_code("moe_route", "logits", logits.dtype);
  if (E <= 32 * cuda::kWarpRouteMax && r.n_group <= cuda::kWarpRouteMaxGroups) {
    cuda::moe_route_warp_kernel<<<static_cast<unsigned>((T + 3) / 4), 128, 0, stream_>>>(
        logits.data, code, T, r, ids.ptr<int32_t>(), weights.ptr<float>());
    FT_CUDA_LAUNCH_CHECK();
    return;
  }
  const size_t smem = static_cast<size_t>(E + 2 * std::max(r.n_group, 1)) * 4;
  cuda::moe_route_kernel<<<static_cast<unsigned>(T), 128, smem, stream_>>>(logits.data, code, r, ids.ptr<int32_t>(),
                                                                            weights.ptr<float>());
  FT_CUDA_LAUNCH_CHECK();
}

namespace cuda {
namespace {

/** ids[t, :] = -1 for t >= *n_valid (flat [T * k]). */
__global__ void moe_mask_rows_kernel(const int32_t* __restrict__ n_valid, int32_t* __restrict__ ids, int64_t T,
                                     int64_t k) {
  const int64_t from = static_cast<int64_t>(max(0, *n_valid)) * k;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < T * k;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    if (i >= from) ids[i] = -1;
}

}  // namespace
}  // namespace cuda

void CudaOps::moe_mask_rows(const Tensor& n_valid, Tensor ids) {
  cuda::check_dtype("moe_mask_rows", "n_valid", n_valid, {DType::I32});
  cuda::check_dtype("moe_mask_rows", "ids", ids, {DType::I32});
  if (n_valid.numel() != 1) fail(ErrorCode::kInvalidArgument, "moe_mask_rows: n_valid {} must hold one count", n_valid.str());
  const int64_t T = ids.rows(), k = ids.cols();
  if (T * k == 0) return;
  cuda::moe_mask_rows_kernel<<<cuda::grid_1d(T * k, 256), 256, 0, stream_>>>(n_valid.ptr<int32_t>(), ids.ptr<int32_t>(),
                                                                             T, k);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
