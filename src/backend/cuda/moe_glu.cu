// moe_glu: the gated unit of moe_experts' unfused paths (gate and up in different weight dtypes, or
// the prefill's per-expert GEMMs), in place: g[i] = expert_glu(kind, alpha, limit, g[i], u[i]) for
// i < n, g and u F32 or BF16 (one dtype), fp32 arithmetic. The projections added the experts'
// biases already. Bytes moved: 3 n elements.
#include "backend/cuda/common.cuh"
#include "backend/cuda/expert_glu.cuh"
#include "backend/cuda/launch.h"

namespace ft::cuda {
namespace {

template <typename T>
__global__ void moe_glu_kernel(T* g, const T* u, int64_t n, int kind, float alpha, float limit) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    g[i] = from_f<T>(expert_glu(kind, alpha, limit, to_f(g[i]), to_f(u[i])));
}

}  // namespace

void launch_moe_glu(void* g, const void* u, DType dt, int64_t n, int kind, float alpha, float limit, cudaStream_t s) {
  if (n <= 0) return;
  FT_CHECK(dt == DType::F32 || dt == DType::BF16);
  if (dt == DType::F32)
    moe_glu_kernel<<<grid_1d(n, 256), 256, 0, s>>>(static_cast<float*>(g), static_cast<const float*>(u), n, kind, alpha,
                                                   limit);
  else
    moe_glu_kernel<<<grid_1d(n, 256), 256, 0, s>>>(static_cast<bf16*>(g), static_cast<const bf16*>(u), n, kind, alpha,
                                                   limit);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
