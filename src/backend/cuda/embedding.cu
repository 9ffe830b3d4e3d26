// embedding: out[t, :] = table[ids[t], :], table [V, H] in any cuda_weight_type, ids I32 [T] on the
// device (clamped to [0, V): validate ids on the host), out [T, H] F32 or BF16.
// Bytes moved: T * row_bytes(table) read + T * H * out size written. Kernel: dequant_rows (dequant.cu).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/launch.h"

namespace ft {

void CudaOps::embedding(const Tensor& table, const Tensor& ids, Tensor out) {
  cuda::check_dev("embedding", "table", table);
  cuda::check_dtype("embedding", "ids", ids, {DType::I32});
  cuda::check_act("embedding", "out", out);
  if (table.ndim != 2) fail(ErrorCode::kInvalidArgument, "embedding: table {} must be 2-D [V, H]", table.str());
  if (!cuda::cuda_weight_type(table.dtype))
    fail(ErrorCode::kUnsupported, "embedding: table dtype {} has no CUDA kernel", dtype_name(table.dtype));
  const int64_t V = table.dim(0), H = table.dim(1), T = ids.numel();
  if (out.rows() != T || out.cols() != H)
    fail(ErrorCode::kInvalidArgument, "embedding: out {} must be [{}, {}] (ids x table width)", out.str(), T, H);
  cuda::launch_dequant_rows(table.dtype, table.data, table.row_bytes(), H, ids.ptr<int32_t>(), V, 0, T, out.data,
                            out.dtype, H, stream_);
}

}  // namespace ft
