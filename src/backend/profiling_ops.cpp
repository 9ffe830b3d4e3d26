#include "backend/profiling_ops.h"

#include <algorithm>

#include <fmt/format.h>

namespace ft {
namespace {

using Clock = std::chrono::steady_clock;

std::string weight_key(const char* op, const Tensor& w) {
  return fmt::format("{} [{}x{}] {}", op, w.dim(0), w.cols(), dtype_name(w.dtype));
}

}  // namespace

ProfilingOps::ProfilingOps(std::unique_ptr<Ops> inner) : inner_(std::move(inner)) {
  inner_->synchronize();
  double best = 1e9;
  for (int i = 0; i < 20; ++i) {  // the cheapest of a few empty brackets
    const auto t0 = Clock::now();
    inner_->synchronize();
    inner_->synchronize();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  bracket_ = best;
}

template <typename F>
void ProfilingOps::timed(const std::string& key, F&& f) {
  inner_->synchronize();
  const auto t0 = Clock::now();
  f();
  inner_->synchronize();
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  OpProfileRow& r = acc_[key];
  r.key = key;
  ++r.calls;
  r.seconds += std::max(0.0, dt - bracket_);
}

std::vector<OpProfileRow> ProfilingOps::rows() const {
  std::vector<OpProfileRow> out;
  for (const auto& [k, r] : acc_) out.push_back(r);
  std::sort(out.begin(), out.end(), [](const OpProfileRow& a, const OpProfileRow& b) { return a.seconds > b.seconds; });
  return out;
}

void ProfilingOps::copy(const Tensor& src, Tensor dst) {
  timed(fmt::format("copy {}->{}", device_name(src.device), device_name(dst.device)), [&] { inner_->copy(src, dst); });
}
void ProfilingOps::zero(Tensor t) { timed("zero", [&] { inner_->zero(t); }); }
void ProfilingOps::embedding(const Tensor& table, const Tensor& ids, Tensor out) {
  timed(weight_key("embedding", table), [&] { inner_->embedding(table, ids, out); });  // also row gathers
}
void ProfilingOps::rms_norm(const RmsNormParams& p, const Tensor& x, const Tensor& w, Tensor out, ActQ8* out_q8) {
  timed(fmt::format("rms_norm [{}]", x.cols()), [&] { inner_->rms_norm(p, x, w, out, out_q8); });
}
void ProfilingOps::qk_norm_rope_store(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& p,
                                      Tensor q, Tensor k, const Tensor& v, const BatchInfo& batch, KvLayer kv) {
  timed("qk_norm_rope_store", [&] { inner_->qk_norm_rope_store(np, wq, wk, p, q, k, v, batch, kv); });
}
void ProfilingOps::qk_norm_rope_attention(const RmsNormParams& np, const Tensor& wq, const Tensor& wk,
                                          const RopeParams& rp, const AttentionParams& ap, Tensor q, Tensor k,
                                          const Tensor& v, const BatchInfo& batch, KvLayer kv, Tensor out,
                                          ActQ8* out_q8) {
  timed("qk_norm_rope_attention",
        [&] { inner_->qk_norm_rope_attention(np, wq, wk, rp, ap, q, k, v, batch, kv, out, out_q8); });
}
void ProfilingOps::add_rms_norm(const RmsNormParams& p, Tensor x, const Tensor& r, const Tensor& w, Tensor out,
                                ActQ8* out_q8) {
  timed(fmt::format("add_rms_norm [{}]", x.cols()), [&] { inner_->add_rms_norm(p, x, r, w, out, out_q8); });
}
void ProfilingOps::rope(const RopeParams& p, Tensor x, const Tensor& positions) {
  timed("rope", [&] { inner_->rope(p, x, positions); });
}
void ProfilingOps::norm_rope(const RmsNormParams& np, const Tensor& w, const RopeParams& p, Tensor x,
                             const Tensor& positions) {
  timed("norm_rope", [&] { inner_->norm_rope(np, w, p, x, positions); });
}
void ProfilingOps::matmul(const Tensor& x, const Tensor& w, Tensor y, const Tensor& bias, const ActQ8* x_q8) {
  timed(weight_key("matmul", w), [&] { inner_->matmul(x, w, y, bias, x_q8); });
}
void ProfilingOps::swiglu(const Tensor& gate, const Tensor& up, Tensor out) {
  timed("swiglu", [&] { inner_->swiglu(gate, up, out); });
}
void ProfilingOps::add(const Tensor& a, const Tensor& b, Tensor out) { timed("add", [&] { inner_->add(a, b, out); }); }
void ProfilingOps::scale(const Tensor& x, float s, Tensor out) { timed("scale", [&] { inner_->scale(x, s, out); }); }
void ProfilingOps::sigmoid(const Tensor& x, Tensor out) { timed("sigmoid", [&] { inner_->sigmoid(x, out); }); }
void ProfilingOps::sigmoid_mul(const Tensor& gate, const Tensor& x, Tensor out) {
  timed("sigmoid_mul", [&] { inner_->sigmoid_mul(gate, x, out); });
}
void ProfilingOps::ssm_conv(const BatchInfo& batch, const Tensor& x, const Tensor& w, Tensor conv_state, Tensor out) {
  timed("ssm_conv", [&] { inner_->ssm_conv(batch, x, w, conv_state, out); });
}
void ProfilingOps::gated_delta_rule(const GatedDeltaParams& p, const BatchInfo& batch, const Tensor& qkv,
                                    const Tensor& a, const Tensor& b, Tensor ssm_state, Tensor out) {
  timed("gated_delta_rule", [&] { inner_->gated_delta_rule(p, batch, qkv, a, b, ssm_state, out); });
}
void ProfilingOps::add_scaled_rows(const Tensor& x, const Tensor& row_scale, float alpha, Tensor y) {
  timed("add_scaled_rows", [&] { inner_->add_scaled_rows(x, row_scale, alpha, y); });
}
void ProfilingOps::gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor out) {
  timed("gelu_tanh_mul", [&] { inner_->gelu_tanh_mul(gate, up, out); });
}
void ProfilingOps::softcap(const Tensor& x, float cap, Tensor out) {
  timed("softcap", [&] { inner_->softcap(x, cap, out); });
}
void ProfilingOps::embedding_split(const Tensor& table, const Tensor& ids, Tensor out) {
  timed("embedding_split", [&] { inner_->embedding_split(table, ids, out); });
}
void ProfilingOps::moe_expert_scale(const Tensor& ids, const Tensor& scale, Tensor weights) {
  timed("moe_expert_scale", [&] { inner_->moe_expert_scale(ids, scale, weights); });
}
void ProfilingOps::softmax(const Tensor& x, Tensor out) { timed("softmax", [&] { inner_->softmax(x, out); }); }
void ProfilingOps::topk(const Tensor& x, int32_t k, Tensor ids, Tensor values) {
  timed("topk", [&] { inner_->topk(x, k, ids, values); });
}
void ProfilingOps::kv_write(const BatchInfo& batch, const Tensor& k, const Tensor& v, KvLayer kv) {
  timed("kv_write", [&] { inner_->kv_write(batch, k, v, kv); });
}
void ProfilingOps::attention(const AttentionParams& p, const BatchInfo& batch, const Tensor& q, KvLayer kv,
                             Tensor out, ActQ8* out_q8) {
  timed(batch.n_tokens == batch.n_seqs ? "attention (decode)" : "attention (prefill)",
        [&] { inner_->attention(p, batch, q, kv, out, out_q8); });
}
void ProfilingOps::attention_mla(const MlaAttentionParams& p, const BatchInfo& batch, const Tensor& q_lat,
                                 const Tensor& q_rope, KvLayer kv, Tensor out) {
  timed("attention_mla", [&] { inner_->attention_mla(p, batch, q_lat, q_rope, kv, out); });
}
void ProfilingOps::head_matmul(const Tensor& x, const Tensor& w, Tensor y) {
  timed("head_matmul", [&] { inner_->head_matmul(x, w, y); });
}
void ProfilingOps::moe_route(const RouterParams& p, const Tensor& logits, Tensor ids, Tensor weights) {
  timed("moe_route", [&] { inner_->moe_route(p, logits, ids, weights); });
}
void ProfilingOps::moe_router(const RouterParams& p, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor logits,
                              Tensor ids, Tensor weights, const Tensor& n_valid, ActQ8* x_q8) {
  timed(weight_key("moe_router", w), [&] { inner_->moe_router(p, x, w, bias, logits, ids, weights, n_valid, x_q8); });
}
void ProfilingOps::moe_mask_rows(const Tensor& n_valid, Tensor ids) {
  timed("moe_mask_rows", [&] { inner_->moe_mask_rows(n_valid, ids); });
}
void ProfilingOps::moe_local_ids(const Tensor& ids, int32_t begin, int32_t end, int32_t n_expert, Tensor out) {
  timed("moe_local_ids", [&] { inner_->moe_local_ids(ids, begin, end, n_expert, out); });
}
void ProfilingOps::moe_experts(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
                               const ExpertBank& bank, Tensor out, const ActQ8* x_q8) {
  const std::string key = bank.gate.empty() ? std::string("moe_experts") : weight_key("moe_experts", bank.gate[0]);
  timed(key, [&] { inner_->moe_experts(p, x, ids, weights, bank, out, x_q8); });
}
void ProfilingOps::hc_pre(const HyperConnParams& p, const Tensor& streams, const Tensor& mixes, const Tensor& base,
                          const Tensor& scale, Tensor collapsed, Tensor post, Tensor comb) {
  timed("hc_pre", [&] { inner_->hc_pre(p, streams, mixes, base, scale, collapsed, post, comb); });
}
void ProfilingOps::hc_post(const HyperConnParams& p, const Tensor& streams, const Tensor& y, const Tensor& post,
                           const Tensor& comb, Tensor out) {
  timed("hc_post", [&] { inner_->hc_post(p, streams, y, post, comb, out); });
}
void ProfilingOps::compress_kv(const CompressParams& p, const BatchInfo& batch, const Tensor& proj, KvLayer kv,
                               const Tensor& ape, const Tensor& norm_w, Tensor entries) {
  timed(fmt::format("compress_kv (rate {})", p.rate), [&] { inner_->compress_kv(p, batch, proj, kv, ape, norm_w, entries); });
}
void ProfilingOps::indexer_topk(const IndexerParams& p, const BatchInfo& batch, const Tensor& q, const Tensor& w,
                                const Tensor& keys, Tensor ids) {
  timed("indexer_topk", [&] { inner_->indexer_topk(p, batch, q, w, keys, ids); });
}
void ProfilingOps::attention_compressed(const CompressedAttentionParams& p, const BatchInfo& batch, const Tensor& q,
                                        KvLayer kv, const Tensor& entries, const Tensor& selected, Tensor out) {
  timed(fmt::format("attention_compressed (rate {})", p.rate),
        [&] { inner_->attention_compressed(p, batch, q, kv, entries, selected, out); });
}
void ProfilingOps::moe_route_sqrtsoftplus(const RouterParams& p, const Tensor& logits, const Tensor& tokens,
                                          const Tensor& tid2eid, Tensor ids, Tensor weights) {
  timed("moe_route_sqrtsoftplus", [&] { inner_->moe_route_sqrtsoftplus(p, logits, tokens, tid2eid, ids, weights); });
}
void ProfilingOps::swiglu_clamp(const Tensor& gate, const Tensor& up, float limit, Tensor out) {
  timed("swiglu_clamp", [&] { inner_->swiglu_clamp(gate, up, limit, out); });
}
void ProfilingOps::ngram_hash(const NgramHashParams& p, const BatchInfo& batch, const Tensor& tokens,
                              const Tensor& mult, const Tensor& sizes, const Tensor& offsets, Tensor history,
                              Tensor ids) {
  timed("ngram_hash", [&] { inner_->ngram_hash(p, batch, tokens, mult, sizes, offsets, history, ids); });
}
void ProfilingOps::ple_gate(const Tensor& key, const Tensor& query, const Tensor& w, const Tensor& value, Tensor out) {
  timed("ple_gate", [&] { inner_->ple_gate(key, query, w, value, out); });
}
void ProfilingOps::stream_weighted_sum(const Tensor& x, const Tensor& w, Tensor out) {
  timed("stream_weighted_sum", [&] { inner_->stream_weighted_sum(x, w, out); });
}
void ProfilingOps::attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& batch, const Tensor& q,
                                 KvLayer kv, const Tensor& selected, Tensor out) {
  timed("attention_qsa", [&] { inner_->attention_qsa(p, block, batch, q, kv, selected, out); });
}
void ProfilingOps::sample(const Tensor& logits, const Tensor& rows, Tensor edits, Tensor out,
                          const SampleRow* host_rows, const Tensor& masks) {
  timed("sample", [&] { inner_->sample(logits, rows, edits, out, host_rows, masks); });
}

}  // namespace ft
