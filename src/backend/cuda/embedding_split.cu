// embedding_split: out[j, t, :] = table[ids[t], j D .. (j+1) D) (Gemma 4's per-layer embeddings,
// block-major). table [V, n D] F32/F16/BF16, ids I32 [T] on the device (clamped to [0, V) as embedding
// does: validate ids on the host), out [n, T, D] F32 or BF16. One thread per output element.
// Bytes moved: T * n * D * (table element + out element).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void embedding_split_kernel(const void* table, int dtype_code, int64_t V, const int32_t* ids, T* out,
                                       int64_t n, int64_t T_, int64_t D) {
  const int64_t total = n * T_ * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = i % D, t = (i / D) % T_, j = i / (D * T_);
    int64_t id = ids[t];
    id = id < 0 ? 0 : (id >= V ? V - 1 : id);
    out[i] = from_f<T>(load_any(table, dtype_code, id * n * D + j * D + d));
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::embedding_split(const Tensor& table, const Tensor& ids, Tensor out) {
  cuda::check_dev("embedding_split", "table", table);
  cuda::check_dtype("embedding_split", "table", table, {DType::F32, DType::F16, DType::BF16});
  cuda::check_dtype("embedding_split", "ids", ids, {DType::I32});
  cuda::check_act("embedding_split", "out", out);
  if (table.ndim != 2) fail(ErrorCode::kInvalidArgument, "embedding_split: table {} must be 2-D [V, n * D]", table.str());
  const int64_t V = table.dim(0), W = table.dim(1), n_tok = ids.numel();
  if (out.ndim != 3 || out.dim(1) != n_tok || out.dim(0) * out.dim(2) != W)
    fail(ErrorCode::kInvalidArgument, "embedding_split: out {} must be [n, {}, D] with n * D = {} (table {})", out.str(),
         n_tok, W, table.str());
  const int64_t n = out.dim(0), D = out.dim(2);
  if (n * n_tok * D == 0) return;
  const int code = table.dtype == DType::F32 ? 0 : table.dtype == DType::F16 ? 1 : 2;
  FT_DISPATCH_ACT("embedding_split", "out", out.dtype, {
    cuda::embedding_split_kernel<T><<<cuda::grid_1d(n * n_tok * D, 256), 256, 0, stream_>>>(
        table.data, code, V, ids.ptr<int32_t>(), out.ptr<T>(), n, n_tok, D);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
