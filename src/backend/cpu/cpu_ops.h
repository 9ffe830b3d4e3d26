#pragma once
// CpuOps: the CPU backend. F32 activations, OpenMP threads, AVX-512/AVX2 inner loops chosen at run
// time (backend/cpu/simd.h) with a scalar fallback. Each op lives in its own file in this folder.
// Results are deterministic and independent of batch composition: every output element is
// computed by the same sequence of floating-point operations whatever else is in the batch.
#include <cmath>
#include <memory>
#include <vector>

#include "backend/cpu/expert_ffn.h"
#include "backend/ops.h"
#include "backend/sampling.h"

namespace ft {

class CpuOps : public Ops {
 public:
  /** n_threads <= 0: OpenMP's default (all cores). */
  explicit CpuOps(int n_threads = 0);

  const char* name() const override { return "cpu"; }
  Device device() const override { return Device::kCpu; }
  DType activation_dtype() const override { return DType::F32; }
  int n_threads() const { return n_threads_; }

  Buffer alloc(int64_t bytes) override;
  Tensor make_resident(const Tensor& host, Buffer& storage) override;
  void copy(const Tensor& src, Tensor dst) override;
  void zero(Tensor t) override;
  void synchronize() override {}

  void embedding(const Tensor& table, const Tensor& ids, Tensor out) override;
  void rms_norm(const RmsNormParams& p, const Tensor& x, const Tensor& w, Tensor out, ActQ8* out_q8 = nullptr) override;
  void rope(const RopeParams& p, Tensor x, const Tensor& positions) override;
  void matmul(const Tensor& x, const Tensor& w, Tensor y, const Tensor& bias, const ActQ8* x_q8 = nullptr) override;
  void swiglu(const Tensor& gate, const Tensor& up, Tensor out) override;
  void add(const Tensor& a, const Tensor& b, Tensor out) override;
  void scale(const Tensor& x, float s, Tensor out) override;
  void sigmoid(const Tensor& x, Tensor out) override;
  void sigmoid_mul(const Tensor& gate, const Tensor& x, Tensor out) override;
  void add_scaled_rows(const Tensor& x, const Tensor& row_scale, float alpha, Tensor y) override;
  void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor out) override;
  void softcap(const Tensor& x, float cap, Tensor out) override;
  void embedding_split(const Tensor& table, const Tensor& ids, Tensor out) override;
  void moe_expert_scale(const Tensor& ids, const Tensor& scale, Tensor weights) override;
  void softmax(const Tensor& x, Tensor out) override;
  void topk(const Tensor& x, int32_t k, Tensor ids, Tensor values) override;
  void kv_write(const BatchInfo& batch, const Tensor& k, const Tensor& v, KvLayer kv) override;
  void ssm_conv(const BatchInfo& batch, const Tensor& x, const Tensor& w, Tensor conv_state, Tensor out) override;
  void gated_delta_rule(const GatedDeltaParams& p, const BatchInfo& batch, const Tensor& qkv, const Tensor& a,
                        const Tensor& b, Tensor ssm_state, Tensor out) override;
  void attention(const AttentionParams& p, const BatchInfo& batch, const Tensor& q, KvLayer kv,
                 Tensor out, ActQ8* out_q8 = nullptr) override;
  void attention_mla(const MlaAttentionParams& p, const BatchInfo& batch, const Tensor& q_lat, const Tensor& q_rope,
                     KvLayer kv, Tensor out) override;
  void head_matmul(const Tensor& x, const Tensor& w, Tensor y) override;
  void moe_route(const RouterParams& p, const Tensor& logits, Tensor ids, Tensor weights) override;
  void moe_mask_rows(const Tensor& n_valid, Tensor ids) override;
  void moe_local_ids(const Tensor& ids, int32_t begin, int32_t end, int32_t n_expert, Tensor out) override;
  void moe_experts(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const ExpertBank& bank, Tensor out, const ActQ8* x_q8 = nullptr) override;
  void sample(const Tensor& logits, const Tensor& rows, Tensor edits, Tensor out,
              const SampleRow* host_rows = nullptr, const Tensor& masks = Tensor()) override;
  // DeepSeek-V4 (hc_pre.cpp, hc_post.cpp, compress_kv.cpp, indexer_topk.cpp, attention_compressed.cpp,
  // moe_route_sqrtsoftplus.cpp, swiglu_clamp.cpp).
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
  // Qwen4-Exp (ngram_hash.cpp, ple_gate.cpp (also stream_weighted_sum), attention_qsa.cpp).
  void ngram_hash(const NgramHashParams& p, const BatchInfo& batch, const Tensor& tokens, const Tensor& mult,
                  const Tensor& sizes, const Tensor& offsets, Tensor history, Tensor ids) override;
  void ple_gate(const Tensor& key, const Tensor& query, const Tensor& w, const Tensor& value, Tensor out) override;
  void stream_weighted_sum(const Tensor& x, const Tensor& w, Tensor out) override;
  void attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& batch, const Tensor& q, KvLayer kv,
                     const Tensor& selected, Tensor out) override;


 private:
  int n_threads_;
  std::vector<float> moe_scratch_;  // grown once to the largest batch seen (moe_experts)
  cpu::ExpertPairs moe_pairs_;
};

