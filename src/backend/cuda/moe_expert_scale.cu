// moe_expert_scale: weights[t, j] *= scale[ids[t, j]] where ids[t, j] >= 0 (Gemma 4's router
// per_expert_scale). ids I32 [T, k], weights F32 [T, k], scale F32 [E], all on the device; an id >= E
// is skipped (the CPU op rejects it). Bytes moved: T * k * 12.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

__global__ void moe_expert_scale_kernel(const int32_t* ids, const float* scale, int64_t E, float* w, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t e = ids[i];
    if (e >= 0 && e < E) w[i] *= scale[e];
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::moe_expert_scale(const Tensor& ids, const Tensor& scale, Tensor weights) {
  cuda::check_dev("moe_expert_scale", "ids", ids);
  cuda::check_dev("moe_expert_scale", "scale", scale);
  cuda::check_dev("moe_expert_scale", "weights", weights);
  cuda::check_dtype("moe_expert_scale", "ids", ids, {DType::I32});
  cuda::check_dtype("moe_expert_scale", "scale", scale, {DType::F32});
  cuda::check_dtype("moe_expert_scale", "weights", weights, {DType::F32});
  if (ids.ndim != 2 || !weights.has_shape({ids.rows(), ids.cols()}) || scale.ndim != 1)
    fail(ErrorCode::kInvalidArgument, "moe_expert_scale: ids {} and weights {} must be [T, k], scale {} [E]", ids.str(),
         weights.str(), scale.str());
  const int64_t n = ids.numel();
  if (n == 0) return;
  cuda::moe_expert_scale_kernel<<<cuda::grid_1d(n, 256), 256, 0, stream_>>>(ids.ptr<int32_t>(), scale.ptr<float>(),
                                                                            scale.dim(0), weights.ptr<float>(), n);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
