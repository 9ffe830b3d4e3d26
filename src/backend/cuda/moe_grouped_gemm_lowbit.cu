// Grouped expert GEMM instantiations for Q1_0, Q2_0, TQ1_0, TQ2_0, NVFP4 and the FP8 and NVFP4_G64 /
// NVFP4_G16 forms (decoders in dequant_lowbit.cuh); kernel in moe_grouped_gemm.cuh, dispatch in
// moe_grouped_gemm.cu.
#include "backend/cuda/dequant_lowbit.cuh"
#include "backend/cuda/moe_grouped_gemm.cuh"

namespace ft::cuda {

FT_CUDA_LOWBIT_WEIGHT_TYPES(FT_INSTANTIATE_GROUPED_GEMM_, _)

}  // namespace ft::cuda
