#pragma once
// The tensor-core prefill attention kernel (attention_tc.cu), launched by CudaOps::attention for
// long prefill batches. Host code of the CUDA backend only.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

/** Arguments of the tensor-core attention: the same tensors as Ops::attention (device pointers). */
struct AttnTcArgs {
  const void* q;            // [T, H * D], dtype code q_code (float_code)
  int q_code;
  void* out;                // [T, H * D] F32 (out_f32) or BF16
  bool out_f32;
  const void* k;            // [n_pages, page_size, G, D] F32 (kv_f32) or BF16
  const void* v;
  bool kv_f32;
  int64_t T;
  int H, G, D;
  float scale;
  int window;               // > 0: sliding window
  int64_t page_size, n_pages;
  const int32_t* pos;       // [T]
  const int32_t* seq;       // [T]
  int64_t n_seqs;
  const int32_t* bt;        // [n_seqs, max_blocks]
  int max_blocks;
};

/** Whether the kernel handles `head_dim` (64, 96 or 128). */
bool attention_tc_supports(int64_t head_dim);

/** Queues the kernel on `stream`: 256 threads per block of 16 x (8 / HW) tokens x HW query heads (HW
 *  = 4, 2 or 1, dividing n_head / n_head_kv). Throws kInternal on a launch error. */
void launch_attention_tc(const AttnTcArgs& a, cudaStream_t stream);

}  // namespace ft::cuda
