// softmax: per row, max-subtracted, fp32 sums. x, out [R, C], each F32 or BF16 (may alias when
// the dtypes match). A row of all -inf gives zeros (as on CPU). One block per row; bytes moved
// 2 * R * C * element size (the max and sum passes re-read x from cache).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

__global__ void softmax_kernel(const void* x, int x_code, void* out, bool out_f32, int64_t C) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) mx = fmaxf(mx, load_any(x, x_code, r * C + i));
  mx = block_max(mx, red);
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x)
    sum += mx == -INFINITY ? 0.0f : __expf(load_any(x, x_code, r * C + i) - mx);
  sum = block_sum(sum, red);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t i = threadIdx.x; i < C; i += blockDim.x) {
    const float e = mx == -INFINITY ? 0.0f : __expf(load_any(x, x_code, r * C + i) - mx);
    if (out_f32) static_cast<float*>(out)[r * C + i] = e * inv;
    else static_cast<bf16*>(out)[r * C + i] = __float2bfloat16_rn(e * inv);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::softmax(const Tensor& x, Tensor out) {
  cuda::check_act("softmax", "x", x);
  cuda::check_act("softmax", "out", out);
  cuda::check_same_shape("softmax", "out", out, x);
  if (x.data == out.data && x.dtype != out.dtype)
    fail(ErrorCode::kInvalidArgument, "softmax: in-place x {} and out {} must share a dtype", x.str(), out.str());
  const int64_t R = x.rows(), C = x.cols();
  if (R == 0 || C == 0) return;
  cuda::softmax_kernel<<<static_cast<unsigned>(R), 256, 0, stream_>>>(
      x.data, cuda::float_code("softmax", "x", x.dtype), out.data, out.dtype == DType::F32, C);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
