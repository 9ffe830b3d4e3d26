#pragma once
// One token's routing by one warp, for up to 32 * kWarpRouteMax experts (moe_route.cu, moe_router.cu):
// lane l keeps the scores of experts l, l + 32, ... in registers; softmax over all E (or sigmoid);
// top-k as k rounds of a warp argmax (ties to the lower id); optional renormalisation, then scaling.
// No block barriers, so it runs inside any kernel whose warp has the row's logits.
#include <climits>

#include "backend/cuda/common.cuh"

namespace ft::cuda {

constexpr int kWarpRouteMax = 8;

/** `logit(e)` reads expert e's logit (e < E <= 256). Writes ids[0..k), weights[0..k) from lane 0. */
template <typename Logit>
__device__ __forceinline__ void route_warp(Logit logit, int E, int k, bool sigmoid, bool norm, float scaling,
                                           int32_t* ids, float* weights) {
  const int lane = threadIdx.x & 31;
  float s[kWarpRouteMax];
  float mx = -INFINITY;
#pragma unroll
  for (int u = 0; u < kWarpRouteMax; ++u) {
    const int e = lane + 32 * u;
    s[u] = e < E ? logit(e) : -INFINITY;
    mx = fmaxf(mx, s[u]);
  }
  if (sigmoid) {
#pragma unroll
    for (int u = 0; u < kWarpRouteMax; ++u) s[u] = lane + 32 * u < E ? 1.0f / (1.0f + expf(-s[u])) : -INFINITY;
  } else {
    mx = warp_max(mx);
    float sum = 0.0f;
#pragma unroll
    for (int u = 0; u < kWarpRouteMax; ++u) {
      s[u] = lane + 32 * u < E ? expf(s[u] - mx) : 0.0f;
      sum += s[u];
    }
    const float inv = 1.0f / warp_sum(sum);
#pragma unroll
    for (int u = 0; u < kWarpRouteMax; ++u) s[u] = lane + 32 * u < E ? s[u] * inv : -INFINITY;
  }
  unsigned taken = 0;
  float sel = 0.0f;
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY;
    int idx = INT_MAX;
#pragma unroll
    for (int u = 0; u < kWarpRouteMax; ++u) {
      const int e = lane + 32 * u;
      if (e < E && !(taken >> u & 1u) && (s[u] > best || idx == INT_MAX)) best = s[u], idx = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
      if (ob > best || (ob == best && oi < idx)) best = ob, idx = oi;
    }
    if (idx != INT_MAX && (idx & 31) == lane) taken |= 1u << (idx >> 5);
    if (lane == 0) ids[j] = idx, weights[j] = best;
    sel += best;
  }
  if (lane == 0) {
    const float f = norm && sel > 0.0f ? scaling / sel : scaling;
    for (int j = 0; j < k; ++j) weights[j] *= f;
  }
}

}  // namespace ft::cuda
