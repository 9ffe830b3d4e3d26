#pragma once
// Shape checks every backend's op entry runs before its dtype/device-specific ones, written once so
// the CPU and CUDA backends reject the same inputs with the same message. Host code only: reads
// shapes and host integers, never tensor data (so it works for device tensors too).
#include "backend/ops.h"

namespace ft::op_checks {

/** rope: x [T, n_head * head_dim], positions [T], inv_freq [n_rot / 2], n_rot even in (0, head_dim].
 *  Throws ft::Error(kInvalidArgument) naming the argument. */
void rope(const RopeParams& p, const Tensor& x, const Tensor& positions);

/** matmul: w 2-D [N, K], x [T, K], y [T, N], K a whole number of w's blocks. Throws ft::Error(kInvalidArgument). */
void matmul(const Tensor& x, const Tensor& w, const Tensor& y);

/** BatchInfo index tensors are I32 with T / S / S+1 / S*max_blocks entries and no negative sizes.
 *  Throws ft::Error(kInvalidArgument) naming `op`. */
void batch(const char* op, const BatchInfo& b);

/** sample: rows and out hold logits.rows() SampleRows / SampleResults and edits (empty allowed) a whole
 *  number of LogitEdits, whose count it returns. Throws ft::Error(kInvalidArgument) naming the argument. */
int64_t sample(const Tensor& logits, const Tensor& rows, const Tensor& edits, const Tensor& out);

/** The edits' contract of Ops::sample, on host copies of its R rows and n edits over rows of V logits:
 *  every row not skipped names a range inside [0, n), the ranges are disjoint, and a range's ids lie in
 *  [0, V) and are unique. Throws ft::Error(kInvalidArgument) naming `op`. Reads its data (host code). */
void sample_edits(const char* op, const SampleRow* rows, int64_t R, const LogitEdit* edits, int64_t n, int64_t V);

/** sample's `masks`: a whole number of masks of sample_mask_words(V) words (empty allowed); returns their
 *  count M. Throws kInvalidArgument otherwise. */
int64_t sample_mask_count(const char* op, const Tensor& masks, int64_t V);

/** The masks' contract of Ops::sample on host copies of its R rows: every row that is not skipped names
 *  mask_index -1 or one of the M masks. Throws kInvalidArgument naming the row. */
void sample_mask_rows(const char* op, const SampleRow* rows, int64_t R, int64_t M);

/** moe_route's router params against logits of E experts: bias empty or F32 [E]; n_group <= 1, or
 *  E a multiple of n_group with >= 2 experts a group, topk_group in [1, n_group] and k no more than
 *  the kept groups' experts. Throws ft::Error(kInvalidArgument) naming `op`. */
void router(const char* op, const RouterParams& p, int64_t E);

/** moe_local_ids: ids and out I32 of one shape, 0 <= begin <= end <= n_expert. Throws
 *  ft::Error(kInvalidArgument) naming the argument. */
void moe_local_ids(const Tensor& ids, int32_t begin, int32_t end, int32_t n_expert, const Tensor& out);

/** attention_mla: q_lat and out [T, n_head * kv_lora_rank], q_rope [T, n_head * rope_dim], kv.k
 *  [pages, page, 1, kv_lora_rank] and kv.v [pages, page, 1, rope_dim] with equal pages and page size,
 *  positive sizes; batch as batch(). Throws ft::Error(kInvalidArgument) naming the argument. */
void attention_mla(const MlaAttentionParams& p, const BatchInfo& b, const Tensor& q_lat, const Tensor& q_rope,
                   const KvLayer& kv, const Tensor& out);

/** head_matmul: w 3-D [n_head, N, K], x [T, n_head * K], y [T, n_head * N]. Throws kInvalidArgument. */
void head_matmul(const Tensor& x, const Tensor& w, const Tensor& y);

/** kv_write: kv.k and kv.v 4-D with equal pages and page size; k [T, Wk] and v [T, Wv] with their
 *  widths; batch as batch(). Throws ft::Error(kInvalidArgument) naming `op` and the argument. */
void kv_write(const char* op, const BatchInfo& b, const Tensor& k, const Tensor& v, const KvLayer& kv);

/** attention's p.sinks: empty, or F32 1-D [p.n_head]. Throws ft::Error(kInvalidArgument) naming `op`. */
void attention_sinks(const char* op, const AttentionParams& p);

/** moe_experts' bank beyond its matrices: kSwiglu, kGeluTanh, kSwigluOai with a finite alpha and a limit > 0, or
 *  kSwigluClamp with a limit > 0;
 *  each bias empty or F32 2-D with n_expert rows: gate_bias, up_bias [E, F] (F = expert 0's gate
 *  rows), down_bias [E, H]. Throws ft::Error(kInvalidArgument) naming `op` and the field. */
void expert_bank_extras(const char* op, const ExpertBank& bank, int64_t H);

/** ssm_conv: x and out [T, C] of one dtype, w [C, K] F32 with K >= 2, conv_state F32 3-D
 *  [n_slots, K-1, C], batch as batch() with state_slots I32 [S]. Throws kInvalidArgument naming the
 *  argument. Returns K. */
int64_t ssm_conv(const BatchInfo& b, const Tensor& x, const Tensor& w, const Tensor& conv_state, const Tensor& out);

/** gated_delta_rule: positive head counts and dims, n_v_heads a multiple of n_k_heads, a_log and
 *  dt_bias F32 [Hv], qkv [T, 2 Hk dk + Hv dv], a and b [T, Hv] (F32 or qkv's dtype, one dtype),
 *  out [T, Hv dv] of qkv's dtype,
 *  ssm_state F32 [n_slots, Hv, dk, dv], batch as batch() with state_slots I32 [S]. Throws
 *  kInvalidArgument naming the argument. */
void gated_delta_rule(const GatedDeltaParams& p, const BatchInfo& b, const Tensor& qkv, const Tensor& a,
                      const Tensor& beta, const Tensor& ssm_state, const Tensor& out);

/** ple_gate: value [T, D] with D >= 1; key, query and out [T, n * D]; w n * D values.
 *  Throws ft::Error(kInvalidArgument) naming every argument. */
void ple_gate(const Tensor& key, const Tensor& query, const Tensor& w, const Tensor& value, const Tensor& out);

/** stream_weighted_sum: out [T, D] with D >= 1; x [T, n * D]; w n * D values.
 *  Throws ft::Error(kInvalidArgument) naming every argument. */
void stream_weighted_sum(const Tensor& x, const Tensor& w, const Tensor& out);

/** attention_qsa: n_head a positive multiple of n_head_kv, head_dim and block positive; q and out
 *  [T, n_head * head_dim], selected 2-D [T, K], kv.k [pages, page, n_head_kv, head_dim] and kv.v 4-D
 *  with kv.k's pages and page size and at least n_head_kv * head_dim values a token; batch as batch().
 *  Throws ft::Error(kInvalidArgument) naming the argument. */
void attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& b, const Tensor& q, const KvLayer& kv,
                   const Tensor& selected, const Tensor& out);

}  // namespace ft::op_checks
