#include "backend/op_checks.h"

#include <cmath>
#include <vector>

#include "util/error.h"

namespace ft::op_checks {
namespace {

void want_i32(const char* op, const char* arg, const Tensor& t) {
  if (t.dtype != DType::I32)
    fail(ErrorCode::kInvalidArgument, "{}: {} {} must be I32", op, arg, t.str());
}

}  // namespace

void rope(const RopeParams& p, const Tensor& x, const Tensor& positions) {
  const int64_t T = x.rows(), W = x.cols(), hd = p.head_dim, n_rot = p.n_rot;
  if (hd <= 0 || W % hd != 0)
    fail(ErrorCode::kInvalidArgument, "rope: row length {} of x {} is not a multiple of head_dim {}", W, x.str(), hd);
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > hd)
    fail(ErrorCode::kInvalidArgument, "rope: n_rot {} must be even and in (0, head_dim {}]", n_rot, hd);
  if (p.inv_freq.numel() != n_rot / 2)
    fail(ErrorCode::kInvalidArgument, "rope: inv_freq {} must have n_rot/2 = {} entries", p.inv_freq.str(), n_rot / 2);
  if (positions.numel() != T)
    fail(ErrorCode::kInvalidArgument, "rope: positions {} must have one entry per row of x {}", positions.str(),
         x.str());
}


void matmul(const Tensor& x, const Tensor& w, const Tensor& y) {
  if (w.ndim != 2) fail(ErrorCode::kInvalidArgument, "matmul: w {} must be 2-D [N, K]", w.str());
  const int64_t N = w.dim(0), K = w.dim(1), T = x.rows();
  if (x.cols() != K)
    fail(ErrorCode::kInvalidArgument, "matmul: w {} does not match x {} (K = {} vs {})", w.str(), x.str(), K, x.cols());
  if (y.rows() != T || y.cols() != N)
    fail(ErrorCode::kInvalidArgument, "matmul: y {} must be [{}, {}] for x {} and w {}", y.str(), T, N, x.str(),
         w.str());
  if (K % dtype_info(w.dtype).block_size != 0)
    fail(ErrorCode::kInvalidArgument, "matmul: w {} row length is not a whole number of {} blocks", w.str(),
         dtype_name(w.dtype));
}

void batch(const char* op, const BatchInfo& b) {
  want_i32(op, "batch.positions", b.positions);
  want_i32(op, "batch.seq_index", b.seq_index);
  want_i32(op, "batch.seq_start", b.seq_start);
  want_i32(op, "batch.block_tables", b.block_tables);
  const int64_t T = b.n_tokens, S = b.n_seqs;
  if (T < 0 || S < 0 || b.max_blocks < 0 || b.max_kv_len < 0)
    fail(ErrorCode::kInvalidArgument, "{}: batch has negative sizes (T={}, S={}, max_blocks={}, max_kv_len={})", op, T,
         S, b.max_blocks, b.max_kv_len);
  if (b.positions.numel() != T || b.seq_index.numel() != T || b.seq_start.numel() != S + 1 ||
      b.block_tables.numel() != S * static_cast<int64_t>(b.max_blocks))
    fail(ErrorCode::kInvalidArgument,
         "{}: batch index shapes positions {}, seq_index {}, seq_start {}, block_tables {} do not fit T={}, S={}, "
         "max_blocks={}",
         op, b.positions.shape_str(), b.seq_index.shape_str(), b.seq_start.shape_str(), b.block_tables.shape_str(), T,
         S, b.max_blocks);
}

int64_t sample(const Tensor& logits, const Tensor& rows, const Tensor& edits, const Tensor& out) {
  const int64_t R = logits.rows();
  if (rows.bytes() != R * static_cast<int64_t>(sizeof(SampleRow)))
    fail(ErrorCode::kInvalidArgument, "sample: rows holds {} bytes, expected {} rows of {}", rows.bytes(), R,
         sizeof(SampleRow));
  if (out.bytes() != R * static_cast<int64_t>(sizeof(SampleResult)))
    fail(ErrorCode::kInvalidArgument, "sample: out holds {} bytes, expected {} rows of {}", out.bytes(), R,
         sizeof(SampleResult));
  if (edits.empty()) return 0;
  if (edits.bytes() % static_cast<int64_t>(sizeof(LogitEdit)) != 0)
    fail(ErrorCode::kInvalidArgument, "sample: edits holds {} bytes, not a whole number of edits", edits.bytes());
  return edits.bytes() / static_cast<int64_t>(sizeof(LogitEdit));
}

