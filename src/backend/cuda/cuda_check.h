#pragma once
// Error checks for CUDA runtime and cuBLAS calls (host code of the CUDA backend).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "util/error.h"

/** Throws ft::Error(kInternal) naming the call when a CUDA runtime call fails. */
#define FT_CUDA_CHECK(expr)                                                                              \
  do {                                                                                                   \
    cudaError_t ft_err_ = (expr);                                                                        \
    if (ft_err_ != cudaSuccess)                                                                          \
      ::ft::fail(::ft::ErrorCode::kInternal, "CUDA error {} ({}) in {} at {}:{}", static_cast<int>(ft_err_), \
                 cudaGetErrorString(ft_err_), #expr, __FILE__, __LINE__);                                \
  } while (0)

/** Checks the launch just issued (bad configurations surface here, faults at the next sync). Takes
 *  the error (cudaGetLastError), so one failed launch is reported once, not again by every later check. */
#define FT_CUDA_LAUNCH_CHECK() FT_CUDA_CHECK(cudaGetLastError())

/** Throws ft::Error(kInternal) naming the call when a cuBLAS call fails. */
#define FT_CUBLAS_CHECK(expr)                                                                            \
  do {                                                                                                   \
    cublasStatus_t ft_st_ = (expr);                                                                      \
    if (ft_st_ != CUBLAS_STATUS_SUCCESS)                                                                 \
      ::ft::fail(::ft::ErrorCode::kInternal, "cuBLAS error {} in {} at {}:{}", static_cast<int>(ft_st_), #expr, \
                 __FILE__, __LINE__);                                                                    \
  } while (0)
