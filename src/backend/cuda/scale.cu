// scale: out = s * x elementwise; x, out of equal shape and one activation dtype (F32 or BF16);
// out may alias x. Bytes moved: 2 * numel * element size.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void scale_kernel(const T* x, float s, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(s * to_f(x[i]));
}

}  // namespace
}  // namespace cuda

void CudaOps::scale(const Tensor& x, float s, Tensor out) {
  cuda::check_act("scale", "x", x);
  cuda::check_act("scale", "out", out);
  cuda::check_same_shape("scale", "out", out, x);
  cuda::check_same_dtype("scale", "out", out, x);
  const int64_t n = x.numel();
  if (n == 0) return;
  FT_DISPATCH_ACT("scale", "x", x.dtype, {
    cuda::scale_kernel<T><<<cuda::grid_1d(n, 256), 256, 0, stream_>>>(x.ptr<T>(), s, out.ptr<T>(), n);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
