// ple_gate on the CPU: Qwen4-Exp's per-layer-embedding stream gate (transformers
// Qwen4ExpTextPLELayer.forward: a signed square root of the scaled key . query of each stream, through
// a sigmoid, scales the shared value), and stream_weighted_sum (its gated residual's weighted mean of
// the streams). Semantics in ops.h.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

void CpuOps::ple_gate(const Tensor& key, const Tensor& query, const Tensor& w, const Tensor& value, Tensor out) {
  const char* op = "ple_gate";
  for (const Tensor* t : {&key, &query, &w, &value, static_cast<const Tensor*>(&out)})
    cpu::check_dtype(op, "input", *t, DType::F32);
  op_checks::ple_gate(key, query, w, value, out);
  const int64_t T = value.rows(), D = value.cols();
  const int64_t n = key.cols() / D;
  const float inv = 1.0f / std::sqrt(static_cast<float>(D));
  const float* wd = w.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * n * D > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* v = value.ptr<float>() + t * D;
    for (int64_t k = 0; k < n; ++k) {
      const float* kr = key.ptr<float>() + t * n * D + k * D;
      const float* qr = query.ptr<float>() + t * n * D + k * D;
      float g = 0.0f;
      for (int64_t d = 0; d < D; ++d) g += kr[d] * qr[d] * wd[k * D + d];
      g *= inv;
      const float sgn = g > 0.0f ? 1.0f : (g < 0.0f ? -1.0f : 0.0f);
      g = std::sqrt(std::max(std::fabs(g), 1e-6f)) * sgn;
      const float sig = 1.0f / (1.0f + std::exp(-g));
      float* o = out.ptr<float>() + t * n * D + k * D;
      for (int64_t d = 0; d < D; ++d) o[d] = sig * v[d];
    }
  }
}

void CpuOps::stream_weighted_sum(const Tensor& x, const Tensor& w, Tensor out) {
  const char* op = "stream_weighted_sum";
  for (const Tensor* t : {&x, &w, static_cast<const Tensor*>(&out)}) cpu::check_dtype(op, "input", *t, DType::F32);
  op_checks::stream_weighted_sum(x, w, out);
  const int64_t T = out.rows(), D = out.cols();
  const int64_t n = x.cols() / D;
  const float* wd = w.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * n * D > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* xr = x.ptr<float>() + t * n * D;
    float* o = out.ptr<float>() + t * D;
    for (int64_t d = 0; d < D; ++d) {
      float acc = 0.0f;
      for (int64_t k = 0; k < n; ++k) acc += xr[k * D + d] * wd[k * D + d];
      o[d] = acc;
    }
  }
}

}  // namespace ft
