// head_matmul: one matmul per head, y[t, h N .. (h+1) N) = x[t, h K .. (h+1) K) w[h]^T (MLA's absorbed
// up-projections: W_UK into the query, W_UV after attention; DeepSeek-V2, arXiv:2405.04434, §2.1.2).
// x [T, H * K] F32 or BF16; w [H, N, K] F32, F16 or BF16; y [T, H * N] F32 or BF16 (must not alias x).
// Paths:
//  - up to 16 tokens (decode), or a weight/activation mix cuBLAS does not take: a per-head GEMV, grid
//    (N / (32 groups), H, ceil(T / tpb)); the block's tpb tokens' x slice of head h sits in shared memory
//    (fp32), each of its 16 warps reads 2 weight rows of each of its `groups` 32-row groups once (coalesced
//    4-element loads) for all those tokens (groups > 1 with several tokens: about 2 blocks an SM); exact fp32;
//    tpb = 16, or fewer for K above 3072 so the slice stays 16 x 3072 floats (DeepSeek-V4-Flash's grouped
//    output LoRA, K = 4096: 12); a token's sums do not depend on tpb; [W once per tpb tokens + x + y];
//  - more tokens, BF16 w: cuBLAS GemmStridedBatchedEx (batch = heads, lda K, ldb H K, batch strides
//    N K, K, N), bf16 inputs, fp32 compute [W + x + y, tensor cores]. F32 x is split into x_hi + x_lo,
//    both bf16 (x_hi = bf16(x), x_lo = bf16(x - x_hi): ~16 mantissa bits), and multiplied twice (the
//    second product added with beta = 1), so F32 activations keep ~1e-5 relative accuracy through MLA's
//    two extra products per layer [2 W + 3 x + 2 y]; F32 w with F32 x and y: SgemmStridedBatched (fp32).
//    Graph-capturable: cuBLAS uses the backend's fixed workspace.
// Throws kInvalidArgument for shapes (op_checks::head_matmul) or aliasing, kUnsupported for another
// weight dtype or K above 16 x 3072 on the GEMV path.
#include <algorithm>

#include "backend/op_checks.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/launch.h"
#include "backend/cuda/smem_opt_in.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kHmWarps = 16, kHmRowsPerWarp = 2, kHmTokens = 16;
constexpr int64_t kHmMaxK = 3072;  // the GEMV's x slice: 16 tokens x K floats of shared memory (fewer tokens above)

/** Four weights at element i of w (dtype code 0 F32, 1 F16, 2 BF16; i % 4 == 0, 16/8-byte aligned). */
__device__ __forceinline__ float4 load_w4(const void* w, int code, int64_t i) {
  if (code == 0) return __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(w) + i));
  const uint2 u = __ldg(reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(w) + i));
  if (code == 2)
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
  const __half2 a = *reinterpret_cast<const __half2*>(&u.x), b = *reinterpret_cast<const __half2*>(&u.y);
  const float2 fa = __half22float2(a), fb = __half22float2(b);
  return make_float4(fa.x, fa.y, fb.x, fb.y);
}

/** Block (row groups, head h, token group): for g < groups, rows n = 32 (groups blockIdx.x + g) + 2 warp +
 *  {0, 1} of w[h] for tokens tpb blockIdx.z .. + tpb - 1 (tpb <= 16), so the x slice a block stages serves
 *  32 groups rows. vec: K % 4 == 0 and w 16-byte aligned (4-element loads), else one element per lane. */
__global__ void __launch_bounds__(kHmWarps * 32) head_gemv_kernel(const void* x, bool x_f32, const void* w, int w_code,
                                                                 void* y, bool y_f32, int64_t T, int H, int64_t N,
                                                                 int64_t K, bool vec, int tpb, int groups) {
  extern __shared__ __align__(16) float xs[];  // [nt][K]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, h = blockIdx.y;
  const int64_t t0 = static_cast<int64_t>(blockIdx.z) * tpb;
  const int nt = static_cast<int>(min(static_cast<int64_t>(tpb), T - t0));
  for (int64_t i = threadIdx.x; i < nt * K; i += blockDim.x) {
    const int64_t t = i / K, k = i - t * K;
    xs[i] = load_any(x, x_f32 ? 0 : 2, (t0 + t) * H * K + h * K + k);
  }
  __syncthreads();
  for (int g = 0; g < groups; ++g)
#pragma unroll
  for (int rr = 0; rr < kHmRowsPerWarp; ++rr) {
    const int64_t n = ((static_cast<int64_t>(blockIdx.x) * groups + g) * kHmWarps + warp) * kHmRowsPerWarp + rr;
    if (n >= N) break;  // warp-uniform
    const int64_t wrow = (static_cast<int64_t>(h) * N + n) * K;
    float acc[kHmTokens];
#pragma unroll
    for (int t = 0; t < kHmTokens; ++t) acc[t] = 0.0f;
    if (vec) {
      for (int64_t k = lane * 4; k < K; k += 128) {
        const float4 wv = load_w4(w, w_code, wrow + k);
#pragma unroll
        for (int t = 0; t < kHmTokens; ++t) {
          if (t >= nt) break;
          const float4 xv = *reinterpret_cast<const float4*>(xs + t * K + k);
          acc[t] = fmaf(wv.x, xv.x, fmaf(wv.y, xv.y, fmaf(wv.z, xv.z, fmaf(wv.w, xv.w, acc[t]))));
        }
      }
    } else {
      for (int64_t k = lane; k < K; k += 32) {
        const float wv = load_any(w, w_code, wrow + k);
#pragma unroll
        for (int t = 0; t < kHmTokens; ++t) {
          if (t >= nt) break;
          acc[t] = fmaf(wv, xs[t * K + k], acc[t]);
        }
      }
    }
    float mine = 0.0f;  // lane t keeps token t's sum
#pragma unroll
    for (int t = 0; t < kHmTokens; ++t) {
      if (t >= nt) break;
      const float v = warp_sum(acc[t]);
      if (lane == t) mine = v;
    }
    if (lane < nt) {
      const int64_t i = (t0 + lane) * H * N + h * N + n;
      if (y_f32) static_cast<float*>(y)[i] = mine;
      else static_cast<bf16*>(y)[i] = __float2bfloat16_rn(mine);
    }
  }
}

