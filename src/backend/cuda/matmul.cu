// matmul: y[T, N] = x[T, K] W[N, K]^T (+ bias[N]). x, y F32 or BF16 (y may be either); W F32, F16,
// BF16 or a GGUF block type (cuda_weight_type); bias F32/F16/BF16 or empty; fp32 accumulation.
// Paths (bytes moved in brackets; W = weight bytes):
//  - T <= 8 (<= 16 for weights other than BF16 and FP8), or any T for a router-sized W (<= 256 rows, <= 1M
//    elements) with F32 x: the decoding GEMV (gemv.cuh) [W per 8 tokens + x + y];
//  - F32 W and F32 x, y beyond that: cuBLAS SGEMM (fp32, exact like the GEMV);
//  - BF16 W: cuBLAS GemmEx, bf16 inputs, fp32 compute [W + x + y, tensor cores];
//  - other W: tiles of W decoded to a bf16 scratch (dequant.cu), then cuBLAS per tile
//    [W + 2 * N * K * 2 + x + y].
#include <algorithm>

#include "backend/op_checks.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/launch.h"

namespace ft {
namespace cuda {
namespace {

constexpr int64_t kExactMaxRows = 256;             // routers (one row per expert) and gates, not projections

template <typename T>
__global__ void add_bias_kernel(T* __restrict__ y, int64_t ldy, int64_t T_, int64_t N, const void* __restrict__ bias,
                                int bias_code) {
  const int64_t total = T_ * N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / N, n = i % N;
    T* p = y + t * ldy + n;
    *p = from_f<T>(to_f(*p) + load_any(bias, bias_code, n));
  }
}

/** y (+n0 columns) = x W_tile^T for a bf16 W tile of `rows` rows, cuBLAS column-major trick:
 *  y^T[N, T] = W[N, K] x^T, i.e. C(m=rows, n=T) = op(A)=A^T (A: K x rows, lda K) * B (K x T, ldb K). */
void gemm_bf16(cublasHandle_t h, const bf16* x, int64_t T, int64_t K, const void* w_tile, int64_t rows, void* y,
               DType y_dtype, int64_t ldy) {
  const float alpha = 1.0f, beta = 0.0f;
  FT_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), static_cast<int>(T),
                               static_cast<int>(K), &alpha, w_tile, CUDA_R_16BF, static_cast<int>(K), x, CUDA_R_16BF,
                               static_cast<int>(K), &beta, y, y_dtype == DType::F32 ? CUDA_R_32F : CUDA_R_16BF,
                               static_cast<int>(ldy), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace
}  // namespace cuda

void CudaOps::matmul_raw(const void* x, DType x_dtype, int64_t T, const Tensor& w, void* y, DType y_dtype,
                         int64_t ldy, const Tensor& bias, void* x_q8) {
  const int64_t N = w.dim(0), K = w.dim(1);
  if (T <= 0 || N <= 0) return;
  // FP8 blocks take the tiles + cuBLAS path past 8 tokens: the 8-token GEMV re-reads the tokens' x for
  // every row (K 4096 f32: 128 KiB a row, L2-bound), DeepSeek-V4-Flash's FP8 projections at 16 tokens
  // ran at ~110 GB/s in it (ncu, H100), where decoding a tile to bf16 for cuBLAS costs ~20 us.
  const bool fp8 = w.dtype == DType::F8_E4M3_B32 || w.dtype == DType::F8_E4M3_B16;
  const int64_t gemv_max = w.dtype == DType::BF16 || fp8 ? 8 : 16;
  // Routers and shared-expert gates (few rows) with F32 activations must see x exactly, where the
  // bf16 cuBLAS path would round it (router decisions flip on such rounding): the GEMV at any T
  // (measured faster than SGEMM for [128 x 2048] at 4k tokens). Other F32 weights with F32
  // activations go to cuBLAS SGEMM (fp32 throughout).
  const bool exact_small = x_dtype == DType::F32 && N <= cuda::kExactMaxRows && N * K <= (int64_t{1} << 20);
  if (T > gemv_max && !exact_small && x_dtype == DType::F32 && w.dtype == DType::F32 && y_dtype == DType::F32 &&
      bias.empty()) {
    const float alpha = 1.0f, beta = 0.0f;  // y^T[N, T] = W[N, K] x^T, as gemm_bf16
    FT_CUBLAS_CHECK(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(N), static_cast<int>(T),
                                static_cast<int>(K), &alpha, static_cast<const float*>(w.data), static_cast<int>(K),
                                static_cast<const float*>(x), static_cast<int>(K), &beta, static_cast<float*>(y),
                                static_cast<int>(ldy)));
    return;
  }
  if (T <= gemv_max || exact_small) {  // the GEMV reads BF16 or F32 activations directly
    cuda::GemvArgs a;
    a.w = w.bytes_ptr();
    a.N = N, a.K = K, a.row_bytes = w.row_bytes();
    a.x = x, a.x_f32 = x_dtype == DType::F32, a.ldx = K, a.T = T;
    a.y = y, a.y_f32 = y_dtype == DType::F32, a.ldy = ldy;
    if (!bias.empty()) a.bias = bias.data, a.bias_code = cuda::float_code("matmul", "bias", bias.dtype);
    if (cuda::gemv_q8_supports(w.dtype)) {  // int8 activations: as their producer wrote them, or quantized first
      a.q8 = x_q8;
      a.q8_ready = a.q8 != nullptr;
      if (!a.q8_ready) a.q8 = scratch(Scratch::kQ8, cuda::gemv_q8_scratch_bytes(T, K));
    }
    const int maxt = T == 1 ? 1 : 8;
    cuda::launch_gemv(w.dtype, maxt, false, a, (T + maxt - 1) / maxt, stream_);
    return;
  }
  const cuda::bf16* xb = static_cast<const cuda::bf16*>(x);
  if (x_dtype != DType::BF16) {  // cuBLAS multiplies bf16 by bf16: convert the activations once
    auto* tmp = static_cast<cuda::bf16*>(scratch(Scratch::kXConvert, T * K * 2));
    cuda::launch_convert(x, x_dtype, tmp, DType::BF16, T * K, stream_);
    xb = tmp;
  }
  const int64_t esz = y_dtype == DType::F32 ? 4 : 2;
  if (w.dtype == DType::BF16) {
    cuda::gemm_bf16(cublas_, xb, T, K, w.data, N, y, y_dtype, ldy);
  } else {
    const int64_t tile = std::max<int64_t>(1, std::min<int64_t>(N, cuda::kDequantTileBytes / (K * 2)));
    void* wt = scratch(Scratch::kDequant, tile * K * 2);
    for (int64_t n0 = 0; n0 < N; n0 += tile) {
      const int64_t rows = std::min(tile, N - n0);
      cuda::launch_dequant_rows(w.dtype, w.data, w.row_bytes(), K, nullptr, N, n0, rows, wt, DType::BF16, K, stream_);
      cuda::gemm_bf16(cublas_, xb, T, K, wt, rows, static_cast<uint8_t*>(y) + n0 * esz, y_dtype, ldy);
    }
  }
  if (!bias.empty()) {
    const int code = cuda::float_code("matmul", "bias", bias.dtype);
    const unsigned g = cuda::grid_1d(T * N, 256);
    if (y_dtype == DType::F32)
      cuda::add_bias_kernel<<<g, 256, 0, stream_>>>(static_cast<float*>(y), ldy, T, N, bias.data, code);
    else
      cuda::add_bias_kernel<<<g, 256, 0, stream_>>>(static_cast<cuda::bf16*>(y), ldy, T, N, bias.data, code);
    FT_CUDA_LAUNCH_CHECK();
  }
}

void CudaOps::matmul(const Tensor& x, const Tensor& w, Tensor y, const Tensor& bias, const ActQ8* x_q8) {
  cuda::check_act("matmul", "x", x);
  cuda::check_act("matmul", "y", y);
  cuda::check_dev("matmul", "w", w);
  op_checks::matmul(x, w, y);
  if (!cuda::cuda_weight_type(w.dtype))
    fail(ErrorCode::kUnsupported, "matmul: weight dtype {} of w {} has no CUDA kernel", dtype_name(w.dtype),
         w.shape_str());
  const int64_t N = w.dim(0), T = x.rows();
  if (!bias.empty()) {
    cuda::check_dtype("matmul", "bias", bias, {DType::F32, DType::F16, DType::BF16});
    if (bias.numel() != N)
      fail(ErrorCode::kInvalidArgument, "matmul: bias {} must have N = {} entries", bias.str(), N);
  }
  if (x.data == y.data) fail(ErrorCode::kInvalidArgument, "matmul: y must not alias x");
  matmul_raw(x.data, x.dtype, T, w, y.data, y.dtype, N, bias, handed_q8(x_q8, x.data, x.dtype, T, w.dim(1)));
}

}  // namespace ft
