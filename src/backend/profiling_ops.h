#pragma once
// ProfilingOps: an Ops decorator that times every op of the wrapped backend (`ft bench
// --profile-ops`). Each call is bracketed by synchronize() and a host clock, so a time is the op's
// device time plus one launch and one synchronisation; the empty-bracket cost (measured at start)
// is subtracted. Graph capture is off while profiling (a capture cannot synchronise). Ops are keyed
// by name and, for matmul and moe_experts, by weight shape and dtype ("matmul [2048x4096] Q4_K").
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"

namespace ft {

/** Accumulated time of one op key. */
struct OpProfileRow {
  std::string key;
  int64_t calls = 0;
  double seconds = 0;  // bracket cost already subtracted (clamped at 0 per call)
};

class ProfilingOps final : public Ops {
 public:
  /** Wraps `inner` (owned). */
  explicit ProfilingOps(std::unique_ptr<Ops> inner);

  /** Rows sorted by total time, descending. */
  std::vector<OpProfileRow> rows() const;
  /** Forgets the times gathered so far. */
  void reset() { acc_.clear(); }
  /** Seconds one empty synchronize bracket costs (subtracted from every call). */
  double bracket_seconds() const { return bracket_; }

  const char* name() const override { return inner_->name(); }
  Device device() const override { return inner_->device(); }
  DType activation_dtype() const override { return inner_->activation_dtype(); }
  bool reads_int8_activations(DType weight) const override { return inner_->reads_int8_activations(weight); }
  Buffer alloc(int64_t bytes) override { return inner_->alloc(bytes); }
  Buffer alloc_host(int64_t bytes) override { return inner_->alloc_host(bytes); }
  Tensor make_resident(const Tensor& host, Buffer& storage) override { return inner_->make_resident(host, storage); }
  Tensor make_host_mapped(const Tensor& host, Buffer& storage) override {
    return inner_->make_host_mapped(host, storage);
  }
  void copy(const Tensor& src, Tensor dst) override;
  void zero(Tensor t) override;
  void synchronize() override { inner_->synchronize(); }

