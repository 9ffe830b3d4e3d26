// embedding: row gather from a table in any stored dtype (CPU backend).
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/simd.h"
#include "util/error.h"

namespace ft {

void CpuOps::embedding(const Tensor& table, const Tensor& ids, Tensor out) {
  cpu::check_cpu("embedding", "table", table);
  cpu::check_dtype("embedding", "ids", ids, DType::I32);
  cpu::check_dtype("embedding", "out", out, DType::F32);
  if (table.ndim != 2) fail(ErrorCode::kInvalidArgument, "embedding: table {} must be 2-D [V, H]", table.str());
  const int64_t V = table.dim(0), H = table.dim(1), T = ids.numel();
  if (out.rows() != T || out.cols() != H)
    fail(ErrorCode::kInvalidArgument, "embedding: out {} must be [{}, {}] (ids x table width)", out.str(), T, H);
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t t = 0; t < T; ++t)
    if (id[t] < 0 || id[t] >= V)
      fail(ErrorCode::kInvalidArgument, "embedding: token id {} at index {} is outside the table's {} rows", id[t], t,
           V);
  const int64_t rb = table.row_bytes();
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * H > 65536)
  for (int64_t t = 0; t < T; ++t)
    cpu::to_f32(table.dtype, table.bytes_ptr() + id[t] * rb, out.ptr<float>() + t * H, H);
}

}  // namespace ft
