// topk: the k largest entries of each row, descending, ties to the lower column, NaN last.
// x [R, C] F32 or BF16; ids I32 [R, k]; values F32 [R, k]. One block per row (block_topk in
// topk.cuh): bytes moved k * R * C * element size (re-reads hit L1/L2) + outputs.
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/topk.cuh"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void topk_kernel(const T* x, int64_t C, int k, int32_t* ids, float* values) {
  const int64_t r = blockIdx.x;
  const T* row = x + r * C;
  block_topk([&](int c) { return to_f(row[c]); }, static_cast<int>(C), k, [&](int j, int idx, float v) {
    ids[r * k + j] = idx;
    values[r * k + j] = v;
  });
}

}  // namespace
}  // namespace cuda

void CudaOps::topk(const Tensor& x, int32_t k, Tensor ids, Tensor values) {
  cuda::check_act("topk", "x", x);
  cuda::check_dtype("topk", "ids", ids, {DType::I32});
  cuda::check_dtype("topk", "values", values, {DType::F32});
  const int64_t R = x.rows(), C = x.cols();
  if (k < 1 || k > C) fail(ErrorCode::kInvalidArgument, "topk: k = {} must be in [1, {}] for x {}", k, C, x.str());
  if (C > INT_MAX) fail(ErrorCode::kInvalidArgument, "topk: row length {} of x is too large", C);
  if (ids.rows() != R || ids.cols() != k)
    fail(ErrorCode::kInvalidArgument, "topk: ids {} must be [{}, {}]", ids.str(), R, k);
  if (values.rows() != R || values.cols() != k)
    fail(ErrorCode::kInvalidArgument, "topk: values {} must be [{}, {}]", values.str(), R, k);
  if (R == 0) return;
  FT_DISPATCH_ACT("topk", "x", x.dtype, {
    cuda::topk_kernel<T><<<static_cast<unsigned>(R), 256, 0, stream_>>>(x.ptr<T>(), C, k, ids.ptr<int32_t>(),
                                                                        values.ptr<float>());
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
