// rms_norm: out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * (w + weight_offset). x, out [R, D]
// of one activation dtype (F32 or BF16; may alias); w [D] F32/F16/BF16. One warp per row, fp32
// sum of squares. Bytes moved: 2 * R * D * element size + D weights (cached).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void rms_norm_kernel(const T* x, const void* w, int w_code, float eps, float offset, T* out, int64_t R,
                                int64_t D) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  const int lane = threadIdx.x & 31;
  if (r >= R) return;
  const T* xr = x + r * D;
  float ss = 0.0f;
  for (int64_t i = lane; i < D; i += 32) {
    const float v = to_f(xr[i]);
    ss += v * v;
  }
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
  T* o = out + r * D;
  for (int64_t i = lane; i < D; i += 32) o[i] = from_f<T>(to_f(xr[i]) * inv * (load_any(w, w_code, i) + offset));
}

}  // namespace
}  // namespace cuda

void CudaOps::rms_norm(const RmsNormParams& p, const Tensor& x, const Tensor& w, Tensor out) {
  cuda::check_act("rms_norm", "x", x);
  cuda::check_act("rms_norm", "out", out);
  cuda::check_same_shape("rms_norm", "out", out, x);
  cuda::check_same_dtype("rms_norm", "out", out, x);
  cuda::check_dev("rms_norm", "w", w);
  const int w_code = cuda::float_code("rms_norm", "w", w.dtype);
  const int64_t R = x.rows(), D = x.cols();
  if (w.numel() != D)
    fail(ErrorCode::kInvalidArgument, "rms_norm: weight {} must have {} elements (the row length of x {})", w.str(), D,
         x.str());
  if (R == 0) return;
  const unsigned blocks = static_cast<unsigned>((R + 3) / 4);
  FT_DISPATCH_ACT("rms_norm", "x", x.dtype, {
    cuda::rms_norm_kernel<T><<<blocks, 128, 0, stream_>>>(x.ptr<T>(), w.data, w_code, p.eps, p.weight_offset,
                                                          out.ptr<T>(), R, D);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