void sample_edits(const char* op, const SampleRow* rows, int64_t R, const LogitEdit* edits, int64_t n, int64_t V) {
  thread_local std::vector<int32_t> owner;   // [n] the row holding each edit
  thread_local std::vector<int64_t> stamp;   // [V] the last row (stamp) that edited each id
  thread_local int64_t stamps = 0;
  owner.assign(static_cast<size_t>(n), -1);
  if (static_cast<int64_t>(stamp.size()) < V) stamp.assign(static_cast<size_t>(V), -1);
  for (int64_t r = 0; r < R; ++r) {
    const SampleRow& row = rows[r];
    if (row.skip) continue;
    if (row.edit_begin < 0 || row.edit_end < row.edit_begin || row.edit_end > n)
      fail(ErrorCode::kInvalidArgument, "{}: sampling row {} names edits [{}, {}) of {}", op, r, row.edit_begin,
           row.edit_end, n);
    const int64_t mark = ++stamps;
    for (int32_t j = row.edit_begin; j < row.edit_end; ++j) {
      int32_t& o = owner[static_cast<size_t>(j)];
      if (o >= 0) fail(ErrorCode::kInvalidArgument, "{}: sampling rows {} and {} share edit {}", op, o, r, j);
      o = static_cast<int32_t>(r);
      const int32_t id = edits[j].id;
      if (id < 0 || id >= V)
        fail(ErrorCode::kInvalidArgument, "{}: sampling row {} edits token {}, outside the vocabulary [0, {})", op, r,
             id, V);
      if (stamp[static_cast<size_t>(id)] == mark)
        fail(ErrorCode::kInvalidArgument, "{}: sampling row {} edits token {} twice", op, r, id);
      stamp[static_cast<size_t>(id)] = mark;
    }
  }
}

int64_t sample_mask_count(const char* op, const Tensor& masks, int64_t V) {
  if (masks.empty()) return 0;
  const int64_t mask_bytes = sample_mask_words(V) * 4;
  if (masks.bytes() % mask_bytes != 0)
    fail(ErrorCode::kInvalidArgument, "{}: masks hold {} bytes, not a whole number of {}-byte masks over {} ids", op,
         masks.bytes(), mask_bytes, V);
  return masks.bytes() / mask_bytes;
}

void sample_mask_rows(const char* op, const SampleRow* rows, int64_t R, int64_t M) {
  for (int64_t r = 0; r < R; ++r)
    if (!rows[r].skip && (rows[r].mask_index < -1 || rows[r].mask_index >= M))
      fail(ErrorCode::kInvalidArgument, "{}: sampling row {} names mask {} of {}", op, r, rows[r].mask_index, M);
}

void router(const char* op, const RouterParams& p, int64_t E) {
  if (!p.bias.empty() && (p.bias.dtype != DType::F32 || p.bias.numel() != E))
    fail(ErrorCode::kInvalidArgument, "{}: bias {} must be F32 [{}] (one per expert)", op, p.bias.str(), E);
  if (p.n_group <= 1) return;
  if (E % p.n_group != 0 || E / p.n_group < 2)
    fail(ErrorCode::kInvalidArgument, "{}: {} experts do not split into {} groups of 2 or more", op, E, p.n_group);
  if (p.topk_group < 1 || p.topk_group > p.n_group)
    fail(ErrorCode::kInvalidArgument, "{}: topk_group {} must be in [1, n_group {}]", op, p.topk_group, p.n_group);
  if (p.n_expert_used > p.topk_group * (E / p.n_group))
    fail(ErrorCode::kInvalidArgument, "{}: {} experts per token exceed the {} experts of {} kept groups", op,
         p.n_expert_used, p.topk_group * (E / p.n_group), p.topk_group);
}

void moe_local_ids(const Tensor& ids, int32_t begin, int32_t end, int32_t n_expert, const Tensor& out) {
  want_i32("moe_local_ids", "ids", ids);
  want_i32("moe_local_ids", "out", out);
  bool same = ids.ndim == out.ndim;
  for (int d = 0; same && d < ids.ndim; ++d) same = ids.dim(d) == out.dim(d);
  if (!same)
    fail(ErrorCode::kInvalidArgument, "moe_local_ids: out {} must have the shape of ids {}", out.str(), ids.str());
  if (begin < 0 || begin > end || end > n_expert)
    fail(ErrorCode::kInvalidArgument, "moe_local_ids: experts [{}, {}) are not a range inside [0, {})", begin, end,
         n_expert);
}