// ---- helpers shared by the op files (cpu backend internal) ----
namespace cpu {

/** y[t, n] = dot(x[t, :], w[n, :]) (+ bias[n]) for rows t < T: x F32 with row stride ldx, y F32 with
 *  row stride ldy, w [N, K] any weight dtype. Parallel over (row tiles of w, token blocks); each
 *  element's summation order is fixed (independent of T). */
void matmul_f32(const float* x, int64_t T, int64_t ldx, const Tensor& w, const Tensor& bias, float* y, int64_t ldy,
                int n_threads);

/** Indices of the k best values of row[0..C) into idx: descending, ties to the lower index, NaN last. */
void topk_row(const float* row, int64_t C, int32_t k, int32_t* idx);

/** Page id and slot of position `pos` of batch sequence `s`; throws kInvalidArgument naming the op when
 *  the block table or page id is out of range. */
struct PageSlot {
  int64_t page, slot;
};
PageSlot page_slot(const char* op, const BatchInfo& b, int64_t n_pages, int64_t page_size, int32_t s, int32_t pos);
/** Validates a BatchInfo's index tensors (CPU, I32, shapes) for `op`. */
void check_batch(const char* op, const BatchInfo& b);
/** Throws kInvalidArgument naming `op` when a sequence's batch.state_slots entry is outside [0, n_slots). */
void check_state_slots(const char* op, const BatchInfo& b, int64_t n_slots);

/** PyTorch's GELU with approximate="tanh" in fp32: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (the
 *  constants as ATen writes them), for gelu_tanh_mul and the experts' ExpertGlu::kGeluTanh. */
inline float gelu_tanh(float x) {
  const float beta = 0.7978845608028654f, kappa = 0.044715f;
  return 0.5f * x * (1.0f + std::tanh(beta * (x + kappa * x * x * x)));
}

/** DeepSeek-V4's tail RoPE of one head x[0, head_dim) in place (ops.h, before HyperConnParams):
 *  the last p.n_rot dims as adjacent pairs, angle pos * inv_freq[i]; sign -1 rotates backwards. */
void rope_tail(const RopeParams& p, float* x, double pos, float sign = 1.0f);

/** Throws kInvalidArgument naming `op` unless kv's pages are F32 without scales, or quantized codes
 *  (F8_E4M3 / I8) with scales of kv_scale_dtype [n_pages, page_size, heads, kv_scales_per_head]. */
void check_kv_pages(const char* op, const KvLayer& kv);
/** The same for one page tensor `name` and its scales (empty for F32 pages): the ops that read or
 *  write only kv.k or only kv.v (compress_kv, attention_compressed). */
void check_kv_page_tensor(const char* op, const char* name, const Tensor& pages, const Tensor& scales);

/** Throws kInvalidArgument "<op>: <arg> must be on the CPU" / "... must be F32" etc. */
void check_cpu(const char* op, const char* arg, const Tensor& t);
void check_dtype(const char* op, const char* arg, const Tensor& t, DType want);
/** Throws kInvalidArgument "<op>: <arg> has shape [..], expected [..]". */
void check_same_shape(const char* op, const char* arg, const Tensor& t, const Tensor& ref);

/** Samples one token from each of the R logit rows [R, V] (float32, not modified) as
 *  backend/sampling.h defines it: row r by rows[r] (skipped when `skip` is set: out[r] untouched),
 *  which names its range of `edits` (their `raw` fields are written); results to out [R]. Ranges and
 *  ids are not checked here (op_checks::sample_edits), nor are the rows' mask_index into `masks` (M rows of
 *  sample_mask_words(V) words; null when no row names one: op_checks::sample_mask_rows). Scratch: one per calling thread, grown to the
 *  vocabulary once. The CPU backend's sample op and the host samplers (ModelRunner, Sampler) use it. */
void sample_rows(const float* logits, int64_t V, const SampleRow* rows, int64_t R, LogitEdit* edits,
                 SampleResult* out, const uint32_t* masks = nullptr);

}  // namespace cpu
}  // namespace ft
