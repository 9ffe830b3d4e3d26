#pragma once
// The kernels of Ops::attention_mla (latent-space multi-head latent attention) as the op entry
// (attention_mla.cu) launches them: a CUDA-core kernel with exact fp32 products (attention_mla.cu)
// and a tensor-core kernel (attention_mla_tc.cu), both followed by a merge of their key-range splits
// when the plan has several. Host code of the CUDA backend only (plain data, no device code).
#include <cuda_runtime.h>

#include <cstdint>

namespace ft::cuda {

/** The tensors of one attention_mla call as device pointers, and the launch plan. */
struct MlaArgs {
  const void* q_lat = nullptr;   // [T, H * R]
  const void* q_rope = nullptr;  // [T, H * P], q_lat's dtype
  bool q_f32 = false;            // F32, else BF16
  void* out = nullptr;           // [T, H * R] F32 (out_f32) or BF16
  bool out_f32 = false;
  const void* c = nullptr;       // latent pages [n_pages, page_size, R] F32 (kv_f32) or BF16, or codes (kv_form)
  const void* r = nullptr;       // RoPE-key pages [n_pages, page_size, P], c's dtype
  bool kv_f32 = false;           // not BF16 pages: F32, or quantized (kv_form)
  /** kKvFloat (attention_args.h), or kKvFp8 / kKvQ8: c and r hold one-byte codes and these their
   *  scales (KvLayer::k_scale / ::v_scale, c_sph / r_sph a row: 1 for fp8, ceil(R or P / 32) for
   *  q8_0; kv_quant.cuh). Quantized pages take the CUDA-core kernel (the tensor-core one when
   *  MlaTuning::tc is 1). */
  int kv_form = 0;
  const void* c_scale = nullptr;
  const void* r_scale = nullptr;
  int c_sph = 0, r_sph = 0;
  int64_t T = 0;
  int H = 0, R = 0, P = 0;
  float scale_log2 = 0.0f;       // scale * log2(e): the kernels' softmax is base 2
  int64_t page_size = 0, n_pages = 0;
  const int32_t* pos = nullptr;  // [T]
  const int32_t* seq = nullptr;  // [T]
  int64_t n_seqs = 0;
  const int32_t* bt = nullptr;   // [n_seqs, max_blocks]
  int max_blocks = 0;
  // ---- plan (set by the entry) ----
  int rows = 16;                 // query rows (token, head) per block: 16 (CUDA-core), 16 * row tiles (tensor-core)
  int nt = 1, hc = 1, n_hchunks = 1;  // a block's rows: nt consecutive tokens x hc heads (chunk blockIdx.y)
  int n_split = 1;               // blocks over the key range (grid z)
  /** Key-range pieces. per_token (decode, nt == 1): each token's range 0..p in pieces of
   *  max(kMlaMinKeys, ceil((p + 1) / n_split)) keys rounded up to kMlaTile, so the plan depends only on
   *  the token's position and n_split, never on the batch; else pieces of split_len keys (absolute). */
  bool per_token = false;
  int split_len = 1 << 30;
  /** [n_split, T * H, R + 4] when n_split > 1: per (split, row) m (base 2), l, 2 unused, o[R]. A row whose
   *  range is one piece is written to out directly by its kernel, and the merge leaves it. */
  float* part = nullptr;
};

/** Keys per shared-memory tile of both kernels; split pieces are whole tiles. */
constexpr int kMlaTile = 32;
/** Fewest keys a per-token split piece takes. */
constexpr int kMlaMinKeys = 64;
/** Most blocks a token's key range is split over. */
constexpr int kMlaMaxSplits = 64;

/** Whether the CUDA-core kernel handles R (kv_lora_rank) and P (rope_dim): R in {32, 64, 128, 256, 512},
 *  P a multiple of 4, R + P <= 1152. */
bool mla_core_supports(int64_t R, int64_t P);
/** Whether the tensor-core kernel handles them: R in {32, 64, 128, 256, 512}, P a multiple of 8, R + P <= 640. */
bool mla_tc_supports(int64_t R, int64_t P);

/** Queues the CUDA-core kernel (grid (ceil(T / nt), n_hchunks, n_split), 128 threads; a.rows == 16). */
void launch_mla_core(const MlaArgs& a, cudaStream_t stream);
/** Queues the tensor-core kernel (grid as above, 8 * a.rows threads: 4 warps per 16 rows; a.rows 16, 32 or 64). */
void launch_mla_tc(const MlaArgs& a, cudaStream_t stream);
/** Queues the merge of a.part into a.out (one block per (token, head)); only when a.n_split > 1. */
void launch_mla_merge(const MlaArgs& a, cudaStream_t stream);

/** Diagnostic overrides of the plan (tests and benchmarks; 0: the entry's choice). Not thread-safe:
 *  set them before the op runs. */
struct MlaTuning {
  int tc = -1;       // 1: tensor-core kernel whenever it supports the shape (quantized pages too); 0: never; -1: the entry's choice
  int row_tiles = 0; // tensor-core rows per block / 16: 1, 2 or 4
  int n_split = 0;   // splits of a decode batch
};
MlaTuning& mla_tuning();

}  // namespace ft::cuda
