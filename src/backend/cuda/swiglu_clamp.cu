// swiglu_clamp: out = silu(min(gate, limit)) * clamp(up, -limit, limit), DeepSeek-V4's SwiGLU with
// swiglu_limit (ops.h); gate, up, out [T, F] of one activation dtype, out may alias either.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void swiglu_clamp_kernel(const T* gate, const T* up, T* out, int64_t n, float limit) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = fminf(to_f(gate[i]), limit), u = fminf(fmaxf(to_f(up[i]), -limit), limit);
    out[i] = from_f<T>(g / (1.0f + expf(-g)) * u);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::swiglu_clamp(const Tensor& gate, const Tensor& up, float limit, Tensor out) {
  const char* op = "swiglu_clamp";
  cuda::check_act(op, "gate", gate);
  cuda::check_act(op, "up", up);
  cuda::check_act(op, "out", out);
  cuda::check_same_shape(op, "up", up, gate);
  cuda::check_same_shape(op, "out", out, gate);
  cuda::check_same_dtype(op, "up", up, gate);
  cuda::check_same_dtype(op, "out", out, gate);
  if (!(limit > 0.0f)) fail(ErrorCode::kInvalidArgument, "swiglu_clamp: limit {} must be > 0", limit);
  const int64_t n = gate.numel();
  if (n == 0) return;
  FT_DISPATCH_ACT(op, "gate", gate.dtype, {
    cuda::swiglu_clamp_kernel<T><<<cuda::grid_1d(n, 256), 256, 0, stream_>>>(gate.ptr<T>(), up.ptr<T>(),
                                                                              out.ptr<T>(), n, limit);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
