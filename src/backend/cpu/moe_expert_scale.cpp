// moe_expert_scale: routed weights times a per-expert scale (Gemma 4's router; CPU backend).
#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::moe_expert_scale(const Tensor& ids, const Tensor& scale, Tensor weights) {
  cpu::check_dtype("moe_expert_scale", "ids", ids, DType::I32);
  cpu::check_dtype("moe_expert_scale", "scale", scale, DType::F32);
  cpu::check_dtype("moe_expert_scale", "weights", weights, DType::F32);
  if (ids.ndim != 2 || !weights.has_shape({ids.rows(), ids.cols()}) || scale.ndim != 1)
    fail(ErrorCode::kInvalidArgument, "moe_expert_scale: ids {} and weights {} must be [T, k], scale {} [E]", ids.str(),
         weights.str(), scale.str());
  const int64_t n = ids.numel(), E = scale.dim(0);
  const int32_t* id = ids.ptr<int32_t>();
  const float* s = scale.ptr<float>();
  float* w = weights.ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    if (id[i] < 0) continue;
    if (id[i] >= E)
      fail(ErrorCode::kInvalidArgument, "moe_expert_scale: expert id {} at entry {} is outside the scale's {} experts",
           id[i], i, E);
    w[i] *= s[id[i]];
  }
}

}  // namespace ft