  void embedding(const Tensor& table, const Tensor& ids, Tensor out) override;
  void rms_norm(const RmsNormParams& p, const Tensor& x, const Tensor& w, Tensor out, ActQ8* out_q8 = nullptr) override;
  void qk_norm_rope_store(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& p, Tensor q,
                          Tensor k, const Tensor& v, const BatchInfo& batch, KvLayer kv) override;
  void qk_norm_rope_attention(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& rp,
                              const AttentionParams& ap, Tensor q, Tensor k, const Tensor& v, const BatchInfo& batch,
                              KvLayer kv, Tensor out, ActQ8* out_q8 = nullptr) override;
  void add_rms_norm(const RmsNormParams& p, Tensor x, const Tensor& r, const Tensor& w, Tensor out,
                    ActQ8* out_q8 = nullptr) override;
  void rope(const RopeParams& p, Tensor x, const Tensor& positions) override;
  void norm_rope(const RmsNormParams& np, const Tensor& w, const RopeParams& p, Tensor x,
                 const Tensor& positions) override;
  void matmul(const Tensor& x, const Tensor& w, Tensor y, const Tensor& bias, const ActQ8* x_q8 = nullptr) override;
  void swiglu(const Tensor& gate, const Tensor& up, Tensor out) override;
  void add(const Tensor& a, const Tensor& b, Tensor out) override;
  void scale(const Tensor& x, float s, Tensor out) override;
  void sigmoid(const Tensor& x, Tensor out) override;
  void sigmoid_mul(const Tensor& gate, const Tensor& x, Tensor out) override;
  void add_scaled_rows(const Tensor& x, const Tensor& row_scale, float alpha, Tensor y) override;
  void ssm_conv(const BatchInfo& batch, const Tensor& x, const Tensor& w, Tensor conv_state, Tensor out) override;
  void gated_delta_rule(const GatedDeltaParams& p, const BatchInfo& batch, const Tensor& qkv, const Tensor& a,
                        const Tensor& b, Tensor ssm_state, Tensor out) override;
  void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor out) override;
  void softcap(const Tensor& x, float cap, Tensor out) override;
  void embedding_split(const Tensor& table, const Tensor& ids, Tensor out) override;
  void moe_expert_scale(const Tensor& ids, const Tensor& scale, Tensor weights) override;
  void softmax(const Tensor& x, Tensor out) override;
  void topk(const Tensor& x, int32_t k, Tensor ids, Tensor values) override;
  void kv_write(const BatchInfo& batch, const Tensor& k, const Tensor& v, KvLayer kv) override;
  void attention(const AttentionParams& p, const BatchInfo& batch, const Tensor& q, KvLayer kv, Tensor out,
                 ActQ8* out_q8 = nullptr) override;
  void attention_mla(const MlaAttentionParams& p, const BatchInfo& batch, const Tensor& q_lat, const Tensor& q_rope,
                     KvLayer kv, Tensor out) override;
  void head_matmul(const Tensor& x, const Tensor& w, Tensor y) override;
  void moe_route(const RouterParams& p, const Tensor& logits, Tensor ids, Tensor weights) override;
  void moe_mask_rows(const Tensor& n_valid, Tensor ids) override;
  void moe_local_ids(const Tensor& ids, int32_t begin, int32_t end, int32_t n_expert, Tensor out) override;
  void moe_router(const RouterParams& p, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor logits, Tensor ids,
                  Tensor weights, const Tensor& n_valid, ActQ8* x_q8 = nullptr) override;
  void moe_experts(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const ExpertBank& bank, Tensor out, const ActQ8* x_q8 = nullptr) override;
  void sample(const Tensor& logits, const Tensor& rows, Tensor edits, Tensor out,
              const SampleRow* host_rows = nullptr, const Tensor& masks = Tensor()) override;
  void hc_pre(const HyperConnParams& p, const Tensor& streams, const Tensor& mixes, const Tensor& base,
              const Tensor& scale, Tensor collapsed, Tensor post, Tensor comb) override;
  void hc_post(const HyperConnParams& p, const Tensor& streams, const Tensor& y, const Tensor& post,
               const Tensor& comb, Tensor out) override;
  void compress_kv(const CompressParams& p, const BatchInfo& batch, const Tensor& proj, KvLayer kv,
                   const Tensor& ape, const Tensor& norm_w, Tensor entries) override;
  void indexer_topk(const IndexerParams& p, const BatchInfo& batch, const Tensor& q, const Tensor& w,
                    const Tensor& keys, Tensor ids) override;
  void attention_compressed(const CompressedAttentionParams& p, const BatchInfo& batch, const Tensor& q, KvLayer kv,
                            const Tensor& entries, const Tensor& selected, Tensor out) override;
  void moe_route_sqrtsoftplus(const RouterParams& p, const Tensor& logits, const Tensor& tokens,
                              const Tensor& tid2eid, Tensor ids, Tensor weights) override;
  void swiglu_clamp(const Tensor& gate, const Tensor& up, float limit, Tensor out) override;
  void ngram_hash(const NgramHashParams& p, const BatchInfo& batch, const Tensor& tokens, const Tensor& mult,
                  const Tensor& sizes, const Tensor& offsets, Tensor history, Tensor ids) override;
  void ple_gate(const Tensor& key, const Tensor& query, const Tensor& w, const Tensor& value, Tensor out) override;
  void stream_weighted_sum(const Tensor& x, const Tensor& w, Tensor out) override;
  void attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& batch, const Tensor& q, KvLayer kv,
                     const Tensor& selected, Tensor out) override;
  int64_t max_sample_row() const override { return inner_->max_sample_row(); }
  int64_t workspace_bytes(const WorkspaceShape& s) const override { return inner_->workspace_bytes(s); }

 private:
  /** Runs `f` between two synchronize() calls and adds its time to `key`. */
  template <typename F>
  void timed(const std::string& key, F&& f);

  std::unique_ptr<Ops> inner_;
  double bracket_ = 0;
  std::map<std::string, OpProfileRow> acc_;
};

}  // namespace ft
