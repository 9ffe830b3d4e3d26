// dequant_rows instantiations (kernel in dequant_rows.cuh) for the codebook I-quants
// (dequant_iq.cuh) and the 1-/2-bit, ternary, NVFP4 and FP8 types (dequant_lowbit.cuh); dequant.cu
// dispatches to them.
#include "backend/cuda/dequant_iq.cuh"
#include "backend/cuda/dequant_lowbit.cuh"
#include "backend/cuda/dequant_rows.cuh"

namespace ft::cuda {

FT_CUDA_IQ_WEIGHT_TYPES(FT_INSTANTIATE_DEQUANT_ROWS_, _)
FT_CUDA_LOWBIT_WEIGHT_TYPES(FT_INSTANTIATE_DEQUANT_ROWS_, _)

}  // namespace ft::cuda
