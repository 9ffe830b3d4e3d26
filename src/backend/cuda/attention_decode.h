#pragma once
// The decode attention kernel (attention_decode.cu), launched by CudaOps::attention when every
// sequence of the batch contributes one token. Host code of the CUDA backend only.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention_args.h"

namespace ft::cuda {

/** Arguments of the decode kernel: the call's tensors and the split plan. */
struct AttnDecodeArgs : AttnTensors {
  int n_split = 0, split_len = 0;  // split s covers keys [s * split_len, (s + 1) * split_len) (the last: to the end)
  float* part = nullptr;           // [n_split, T * H, D + 2]: m, l, o[D] per (split, token, head)
};

/** Whether the kernel handles these heads: head_dim a multiple of 4 up to 128 (or of 8 up to 256),
 *  query heads per kv head 1, 2, 4 or 8. */
bool attention_decode_supports(int64_t n_head, int64_t n_head_kv, int64_t head_dim);

/** Queues the kernel on `stream`: grid (T, G, n_split), 128 threads; writes the partials of every
 *  split that starts at or before each token's position. Throws kInternal on a launch error. */
void launch_attention_decode(const AttnDecodeArgs& a, cudaStream_t stream);

}  // namespace ft::cuda
