// softmax: per-row, max-subtracted, fp32 (CPU backend).
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::softmax(const Tensor& x, Tensor out) {
  cpu::check_dtype("softmax", "x", x, DType::F32);
  cpu::check_dtype("softmax", "out", out, DType::F32);
  cpu::check_same_shape("softmax", "out", out, x);
  const int64_t R = x.rows(), C = x.cols();
  const float* a = x.ptr<float>();
  float* o = out.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (R * C > 65536)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = a + r * C;
    float* orow = o + r * C;
    float mx = -INFINITY;
    for (int64_t i = 0; i < C; ++i) mx = std::fmax(mx, xr[i]);
    float sum = 0.0f;
    for (int64_t i = 0; i < C; ++i) {
      const float e = mx == -INFINITY ? 0.0f : std::exp(xr[i] - mx);
      orow[i] = e;
      sum += e;
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t i = 0; i < C; ++i) orow[i] *= inv;
  }
}

}  // namespace ft
