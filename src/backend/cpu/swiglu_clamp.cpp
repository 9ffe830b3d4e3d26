// swiglu_clamp: out = silu(min(gate, limit)) * clamp(up, -limit, limit), DeepSeek-V4's SwiGLU with
// swiglu_limit (transformers DeepseekV4MLP / DeepseekV4Experts._apply_gate) (CPU backend).
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::swiglu_clamp(const Tensor& gate, const Tensor& up, float limit, Tensor out) {
  cpu::check_dtype("swiglu_clamp", "gate", gate, DType::F32);
  cpu::check_dtype("swiglu_clamp", "up", up, DType::F32);
  cpu::check_dtype("swiglu_clamp", "out", out, DType::F32);
  cpu::check_same_shape("swiglu_clamp", "up", up, gate);
  cpu::check_same_shape("swiglu_clamp", "out", out, gate);
  if (!(limit > 0.0f)) fail(ErrorCode::kInvalidArgument, "swiglu_clamp: limit {} must be > 0", limit);
  const int64_t n = gate.numel();
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gv = std::min(g[i], limit), uv = std::clamp(u[i], -limit, limit);
    o[i] = gv / (1.0f + std::exp(-gv)) * uv;
  }
}

}  // namespace ft
