#pragma once
// Block-wide top-k selection shared by topk.cu and moe_route.cu: k rounds, each a block argmax
// over the entries ranked strictly after the previous pick in the order (value descending, NaN
// last, ties to the lower index). O(k * C) reads per row; meant for k up to a few dozen.
#include <climits>

#include "backend/cuda/common.cuh"

namespace ft::cuda {

/** True when (va, ia) ranks before (vb, ib): larger value first, NaN last, ties to the lower index. */
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib) {
  const bool na = isnan(va), nb = isnan(vb);
  if (na != nb) return nb;
  if (!na && va != vb) return va > vb;
  return ia < ib;
}

/** Picks the k best of get(0..C-1) across the calling block (blockDim.x a multiple of 32). Thread 0
 *  calls emit(j, index, value) for rank j = 0..k-1 in order. All threads must call. */
template <typename Get, typename Emit>
__device__ void block_topk(Get get, int C, int k, Emit emit) {
  __shared__ float red_v[32];
  __shared__ int red_i[32];
  __shared__ float last_v;
  __shared__ int last_i;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int j = 0; j < k; ++j) {
    float bv = 0.0f;
    int bi = -1;
    const float lv = j > 0 ? last_v : 0.0f;
    const int li = j > 0 ? last_i : -1;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      const float v = get(c);
      if (j > 0 && !ranks_before(lv, li, v, c)) continue;
      if (bi < 0 || ranks_before(v, c, bv, bi)) bv = v, bi = c;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (oi >= 0 && (bi < 0 || ranks_before(ov, oi, bv, bi))) bv = ov, bi = oi;
    }
    __syncthreads();  // previous round's readers of red_*/last_* are done
    if (lane == 0) red_v[warp] = bv, red_i[warp] = bi;
    __syncthreads();
    if (warp == 0) {
      bv = lane < n_warps ? red_v[lane] : 0.0f;
      bi = lane < n_warps ? red_i[lane] : -1;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (oi >= 0 && (bi < 0 || ranks_before(ov, oi, bv, bi))) bv = ov, bi = oi;
      }
      if (lane == 0) {
        last_v = bv, last_i = bi;
        emit(j, bi, bv);
      }
    }
    __syncthreads();
  }
}

}  // namespace ft::cuda
