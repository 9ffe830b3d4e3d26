#pragma once
// Which weight dtypes the CUDA backend's kernels read (matmul, the experts' GEMV and grouped GEMM,
// embedding), for refusing a file at load instead of at its first request. Compiles in every build;
// code outside backend/cuda asks here and never includes CUDA headers.
#include <string>

#include "tensor/dtype.h"

namespace ft {

/** Whether the CUDA kernels read weights of `t` (backend/cuda/dequant.cuh cuda_weight_type). False in
 *  a build without CUDA. */
bool cuda_has_weight_kernel(DType t);

/** The weight dtypes cuda_has_weight_kernel accepts, for messages ("F32, F16, BF16, Q4_0, ..."). */
std::string cuda_weight_kernel_types();

}  // namespace ft
