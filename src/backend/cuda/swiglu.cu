// swiglu: out = silu(gate) * up elementwise; gate, up, out [T, F], one activation dtype (F32 or
// BF16); out may alias either input. Bytes moved: 3 * T * F * element size.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void swiglu_kernel(const T* gate, const T* up, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(silu(to_f(gate[i])) * to_f(up[i]));
}

}  // namespace
}  // namespace cuda

void CudaOps::swiglu(const Tensor& gate, const Tensor& up, Tensor out) {
  cuda::check_act("swiglu", "gate", gate);
  cuda::check_act("swiglu", "up", up);
  cuda::check_act("swiglu", "out", out);
  cuda::check_same_shape("swiglu", "up", up, gate);
  cuda::check_same_shape("swiglu", "out", out, gate);
  cuda::check_same_dtype("swiglu", "up", up, gate);
  cuda::check_same_dtype("swiglu", "out", out, gate);
  const int64_t n = gate.numel();
  if (n == 0) return;
  FT_DISPATCH_ACT("swiglu", "gate", gate.dtype, {
    cuda::swiglu_kernel<T><<<cuda::grid_1d(n, 256), 256, 0, stream_>>>(gate.ptr<T>(), up.ptr<T>(), out.ptr<T>(), n);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
