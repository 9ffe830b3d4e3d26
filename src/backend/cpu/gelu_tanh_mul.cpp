// gelu_tanh_mul: Gemma's gated unit, out = gelu_tanh(gate) * up (CPU backend, F32).
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor out) {
  cpu::check_dtype("gelu_tanh_mul", "gate", gate, DType::F32);
  cpu::check_dtype("gelu_tanh_mul", "up", up, DType::F32);
  cpu::check_dtype("gelu_tanh_mul", "out", out, DType::F32);
  cpu::check_same_shape("gelu_tanh_mul", "up", up, gate);
  cpu::check_same_shape("gelu_tanh_mul", "out", out, gate);
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t n = gate.numel();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) o[i] = cpu::gelu_tanh(g[i]) * u[i];
}

}  // namespace ft