void attention_mla(const MlaAttentionParams& p, const BatchInfo& b, const Tensor& q_lat, const Tensor& q_rope,
                   const KvLayer& kv, const Tensor& out) {
  batch("attention_mla", b);
  const int64_t T = b.n_tokens, H = p.n_head, R = p.kv_lora_rank, P = p.rope_dim;
  if (H <= 0 || R <= 0 || P <= 0)
    fail(ErrorCode::kInvalidArgument, "attention_mla: n_head {}, kv_lora_rank {} and rope_dim {} must be > 0", H, R, P);
  if (q_lat.rows() != T || q_lat.cols() != H * R)
    fail(ErrorCode::kInvalidArgument, "attention_mla: q_lat {} must be [{}, {}] (tokens, n_head x kv_lora_rank)",
         q_lat.str(), T, H * R);
  if (out.rows() != T || out.cols() != H * R)
    fail(ErrorCode::kInvalidArgument, "attention_mla: out {} must be [{}, {}]", out.str(), T, H * R);
  if (q_rope.rows() != T || q_rope.cols() != H * P)
    fail(ErrorCode::kInvalidArgument, "attention_mla: q_rope {} must be [{}, {}] (tokens, n_head x rope_dim)",
         q_rope.str(), T, H * P);
  if (kv.k.ndim != 4 || kv.k.dim(2) != 1 || kv.k.dim(3) != R)
    fail(ErrorCode::kInvalidArgument, "attention_mla: kv.k {} must be [pages, page_size, 1, {}]", kv.k.str(), R);
  if (kv.v.ndim != 4 || kv.v.dim(2) != 1 || kv.v.dim(3) != P || kv.v.dim(0) != kv.k.dim(0) ||
      kv.v.dim(1) != kv.k.dim(1))
    fail(ErrorCode::kInvalidArgument, "attention_mla: kv.v {} must be [{}, {}, 1, {}]", kv.v.str(), kv.k.dim(0),
         kv.k.dim(1), P);
}

void head_matmul(const Tensor& x, const Tensor& w, const Tensor& y) {
  if (w.ndim != 3) fail(ErrorCode::kInvalidArgument, "head_matmul: w {} must be 3-D [n_head, N, K]", w.str());
  const int64_t H = w.dim(0), N = w.dim(1), K = w.dim(2), T = x.rows();
  if (x.cols() != H * K)
    fail(ErrorCode::kInvalidArgument, "head_matmul: x {} must be [T, {}] (n_head {} x K {}) for w {}", x.str(), H * K,
         H, K, w.str());
  if (y.rows() != T || y.cols() != H * N)
    fail(ErrorCode::kInvalidArgument, "head_matmul: y {} must be [{}, {}] for w {}", y.str(), T, H * N, w.str());
}

void kv_write(const char* op, const BatchInfo& b, const Tensor& k, const Tensor& v, const KvLayer& kv) {
  batch(op, b);
  if (kv.k.ndim != 4 || kv.v.ndim != 4 || kv.k.dim(0) != kv.v.dim(0) || kv.k.dim(1) != kv.v.dim(1))
    fail(ErrorCode::kInvalidArgument, "{}: kv.k {} and kv.v {} must be 4-D pages of one count and size", op,
         kv.k.str(), kv.v.str());
  const int64_t T = b.n_tokens, Wk = kv.k.dim(2) * kv.k.dim(3), Wv = kv.v.dim(2) * kv.v.dim(3);
  if (k.rows() != T || k.cols() != Wk)
    fail(ErrorCode::kInvalidArgument, "{}: k {} must be [{}, {}] (tokens, kv heads x head_dim)", op, k.str(), T, Wk);
  if (v.rows() != T || v.cols() != Wv)
    fail(ErrorCode::kInvalidArgument, "{}: v {} must be [{}, {}] (tokens, kv heads x head_dim)", op, v.str(), T, Wv);
}

void attention_sinks(const char* op, const AttentionParams& p) {
  if (p.sinks.empty()) return;
  if (p.sinks.dtype != DType::F32 || p.sinks.ndim != 1 || p.sinks.dim(0) != p.n_head)
    fail(ErrorCode::kInvalidArgument, "{}: sinks {} must be F32 [n_head = {}]", op, p.sinks.str(), p.n_head);
}

