// GEMV instantiations for F32, F16, BF16 weights (kernel in gemv.cuh).
#include "backend/cuda/gemv.cuh"

namespace ft::cuda {

template void launch_gemv_t<DType::F32>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::F16>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::BF16>(int, bool, const GemvArgs&, int64_t, cudaStream_t);

}  // namespace ft::cuda
