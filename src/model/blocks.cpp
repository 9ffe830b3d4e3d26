#include "model/blocks.h"

#include <cmath>

#include <fmt/format.h>

#include "kv/kv_cache.h"
#include "model/rope.h"
#include "quant/quant.h"
#include "util/error.h"

namespace ft {

// ---- attention ----

AttentionSpec attention_spec(const ModelConfig& c, const Tensor& inv_freq, float attn_factor) {
  AttentionSpec s;
  s.attn = {static_cast<int32_t>(c.n_head), static_cast<int32_t>(c.n_head_kv), static_cast<int32_t>(c.head_dim),
            1.0f / std::sqrt(static_cast<float>(c.head_dim)), c.sliding_window, Tensor()};
  s.rope = {c.rope_mode, static_cast<int32_t>(c.head_dim), static_cast<int32_t>(c.n_rot), inv_freq, attn_factor};
  s.qk_norm_params = {static_cast<float>(c.rms_eps), c.norm_weight_offset};
  s.qk_norm = c.qk_norm;
  s.layer_window = c.layer_window;
  return s;
}

AttentionWeights load_attention(WeightLoader& ld, const ModelConfig& c, int64_t l) {
  const int64_t H = c.n_embd, qd = c.n_head * c.head_dim, kvd = c.n_head_kv * c.head_dim;
  AttentionWeights w;
  const WeightName nq = layer_weight(l, "attn_q", "self_attn.q_proj"), nk = layer_weight(l, "attn_k", "self_attn.k_proj"),
                   nv = layer_weight(l, "attn_v", "self_attn.v_proj");
  if (c.attn_output_gate) {  // per head: hd query rows, then hd gate rows
    std::vector<int64_t> q_rows, g_rows;
    for (int64_t h = 0; h < c.n_head; ++h)
      for (int64_t i = 0; i < c.head_dim; ++i) {
        q_rows.push_back(2 * h * c.head_dim + i);
        g_rows.push_back((2 * h + 1) * c.head_dim + i);
      }
    w.wq = ld.get_rows(nq, {2 * qd, H}, q_rows);
    w.wgate = ld.get_rows(nq, {2 * qd, H}, g_rows);
    w.wk = ld.get(nk, {kvd, H});
    w.wv = ld.get(nv, {kvd, H});
  } else if (!c.attn_bias) {
    w.wqkv = ld.get_stacked({nq, nk, nv}, {qd, kvd, kvd}, H);
  }
  if (!w.wqkv.empty()) {
    w.wq = w.wqkv.slice(0, qd), w.wk = w.wqkv.slice(qd, kvd), w.wv = w.wqkv.slice(qd + kvd, kvd);
  } else if (w.wq.empty()) {
    w.wq = ld.get(nq, {qd, H});
    w.wk = ld.get(nk, {kvd, H});
    w.wv = ld.get(nv, {kvd, H});
  }
  w.wo = ld.get(layer_weight(l, "attn_output", "self_attn.o_proj"), {H, qd});
  if (c.attn_bias) {
    w.bq = ld.get(layer_weight(l, "attn_q", "self_attn.q_proj", "bias"), {qd}, WeightKind::kVector);
    w.bk = ld.get(layer_weight(l, "attn_k", "self_attn.k_proj", "bias"), {kvd}, WeightKind::kVector);
    w.bv = ld.get(layer_weight(l, "attn_v", "self_attn.v_proj", "bias"), {kvd}, WeightKind::kVector);
  }
  if (c.attn_out_bias) w.bo = ld.get(layer_weight(l, "attn_output", "self_attn.o_proj", "bias"), {H}, WeightKind::kVector);
  if (c.attn_sinks)  // HF names the parameter without a .weight suffix
    w.sinks = ld.get_f32({fmt::format("blk.{}.attn_sinks.weight", l), fmt::format("model.layers.{}.self_attn.sinks", l)},
                         {c.n_head});
  if (c.qk_norm != QkNorm::kNone) {
    const bool full = c.qk_norm == QkNorm::kFull;
    w.q_norm = ld.get(layer_weight(l, "attn_q_norm", "self_attn.q_norm"), {full ? qd : c.head_dim}, WeightKind::kVector);
    w.k_norm = ld.get(layer_weight(l, "attn_k_norm", "self_attn.k_norm"), {full ? kvd : c.head_dim}, WeightKind::kVector);
  }
  return w;
}

AttentionWeights load_attention(WeightLoader& ld, const ModelConfig& c, int64_t l, const dist::TpShard& tp) {
  if (tp.size == 1) return load_attention(ld, c, l);
  const int64_t H = c.n_embd, hd = c.head_dim, qd = c.n_head * hd, kvd = c.n_head_kv * hd;
  const dist::TpRange heads = dist::tp_heads(c.n_head, tp), kv = dist::tp_kv_heads(c.n_head_kv, tp);
  auto range = [](int64_t begin, int64_t n) {
    std::vector<int64_t> r(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = begin + i;
    return r;
  };
  AttentionWeights w;
  const WeightName nq = layer_weight(l, "attn_q", "self_attn.q_proj");
  if (c.attn_output_gate) {  // q_proj [2 qd, H], per head hd query rows then hd gate rows: the rank's heads' rows
    std::vector<int64_t> q_rows, g_rows;
    for (int64_t h = heads.begin; h < heads.begin + heads.count; ++h)
      for (int64_t i = 0; i < hd; ++i) {
        q_rows.push_back(2 * h * hd + i);
        g_rows.push_back((2 * h + 1) * hd + i);
      }
    w.wq = ld.get_rows(nq, {2 * qd, H}, q_rows);
    w.wgate = ld.get_rows(nq, {2 * qd, H}, g_rows);
  } else {
    w.wq = ld.get_rows(nq, {qd, H}, range(heads.begin * hd, heads.count * hd));
  }
  w.wk = ld.get_rows(layer_weight(l, "attn_k", "self_attn.k_proj"), {kvd, H}, range(kv.begin * hd, kv.count * hd));
  w.wv = ld.get_rows(layer_weight(l, "attn_v", "self_attn.v_proj"), {kvd, H}, range(kv.begin * hd, kv.count * hd));
  w.wo = ld.get_cols(layer_weight(l, "attn_output", "self_attn.o_proj"), {H, qd}, heads.begin * hd, heads.count * hd);
  if (c.attn_bias) {  // column parallel: each rank its slice
    if (c.attn_output_gate)
      fail(ErrorCode::kUnsupported, "tensor parallelism: a q_proj bias with an attention output gate is not split");
    w.bq = ld.get(layer_weight(l, "attn_q", "self_attn.q_proj", "bias"), {qd}, WeightKind::kVector)
               .slice(heads.begin * hd, heads.count * hd);
    w.bk = ld.get(layer_weight(l, "attn_k", "self_attn.k_proj", "bias"), {kvd}, WeightKind::kVector)
               .slice(kv.begin * hd, kv.count * hd);
    w.bv = ld.get(layer_weight(l, "attn_v", "self_attn.v_proj", "bias"), {kvd}, WeightKind::kVector)
               .slice(kv.begin * hd, kv.count * hd);
  }
  if (c.attn_out_bias && tp.rank == 0)  // row parallel: added once to the sum
    w.bo = ld.get(layer_weight(l, "attn_output", "self_attn.o_proj", "bias"), {H}, WeightKind::kVector);
  if (c.attn_sinks)
    w.sinks = ld.get_f32({fmt::format("blk.{}.attn_sinks.weight", l), fmt::format("model.layers.{}.self_attn.sinks", l)},
                         {c.n_head})
                  .slice(heads.begin, heads.count);
  if (c.qk_norm == QkNorm::kPerHead) {  // one [hd] weight every head shares
    w.q_norm = ld.get(layer_weight(l, "attn_q_norm", "self_attn.q_norm"), {hd}, WeightKind::kVector);
    w.k_norm = ld.get(layer_weight(l, "attn_k_norm", "self_attn.k_norm"), {hd}, WeightKind::kVector);
  } else if (c.qk_norm == QkNorm::kFull) {  // the rank's heads' slice; the RMS is all-reduced (tp_full_rms_norm)
    w.q_norm = ld.get(layer_weight(l, "attn_q_norm", "self_attn.q_norm"), {qd}, WeightKind::kVector)
                   .slice(heads.begin * hd, heads.count * hd);
    w.k_norm = ld.get(layer_weight(l, "attn_k_norm", "self_attn.k_norm"), {kvd}, WeightKind::kVector)
                   .slice(kv.begin * hd, kv.count * hd);
  }
  return w;
}

void tp_full_rms_norm(ForwardContext& ctx, const RmsNormParams& p, const Tensor& q, const Tensor& wq, const Tensor& k,
                      const Tensor& wk) {
  if (!ctx.tp || ctx.tp->group_size() == 1) {
    ctx.ops.rms_norm(p, q, wq, q);
    ctx.ops.rms_norm(p, k, wk, k);
    return;
  }
  if (ctx.ops.device() != Device::kCpu || q.device != Device::kCpu || k.device != Device::kCpu ||
      q.dtype != DType::F32 || k.dtype != DType::F32)
    fail(ErrorCode::kUnsupported, "tensor parallelism: full-width QK-norm runs on the CPU backend (F32) only");
  const int64_t T = q.rows(), n = ctx.tp->group_size();
  const Tensor* xs[2] = {&q, &k};
  const Tensor* ws[2] = {&wq, &wk};
  std::vector<float> ss(static_cast<size_t>(T * 2), 0.0f);  // [T, 2]: each token's q and k sum of squares
  ctx.ops.synchronize();
  for (int j = 0; j < 2; ++j) {
    const int64_t D = xs[j]->cols();
    const float* x = xs[j]->ptr<float>();
    for (int64_t t = 0; t < T; ++t) {
      float s = 0.0f;
      for (int64_t i = 0; i < D; ++i) s += x[t * D + i] * x[t * D + i];
      ss[static_cast<size_t>(t * 2 + j)] = s;
    }
  }
  const Tensor sums(ss.data(), DType::F32, {T, 2});
  ctx.tp->all_reduce(sums, sums);  // the whole width's sums, the same bits on every rank
  for (int j = 0; j < 2; ++j) {
    const int64_t D = xs[j]->cols();
    if (ws[j]->numel() != D)
      fail(ErrorCode::kInvalidArgument, "tp_full_rms_norm: weight {} must have {} elements (the rank's width of {})",
           ws[j]->str(), D, xs[j]->str());
    std::vector<float> w(static_cast<size_t>(D));
    dequantize_row(ws[j]->dtype, ws[j]->data, w.data(), D);
    float* x = xs[j]->ptr<float>();
    const float width = static_cast<float>(D * n);  // the full width: every rank holds an equal slice
    for (int64_t t = 0; t < T; ++t) {
      const float inv = 1.0f / std::sqrt(ss[static_cast<size_t>(t * 2 + j)] / width + p.eps);
      for (int64_t i = 0; i < D; ++i) x[t * D + i] = x[t * D + i] * inv * (w[static_cast<size_t>(i)] + p.weight_offset);
    }
  }
}

void tp_all_reduce(ForwardContext& ctx, const Tensor& out) {
  if (ctx.tp && ctx.tp->group_size() > 1) ctx.tp->all_reduce(out, out);
}

dist::TpRange tp_kv_heads_read(int64_t n_head, int64_t n_kv, const dist::TpShard& tp) {
  const dist::TpRange q = dist::tp_heads(n_head, tp);
  if (n_kv <= 0 || n_kv % tp.size == 0 || tp.size % n_kv != 0 || n_head % n_kv != 0)
    return dist::tp_kv_heads(n_kv, tp);
  return {q.begin / (n_head / n_kv), 1};  // the rank's query heads all read this one
}

std::vector<int64_t> index_range(int64_t begin, int64_t n) {
  std::vector<int64_t> r(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) r[static_cast<size_t>(i)] = begin + i;
  return r;
}

void check_tp_group(const ForwardContext& ctx, const dist::TpShard& tp) {
  const int size = ctx.tp ? ctx.tp->group_size() : 1, rank = ctx.tp ? ctx.tp->rank() : 0;
  if (size != tp.size || rank != tp.rank)
    fail(ErrorCode::kInvalidArgument,
         "the model was loaded as tensor-parallel rank {} of {}, but runs with a group of {} (rank {})", tp.rank,
         tp.size, size, rank);
}

void attention_block(ForwardContext& ctx, int64_t l, const AttentionSpec& spec, const AttentionWeights& w,
                     const Tensor& h, Tensor out, const ActQ8* h_q8) {
  Ops& ops = ctx.ops;
  ForwardState& s = ctx.state;
  const int64_t T = h.rows();
  Tensor q = s.q.slice(0, T), k = s.k.slice(0, T), v = s.v.slice(0, T), attn = s.attn.slice(0, T);
  if (T == 1 && !w.wqkv.empty()) {  // one token: q, k, v are consecutive pieces of one output row
    const int64_t qd = w.wq.dim(0), kvd = w.wk.dim(0);
    Tensor qkv = s.qkv.slice(0, 1);  // [1, qd + 2 kvd]
    ops.matmul(h, w.wqkv, qkv, Tensor(), h_q8);
    q = qkv.reshape({qd + 2 * kvd}).slice(0, qd).reshape({1, qd});
    k = qkv.reshape({qd + 2 * kvd}).slice(qd, kvd).reshape({1, kvd});
    v = qkv.reshape({qd + 2 * kvd}).slice(qd + kvd, kvd).reshape({1, kvd});
  } else {
    ops.matmul(h, w.wq, q, w.bq, h_q8);  // [T, n_head * head_dim]
    ops.matmul(h, w.wk, k, w.bk, h_q8);  // [T, n_kv * head_dim]
    ops.matmul(h, w.wv, v, w.bv, h_q8);  // [T, n_kv * head_dim]
  }
  const KvLayer kv = ctx.kv.layer(static_cast<int32_t>(l));
  AttentionParams ap = spec.attn;
  if (!spec.layer_window.empty()) ap.sliding_window = spec.layer_window[static_cast<size_t>(l)];
  ap.sinks = w.sinks;
  ActQ8 attn_q8;  // attn's int8 form when the (decode) attention wrote it, for the output projection
  if (spec.qk_norm == QkNorm::kPerHead) {  // per-head QK-norm, RoPE, k and v into the pages, attention
    ops.qk_norm_rope_attention(spec.qk_norm_params, w.q_norm, w.k_norm, spec.rope, ap, q, k, v, ctx.kv_batch(l),
                               kv, attn, ctx.q8(attn_q8));  // [T, n_head * head_dim]
  } else {
    if (spec.qk_norm == QkNorm::kFull) tp_full_rms_norm(ctx, spec.qk_norm_params, q, w.q_norm, k, w.k_norm);
    ops.rope(spec.rope, q, ctx.batch.positions);
    ops.rope(spec.rope, k, ctx.batch.positions);
    ops.kv_write(ctx.kv_batch(l), k, v, kv);
    ops.attention(ap, ctx.kv_batch(l), q, kv, attn, ctx.q8(attn_q8));  // [T, n_head * head_dim]
  }
  if (!w.wgate.empty()) {
    Tensor gate = s.attn_gate.slice(0, T);
    ops.matmul(h, w.wgate, gate, Tensor(), h_q8);  // [T, n_head * head_dim]
    ops.sigmoid_mul(gate, attn, attn);
    attn_q8 = ActQ8{};  // attn changed: its form is no longer its
  }
  ctx.dump_if("kqv_out", l, attn);
  ops.matmul(attn, w.wo, out, w.bo, ctx.q8(attn_q8));  // [T, H]
  tp_all_reduce(ctx, out);  // tensor parallel: the heads' partial sums
}

// ---- feed-forward ----

MlpWeights load_mlp(WeightLoader& ld, const ModelConfig& c, int64_t l, int64_t F) {
  const int64_t H = c.n_embd;
  return {ld.get(layer_weight(l, "ffn_gate", "mlp.gate_proj"), {F, H}),
          ld.get(layer_weight(l, "ffn_up", "mlp.up_proj"), {F, H}),
          ld.get(layer_weight(l, "ffn_down", "mlp.down_proj"), {H, F})};
}

MlpWeights load_mlp_shard(WeightLoader& ld, const WeightName& gate, const WeightName& up, const WeightName& down,
                          int64_t H, int64_t F, const dist::TpShard& tp) {
  if (tp.size == 1) return {ld.get(gate, {F, H}), ld.get(up, {F, H}), ld.get(down, {H, F})};
  const dist::TpRange cols = dist::tp_ffn(F, tp);
  std::vector<int64_t> rows(static_cast<size_t>(cols.count));
  for (int64_t i = 0; i < cols.count; ++i) rows[static_cast<size_t>(i)] = cols.begin + i;
  return {ld.get_rows(gate, {F, H}, rows), ld.get_rows(up, {F, H}, rows), ld.get_cols(down, {H, F}, cols.begin, cols.count)};
}

void gated_mlp(ForwardContext& ctx, const MlpWeights& w, const Tensor& h, Tensor out, const ActQ8* h_q8) {
  const int64_t T = h.rows(), F = w.gate.dim(0);
  Tensor g = ctx.state.ff_gate.reshape({ctx.state.max_tokens * ctx.state.ff_gate.cols()})
                 .slice(0, T * F).reshape({T, F});
  Tensor u = ctx.state.ff_up.reshape({ctx.state.max_tokens * ctx.state.ff_up.cols()}).slice(0, T * F).reshape({T, F});
  ctx.ops.matmul(h, w.gate, g, Tensor(), h_q8);  // [T, F]
  ctx.ops.matmul(h, w.up, u, Tensor(), h_q8);    // [T, F]
  ctx.ops.swiglu(g, u, g);
  ctx.ops.matmul(g, w.down, out, Tensor());  // [T, H]
  tp_all_reduce(ctx, out);  // tensor parallel: the FFN columns' partial sums
}

ExpertBank load_host_experts(WeightLoader& ld, const ModelConfig& c, int64_t l, const ExpertNames& n) {
  const int64_t E = c.n_expert, F = c.n_ff_exp, H = c.n_embd;
  ExpertBank b;
  if (n.fused && !ld.is_gguf()) {
    b = ld.host_fused_experts(l, n.fused, E, F, H);  // with its biases
  } else {
    b.gate = ld.host_experts(l, "ffn_gate_exps", n.gate, E, F, H);
    b.up = ld.host_experts(l, "ffn_up_exps", n.up, E, F, H);
    b.down = ld.host_experts(l, "ffn_down_exps", n.down, E, H, F);
    if (n.bias) {
      if (!ld.is_gguf())
        fail(ErrorCode::kInvalidArgument, "layer {}: per-expert biases are read from fused HF experts only", l);
      auto bias = [&](const char* gguf, int64_t cols) {
        return ld.host_f32({fmt::format("blk.{}.{}.bias", l, gguf), ""}, {E, cols}, WeightKind::kMatrix);
      };
      b.gate_bias = bias("ffn_gate_exps", F);  // F32 [E, F]
      b.up_bias = bias("ffn_up_exps", F);      // F32 [E, F]
      b.down_bias = bias("ffn_down_exps", H);  // F32 [E, H]
    }
  }
  b.glu = c.expert_glu;
  b.glu_alpha = static_cast<float>(c.swiglu_alpha);
  b.glu_limit = static_cast<float>(c.swiglu_limit);
  return b;
}

void moe_block(ForwardContext& ctx, int64_t l, const RouterParams& router, const MoeWeights& w, const Tensor& h,
               Tensor out, const MoePrefetch& prefetch, ActQ8* h_q8) {
  if (!ctx.experts) fail(ErrorCode::kInvalidArgument, "layer {}: a MoE layer needs an expert executor", l);
  moe_ffn(ctx.ops, *ctx.experts, l, router, w, h, ctx.state.moe, out, ctx.batch.n_valid, prefetch, h_q8, ctx.tp);
}

// ---- embeddings and output ----

namespace {
const WeightName kTokenEmbd{"token_embd.weight", "model.embed_tokens.weight"};
const WeightName kOutput{"output.weight", "lm_head.weight"};
}  // namespace

bool output_tied(const WeightLoader& ld, const ModelConfig& c) {
  // llama.cpp: a GGUF without output.weight is tied; an untied HF checkpoint must have lm_head.
  return !ld.has(kOutput) && (c.tie_embeddings || ld.is_gguf());
}

Tensor load_token_embd_host_mapped(WeightLoader& ld, const ModelConfig& c) {
  return ld.get_host_mapped(kTokenEmbd, {c.n_vocab, c.n_embd});
}

OutputWeights load_output(WeightLoader& ld, ModelConfig& c) {
  OutputWeights w;
  const WeightName& embd = kTokenEmbd;
  if (c.n_vocab == 0) {
    if (const TensorInfo* t = ld.checkpoint().find(ld.name(embd)); t && t->shape.size() == 2) c.n_vocab = t->shape[0];
  }
  const int64_t V = c.n_vocab, H = c.n_embd;
  w.tied = output_tied(ld, c);
  w.tok_embd = w.tied ? ld.get(embd, {V, H}) : ld.unplaced(embd, {V, H});
  w.output_norm = ld.get({"output_norm.weight", "model.norm.weight"}, {H}, WeightKind::kVector);
  w.output = w.tied ? w.tok_embd : ld.get(kOutput, {V, H});  // untied HF without lm_head: missing tensor
  return w;
}

void place_token_embd(WeightLoader& ld, const ModelConfig& c, Tensor& tok_embd) {
  if (!tok_embd.data) tok_embd = ld.get(kTokenEmbd, {c.n_vocab, c.n_embd});
}

Tensor embed(ForwardContext& ctx, const Tensor& tok_embd) {
  if (!tok_embd.data) fail(ErrorCode::kInternal, "the token embedding table was not placed (Model::place_deferred)");
  Tensor x = ctx.state.x.slice(0, ctx.batch.n_tokens);
  ctx.ops.embedding(tok_embd, ctx.token_ids, x);  // [T, H]
  return x;
}

void lm_head(ForwardContext& ctx, const OutputWeights& w, const RmsNormParams& norm, const Tensor& x) {
  if (ctx.logit_rows.empty()) return;  // a prefill chunk whose logits nobody needs
  Tensor rows = ctx.state.out_rows.slice(0, ctx.logit_rows.numel());  // [R, H]
  ctx.ops.embedding(x, ctx.logit_rows, rows);
  ActQ8 rows_q8;  // the norm's int8 form of rows, for the LM head's GEMV
  ctx.ops.rms_norm(norm, rows, w.output_norm, rows, ctx.q8(rows_q8));
  ctx.dump_if("result_norm", -1, rows);
  ctx.ops.matmul(rows, w.output, ctx.logits, Tensor(), ctx.q8(rows_q8));  // [R, V]
  ctx.dump_if("result_output", -1, ctx.logits);
}

Tensor load_norm(WeightLoader& ld, const ModelConfig& c, int64_t l, const char* gguf, const char* hf) {
  return ld.get(layer_weight(l, gguf, hf), {c.n_embd}, WeightKind::kVector);
}

AttentionSpec load_attention_spec(WeightLoader& ld, Ops& ops, const ModelConfig& c, std::vector<Buffer>& storage) {
  std::vector<float> factors;
  const WeightName freqs{"rope_freqs.weight", ""};
  if (ld.is_gguf() && ld.has(freqs)) {
    Tensor f = ld.host(freqs, {c.n_rot / 2}, WeightKind::kVector);
    factors.resize(static_cast<size_t>(c.n_rot / 2));
    dequantize_row(f.dtype, f.data, factors.data(), c.n_rot / 2);
  }
  const RopeTable rope = rope_table(c, factors);
  return attention_spec(c, upload_f32(ops, rope.inv_freq, storage), rope.attn_factor);
}

Tensor upload_f32(Ops& ops, const std::vector<float>& values, std::vector<Buffer>& storage) {
  const int64_t n = static_cast<int64_t>(values.size());
  Tensor host(const_cast<float*>(values.data()), DType::F32, {n});
  storage.push_back(ops.alloc(n * 4));
  Tensor dev(storage.back().data(), DType::F32, {n}, ops.device());
  ops.copy(host, dev);
  return dev;
}

}  // namespace ft
