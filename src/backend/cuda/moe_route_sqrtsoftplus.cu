// moe_route_sqrtsoftplus: DeepSeek-V4's router (ops.h): scores sqrt(softplus(logits)), experts from
// the hash table tid2eid[token] or the k best of score + bias (ties to the lower id), weights the
// scores renormalised and scaled. One warp per token (k <= 32; E scores a warp in shared memory).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kMaxK = 32;

template <typename T>
__device__ float sqrt_softplus(const T* l, int64_t e) {
  const float x = to_f(l[e]);
  return sqrtf(x > 20.0f ? x : log1pf(expf(x)));
}

/** One warp per token: the scores (plus bias) of its E experts into the warp's shared row once, then
 *  k rounds of a warp arg-max (ties to the lower id, as a scan in id order) that retire the winner;
 *  the weights from the unbiased scores. (Was one thread per token recomputing every score in each of
 *  the k scans: 122 us a call at E = 256, k = 6, session 41's profile.) */
template <typename T>
__global__ void route_kernel(const T* logits, const float* bias, const int32_t* tokens, const int32_t* tid2eid,
                             int64_t V, int32_t* ids, float* weights, int64_t n_tok, int64_t E, int k, bool norm,
                             float scaling) {
  extern __shared__ float route_scores[];  // [warps, E]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + warp;
  if (t >= n_tok) return;
  const T* l = logits + t * E;
  int32_t* id = ids + t * k;
  if (tid2eid) {
    int32_t tok = tokens[t];
    tok = tok < 0 ? 0 : (tok >= V ? static_cast<int32_t>(V - 1) : tok);  // validated on the host side of the model
    if (lane < k) id[lane] = tid2eid[static_cast<int64_t>(tok) * k + lane];
    __syncwarp();
  } else {
    float* s = route_scores + static_cast<int64_t>(warp) * E;
    for (int64_t e = lane; e < E; e += 32) s[e] = sqrt_softplus(l, e) + (bias ? bias[e] : 0.0f);
    __syncwarp();
    for (int j = 0; j < k; ++j) {
      float best = -INFINITY;
      int32_t arg = -1;
      for (int64_t e = lane; e < E; e += 32) {  // ascending ids: strict > keeps the lower id of a tie
        const float v = s[e];
        if (v != -INFINITY && (arg < 0 || v > best)) best = v, arg = static_cast<int32_t>(e);
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ob = __shfl_xor_sync(0xffffffffu, best, o);
        const int32_t oa = __shfl_xor_sync(0xffffffffu, arg, o);
        if (oa >= 0 && (arg < 0 || ob > best || (ob == best && oa < arg))) best = ob, arg = oa;
      }
      if (lane == 0) id[j] = arg;
      if (lane == (arg & 31)) s[arg] = -INFINITY;  // retired (a score is sqrt(softplus) + bias: never -inf)
      __syncwarp();
    }
  }
  float w = lane < k ? sqrt_softplus(l, id[lane]) : 0.0f, sum = w;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane < k) weights[t * k + lane] = (norm ? w / (sum + 1e-20f) : w) * scaling;
}

}  // namespace
}  // namespace cuda

void CudaOps::moe_route_sqrtsoftplus(const RouterParams& p, const Tensor& logits, const Tensor& tokens,
                                     const Tensor& tid2eid, Tensor ids, Tensor weights) {
  const char* op = "moe_route_sqrtsoftplus";
  cuda::check_act(op, "logits", logits);
  cuda::check_dtype(op, "ids", ids, {DType::I32});
  cuda::check_dtype(op, "weights", weights, {DType::F32});
  const int64_t T = logits.rows(), E = logits.cols(), k = p.n_expert_used;
  if (k < 1 || k > E || k > cuda::kMaxK || !ids.has_shape({T, k}) || !weights.has_shape({T, k}))
    fail(ErrorCode::kInvalidArgument, "{}: logits {}, ids {}, weights {} do not fit k = {} (at most {})", op,
         logits.str(), ids.str(), weights.str(), k, cuda::kMaxK);
  if (!p.bias.empty()) {
    cuda::check_dtype(op, "bias", p.bias, {DType::F32});
    if (p.bias.numel() != E) fail(ErrorCode::kInvalidArgument, "{}: bias {} must be [{}]", op, p.bias.str(), E);
  }
  const bool hash = !tid2eid.empty();
  if (hash) {
    cuda::check_dtype(op, "tid2eid", tid2eid, {DType::I32});
    cuda::check_dtype(op, "tokens", tokens, {DType::I32});
    if (tid2eid.ndim != 2 || tid2eid.dim(1) != k || tokens.numel() != T)
      fail(ErrorCode::kInvalidArgument, "{}: tid2eid {} must be [V, {}] and tokens {} [{}]", op, tid2eid.str(), k,
           tokens.str(), T);
  }
  if (T == 0) return;
  const int64_t n_tok = T;  // (T names the element type inside FT_DISPATCH_ACT)
  const int64_t warps = std::min<int64_t>(4, std::max<int64_t>(1, (48 << 10) / (E * 4)));
  if (!hash && E * 4 > (48 << 10))
    fail(ErrorCode::kInvalidArgument, "{}: {} experts do not fit one warp's shared scores (at most {})", op, E,
         (48 << 10) / 4);
  const size_t smem = hash ? 0 : static_cast<size_t>(warps * E * 4);
  FT_DISPATCH_ACT(op, "logits", logits.dtype, {
    cuda::route_kernel<T><<<cuda::grid_1d(n_tok, warps), static_cast<unsigned>(warps * 32), smem, stream_>>>(
        logits.ptr<T>(), p.bias.empty() ? nullptr : p.bias.ptr<float>(), hash ? tokens.ptr<int32_t>() : nullptr,
        hash ? tid2eid.ptr<int32_t>() : nullptr, hash ? tid2eid.dim(0) : 0, ids.ptr<int32_t>(), weights.ptr<float>(),
        n_tok, E, static_cast<int>(k), p.norm_topk_prob, p.scaling);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
