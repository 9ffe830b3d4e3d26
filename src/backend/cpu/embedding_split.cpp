// embedding_split: a row gather whose rows are split into n column blocks, block-major (Gemma 4's
// per-layer embeddings; CPU backend).
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd.h"
#include "util/error.h"

namespace ft {

void CpuOps::embedding_split(const Tensor& table, const Tensor& ids, Tensor out) {
  cpu::check_cpu("embedding_split", "table", table);
  cpu::check_dtype("embedding_split", "ids", ids, DType::I32);
  cpu::check_dtype("embedding_split", "out", out, DType::F32);
  if (table.ndim != 2 || (table.dtype != DType::F32 && table.dtype != DType::F16 && table.dtype != DType::BF16))
    fail(ErrorCode::kInvalidArgument, "embedding_split: table {} must be 2-D F32/F16/BF16 [V, n * D]", table.str());
  const int64_t V = table.dim(0), W = table.dim(1), T = ids.numel();
  if (out.ndim != 3 || out.dim(1) != T || out.dim(0) * out.dim(2) != W)
    fail(ErrorCode::kInvalidArgument, "embedding_split: out {} must be [n, {}, D] with n * D = {} (table {})", out.str(),
         T, W, table.str());
  const int64_t n = out.dim(0), D = out.dim(2);
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    if (id[t] < 0 || id[t] >= V)
      fail(ErrorCode::kInvalidArgument, "embedding_split: token id {} at index {} is outside the table's {} rows",
           id[t], t, V);
  const int64_t rb = table.row_bytes(), eb = dtype_bytes(table.dtype, 1);
  float* o = out.ptr<float>();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * W > 65536)
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < n; ++j)
      cpu::to_f32(table.dtype, table.bytes_ptr() + id[t] * rb + j * D * eb, o + (j * T + t) * D, D);
}

}  // namespace ft
