// moe_local_ids: expert parallelism's routes masked to one rank's block of experts [begin, end):
// out[i] = ids[i] - begin inside the block, else -1. ids, out I32 of one shape on the device (may
// alias); the kernel reads the ids, so a recorded graph masks each replay's routes. An id >= n_expert
// cannot be reported from inside a graph: it becomes -1 (routed nowhere; the CPU op rejects it).
// Bytes moved: 8 per entry.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/op_checks.h"

namespace ft {
namespace cuda {
namespace {

__global__ void moe_local_ids_kernel(const int32_t* ids, int32_t begin, int32_t end, int32_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t e = ids[i];
    out[i] = e >= begin && e < end ? e - begin : -1;  // end <= n_expert: a bad id lands outside
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::moe_local_ids(const Tensor& ids, int32_t begin, int32_t end, int32_t n_expert, Tensor out) {
  op_checks::moe_local_ids(ids, begin, end, n_expert, out);
  const int64_t n = ids.numel();
  if (n == 0) return;
  cuda::check_dev("moe_local_ids", "ids", ids);
  cuda::check_dev("moe_local_ids", "out", out);
  cuda::moe_local_ids_kernel<<<cuda::grid_1d(n, 256), 256, 0, stream_>>>(ids.ptr<int32_t>(), begin, end,
                                                                         out.ptr<int32_t>(), n);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
