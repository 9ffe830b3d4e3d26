#pragma once
// Internal helpers of the CUDA backend shared by the op files: error checking of CUDA/cuBLAS
// calls, bf16 <-> float element access, warp reductions, and the dtype -> template dispatch
// for activation tensors (F32 or BF16). Only included from src/backend/cuda/*.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/checks.h"
#include "backend/cuda/cuda_check.h"
#include "util/error.h"

namespace ft::cuda {

using bf16 = __nv_bfloat16;

// ---- element access -------------------------------------------------------------------------

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(bf16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_f(float v);
template <>
__device__ __forceinline__ float from_f<float>(float v) { return v; }
template <>
__device__ __forceinline__ bf16 from_f<bf16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

/** Element i of an F32/F16/BF16 array whose dtype is only known at run time (uniform branch). */
__device__ __forceinline__ float load_any(const void* p, int dtype_code, int64_t i) {
  if (dtype_code == 0) return static_cast<const float*>(p)[i];
  if (dtype_code == 1) return __half2float(static_cast<const __half*>(p)[i]);
  return __bfloat162float(static_cast<const bf16*>(p)[i]);
}

// ---- vector loads of activations ------------------------------------------------------------

/** Loads N (2, 4, 8, 16 or 32) bf16 activations at p (aligned to min(16, 2N) bytes) as floats. */
template <int N>
__device__ __forceinline__ void load_x(const bf16* p, float* v) {
  if constexpr (N == 2) {
    const uint32_t u = __ldg(reinterpret_cast<const unsigned int*>(p));
    v[0] = __uint_as_float(u << 16), v[1] = __uint_as_float(u & 0xffff0000u);
  } else if constexpr (N % 8 == 0) {
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

/** Loads N (2, or a multiple of 4) f32 activations at p (aligned to 8 or 16 bytes). */
template <int N>
__device__ __forceinline__ void load_x(const float* p, float* v) {
  static_assert(N == 2 || N % 4 == 0, "load_x: N must be 2 or a multiple of 4");
  if constexpr (N == 2) {
    const float2 f = __ldg(reinterpret_cast<const float2*>(p));
    v[0] = f.x, v[1] = f.y;
  } else {
#pragma unroll
    for (int i = 0; i < N / 4; ++i) {
      const float4 f = __ldg(reinterpret_cast<const float4*>(p) + i);
      v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
  }
}

/** Activation row `r` element offset `off` of a BF16 or F32 activation matrix, as floats. */
template <int N>
__device__ __forceinline__ void load_x_any(const void* x, bool f32, int64_t off, float* v) {
  if (f32) load_x<N>(static_cast<const float*>(x) + off, v);
  else load_x<N>(static_cast<const bf16*>(x) + off, v);
}

// ---- reductions -----------------------------------------------------------------------------

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/** warp_sum of N independent values at once: each takes warp_sum's butterfly (so each result is
 *  warp_sum's bit for bit), with the N shuffles of a level in flight together. */
template <int N>
__device__ __forceinline__ void warp_sum_n(float (&v)[N]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/** Sum over a block of blockDim.x (a multiple of 32, <= 1024) threads; every thread gets the total.
 *  `red` is 32 floats of shared memory; the call contains __syncthreads(). */
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // red may still be read by a previous call
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float block_max(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : -INFINITY;
  return warp_max(v);
}

__device__ __forceinline__ float silu(float g) { return g / (1.0f + __expf(-g)); }

inline unsigned grid_1d(int64_t n, int threads, int64_t cap = 65535LL * 32) {
  int64_t b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < cap ? b : cap);
}

}  // namespace ft::cuda

/** Calls the body with the type alias `Name` bound to float or bf16 for dtype F32 or BF16; other
 *  dtypes throw kUnsupported naming op and arg. Through the two forms below. */
#define FT_DISPATCH_FLOAT_(Name, op, arg, dtype, ...)                                           \
  do {                                                                                          \
    if ((dtype) == ::ft::DType::F32) {                                                          \
      using Name = float;                                                                       \
      __VA_ARGS__;                                                                              \
    } else if ((dtype) == ::ft::DType::BF16) {                                                  \
      using Name = ::ft::cuda::bf16;                                                            \
      __VA_ARGS__;                                                                              \
    } else {                                                                                    \
      ::ft::fail(::ft::ErrorCode::kUnsupported, "{}: {} has dtype {}; the CUDA backend computes in F32 or BF16", \
                 op, arg, ::ft::dtype_name(dtype));                                             \
    }                                                                                           \
  } while (0)

/** Calls `body` with `T` bound to float or bf16 for an activation dtype; other dtypes throw
 *  kUnsupported naming op and arg. Use: FT_DISPATCH_ACT(op, "x", x.dtype, { kernel<T><<<..>>>(..); }) */
#define FT_DISPATCH_ACT(op, arg, dtype, ...) FT_DISPATCH_FLOAT_(T, op, arg, dtype, __VA_ARGS__)

/** As FT_DISPATCH_ACT for a second element type, P: KV pages whose dtype may differ from the
 *  activations' (F32 or BF16 either way). */
#define FT_DISPATCH_PAGE(op, arg, dtype, ...) FT_DISPATCH_FLOAT_(P, op, arg, dtype, __VA_ARGS__)
