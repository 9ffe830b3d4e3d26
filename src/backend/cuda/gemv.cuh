#pragma once
// GEMV / small-batch GEMM that decodes weights in registers: y[t, n] = sum_k x[t, k] * W[n, k] for
// up to MAXT tokens per weight pass, W in any cuda_weight_type (dequant.cuh). One warp per output
// row n; its lanes stride over the row's chunks (kChunk elements: one 16-byte load for float
// weights, one 32-element sub-block for block types), decode the chunk, and FMA it against the
// matching bf16 activations of every token; a warp shuffle reduction finishes the row.
// Bytes moved per problem: N * row_bytes of weights (read once per MAXT tokens) + x rows (cached)
// + N * MAXT outputs. Included by the per-type-family instantiation files gemv_*.cu only.
#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/launch.h"

namespace ft::cuda {

constexpr int kGemvWarps = 4;  // output rows per block

/** Loads N (4, 8, 16 or 32) bf16 activations at p (aligned to min(16, 2N) bytes) as floats. */
template <int N>
__device__ __forceinline__ void load_x(const bf16* p, float* v) {
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(p) + i);
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[8 * i + 2 * k] = __uint_as_float(w[k] << 16);
        v[8 * i + 2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
      }
    }
  } else {
    static_assert(N == 4, "load_x: N must be 4 or a multiple of 8");
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    v[0] = __uint_as_float(u.x << 16), v[1] = __uint_as_float(u.x & 0xffff0000u);
    v[2] = __uint_as_float(u.y << 16), v[3] = __uint_as_float(u.y & 0xffff0000u);
  }
}

/** Loads N (multiple of 4) f32 activations at p (16-byte aligned). */
template <int N>
__device__ __forceinline__ void load_x(const float* p, float* v) {
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const float4 f = __ldg(reinterpret_cast<const float4*>(p) + i);
    v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
  }
}

/** Activation row `r` element offset `off` of a BF16 or F32 activation matrix, as floats. */
template <int N>
__device__ __forceinline__ void load_x_any(const void* x, bool f32, int64_t off, float* v) {
  if (f32) load_x<N>(static_cast<const float*>(x) + off, v);
  else load_x<N>(static_cast<const bf16*>(x) + off, v);
}

/** Shared GEMV epilogue (float and dp4a kernels): warp-reduces each token's partial dot products,
 *  then lane 0 adds the bias (or applies silu(gate) * up for GLU pairs) and stores row n of tokens
 *  yrow .. yrow + nt - 1 in y's dtype (F32 or BF16). */
template <int MAXT, bool GLU>
__device__ __forceinline__ void gemv_epilogue(const GemvArgs& a, float (&acc)[MAXT], float* accb, int nt,
                                              int64_t yrow, int64_t n, int lane) {
#pragma unroll
  for (int t = 0; t < MAXT; ++t) {
    acc[t] = warp_sum(acc[t]);
    if constexpr (GLU) accb[t] = warp_sum(accb[t]);
  }
  if (lane != 0) return;
  const float b = a.bias ? load_any(a.bias, a.bias_code, n) : 0.0f;
#pragma unroll
  for (int t = 0; t < MAXT; ++t) {
    if (t < nt) {
      float v = acc[t] + b;
      if constexpr (GLU) v = silu(acc[t]) * accb[t];
      const int64_t o = (yrow + t) * a.ldy + n;
      if (a.y_f32) static_cast<float*>(a.y)[o] = v;
      else static_cast<bf16*>(a.y)[o] = __float2bfloat16_rn(v);
    }
  }
}

template <DType WT, int MAXT, bool GLU>
__global__ void __launch_bounds__(kGemvWarps * 32) gemv_kernel(GemvArgs a, int64_t n_problems) {
  using D = Dq<WT>;
  constexpr int C = D::kChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kGemvWarps + warp;
  if (n >= a.N) return;  // whole warp leaves; no block-wide barrier below
  const int64_t n_chunks = a.K / C;
  for (int64_t p = blockIdx.y; p < n_problems; p += gridDim.y) {
    const uint8_t* wa;
    const uint8_t* wb = nullptr;
    int64_t xoff;  // element offset of the problem's first activation row
    int nt;
    int64_t yrow;
    if (a.table) {
      const int32_t e = a.ids[p];
      if (e < 0 || e >= a.n_expert) continue;
      wa = reinterpret_cast<const uint8_t*>(a.table[3 * static_cast<int64_t>(e) + a.col_a]);
      if constexpr (GLU) wb = reinterpret_cast<const uint8_t*>(a.table[3 * static_cast<int64_t>(e) + a.col_b]);
      xoff = (p / a.x_div) * a.ldx;
      nt = 1;
      yrow = p;
    } else {
      wa = a.w;
      yrow = p * MAXT;
      xoff = yrow * a.ldx;
      nt = static_cast<int>(min(static_cast<int64_t>(MAXT), a.T - yrow));
    }
    const uint8_t* ra = wa + n * a.row_bytes;
    const uint8_t* rb = GLU ? wb + n * a.row_bytes : nullptr;
    float acc[MAXT], accb[GLU ? MAXT : 1];
#pragma unroll
    for (int t = 0; t < MAXT; ++t) acc[t] = 0.0f;
#pragma unroll
    for (int t = 0; t < (GLU ? MAXT : 1); ++t) accb[t] = 0.0f;
#pragma unroll 2
    for (int64_t c = lane; c < n_chunks; c += 32) {
      float w[C], w2[GLU ? C : 1];
      D::load(ra, c, w);
      if constexpr (GLU) D::load(rb, c, w2);
#pragma unroll
      for (int t = 0; t < MAXT; ++t) {
        if (t < nt) {
          float xv[C];
          load_x_any<C>(a.x, a.x_f32, xoff + t * a.ldx + c * C, xv);
#pragma unroll
          for (int i = 0; i < C; ++i) {
            acc[t] = fmaf(w[i], xv[i], acc[t]);
            if constexpr (GLU) accb[t] = fmaf(w2[i], xv[i], accb[t]);
          }
        }
      }
    }
    gemv_epilogue<MAXT, GLU>(a, acc, accb, nt, yrow, n, lane);
  }
}

/** Host launcher for one weight type; explicit instantiations live in gemv_<family>.cu. */
template <DType WT>
void launch_gemv_t(int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((a.N + kGemvWarps - 1) / kGemvWarps),
                  static_cast<unsigned>(n_problems < 65535 ? n_problems : 65535));
  if (glu) gemv_kernel<WT, 1, true><<<grid, kGemvWarps * 32, 0, s>>>(a, n_problems);
  else if (maxt == 1) gemv_kernel<WT, 1, false><<<grid, kGemvWarps * 32, 0, s>>>(a, n_problems);
  else gemv_kernel<WT, 8, false><<<grid, kGemvWarps * 32, 0, s>>>(a, n_problems);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
