// moe_router: a MoE layer's router in one launch for small batches (decode): logits = x w^T + bias, the
// routing of moe_route (softmax/sigmoid, selection bias, group-limited top-k: route_warp.cuh), and the
// padding mask of moe_mask_rows. x [T, H] and
// logits [T, E] F32 or BF16 (one dtype), w [E, H] F32 or BF16, bias [E] F32/F16/BF16 or empty (the
// router's logit bias, gpt-oss; added to the block's fp32 sum before the logit is stored, as matmul adds
// it), ids I32 [T, k], weights F32 [T, k], n_valid I32 [1] or empty. Block (e, t) computes logit (t, e) with 4 warps over H (fp32, fixed order);
// the block that finishes token t's last logit (a per-token counter it resets, the "last block"
// pattern of the CUDA threadFenceReduction sample) routes the token with one warp (route_warp.cuh).
// Other shapes (more than 16 tokens, 256 experts or 32 groups) take Ops' default: matmul, moe_route,
// moe_mask_rows. Throws kInvalidArgument as moe_route does (op_checks::router). The kernel also writes x's int8
// form for the expert GEMVs (CudaOps::prepare_q8), from warps 1-3 after their logit, off the routing
// block's path: the experts' quantize launch is then skipped.
// Bytes moved: E * H weights + T * H activations + T * E logits written and read once.
#include "backend/cuda/checks.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/q8_act.cuh"
#include "backend/cuda/route_warp.cuh"

