// gelu_tanh_mul: out = gelu_tanh(gate) * up elementwise (PyTorch's GELU with approximate="tanh";
// Gemma's MLP); gate, up, out [T, F], one activation dtype (F32 or BF16); out may alias either input.
// Bytes moved: 3 * T * F * element size.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/expert_glu.cuh"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void gelu_tanh_mul_kernel(const T* gate, const T* up, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(expert_glu(kGluGeluTanh, 0.0f, 0.0f, to_f(gate[i]), to_f(up[i])));
}

}  // namespace
}  // namespace cuda

void CudaOps::gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor out) {
  cuda::check_act("gelu_tanh_mul", "gate", gate);
  cuda::check_act("gelu_tanh_mul", "up", up);
  cuda::check_act("gelu_tanh_mul", "out", out);
  cuda::check_same_shape("gelu_tanh_mul", "up", up, gate);
  cuda::check_same_shape("gelu_tanh_mul", "out", out, gate);
  cuda::check_same_dtype("gelu_tanh_mul", "up", up, gate);
  cuda::check_same_dtype("gelu_tanh_mul", "out", out, gate);
  const int64_t n = gate.numel();
  if (n == 0) return;
  FT_DISPATCH_ACT("gelu_tanh_mul", "gate", gate.dtype, {
    cuda::gelu_tanh_mul_kernel<T>
        <<<cuda::grid_1d(n, 256), 256, 0, stream_>>>(gate.ptr<T>(), up.ptr<T>(), out.ptr<T>(), n);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
