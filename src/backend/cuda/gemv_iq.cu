// GEMV instantiations for the codebook I-quants IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M
// (decoders in dequant_iq.cuh, kernel in gemv.cuh).
#include "backend/cuda/dequant_iq.cuh"
#include "backend/cuda/gemv.cuh"

namespace ft::cuda {

FT_CUDA_IQ_WEIGHT_TYPES(FT_INSTANTIATE_GEMV_, _)

}  // namespace ft::cuda
