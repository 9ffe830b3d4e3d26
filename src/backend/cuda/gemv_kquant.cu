// GEMV instantiations for 256-element super-block types (Q2_K .. Q6_K, IQ4_XS) weights (kernel in gemv.cuh).
#include "backend/cuda/gemv.cuh"

namespace ft::cuda {

template void launch_gemv_t<DType::Q2_K>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::Q3_K>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::Q4_K>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::Q5_K>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::Q6_K>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
template void launch_gemv_t<DType::IQ4_XS>(int, bool, const GemvArgs&, int64_t, cudaStream_t);

}  // namespace ft::cuda
