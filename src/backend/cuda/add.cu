// add: out = a + b elementwise; a, b, out of equal shape and one activation dtype (F32 or BF16);
// out may alias a or b. Bytes moved: 3 * numel * element size.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/pdl.cuh"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  pdl_enter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(to_f(a[i]) + to_f(b[i]));
}

}  // namespace
}  // namespace cuda

void CudaOps::add(const Tensor& a, const Tensor& b, Tensor out) {
  cuda::check_act("add", "a", a);
  cuda::check_act("add", "b", b);
  cuda::check_act("add", "out", out);
  cuda::check_same_shape("add", "b", b, a);
  cuda::check_same_shape("add", "out", out, a);
  cuda::check_same_dtype("add", "b", b, a);
  cuda::check_same_dtype("add", "out", out, a);
  const int64_t n = a.numel();
  if (n == 0) return;
  FT_DISPATCH_ACT("add", "a", a.dtype, {
    cuda::launch_pdl(cuda::add_kernel<T>, cuda::grid_1d(n, 256), 256, 0, stream_, a.ptr<T>(), b.ptr<T>(), out.ptr<T>(),
                     n);
  });
}

}  // namespace ft