void expert_bank_extras(const char* op, const ExpertBank& bank, int64_t H) {
  if (bank.glu != ExpertGlu::kSwiglu && bank.glu != ExpertGlu::kSwigluOai && bank.glu != ExpertGlu::kGeluTanh &&
      bank.glu != ExpertGlu::kSwigluClamp)
    fail(ErrorCode::kInvalidArgument, "{}: bank glu {} is not an ExpertGlu", op, static_cast<int>(bank.glu));
  if (bank.glu == ExpertGlu::kSwigluOai && (!std::isfinite(bank.glu_alpha) || !(bank.glu_limit > 0.0f)))
    fail(ErrorCode::kInvalidArgument, "{}: clamped SwiGLU needs a finite alpha and a limit > 0 (alpha {}, limit {})",
         op, bank.glu_alpha, bank.glu_limit);
  if (bank.glu == ExpertGlu::kSwigluClamp && !(bank.glu_limit > 0.0f))
    fail(ErrorCode::kInvalidArgument, "{}: clamped SwiGLU needs a limit > 0 (limit {})", op, bank.glu_limit);
  if (!bank.has_bias()) return;
  const int64_t E = bank.n_expert(), F = E > 0 && bank.gate[0].ndim == 2 ? bank.gate[0].dim(0) : 0;
  const std::pair<const char*, const Tensor*> biases[] = {
      {"gate_bias", &bank.gate_bias}, {"up_bias", &bank.up_bias}, {"down_bias", &bank.down_bias}};
  for (const auto& [name, t] : biases) {
    if (t->empty()) continue;
    const int64_t cols = t == &bank.down_bias ? H : F;
    if (t->dtype != DType::F32 || !t->has_shape({E, cols}))
      fail(ErrorCode::kInvalidArgument, "{}: bank {} {} must be F32 [n_expert = {}, {}]", op, name, t->str(), E, cols);
  }
}

namespace {

void state_slots(const char* op, const BatchInfo& b) {
  want_i32(op, "batch.state_slots", b.state_slots);
  if (b.state_slots.numel() != b.n_seqs)
    fail(ErrorCode::kInvalidArgument, "{}: batch.state_slots {} must hold one slot for each of the {} sequences", op,
         b.state_slots.shape_str(), b.n_seqs);
}

void want_shape(const char* op, const char* arg, const Tensor& t, std::initializer_list<int64_t> shape) {
  if (!t.has_shape(shape))
    fail(ErrorCode::kInvalidArgument, "{}: {} has shape {}, expected {}", op, arg, t.shape_str(),
         Tensor(nullptr, DType::F32, shape).shape_str());
}

void want_f32(const char* op, const char* arg, const Tensor& t) {
  if (t.dtype != DType::F32) fail(ErrorCode::kInvalidArgument, "{}: {} must be F32 (got {})", op, arg, dtype_name(t.dtype));
}

}  // namespace

int64_t ssm_conv(const BatchInfo& b, const Tensor& x, const Tensor& w, const Tensor& conv_state, const Tensor& out) {
  const char* op = "ssm_conv";
  batch(op, b);
  state_slots(op, b);
  if (x.ndim != 2 || w.ndim != 2 || conv_state.ndim != 3)
    fail(ErrorCode::kInvalidArgument, "{}: x {}, w {} must be 2-D and conv_state {} 3-D", op, x.shape_str(), w.shape_str(),
         conv_state.shape_str());
  const int64_t T = x.dim(0), C = x.dim(1), K = w.dim(1);
  if (T != b.n_tokens) fail(ErrorCode::kInvalidArgument, "{}: x has {} rows, the batch {} tokens", op, T, b.n_tokens);
  if (K < 2) fail(ErrorCode::kInvalidArgument, "{}: w {} needs a kernel of at least 2 taps", op, w.shape_str());
  want_shape(op, "w", w, {C, K});
  want_shape(op, "conv_state", conv_state, {conv_state.dim(0), K - 1, C});
  want_shape(op, "out", out, {T, C});
  want_f32(op, "w", w);
  want_f32(op, "conv_state", conv_state);
  if (out.dtype != x.dtype) fail(ErrorCode::kInvalidArgument, "{}: out must have x's dtype", op);
  return K;
}

