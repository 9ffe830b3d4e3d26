#pragma once
// Device helpers shared by the attention_mla kernels (attention_mla.cu, attention_mla_tc.cu): the
// split plan of MlaArgs evaluated for one token, the block's rows, and 16-byte page-row loads.
#include "backend/cuda/attention_mla.h"
#include "backend/cuda/common.cuh"

namespace ft::cuda {

/** Keys per split piece for a token at position p under a's plan (MlaArgs::per_token). */
__device__ __forceinline__ int64_t mla_piece(const MlaArgs& a, int64_t p) {
  if (!a.per_token) return a.split_len;
  int64_t per = (p + a.n_split) / a.n_split;  // ceil((p + 1) / n_split)
  per = per < kMlaMinKeys ? kMlaMinKeys : per;
  return (per + kMlaTile - 1) / kMlaTile * kMlaTile;
}

/** Split pieces holding any of the keys 0..p (0 when p < 0). */
__device__ __forceinline__ int mla_active(const MlaArgs& a, int64_t p, int64_t per) {
  if (p < 0) return 0;
  const int64_t n = p / per + 1;
  return n < a.n_split ? static_cast<int>(n) : a.n_split;
}

/** Row (page * page_size + slot) of key j of the sequence whose block table is `table`, or -1 when
 *  the block or page is out of range (such keys read as zeros, as in the GQA kernels). */
__device__ __forceinline__ int64_t mla_page_row(const MlaArgs& a, const int32_t* table, int64_t j) {
  const uint32_t ps = static_cast<uint32_t>(a.page_size);
  const uint32_t blk = static_cast<uint32_t>(j) / ps, slot = static_cast<uint32_t>(j) - blk * ps;  // positions < 2^31
  const int64_t page = blk < static_cast<uint32_t>(a.max_blocks) ? table[blk] : -1;
  return page >= 0 && page < a.n_pages ? page * a.page_size + slot : -1;
}

/** The block's rows: row r < a.rows is token t0 + r / hc, head hchunk * hc + r % hc. Sets tok (-1: no
 *  such token or head), head, seq (-1 also for a token whose sequence or position is invalid) and pos. */
__device__ __forceinline__ void mla_row(const MlaArgs& a, int r, int64_t t0, int hchunk, int& tok, int& head, int& seq,
                                        int& pos) {
  const int64_t t = t0 + r / a.hc;
  head = hchunk * a.hc + r % a.hc;
  const bool valid = r / a.hc < a.nt && t < a.T && head < a.H;
  tok = valid ? static_cast<int>(t) : -1;
  const int s = valid ? a.seq[t] : -1, p = valid ? a.pos[t] : -1;
  const bool ok = s >= 0 && s < a.n_seqs && p >= 0;
  seq = ok ? s : -1;
  pos = ok ? p : -1;
}

/** Stores one output element of row `row` (t * H + h), dim d. */
__device__ __forceinline__ void mla_store(const MlaArgs& a, int64_t row, int d, float v) {
  const int64_t i = row * a.R + d;
  if (a.out_f32) static_cast<float*>(a.out)[i] = v;
  else static_cast<bf16*>(a.out)[i] = __float2bfloat16_rn(v);
}

}  // namespace ft::cuda