/** hi[i] = bf16(x[i]), lo[i] = bf16(x[i] - hi[i]) for n F32 values. */
__global__ void split_bf16_kernel(const float* __restrict__ x, bf16* __restrict__ hi, bf16* __restrict__ lo, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const bf16 h = __float2bfloat16_rn(v);
    hi[i] = h;
    lo[i] = __float2bfloat16_rn(v - __bfloat162float(h));
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::head_matmul(const Tensor& x, const Tensor& w, Tensor y) {
  const char* op = "head_matmul";
  cuda::check_act(op, "x", x);
  cuda::check_act(op, "y", y);
  cuda::check_dtype(op, "w", w, {DType::F32, DType::F16, DType::BF16});
  op_checks::head_matmul(x, w, y);
  if (x.data == y.data) fail(ErrorCode::kInvalidArgument, "head_matmul: y must not alias x");
  const int64_t H = w.dim(0), N = w.dim(1), K = w.dim(2), T = x.rows();
  if (T == 0 || N == 0 || H == 0) return;
  const bool x_f32 = x.dtype == DType::F32, y_f32 = y.dtype == DType::F32;
  const bool blas_bf16 = w.dtype == DType::BF16;
  const bool blas_f32 = w.dtype == DType::F32 && x_f32 && y_f32;
  if (T > cuda::kHmTokens && (blas_bf16 || blas_f32) && K > 0) {
    const float alpha = 1.0f, beta = 0.0f;
    const int m = static_cast<int>(N), n = static_cast<int>(T), k = static_cast<int>(K);
    const int lda = k, ldb = static_cast<int>(H * K), ldc = static_cast<int>(H * N);
    if (blas_f32) {  // y_h^T [N, T] = W_h [N, K] x_h^T, column-major as matmul's gemm_bf16
      FT_CUBLAS_CHECK(cublasSgemmStridedBatched(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha,
                                                static_cast<const float*>(w.data), lda, N * K,
                                                static_cast<const float*>(x.data), ldb, K, &beta,
                                                static_cast<float*>(y.data), ldc, N, static_cast<int>(H)));
      return;
    }
    auto gemm = [&](const void* xb, const float* b) {
      FT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w.data,
                                                 CUDA_R_16BF, lda, N * K, xb, CUDA_R_16BF, ldb, K, b, y.data,
                                                 y_f32 ? CUDA_R_32F : CUDA_R_16BF, ldc, N, static_cast<int>(H),
                                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    };
    if (!x_f32) return gemm(x.data, &beta);
    const int64_t n_x = T * H * K;  // cuBLAS multiplies bf16 by bf16: x = x_hi + x_lo, two products
    auto* hi = static_cast<cuda::bf16*>(scratch(Scratch::kXConvert, n_x * 4));
    cuda::split_bf16_kernel<<<cuda::grid_1d(n_x, 256), 256, 0, stream_>>>(x.ptr<float>(), hi, hi + n_x, n_x);
    FT_CUDA_LAUNCH_CHECK();
    const float one = 1.0f;
    gemm(hi, &beta);
    gemm(hi + n_x, &one);
    return;
  }
  if (K > cuda::kHmTokens * cuda::kHmMaxK)
    fail(ErrorCode::kUnsupported, "head_matmul: K = {} of w {} (the CUDA GEMV takes up to {}; more with BF16 w and "
         "over 16 tokens)", K, w.str(), cuda::kHmTokens * cuda::kHmMaxK);
  // tokens a block: the x slice within 16 x kHmMaxK floats
  const int tpb = static_cast<int>(std::min<int64_t>(cuda::kHmTokens, cuda::kHmTokens * cuda::kHmMaxK / K));
  const bool vec = K % 4 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
  const int64_t rows_per_group = cuda::kHmWarps * cuda::kHmRowsPerWarp;
  const int64_t row_groups = (N + rows_per_group - 1) / rows_per_group, token_groups = (T + tpb - 1) / tpb;
  // Several tokens: a block's staged x slice (up to 16 x 3072 floats) serves more row groups, so about two
  // blocks an SM read it (DeepSeek-V4-Flash's output LoRA at 16 tokens: 8 groups of 1024 rows, K 4096,
  // before, each block of 8 rows staged its own: ~400 MB of x a call).
  const int64_t per_group_blocks = row_groups * H * token_groups;
  const int groups = T > 1 ? static_cast<int>(std::clamp<int64_t>(per_group_blocks / (2 * std::max(1, sm_count_)), 1,
                                                                  row_groups))
                           : 1;
  const dim3 grid(static_cast<unsigned>((row_groups + groups - 1) / groups), static_cast<unsigned>(H),
                  static_cast<unsigned>(token_groups));
  const size_t smem = static_cast<size_t>(std::min<int64_t>(T, tpb) * K * 4);
  cuda::opt_in_shared_memory(cuda::head_gemv_kernel, static_cast<int>(cuda::kHmTokens * cuda::kHmMaxK * 4));
  cuda::head_gemv_kernel<<<grid, cuda::kHmWarps * 32, smem, stream_>>>(
      x.data, x_f32, w.data, cuda::float_code(op, "w", w.dtype), y.data, y_f32, T, static_cast<int>(H), N, K, vec,
      tpb, groups);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
