// stream_weighted_sum: Qwen4-Exp's gated residual's weighted mean of its n streams (ops.h; CPU
// reference backend/cpu/ple_gate.cpp): out[t, d] = sum_k x[t, k D + d] w[k D + d], one thread per
// output element, the streams summed in order in fp32. x, out one activation dtype; w F32.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/op_checks.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void stream_weighted_sum_kernel(const T* x, const float* w, T* out, int64_t T_, int n, int64_t D) {
  const int64_t total = T_ * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / D, d = i % D;
    const T* xr = x + t * n * D;
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) acc += to_f(xr[k * D + d]) * w[k * D + d];
    out[i] = from_f<T>(acc);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::stream_weighted_sum(const Tensor& x, const Tensor& w, Tensor out) {
  const char* op = "stream_weighted_sum";
  cuda::check_act(op, "x", x);
  cuda::check_same_dtype(op, "out", out, x);
  cuda::check_dtype(op, "w", w, {DType::F32});
  op_checks::stream_weighted_sum(x, w, out);
  if (x.data == out.data) fail(ErrorCode::kInvalidArgument, "{}: out must not alias x", op);
  const int64_t T = out.rows(), D = out.cols();
  const int64_t n = x.cols() / D;
  if (T == 0) return;
  const int64_t n_tok = T;  // (T names the element type inside FT_DISPATCH_ACT)
  FT_DISPATCH_ACT(op, "x", x.dtype, {
    cuda::stream_weighted_sum_kernel<T><<<cuda::grid_1d(n_tok * D, 256), 256, 0, stream_>>>(
        x.ptr<T>(), w.ptr<float>(), out.ptr<T>(), n_tok, static_cast<int>(n), D);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
