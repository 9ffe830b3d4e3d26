// GEMV instantiations for 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4) weights (kernel in gemv.cuh).
#include "backend/cuda/gemv.cuh"

namespace ft::cuda {

template void launch_gemv_t<DType::Q4_0>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::Q4_1>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::Q5_0>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::Q5_1>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::Q8_0>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::IQ4_NL>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::MXFP4>(int, bool, const GemvArgs&, int64_t, cudaStream_t);

}  // namespace ft::cuda
