// softcap: out = cap * tanh(x / cap) (logit soft-capping; CPU backend, F32).
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::softcap(const Tensor& x, float cap, Tensor out) {
  cpu::check_dtype("softcap", "x", x, DType::F32);
  cpu::check_dtype("softcap", "out", out, DType::F32);
  cpu::check_same_shape("softcap", "out", out, x);
  if (!(cap > 0.0f) || !std::isfinite(cap)) fail(ErrorCode::kInvalidArgument, "softcap: cap {} must be > 0", cap);
  const float* a = x.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t n = x.numel();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) o[i] = cap * std::tanh(a[i] / cap);
}

}  // namespace ft
