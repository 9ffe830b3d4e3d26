#pragma once
// The decode attention kernel (attention_decode.cu), launched by CudaOps::attention when every
// sequence of the batch contributes one token. Host code of the CUDA backend only.
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

/** Arguments of the decode kernel: Ops::attention's tensors (device pointers) and the split plan. */
struct AttnDecodeArgs {
  const void* q;            // [T, H * D], dtype code q_code (float_code)
  int q_code;
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
  int n_split, split_len;   // split s covers keys [s * split_len, (s + 1) * split_len) (the last: to the end)
  float* part;              // [n_split, T * H, D + 2]: m, l, o[D] per (split, token, head)
};

/** Whether the kernel handles these heads: head_dim a multiple of 4 up to 128 (or of 8 up to 256),
 *  query heads per kv head 1, 2, 4 or 8. */
bool attention_decode_supports(int64_t n_head, int64_t n_head_kv, int64_t head_dim);

/** Queues the kernel on `stream`: grid (T, G, n_split), 128 threads; writes the partials of every
 *  split that starts at or before each token's position. Throws kInternal on a launch error. */
void launch_attention_decode(const AttnDecodeArgs& a, cudaStream_t stream);

}  // namespace ft::cuda
