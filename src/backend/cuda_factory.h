#pragma once
// Entry point to the CUDA backend that compiles in every build: code outside backend/cuda (engine,
// tests, cli) creates the backend through this header and never includes CUDA headers.
#include <memory>

#include "backend/ops.h"

namespace ft {

/** The CUDA backend on device `device` with `activations` (BF16 or F32) as its activation dtype
 *  (see backend/cuda/cuda_ops.h). Throws ft::Error(kUnsupported) in a build without CUDA,
 *  kInvalidArgument when `device` is not a visible CUDA device. */
std::unique_ptr<Ops> make_cuda_ops(int device = 0, DType activations = DType::F32);

}  // namespace ft