void gated_delta_rule(const GatedDeltaParams& p, const BatchInfo& b, const Tensor& qkv, const Tensor& a,
                      const Tensor& beta, const Tensor& ssm_state, const Tensor& out) {
  const char* op = "gated_delta_rule";
  batch(op, b);
  state_slots(op, b);
  if (p.n_k_heads < 1 || p.n_v_heads < 1 || p.k_head_dim < 1 || p.v_head_dim < 1 || p.n_v_heads % p.n_k_heads != 0)
    fail(ErrorCode::kInvalidArgument,
         "{}: heads {} (key) and {} (value) of dims {} and {} must be positive, value heads a multiple of key heads", op,
         p.n_k_heads, p.n_v_heads, p.k_head_dim, p.v_head_dim);
  const int64_t T = b.n_tokens, Hk = p.n_k_heads, Hv = p.n_v_heads, dk = p.k_head_dim, dv = p.v_head_dim;
  want_shape(op, "qkv", qkv, {T, 2 * Hk * dk + Hv * dv});
  want_shape(op, "a", a, {T, Hv});
  want_shape(op, "b", beta, {T, Hv});
  want_shape(op, "out", out, {T, Hv * dv});
  want_shape(op, "a_log", p.a_log, {Hv});
  want_shape(op, "dt_bias", p.dt_bias, {Hv});
  want_f32(op, "a_log", p.a_log);
  want_f32(op, "dt_bias", p.dt_bias);
  want_f32(op, "ssm_state", ssm_state);
  if (ssm_state.ndim != 4) fail(ErrorCode::kInvalidArgument, "{}: ssm_state {} must be 4-D", op, ssm_state.shape_str());
  want_shape(op, "ssm_state", ssm_state, {ssm_state.dim(0), Hv, dk, dv});
  if (out.dtype != qkv.dtype) fail(ErrorCode::kInvalidArgument, "{}: out must have qkv's dtype", op);
  if (a.dtype != beta.dtype || (a.dtype != DType::F32 && a.dtype != qkv.dtype))
    fail(ErrorCode::kInvalidArgument, "{}: a and b must be F32 or qkv's dtype, one dtype (got {} and {})", op,
         dtype_name(a.dtype), dtype_name(beta.dtype));
}

void ple_gate(const Tensor& key, const Tensor& query, const Tensor& w, const Tensor& value, const Tensor& out) {
  const int64_t T = value.rows(), D = value.cols();
  if (value.ndim != 2 || D < 1 || key.ndim != 2 || key.rows() != T || key.cols() % D != 0 ||
      !query.has_shape({T, key.cols()}) || !out.has_shape({T, key.cols()}) || w.numel() != key.cols())
    fail(ErrorCode::kInvalidArgument, "ple_gate: key {}, query {}, w {}, value {}, out {} do not fit streams of {}",
         key.str(), query.str(), w.str(), value.str(), out.str(), D);
}

void stream_weighted_sum(const Tensor& x, const Tensor& w, const Tensor& out) {
  const int64_t T = out.rows(), D = out.cols();
  if (out.ndim != 2 || D < 1 || x.ndim != 2 || x.rows() != T || x.cols() % D != 0 || w.numel() != x.cols())
    fail(ErrorCode::kInvalidArgument, "stream_weighted_sum: x {}, w {}, out {} do not fit streams of {}", x.str(),
         w.str(), out.str(), D);
}

void attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& b, const Tensor& q, const KvLayer& kv,
                   const Tensor& selected, const Tensor& out) {
  const char* op = "attention_qsa";
  batch(op, b);
  const int64_t T = b.n_tokens, H = p.n_head, G = p.n_head_kv, D = p.head_dim;
  if (H <= 0 || G <= 0 || D <= 0 || H % G != 0 || block < 1)
    fail(ErrorCode::kInvalidArgument, "{}: n_head {} must be a positive multiple of n_head_kv {} (head_dim {}, "
         "block {})", op, H, G, D, block);
  if (!q.has_shape({T, H * D}) || !out.has_shape({T, H * D}) || selected.ndim != 2 || selected.rows() != T ||
      kv.k.ndim != 4 || kv.k.dim(2) != G || kv.k.dim(3) != D || kv.v.ndim != 4 || kv.v.dim(0) != kv.k.dim(0) ||
      kv.v.dim(1) != kv.k.dim(1) || kv.v.dim(2) * kv.v.dim(3) < G * D)
    fail(ErrorCode::kInvalidArgument, "{}: q {}, out {}, selected {}, kv.k {}, kv.v {} do not fit {} heads, {} kv "
         "heads of {}", op, q.str(), out.str(), selected.str(), kv.k.str(), kv.v.str(), H, G, D);
}

}  // namespace ft::op_checks
