#pragma once
// CudaOps: the CUDA backend. Activations F32 by default (BF16 selectable; every op reads either),
// fp32 accumulation, weights kept in their stored dtype and decoded inside the kernels; cuBLAS
// multiplies in bf16. F32 activations keep the residual stream and router inputs exact up to the
// weights: with BF16 activations (~1% logit error) MoE routers flip near-ties and the flipped
// token's error spreads to every later position through attention (measured on the fixtures). All work
// is queued on one stream owned by the backend (so a caller can capture it as a CUDA graph);
// host-visible results need copy() to a host tensor or synchronize(). One op per file in this
// folder: <op>.cu holds the kernel, its launcher and the CudaOps entry that validates arguments.
//
// Only compiled when CMake finds nvcc (FT_HAVE_CUDA); other code reaches it through
// make_cuda_ops() in backend/cuda_factory.h.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "backend/ops.h"
#include "backend/cuda/attention_decode.h"

namespace ft {

class CudaOps final : public Ops {
 public:
  /** Uses CUDA device `device` (made current for this thread); `activations` (BF16 or F32) is what
   *  activation_dtype() reports, i.e. the dtype the model allocates its activations in. Weights are
   *  multiplied in bf16 either way (F32 activations are rounded to bf16 as they enter cuBLAS; the
   *  GEMV reads them exactly). Throws kInvalidArgument for a bad index or dtype, kInternal when the
   *  stream or cuBLAS cannot be created. */
  explicit CudaOps(int device = 0, DType activations = DType::F32);
  ~CudaOps() override;
  CudaOps(const CudaOps&) = delete;
  CudaOps& operator=(const CudaOps&) = delete;

  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::kCuda; }
  DType activation_dtype() const override { return activations_; }

  Buffer alloc(int64_t bytes) override;
  Tensor make_resident(const Tensor& host, Buffer& storage) override;
  Tensor make_host_mapped(const Tensor& host, Buffer& storage) override;
  Buffer alloc_host(int64_t bytes) override;
  std::unique_ptr<HostAllocator> host_allocator() const override;
  void copy(const Tensor& src, Tensor dst) override;
  void zero(Tensor t) override;
  void synchronize() override;
  bool supports_graphs() const override { return true; }
  bool reads_int8_activations(DType weight) const override;
  /** kDecodeClusterKeys where clusters_possible(), else 0 (attention_decode.h). */
  int32_t decode_short_kv_len() const override;
  /** Captures `body` from this backend's stream (thread-local capture mode) into an instantiated
   *  CUDA graph (graph.cpp). Throws kUnsupported when the capture was invalidated (a host
   *  synchronisation, a scratch region regrowing, an allocation inside `body`). */
  std::unique_ptr<StepGraph> capture(const std::function<void()>& body) override;

