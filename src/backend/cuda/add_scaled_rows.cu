// add_scaled_rows: y[t, :] += alpha * row_scale[t] * x[t, :]. x, y [T, D] of one activation dtype
// (F32 or BF16); row_scale [T] or [T, 1] in F32 or BF16, or empty (= 1). Used for gated shared
// experts and weighted sums. Bytes moved: 3 * T * D * element size + T scales.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void add_scaled_rows_kernel(const T* x, const void* row_scale, int scale_code, float alpha, T* y,
                                       int64_t rows, int64_t D) {
  const int64_t n = rows * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float f = row_scale ? alpha * load_any(row_scale, scale_code, i / D) : alpha;
    y[i] = from_f<T>(to_f(y[i]) + f * to_f(x[i]));
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::add_scaled_rows(const Tensor& x, const Tensor& row_scale, float alpha, Tensor y) {
  cuda::check_act("add_scaled_rows", "x", x);
  cuda::check_act("add_scaled_rows", "y", y);
  cuda::check_same_shape("add_scaled_rows", "y", y, x);
  cuda::check_same_dtype("add_scaled_rows", "y", y, x);
  const int64_t R = x.rows(), D = x.cols();
  int code = 0;
  if (!row_scale.empty()) {
    cuda::check_dtype("add_scaled_rows", "row_scale", row_scale, {DType::F32, DType::BF16});
    code = cuda::float_code("add_scaled_rows", "row_scale", row_scale.dtype);
    if (row_scale.numel() != R)
      fail(ErrorCode::kInvalidArgument, "add_scaled_rows: row_scale {} needs {} entries (one per row of x {})",
           row_scale.str(), R, x.str());
  }
  if (R * D == 0) return;
  FT_DISPATCH_ACT("add_scaled_rows", "x", x.dtype, {
    cuda::add_scaled_rows_kernel<T><<<cuda::grid_1d(R * D, 256), 256, 0, stream_>>>(
        x.ptr<T>(), row_scale.empty() ? nullptr : row_scale.data, code, alpha, y.ptr<T>(), R, D);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