namespace ft {
namespace cuda {
namespace {

constexpr int kRouterThreads = 128;
constexpr int64_t kRouterMaxTokens = 16;  // larger batches: the GEMV and route kernels (more blocks each)

template <bool WF32, bool XF32>
__global__ void __launch_bounds__(kRouterThreads)
    moe_router_kernel(const void* x, const void* w, const void* bias, int bias_code, int64_t H, void* logits,
                      RouteArgs r, const int32_t* n_valid, int32_t* ids, float* weights, int* done, int8_t* q8) {
  __shared__ float red[kRouterThreads / 32];
  __shared__ int is_last;
  const int e = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, E = r.E, k = r.k;
  const int64_t t = blockIdx.y;
  const bool masked = n_valid && t >= max(0, *n_valid);  // batch info the host wrote before the step
  // The first kPre chunks of the weight row are loaded before the PDL wait (the weights are constant),
  // the rest in the loop; the sum runs over chunks c = threadIdx.x, + 128, ... in order either way.
  constexpr int kPre = 2;
  float wpre[kPre][8];
#pragma unroll
  for (int u = 0; u < kPre; ++u) {
    const int64_t c = threadIdx.x + u * kRouterThreads;
    // the router's F32/BF16 weights load as activations do
    if (c < H / 8) load_x_any<8>(w, WF32, e * H + c * 8, wpre[u]);
  }
  pdl_enter();
  float acc = 0.0f;
#pragma unroll
  for (int u = 0; u < kPre; ++u) {
    const int64_t c = threadIdx.x + u * kRouterThreads;
    if (c >= H / 8) break;
    float xv[8];
    load_x_any<8>(x, XF32, t * H + c * 8, xv);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(wpre[u][i], xv[i], acc);
  }
  for (int64_t c = threadIdx.x + kPre * kRouterThreads; c < H / 8; c += kRouterThreads) {
    float wv[8], xv[8];
    load_x_any<8>(w, WF32, e * H + c * 8, wv);
    load_x_any<8>(x, XF32, t * H + c * 8, xv);
#pragma unroll
    for (int i = 0; i < 8; ++i) acc = fmaf(wv[i], xv[i], acc);
  }
  acc = warp_sum(acc);
  if (lane == 0) red[warp] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    const float v = (red[0] + red[1]) + (red[2] + red[3]) + (bias ? load_any(bias, bias_code, e) : 0.0f);
    if constexpr (XF32) static_cast<float*>(logits)[t * E + e] = v;
    else static_cast<bf16*>(logits)[t * E + e] = __float2bfloat16_rn(v);
    __threadfence();  // the logit is visible device-wide before it is counted
    is_last = atomicAdd(done + t, 1) == E - 1;
  }
  __syncthreads();
  if (q8 && warp > 0) {  // x's int8 form: chunk c of token t by warp (c / E) % 3 + 1 of block c % E
    const Q8Layout lay(gridDim.y, H);
    for (int64_t c = e + (warp - 1) * static_cast<int64_t>(E); c < H / 32; c += 3 * static_cast<int64_t>(E)) {
      const int64_t i = t * H + c * 32 + lane;
      quantize_q8_lane(XF32 ? static_cast<const float*>(x)[i] : __bfloat162float(static_cast<const bf16*>(x)[i]), q8,
                       lay, i, t * (H / 32) + c);
    }
  }
  if (!is_last || warp != 0) return;
  __threadfence();
  route_warp(
      [&](int j) {
        if constexpr (XF32) return __ldcg(static_cast<const float*>(logits) + t * E + j);
        else return __uint_as_float(static_cast<uint32_t>(__ldcg(static_cast<const unsigned short*>(logits) + t * E + j)) << 16);
      },
      r, ids + t * k, weights + t * k);
  if (lane == 0) {
    if (masked)
      for (int j = 0; j < k; ++j) ids[t * k + j] = -1;  // graph padding: routed nowhere
    done[t] = 0;  // ready for the next launch (graph replays included)
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::moe_router(const RouterParams& p, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor logits,
                         Tensor ids, Tensor weights, const Tensor& n_valid, ActQ8* x_q8) {
  const int64_t T = x.rows(), H = x.cols(), E = w.rows();
  const bool fits = T >= 1 && T <= cuda::kRouterMaxTokens && E >= 1 && E <= 32 * cuda::kWarpRouteMax && H % 8 == 0 &&
                    p.n_group <= cuda::kWarpRouteMaxGroups &&
                    (x.dtype == DType::F32 || x.dtype == DType::BF16) && (w.dtype == DType::F32 || w.dtype == DType::BF16) &&
                    logits.dtype == x.dtype && x.device == Device::kCuda && w.device == Device::kCuda &&
                    w.ndim == 2 && w.cols() == H && logits.rows() == T && logits.cols() == E &&
                    reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
  if (!fits) return Ops::moe_router(p, x, w, bias, logits, ids, weights, n_valid, x_q8);
  cuda::check_act("moe_router", "x", x);
  cuda::check_act("moe_router", "logits", logits);
  cuda::check_dtype("moe_router", "ids", ids, {DType::I32});
  cuda::check_dtype("moe_router", "weights", weights, {DType::F32});
  const int32_t k = p.n_expert_used;
  if (k < 1 || k > E)
    fail(ErrorCode::kInvalidArgument, "moe_router: n_expert_used {} must be in [1, {}] (experts in {})", k, E, w.str());
  if (ids.rows() != T || ids.cols() != k || weights.rows() != T || weights.cols() != k)
    fail(ErrorCode::kInvalidArgument, "moe_router: ids {} and weights {} must be [{}, {}]", ids.str(), weights.str(), T,
         k);
  if (!n_valid.empty()) {
    cuda::check_dtype("moe_router", "n_valid", n_valid, {DType::I32});
    if (n_valid.numel() != 1)
      fail(ErrorCode::kInvalidArgument, "moe_router: n_valid {} must hold one count", n_valid.str());
  }
  const cuda::RouteArgs r = cuda::route_args("moe_router", p, E);
  int bias_code = 0;
  if (!bias.empty()) {
    cuda::check_dev("moe_router", "bias", bias);
    bias_code = cuda::float_code("moe_router", "bias", bias.dtype);
    if (bias.numel() != E)
      fail(ErrorCode::kInvalidArgument, "moe_router: bias {} must have E = {} entries (experts in {})", bias.str(), E,
           w.str());
  }
  int* done = static_cast<int*>(zeroed_scratch(Scratch::kRouterDone, T * 4));
  const dim3 grid(static_cast<unsigned>(E), static_cast<unsigned>(T));
  const bool wf = w.dtype == DType::F32, xf = x.dtype == DType::F32;
  const int32_t* nv = n_valid.empty() ? nullptr : n_valid.ptr<int32_t>();
  // The kernel reads x whole: it also writes x's int8 form for the expert GEMV (prepare_q8, into the
  // caller's handle), unless x's producer (add_rms_norm) did and handed it in.
  auto* q8 = handed_q8(x_q8, x.data, x.dtype, T, H) ? nullptr : static_cast<int8_t*>(prepare_q8(x, x_q8));
  auto go = [&](auto kernel) {
    cuda::launch_pdl(kernel, grid, cuda::kRouterThreads, 0, stream_, x.data, w.data,
                     bias.empty() ? nullptr : bias.data, bias_code, H, logits.data, r, nv,
                     ids.ptr<int32_t>(), weights.ptr<float>(), done, q8);
  };
  if (wf && xf) go(cuda::moe_router_kernel<true, true>);
  else if (wf) go(cuda::moe_router_kernel<true, false>);
  else if (xf) go(cuda::moe_router_kernel<false, true>);
  else go(cuda::moe_router_kernel<false, false>);
}

}  // namespace ft
