#pragma once
// The decode attention kernel (attention_decode.cu), launched by CudaOps::attention when every
// sequence of the batch contributes one token. Host code of the CUDA backend only.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/attention_args.h"

namespace ft::cuda {

/** The QK-norm and rotation the decode kernel applies itself (qk_norm_rope_attention): q of
 *  AttnTensors and k, v here are the projections' outputs, and the kernel stores the token's k (normalised,
 *  rotated) and v into the pages. */
struct DecodeNormRope {
  const void* k = nullptr;  // [T, G * D], q's dtype
  const void* v = nullptr;  // [T, G * D], q's dtype
  const void* wq = nullptr;  // [D] norm weights, dtype codes as load_any
  const void* wk = nullptr;
  int wq_code = 0, wk_code = 0;
  float eps = 0.0f, offset = 0.0f;
  const float* inv_freq = nullptr;  // [n_rot / 2]
  int n_rot = 0;
  bool neox = true;
  float attn_factor = 1.0f;
};

/** Arguments of the decode kernel: the call's tensors and the split plan. */
struct AttnDecodeArgs : AttnTensors {
  int n_split = 0;        // blocks per (token, kv head) sharing the token's key range (decode_splits)
  float* part = nullptr;  // [n_split, T * H, D + 4]: m, l, 2 unused, o[D] per (split, token, head); null: cluster
  int* done = nullptr;    // [T * G * 4] counters, zero before the launch and left zero after it; null: cluster
  int hs_log2 = 0;        // blocks per (token, kv head, split) = 1 << hs_log2 (set by the launcher)
  bool fused = false;     // apply nr (QK-norm, RoPE, the token's KV store) first
  DecodeNormRope nr;
  /** Where the output's int8 form goes as well (q8_act.cuh, Q8Layout(T, H * D)), or null; only when
   *  attention_decode_writes_q8. */
  int8_t* q8 = nullptr;
  /** Cluster merge (n_split == kDecodeClusterSplits, launched as one thread-block cluster per (token,
   *  block of query heads)): the splits' partials merge through distributed shared memory in the
   *  cluster's first block instead of through global memory and the last block (decode_plan). */
  bool cluster = false;
};

/** Blocks per cluster in cluster mode: every token's range splits over these (a non-portable size). */
constexpr int kDecodeClusterSplits = 16;
/** Cluster mode serves batches of at most this many tokens whose longest key range (BatchInfo::max_kv_len)
 *  is at most kDecodeClusterKeys (128 keys per block); longer ranges keep more, shorter splits. On the
 *  H200 (qwen3-30b-a3b) the cluster form was faster at 1.5-1.8k keys (+1-3%) and slower at 3k (-8%). */
constexpr int kDecodeClusterMaxTokens = 16;
constexpr int kDecodeClusterKeys = 2048;

/** Splits per (token, kv head) for a decode batch of T tokens over a pool of `capacity` keys: many
 *  for small batches (one sequence must still fill the GPU), fewer as T grows, so the partials
 *  (n_split * T * n_head * (head_dim + 4) * 4 bytes) stay near 35 MB for 32 heads of 128 (about 70 MB
 *  for 64 heads, 140 MB at T = 512). Depends on T only through power-of-two thresholds, so a batch
 *  padded to a graph's size gets the splits eager decode gets. */
int decode_splits(int64_t T, int64_t capacity);

/** Whether the kernel handles these heads: head_dim a multiple of 4 up to 128 (of 8 up to 256, of 16 up to 512),
 *  query heads per kv head 1, 2, 4 or 8. */
bool attention_decode_supports(int64_t n_head, int64_t n_head_kv, int64_t head_dim);

/** Whether the kernel can also write its output's int8 form (AttnDecodeArgs::q8): the lanes holding a
 *  block's output slices (4 dims each) must make whole warps and 32-element chunks, i.e. the block's
 *  query heads times head_dim a multiple of 128 (head_dim a multiple of 64 with two heads per block,
 *  of 128 with one). */
bool attention_decode_writes_q8(int64_t n_head, int64_t n_head_kv, int64_t head_dim);

/** Whether the kernel can apply the QK-norm and rotation itself (AttnDecodeArgs::fused): head_dim
 *  32 * 4 or 32 * 8 (a lane holds 4 or 8 dims), and a rotation whose pairs are within a lane (normal
 *  mode) or a power-of-two number of lanes apart (NeoX: n_rot / 2 a multiple of the lane's dims). */
bool attention_decode_fuses(int64_t head_dim, int64_t n_rot, bool neox);

/** Queues the kernel on `stream`: grid (T, G << hs_log2, n_split), 128 threads; writes `out` for every token
 *  with a valid sequence and position (through the partials when its range spans several splits), and
 *  when fused also the token's k and v rows of the pages.
 *  Throws kInternal on a launch error. */
void launch_attention_decode(const AttnDecodeArgs& a, cudaStream_t stream);

}  // namespace ft::cuda
