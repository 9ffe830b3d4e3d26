#pragma once
// One token's routing by one warp, for up to 32 * kWarpRouteMax experts (moe_route.cu, moe_router.cu):
// lane l keeps the scores of experts l, l + 32, ... in registers; softmax over all E (or sigmoid);
// selection scores = scores + bias (when given); with groups (DeepSeek-V3's group-limited routing,
// transformers' DeepseekV3TopkRouter: a group's score is the sum of its two best selection scores,
// the topk_group best groups are kept, ties to the lower group) the experts of other groups are
// ineligible; top-k of the selection scores as k rounds of a warp argmax (ties to the lower id); the
// weights are the selected experts' unbiased scores, optionally renormalised, then scaled. A row with a
// NaN or inf logit routes to experts 0..k-1 with zero weight (as the CPU backend).
// No block barriers, so it runs inside any kernel whose warp has the row's logits.
#include <climits>

#include "backend/cuda/common.cuh"
#include "backend/ops.h"

namespace ft::cuda {

constexpr int kWarpRouteMax = 8;
/** Most groups route_warp takes (one per lane); more go to moe_route's block kernel. */
constexpr int kWarpRouteMaxGroups = 32;

/** RouterParams as a kernel reads them (plain data, passed by value). */
struct RouteArgs {
  int E = 0, k = 0;
  bool sigmoid = false, norm = false;
  float scaling = 1.0f;
  const float* bias = nullptr;  // F32 [E] on the device, or null
  int n_group = 1;              // <= 1: no groups; else E % n_group == 0, E / n_group >= 2
  int topk_group = 1;           // in [1, n_group]; k <= topk_group * E / n_group (op_checks::router)
};

/** p checked against E experts (op_checks::router; bias F32 on the device) as a kernel reads it. Throws
 *  ft::Error naming `op` (moe_route.cu). */
RouteArgs route_args(const char* op, const RouterParams& p, int64_t E);

/** The argmax step of a warp over (value, id) pairs carrying a payload w: larger value first, ties to
 *  the lower id (an id of INT_MAX: no candidate). Every lane ends with the winner. */
__device__ __forceinline__ void warp_argmax(float& best, int& idx, float& w) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ob = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
    const float ow = __shfl_xor_sync(0xffffffffu, w, o);
    if (ob > best || (ob == best && oi < idx)) best = ob, idx = oi, w = ow;
  }
}

/** `logit(e)` reads expert e's logit (e < r.E <= 256; r.n_group <= kWarpRouteMaxGroups). Writes ids[0..k),
 *  weights[0..k) from lane 0. */
template <typename Logit>
__device__ __forceinline__ void route_warp(Logit logit, const RouteArgs& r, int32_t* ids, float* weights) {
  const int lane = threadIdx.x & 31, E = r.E;
  float s[kWarpRouteMax];  // scores
  float mx = -INFINITY;
  bool bad = false;
#pragma unroll
  for (int u = 0; u < kWarpRouteMax; ++u) {
    const int e = lane + 32 * u;
    s[u] = e < E ? logit(e) : -INFINITY;
    bad = bad || (e < E && !isfinite(s[u]));
    mx = fmaxf(mx, s[u]);
  }
  if (__any_sync(0xffffffffu, bad)) {  // a diverged token: valid, distinct ids with zero weight
    if (lane == 0)
      for (int j = 0; j < r.k; ++j) ids[j] = j, weights[j] = 0.0f;
    return;
  }
  if (r.sigmoid) {
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
  float c[kWarpRouteMax];  // selection scores
  unsigned taken = 0;      // bit u: expert lane + 32 u is absent, ineligible or already picked
#pragma unroll
  for (int u = 0; u < kWarpRouteMax; ++u) {
    const int e = lane + 32 * u;
    c[u] = e < E && r.bias ? s[u] + r.bias[e] : s[u];
    if (e >= E) taken |= 1u << u;
  }
  if (r.n_group > 1) {
    const int per = E / r.n_group;
    int grp[kWarpRouteMax];
#pragma unroll
    for (int u = 0; u < kWarpRouteMax; ++u) grp[u] = (lane + 32 * u) / per;
    float gs = -INFINITY;  // lane g < n_group: group g's score
    for (int g = 0; g < r.n_group; ++g) {
      float a = -INFINITY, b = -INFINITY;  // the lane's two best of group g, then the warp's
#pragma unroll
      for (int u = 0; u < kWarpRouteMax; ++u) {
        if ((taken >> u & 1u) || grp[u] != g) continue;
        if (c[u] > a) b = a, a = c[u];
        else if (c[u] > b) b = c[u];
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(0xffffffffu, a, o), ob = __shfl_xor_sync(0xffffffffu, b, o);
        const float hi = fmaxf(a, oa), lo = fmaxf(fminf(a, oa), fmaxf(b, ob));
        a = hi, b = lo;
      }
      if (lane == g) gs = a + b;
    }
    unsigned kept = 0;  // bit g: group g kept (warp-uniform)
    for (int j = 0; j < r.topk_group; ++j) {
      const bool cand = lane < r.n_group && !(kept >> lane & 1u);
      float best = cand ? gs : -INFINITY, unused = 0.0f;
      int idx = cand ? lane : INT_MAX;
      warp_argmax(best, idx, unused);
      if (idx != INT_MAX) kept |= 1u << idx;
    }
#pragma unroll
    for (int u = 0; u < kWarpRouteMax; ++u)
      if (!(taken >> u & 1u) && !(kept >> grp[u] & 1u)) taken |= 1u << u;
  }
  float sel = 0.0f;
  for (int j = 0; j < r.k; ++j) {
    float best = -INFINITY, w = 0.0f;
    int idx = INT_MAX;
#pragma unroll
    for (int u = 0; u < kWarpRouteMax; ++u) {
      if (!(taken >> u & 1u) && (c[u] > best || idx == INT_MAX)) best = c[u], w = s[u], idx = lane + 32 * u;
    }
    warp_argmax(best, idx, w);
    if (idx != INT_MAX && (idx & 31) == lane) taken |= 1u << (idx >> 5);
    if (lane == 0) ids[j] = idx, weights[j] = w;
    sel += w;
  }
  if (lane == 0) {
    const float f = r.norm && sel > 0.0f ? r.scaling / sel : r.scaling;
    for (int j = 0; j < r.k; ++j) weights[j] *= f;
  }
}

}  // namespace ft::cuda
