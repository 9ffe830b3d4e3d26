#pragma once
// The tensor-core prefill attention kernel (attention_tc.cu), launched by CudaOps::attention for
// long prefill batches. Host code of the CUDA backend only.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention_args.h"

namespace ft::cuda {

/** The tensor-core kernel takes the call's tensors as they are. */
using AttnTcArgs = AttnTensors;

/** Whether the kernel handles `head_dim` (64, 96 or 128). */
bool attention_tc_supports(int64_t head_dim);

/** Queues the kernel on `stream`: 256 threads per block of 16 x (8 / HW) tokens x HW query heads (HW
 *  = 4, 2 or 1, dividing n_head / n_head_kv). Throws kInternal on a launch error. */
void launch_attention_tc(const AttnTcArgs& a, cudaStream_t stream);

}  // namespace ft::cuda