  void embedding(const Tensor& table, const Tensor& ids, Tensor out) override;
  void rms_norm(const RmsNormParams& p, const Tensor& x, const Tensor& w, Tensor out, ActQ8* out_q8 = nullptr) override;
  void rope(const RopeParams& p, Tensor x, const Tensor& positions) override;
  void add_rms_norm(const RmsNormParams& p, Tensor x, const Tensor& r, const Tensor& w, Tensor out,
                    ActQ8* out_q8 = nullptr) override;
  void qk_norm_rope_store(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& p, Tensor q,
                          Tensor k, const Tensor& v, const BatchInfo& batch, KvLayer kv) override;
  void norm_rope(const RmsNormParams& np, const Tensor& w, const RopeParams& p, Tensor x,
                 const Tensor& positions) override;
  void qk_norm_rope_attention(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& rp,
                              const AttentionParams& ap, Tensor q, Tensor k, const Tensor& v, const BatchInfo& batch,
                              KvLayer kv, Tensor out, ActQ8* out_q8 = nullptr) override;
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
  void attention(const AttentionParams& p, const BatchInfo& batch, const Tensor& q, KvLayer kv,
                 Tensor out, ActQ8* out_q8 = nullptr) override;
  /** attention_mla.cu: exact CUDA-core kernel for F32 pages and short prefill, tensor-core kernel
   *  (attention_mla_tc.cu) for BF16 pages and long prefill; split-K over each token's keys for decode. */
  void attention_mla(const MlaAttentionParams& p, const BatchInfo& batch, const Tensor& q_lat, const Tensor& q_rope,
                     KvLayer kv, Tensor out) override;
  /** head_matmul.cu: a per-head GEMV for up to 16 tokens, cuBLAS strided-batched GEMM beyond. */
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
  // DeepSeek-V4 (hc_pre.cu, hc_post.cu, compress_kv.cu, indexer_topk.cu, attention_compressed.cu,
  // moe_route_sqrtsoftplus.cu, swiglu_clamp.cu).
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
  // Qwen4-Exp (ngram_hash.cu, ple_gate.cu, stream_weighted_sum.cu, attention_qsa.cu).
  void ngram_hash(const NgramHashParams& p, const BatchInfo& batch, const Tensor& tokens, const Tensor& mult,
                  const Tensor& sizes, const Tensor& offsets, Tensor history, Tensor ids) override;
  void ple_gate(const Tensor& key, const Tensor& query, const Tensor& w, const Tensor& value, Tensor out) override;
  void stream_weighted_sum(const Tensor& x, const Tensor& w, Tensor out) override;
  void attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& batch, const Tensor& q, KvLayer kv,
                     const Tensor& selected, Tensor out) override;
  int64_t max_sample_row() const override;
  int64_t workspace_bytes(const WorkspaceShape& s) const override;

  // ---- for the engine (CUDA graphs) and for the op files of this backend ----------------------

  cudaStream_t stream() const { return stream_; }
  int device_index() const { return device_; }
  int sm_count() const { return sm_count_; }

  /** Scratch regions: grown on demand (the first large call pays a cudaMalloc, which
   *  synchronizes the device), never shrunk, distinct per slot so nested users do not clash. */
  enum class Scratch : int { kXConvert = 0, kDequant, kAttention, kAttentionDone, kRouterDone, kMoe, kCub, kQ8, kQ8Prepared, kSample, kSampleDone, kLinearAttention, kCount };
  void* scratch(Scratch slot, int64_t bytes);
  /** What scratch() allocates for a request of `bytes` (headroom for fewer regrowths). */
  static int64_t region_bytes(int64_t bytes) { return bytes <= 0 ? 0 : std::max<int64_t>(bytes + bytes / 4, 1 << 20); }
  /** Bytes of every scratch region allocated so far (tests compare it with workspace_bytes). */
  int64_t scratch_bytes() const;
  static constexpr int64_t kCublasWorkspaceBytes = 32ll << 20;  // fixed, so cuBLAS never allocates (graph capture)
  /** scratch() whose bytes are zero when (re)allocated; for counters that their kernels return to zero. */
  void* zeroed_scratch(Scratch slot, int64_t bytes);
  /** A small pinned host buffer (for index read-backs on eager prefill paths). */
  void* pinned(int64_t bytes);

  /** y[T, N] (row stride ldy, F32 or BF16) = x[T, K] (BF16 or F32, rows contiguous) W^T (+ bias), W any
   *  supported weight dtype. The engine of matmul and of moe_experts' per-expert GEMMs: a GEMV
   *  kernel for small T, cuBLAS (after decoding W to bf16 tiles when W is not BF16) otherwise.
   *  x_q8: x's int8 form (handed_q8) for the integer-dot GEMV to read instead of quantizing x, or null. */
  void matmul_raw(const void* x, DType x_dtype, int64_t T, const Tensor& w, void* y, DType y_dtype, int64_t ldy,
                  const Tensor& bias, void* x_q8 = nullptr);

  /** Device table [E][3] of uint64 addresses (gate, up, down) of a bank's experts, built on first
   *  use and rebuilt only when a view's address changes (the expert cache re-points views). */
  const uint64_t* expert_table(const ExpertBank& bank);

  cublasHandle_t cublas() const { return cublas_; }

  /** The int8 form (q8_act.cuh, Q8Layout(rows, K)) of the rows x K activations at x in dtype `dt` that
   *  handle h names, when h is valid for them (ActQ8, ops.h: the same x, dtype, rows and K, written by
   *  this backend at its current generation); null otherwise (h null or empty, stale or foreign). The
   *  integer-dot GEMV then skips its quantize launch; the bytes are the same either way. */
  void* handed_q8(const ActQ8* h, const void* x, DType dt, int64_t rows, int64_t K) const;
  // Measured on the H200 (qwen3-30b-a3b q4_k, batch 1): the router's form +2.6%, the attention's
  // +1.8%, then the norms' (a cluster of 8 blocks per row, rms_norm.cu) +2.9% more.
  /** How many times a producer has written the int8 form's region (Scratch::kQ8Prepared): a handle
   *  is valid only at the generation it was written at. */
  uint64_t q8_generation() const { return q8_generation_; }
  /** How synchronize() and copies to the host wait: spinning (the default: the lowest latency) or,
   *  with `sleep`, blocked in the driver (cudaEventBlockingSync) so the waiting thread leaves its core
   *  to others: the CPU expert executor's workers, which must all run for a layer to finish (the MoE
   *  exchange sets it; a spinning 17th thread on 16 cores cost the cpu strategy 6x on the H200). */
  void set_host_waits_sleep(bool sleep) { host_waits_sleep_ = sleep; }

 private:
  /** The decode attention kernel for d (tensors set): chooses the split plan (cluster mode when the
   *  batch's longest key range, max_kv_len tokens, is short: decode_short_kv_len) and its scratch;
   *  the kernel also writes out's int8 form when it can and out_q8 asks (prepare_q8). */
  void launch_decode_attention(cuda::AttnDecodeArgs& d, const KvLayer& kv, const Tensor& out, int64_t max_kv_len,
                               ActQ8* out_q8);
  /** Where a kernel about to write or read the rows x K activation x (its output, or an input it reads
   *  whole) writes x's int8 form as well (Scratch::kQ8Prepared, a new generation), with `handle` set to
   *  it; null, `handle` emptied, when nobody asked (handle null) or it is not worth it (more than 16
   *  rows, K not whole 32-element chunks). */
  void* prepare_q8(const Tensor& x, ActQ8* handle);

  uint64_t q8_generation_ = 0;  // q8_generation

  struct Region {
    void* ptr = nullptr;
    int64_t bytes = 0;
  };
  struct BankTable {
    std::vector<uint64_t> host;
    void* dev = nullptr;
    int64_t capacity = 0;
  };

  int device_ = 0;
  DType activations_ = DType::F32;
  int sm_count_ = 0;
  cudaStream_t stream_ = nullptr;
  bool host_waits_sleep_ = false;       // set_host_waits_sleep
  cudaEvent_t sleep_event_ = nullptr;   // synchronize()'s blocking event (created on first use)
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  Region scratch_[static_cast<int>(Scratch::kCount)];
  int64_t scratch_generation_ = 0;  // bumped whenever a scratch region moves (graphs recorded before are stale)
  Buffer pinned_;  // pinned() (alloc_host)
  std::unordered_map<const ExpertBank*, BankTable> bank_tables_;
};

}  // namespace ft
