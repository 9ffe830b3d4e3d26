// Elementwise ops of the CPU backend: swiglu, add, scale, sigmoid, sigmoid_mul, add_scaled_rows. F32 only.
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::swiglu(const Tensor& gate, const Tensor& up, Tensor out) {
  cpu::check_dtype("swiglu", "gate", gate, DType::F32);
  cpu::check_dtype("swiglu", "up", up, DType::F32);
  cpu::check_dtype("swiglu", "out", out, DType::F32);
  cpu::check_same_shape("swiglu", "up", up, gate);
  cpu::check_same_shape("swiglu", "out", out, gate);
  const float* g = gate.ptr<float>();
  const float* u = up.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t n = gate.numel();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

void CpuOps::add(const Tensor& a, const Tensor& b, Tensor out) {
  cpu::check_dtype("add", "a", a, DType::F32);
  cpu::check_dtype("add", "b", b, DType::F32);
  cpu::check_dtype("add", "out", out, DType::F32);
  cpu::check_same_shape("add", "b", b, a);
  cpu::check_same_shape("add", "out", out, a);
  const float* x = a.ptr<float>();
  const float* y = b.ptr<float>();
  float* o = out.ptr<float>();
  const int64_t n = a.numel();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) o[i] = x[i] + y[i];
}

void CpuOps::scale(const Tensor& x, float s, Tensor out) {
  cpu::check_dtype("scale", "x", x, DType::F32);
  cpu::check_dtype("scale", "out", out, DType::F32);
  cpu::check_same_shape("scale", "out", out, x);
  const float* a = x.ptr<float>();
  float* o = out.ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = s * a[i];
}

void CpuOps::sigmoid(const Tensor& x, Tensor out) {
  cpu::check_dtype("sigmoid", "x", x, DType::F32);
  cpu::check_dtype("sigmoid", "out", out, DType::F32);
  cpu::check_same_shape("sigmoid", "out", out, x);
  const float* a = x.ptr<float>();
  float* o = out.ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = 1.0f / (1.0f + std::exp(-a[i]));
}

void CpuOps::sigmoid_mul(const Tensor& gate, const Tensor& x, Tensor out) {
  cpu::check_dtype("sigmoid_mul", "gate", gate, DType::F32);
  cpu::check_dtype("sigmoid_mul", "x", x, DType::F32);
  cpu::check_dtype("sigmoid_mul", "out", out, DType::F32);
  cpu::check_same_shape("sigmoid_mul", "x", x, gate);
  cpu::check_same_shape("sigmoid_mul", "out", out, gate);
  const float* g = gate.ptr<float>();
  const float* a = x.ptr<float>();
  float* o = out.ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = a[i] / (1.0f + std::exp(-g[i]));
}

void CpuOps::add_scaled_rows(const Tensor& x, const Tensor& row_scale, float alpha, Tensor y) {
  cpu::check_dtype("add_scaled_rows", "x", x, DType::F32);
  cpu::check_dtype("add_scaled_rows", "y", y, DType::F32);
  cpu::check_same_shape("add_scaled_rows", "y", y, x);
  const int64_t T = x.rows(), D = x.cols();
  if (!row_scale.empty()) {
    cpu::check_dtype("add_scaled_rows", "row_scale", row_scale, DType::F32);
    if (row_scale.numel() != T)
      fail(ErrorCode::kInvalidArgument, "add_scaled_rows: row_scale {} needs {} entries (one per row of x {})",
           row_scale.str(), T, x.str());
  }
  const float* a = x.ptr<float>();
  float* o = y.ptr<float>();
  const float* s = row_scale.empty() ? nullptr : row_scale.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * D > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float f = alpha * (s ? s[t] : 1.0f);
    for (int64_t i = 0; i < D; ++i) o[t * D + i] += f * a[t * D + i];
  }
}

}  // namespace ft
