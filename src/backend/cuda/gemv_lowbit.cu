// GEMV instantiations for Q1_0, Q2_0, TQ1_0, TQ2_0, NVFP4, F8_E4M3_B32, F8_E4M3_B16, NVFP4_G64 and
// NVFP4_G16 (decoders in dequant_lowbit.cuh, kernel in gemv.cuh).
#include "backend/cuda/dequant_lowbit.cuh"
#include "backend/cuda/gemv.cuh"

namespace ft::cuda {

FT_CUDA_LOWBIT_WEIGHT_TYPES(FT_INSTANTIATE_GEMV_, _)

}  // namespace ft::cuda
