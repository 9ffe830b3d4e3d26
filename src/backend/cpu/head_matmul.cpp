// head_matmul: one x W^T per head over strided head slices of the activations (CPU backend): MLA's
// absorbed up-projections (DeepSeek-V2 §2.1.2). Each head is matmul_f32 on its column range.
#include "backend/cpu/cpu_ops.h"
#include "backend/op_checks.h"
#include "util/error.h"

namespace ft {

void CpuOps::head_matmul(const Tensor& x, const Tensor& w, Tensor y) {
  op_checks::head_matmul(x, w, y);
  cpu::check_dtype("head_matmul", "x", x, DType::F32);
  cpu::check_dtype("head_matmul", "y", y, DType::F32);
  cpu::check_cpu("head_matmul", "w", w);
  if (w.dtype != DType::F32 && w.dtype != DType::F16 && w.dtype != DType::BF16)
    fail(ErrorCode::kUnsupported, "head_matmul: w {} must be F32, F16 or BF16", w.str());
  const int64_t H = w.dim(0), N = w.dim(1), K = w.dim(2), T = x.rows();
  const int64_t head_bytes = dtype_bytes(w.dtype, N * K);
  for (int64_t h = 0; h < H; ++h) {
    Tensor wh(static_cast<char*>(w.data) + h * head_bytes, w.dtype, {N, K}, w.device);
    cpu::matmul_f32(x.ptr<float>() + h * K, T, H * K, wh, Tensor(), y.ptr<float>() + h * N, H * N, n_threads_);
  }
}

}  // namespace ft
