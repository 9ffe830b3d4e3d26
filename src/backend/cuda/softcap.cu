// softcap: out = cap * tanh(x / cap) elementwise (logit soft-capping); x, out of one shape and
// activation dtype (F32 or BF16), may alias. Bytes moved: 2 * numel * element size.
#include <cmath>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void softcap_kernel(const T* x, T* out, float cap, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(cap * tanhf(to_f(x[i]) / cap));
}

}  // namespace
}  // namespace cuda

void CudaOps::softcap(const Tensor& x, float cap, Tensor out) {
  cuda::check_act("softcap", "x", x);
  cuda::check_act("softcap", "out", out);
  cuda::check_same_shape("softcap", "out", out, x);
  cuda::check_same_dtype("softcap", "out", out, x);
  if (!(cap > 0.0f) || !std::isfinite(cap)) fail(ErrorCode::kInvalidArgument, "softcap: cap {} must be > 0", cap);
  const int64_t n = x.numel();
  if (n == 0) return;
  FT_DISPATCH_ACT("softcap", "x", x.dtype, {
    cuda::softcap_kernel<T><<<cuda::grid_1d(n, 256), 256, 0, stream_>>>(x.ptr<T>(), out.ptr<T>(), cap, n);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
