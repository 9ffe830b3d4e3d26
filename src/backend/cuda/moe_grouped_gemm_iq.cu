// Grouped expert GEMM instantiations for the codebook I-quants (decoders in dequant_iq.cuh); kernel
// in moe_grouped_gemm.cuh, dispatch in moe_grouped_gemm.cu.
#include "backend/cuda/dequant_iq.cuh"
#include "backend/cuda/moe_grouped_gemm.cuh"

namespace ft::cuda {

FT_CUDA_IQ_WEIGHT_TYPES(FT_INSTANTIATE_GROUPED_GEMM_, _)

}  // namespace ft::cuda
