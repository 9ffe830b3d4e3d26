// rms_norm: x / sqrt(mean(x^2) + eps) * (w + offset), per row (CPU backend).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd.h"
#include "util/error.h"

namespace ft {

void CpuOps::rms_norm(const RmsNormParams& p, const Tensor& x, const Tensor& w, Tensor out, ActQ8* out_q8) {
  if (out_q8) *out_q8 = ActQ8{};  // the CPU writes no int8 form
  cpu::check_dtype("rms_norm", "x", x, DType::F32);
  cpu::check_dtype("rms_norm", "out", out, DType::F32);
  cpu::check_cpu("rms_norm", "w", w);
  cpu::check_same_shape("rms_norm", "out", out, x);
  const int64_t R = x.rows(), D = x.cols();
  if (w.numel() != D)
    fail(ErrorCode::kInvalidArgument, "rms_norm: weight {} must have {} elements (the row length of x {})", w.str(), D,
         x.str());
  if (!dtype_info(w.dtype).is_float || w.dtype == DType::F64 || dtype_info(w.dtype).block_bytes == 1)
    fail(ErrorCode::kUnsupported, "rms_norm: weight dtype {} (F32, F16 or BF16 expected)", dtype_name(w.dtype));
  thread_local std::vector<float> wf;  // reused: no allocation per step once grown
  wf.resize(static_cast<size_t>(D));
  cpu::to_f32(w.dtype, w.data, wf.data(), D);
  for (float& v : wf) v += p.weight_offset;
  const float* a = x.ptr<float>();
  const float* wv = wf.data();  // the caller's thread_local buffer: worker threads have their own
  float* o = out.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (R * D > 65536)
  for (int64_t r = 0; r < R; ++r) {
    const float* xr = a + r * D;
    float ss = 0.0f;
    for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(D) + p.eps);
    for (int64_t i = 0; i < D; ++i) o[r * D + i] = xr[i] * inv * wv[i];
  }
}

}  // namespace ft
