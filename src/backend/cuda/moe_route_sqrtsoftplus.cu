// moe_route_sqrtsoftplus: DeepSeek-V4's router (ops.h): scores sqrt(softplus(logits)), experts from
// the hash table tid2eid[token] or the k best of score + bias (ties to the lower id), weights the
// scores renormalised and scaled. One thread per token (k <= 32; selection by k scans over E).
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

template <typename T>
__global__ void route_kernel(const T* logits, const float* bias, const int32_t* tokens, const int32_t* tid2eid,
                             int64_t V, int32_t* ids, float* weights, int64_t n_tok, int64_t E, int k, bool norm,
                             float scaling) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= n_tok) return;
  const T* l = logits + t * E;
  int32_t* id = ids + t * k;
  if (tid2eid) {
    int32_t tok = tokens[t];
    tok = tok < 0 ? 0 : (tok >= V ? static_cast<int32_t>(V - 1) : tok);  // validated on the host side of the model
    for (int j = 0; j < k; ++j) id[j] = tid2eid[static_cast<int64_t>(tok) * k + j];
  } else {
    for (int j = 0; j < k; ++j) {
      float best = -INFINITY;
      int32_t arg = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int i = 0; i < j; ++i) taken = taken || id[i] == e;
        if (taken) continue;
        const float v = sqrt_softplus(l, e) + (bias ? bias[e] : 0.0f);
        if (arg < 0 || v > best) best = v, arg = static_cast<int32_t>(e);
      }
      id[j] = arg;
    }
  }
  float w[kMaxK], sum = 0.0f;
  for (int j = 0; j < k; ++j) sum += (w[j] = sqrt_softplus(l, id[j]));
  for (int j = 0; j < k; ++j) weights[t * k + j] = (norm ? w[j] / (sum + 1e-20f) : w[j]) * scaling;
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
  FT_DISPATCH_ACT(op, "logits", logits.dtype, {
    cuda::route_kernel<T><<<cuda::grid_1d(n_tok, 128), 128, 0, stream_>>>(
        logits.ptr<T>(), p.bias.empty() ? nullptr : p.bias.ptr<float>(), hash ? tokens.ptr<int32_t>() : nullptr,
        hash ? tid2eid.ptr<int32_t>() : nullptr, hash ? tid2eid.dim(0) : 0, ids.ptr<int32_t>(), weights.ptr<float>(),
        n_tok, E, static_cast<int>(k), p.norm_topk_prob, p.scaling);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
