// sigmoid: out = 1 / (1 + exp(-x)) elementwise, and sigmoid_mul: out = x * sigmoid(gate) (an output
// gate); x, out of equal shape and one activation dtype
// (F32 or BF16); out may alias x. Bytes moved: 2 * numel * element size.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void sigmoid_kernel(const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(1.0f / (1.0f + expf(-to_f(x[i]))));
}

template <typename T>
__global__ void sigmoid_mul_kernel(const T* gate, const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(to_f(x[i]) / (1.0f + expf(-to_f(gate[i]))));
}

}  // namespace
}  // namespace cuda

void CudaOps::sigmoid(const Tensor& x, Tensor out) {
  cuda::check_act("sigmoid", "x", x);
  cuda::check_act("sigmoid", "out", out);
  cuda::check_same_shape("sigmoid", "out", out, x);
  cuda::check_same_dtype("sigmoid", "out", out, x);
  const int64_t n = x.numel();
  if (n == 0) return;
  FT_DISPATCH_ACT("sigmoid", "x", x.dtype, {
    cuda::sigmoid_kernel<T><<<cuda::grid_1d(n, 256), 256, 0, stream_>>>(x.ptr<T>(), out.ptr<T>(), n);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft

namespace ft {

void CudaOps::sigmoid_mul(const Tensor& gate, const Tensor& x, Tensor out) {
  cuda::check_act("sigmoid_mul", "gate", gate);
  cuda::check_same_shape("sigmoid_mul", "x", x, gate);
  cuda::check_same_shape("sigmoid_mul", "out", out, gate);
  cuda::check_same_dtype("sigmoid_mul", "x", x, gate);
  cuda::check_same_dtype("sigmoid_mul", "out", out, gate);
  const int64_t n = x.numel();
  if (n == 0) return;
  FT_DISPATCH_ACT("sigmoid_mul", "gate", gate.dtype, {
    cuda::sigmoid_mul_kernel<T><<<cuda::grid_1d(n, 256), 256, 0, stream_>>>(gate.ptr<T>(), x.ptr<T>(), out.ptr<T>(), n);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
