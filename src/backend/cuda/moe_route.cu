// moe_route: router logits [T, E] (F32 or BF16) -> ids I32 [T, k], weights F32 [T, k]. Scores are the
// softmax over all E (or the sigmoid) of each row; the k best are picked (descending, ties to the
// lower id, block_topk in topk.cuh), optionally renormalised to sum 1, then multiplied by
// p.scaling. Up to 256 experts: one warp per token, scores in registers; more: one block per token,
// scores staged in shared memory (E floats).
// Bytes moved: T * E * element size + 8 * T * k.
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/route_warp.cuh"
#include "backend/cuda/topk.cuh"

namespace ft {
namespace cuda {
namespace {

__global__ void moe_route_kernel(const void* logits, int code, int E, int k, bool sigmoid, bool norm, float scaling,
                                 int32_t* ids, float* weights) {
  extern __shared__ float score[];
  __shared__ float red[32];
  const int64_t t = blockIdx.x;
  const int64_t base = t * E;
  if (sigmoid) {
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
  int32_t* it = ids + t * k;
  float* wt = weights + t * k;
  block_topk([&](int e) { return score[e]; }, E, k, [&](int j, int idx, float v) {
    it[j] = idx;
    wt[j] = v;
  });
  if (threadIdx.x == 0) {  // thread 0 wrote every entry above, so it reads them back coherently
    float sel = 0.0f;
    for (int j = 0; j < k; ++j) sel += wt[j];
    const float f = norm && sel > 0.0f ? scaling / sel : scaling;
    for (int j = 0; j < k; ++j) wt[j] *= f;
  }
}

/** The same for E <= 32 * kWarpRouteMax experts, one warp per token (decode: no block barriers). */
__global__ void moe_route_warp_kernel(const void* logits, int code, int64_t T, int E, int k, bool sigmoid, bool norm,
                                      float scaling, int32_t* ids, float* weights) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (t >= T) return;
  route_warp([&](int e) { return load_any(logits, code, t * E + e); }, E, k, sigmoid, norm, scaling, ids + t * k,
             weights + t * k);
}

}  // namespace
}  // namespace cuda

void CudaOps::moe_route(const RouterParams& p, const Tensor& logits, Tensor ids, Tensor weights) {
  forget_prepared();
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
  if (T == 0) return;
  if (E <= 32 * cuda::kWarpRouteMax) {
    cuda::moe_route_warp_kernel<<<static_cast<unsigned>((T + 3) / 4), 128, 0, stream_>>>(
        logits.data, cuda::float_code("moe_route", "logits", logits.dtype), T, static_cast<int>(E), k,
        p.scoring == RouterScoring::kSigmoid, p.norm_topk_prob, p.scaling, ids.ptr<int32_t>(), weights.ptr<float>());
    FT_CUDA_LAUNCH_CHECK();
    return;
  }
  cuda::moe_route_kernel<<<static_cast<unsigned>(T), 128, static_cast<size_t>(E) * 4, stream_>>>(
      logits.data, cuda::float_code("moe_route", "logits", logits.dtype), static_cast<int>(E), k,
      p.scoring == RouterScoring::kSigmoid, p.norm_topk_prob, p.scaling, ids.ptr<int32_t>(), weights.ptr<float>());
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
  forget_prepared();
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
