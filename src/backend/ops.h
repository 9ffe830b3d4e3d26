#pragma once
// Ops: the compute interface every backend implements (backend/cpu, backend/cuda) and the only
// thing model/, moe/ and engine/ call to touch tensors. One method per op; each backend gives
// every op the same signature and the same semantics (tests/backend checks them against naive
// scalar references, and later CPU against CUDA).
//
// Conventions for every op:
// - Shapes are row-major, written [rows, cols]; every tensor must be contiguous and live on
//   this backend's device() (weights: made resident with make_resident first).
// - Activations have dtype activation_dtype() (F32 on CPU; on CUDA F32 by default or BF16 when asked, see make_cuda_ops); ops read the dtype from
//   the tensor, never assume it. Index tensors are I32. Accumulation is always fp32.
// - Weights may be F32, F16, BF16 or any GGUF block type that quant/ can dequantize; they are
//   dequantized inside the kernel, never expanded in memory.
// - Violated preconditions on shapes/dtypes/devices throw ft::Error(kInvalidArgument) naming the
//   op and the argument ("matmul: w [64, 96] BF16 does not match x [37, 64]"); an unsupported
//   dtype throws kUnsupported. Ops never allocate per call on hot paths beyond one-time scratch.
// - Ops may run asynchronously on the device; results are visible to the host after copy() to a
//   host tensor or synchronize().
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "backend/host_allocator.h"
#include "backend/sampling.h"
#include "tensor/tensor.h"

namespace ft {

// ----------------------------------------------------------------------------------------------
// Batch description shared by kv_write and attention.

/** One forward's batch: S sequences, each contributing a run of consecutive tokens (a prefill
 *  chunk or one decode token), T tokens in all. Tokens of a sequence are contiguous rows of the
 *  activations, in increasing position order. The index tensors live on the backend's device;
 *  the integers are host copies used to size kernel launches. */
struct BatchInfo {
  int32_t n_tokens = 0;    // T
  int32_t n_seqs = 0;      // S
  int32_t max_blocks = 0;  // columns of block_tables
  int32_t max_kv_len = 0;  // max over tokens of (position + 1): the longest key range any query sees
  Tensor positions;        // I32 [T]: absolute position of each token within its sequence
  Tensor seq_index;        // I32 [T]: batch sequence (0..S-1) of each token
  Tensor seq_start;        // I32 [S+1]: sequence s owns token rows seq_start[s] .. seq_start[s+1]-1
  Tensor block_tables;     // I32 [S, max_blocks]: page id holding positions [j*page, (j+1)*page) of seq s
  /** I32 [1] on the device, or empty (all rows real): rows >= n_valid[0] pad a replayed graph (token 0
   *  at position 0 of a spare page, one sequence each); MoE layers route them nowhere. */
  Tensor n_valid;
  /** I32 [S] on the device, or empty (the model has no recurrent layers): the recurrent-state slot
   *  (StateLayer) of each sequence. A sequence whose first row here is at position 0 starts from a
   *  zero state (nothing is read from its slot); otherwise its slot holds the state after position
   *  (first position - 1). */
  Tensor state_slots;
};

/** One layer's paged KV storage. Page p, slot i holds the key/value of one token:
 *  k[p, i, h, :] for kv head h. dtype F32 on CPU (BF16 allowed on CUDA; F8_E4M3 / I8 codes with
 *  k_scale / v_scale on CPU and CUDA for --kv-cache-dtype fp8 / q8_0). */
struct KvLayer {
  Tensor k;  // [n_pages, page_size, n_head_kv, head_dim]
  Tensor v;  // [n_pages, page_size, n_head_kv, head_dim]
  /** Quantized pages only (--kv-cache-dtype fp8 / q8_0; quant/kv_quant.h), empty otherwise: k and v
   *  then hold codes (F8_E4M3, or I8 for q8_0) and these their scales, [n_pages, page_size, heads,
   *  scales a head] (fp8: one F32 a head; q8_0: one F16 per 32 values of a head). */
  Tensor k_scale;
  Tensor v_scale;
  /** DeepSeek-V4's compressed entries (KvCacheConfig::layer_entry_rate; empty for other layers and
   *  models): [n_pages, rows, 1, width] in the activation dtype, never quantized (an entry is written
   *  once, when its window closes; compress_kv). With rate r and page size ps (the key pages'), entry
   *  w of a sequence lives in the page holding its window's last position (w + 1) r - 1, page index
   *  j = ((w + 1) r - 1) / ps of its block table, at row w - floor(j ps / r) < rows = ceil(ps / r):
   *  so an entry sits in a page only once every position it pools is there, and a prefix-cache page
   *  carries its entries with it. */
  Tensor e;
  bool quantized() const { return !k_scale.empty(); }
};

/** One linear-attention layer's recurrent state (Gated DeltaNet), one slot per running sequence
 *  (BatchInfo::state_slots), F32: it is what the whole prefix left behind, so it is kept exact. */
struct StateLayer {
  Tensor conv;  // F32 [n_slots, conv_kernel - 1, conv_dim]: the sequence's last conv inputs, oldest first
  Tensor ssm;   // F32 [n_slots, n_v_heads, k_head_dim, v_head_dim]: S of the gated delta rule (out = S^T q)
  /** Qwen4-Exp's per-layer embeddings (KvCacheConfig::conv2_*, empty otherwise): the window of a
   *  second short convolution, F32 [n_slots, rows, dim], and the sequence's last tokens, I32 [n_slots, n]. */
  Tensor conv2;
  Tensor tokens;
};

// ----------------------------------------------------------------------------------------------
// Params structs.

/** The int8 form (CUDA q8_act.cuh layout) of an activation x [rows, K] that the op producing x
 *  wrote as well (rms_norm, add_rms_norm, the decode attention for their output; moe_router for its
 *  input), handed by the forward pass to the ops that then read x whole (matmul, moe_experts,
 *  moe_router), so they skip quantizing x again. Empty (data null) when the backend wrote none: the
 *  CPU backend never does and ignores handles. A producer given a handle writes the form (CUDA, up
 *  to 16 rows of whole 32-element chunks); the forward pass hands one only where a reader will use
 *  it (Ops::reads_int8_activations), so the backend keeps no state to decide that.
 *
 *  A reader uses the handle only when it names the same x (data pointer, dtype, rows, K) and its
 *  generation is the backend's current one (CUDA bumps it each time it writes the form's region),
 *  else it quantizes x itself: a stale or foreign handle costs time, never correctness. The caller's
 *  contract: pass a handle only together with the unchanged tensor its producer wrote (an op that
 *  writes x in place in between makes the handle a lie the backend cannot see). */
struct ActQ8 {
  void* data = nullptr;     // the int8 form on the backend's device (null: none)
  const void* x = nullptr;  // the activation it is the form of
  DType dtype = DType::F32;
  int64_t rows = 0, K = 0;
  uint64_t generation = 0;  // the backend's count of writes of the form's region when it was written
};

struct RmsNormParams {
  float eps = 1e-6f;
  /** out = x / rms(x) * (weight + weight_offset); Gemma-style checkpoints store w and use 1 + w. */
  float weight_offset = 0.0f;
};

enum class RopeMode : uint8_t {
  /** GGML "normal" mode: rotates adjacent pairs (x[2i], x[2i+1]) with frequency inv_freq[i]
   *  (llama.cpp's LLAMA_ROPE_TYPE_NORM; GGUF llama files carry Q/K rows permuted for it). */
  kNormal = 0,
  /** GPT-NeoX mode: rotates (x[i], x[i + n_rot/2]) with frequency inv_freq[i] (Hugging Face
   *  `rotate_half`). */
  kNeox = 1,
};

struct RopeParams {
  RopeMode mode = RopeMode::kNeox;
  int32_t head_dim = 0;  // row length of one head; x's last dim must be a multiple of it
  int32_t n_rot = 0;     // rotated dims at the start of each head (even, <= head_dim); the rest pass through
  /** F32 [n_rot / 2] on the device: angle of pair i at position p is p * inv_freq[i]. Scaling variants
   *  (linear, yarn, llama3, ...) are folded into it on the host once (model/rope.h). */
  Tensor inv_freq;
  /** cos and sin are multiplied by this (YaRN's attention factor; 1 otherwise). */
  float attn_factor = 1.0f;
};

struct AttentionParams {
  int32_t n_head = 0;       // query heads
  int32_t n_head_kv = 0;    // key/value heads (GQA: n_head % n_head_kv == 0; query head h uses kv head h / (n_head/n_head_kv))
  int32_t head_dim = 0;
  float scale = 0.0f;       // logits = scale * q.k (usually 1/sqrt(head_dim))
  int32_t sliding_window = 0;  // > 0: a query at position p sees keys at positions > p - sliding_window
  /** F32 [n_head] on the device, or empty: one learned logit per query head that joins the softmax's
   *  denominator and contributes no value (gpt-oss's attention sinks, transformers GptOssAttention):
   *  p_j = exp(s_j) / (exp(sinks[h]) + sum_i exp(s_i)), s = scale * q.k. Not scaled. */
  Tensor sinks;
};

struct MlaAttentionParams {
  int32_t n_head = 0;
  int32_t kv_lora_rank = 0;  // latent width (512 in DeepSeek-V3)
  int32_t rope_dim = 0;      // qk_rope_head_dim (64 in DeepSeek-V3)
  float scale = 0.0f;        // (qk_nope_head_dim + qk_rope_head_dim)^-0.5, times YaRN's mscale^2
};

/** Gated DeltaNet's recurrence (Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks", arXiv
 *  2412.06464; transformers' torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel). */
struct GatedDeltaParams {
  int32_t n_k_heads = 0;   // query/key heads; value head h reads key head h / (n_v_heads / n_k_heads)
  /** Value heads ordered tiled over the key heads (llama.cpp's qwen35 files): value head h reads key
   *  head h % n_k_heads instead. */
  bool v_tiled = false;
  int32_t n_v_heads = 0;   // value heads (a multiple of n_k_heads)
  int32_t k_head_dim = 0;
  int32_t v_head_dim = 0;
  Tensor a_log;            // F32 [n_v_heads] on the device: A_log (decay rate -exp(A_log))
  Tensor dt_bias;          // F32 [n_v_heads] on the device
  float l2_eps = 1e-6f;    // q, k <- x / sqrt(sum x^2 + l2_eps)
};

/** The shapes that size a backend's step scratch (Ops::workspace_bytes): the largest step and the
 *  model's widths. Zero fields: the model has no such layer. */
struct WorkspaceShape {
  int64_t tokens = 0;          // rows of the largest step (the engine's max_step_tokens)
  int64_t max_seqs = 0;        // sequences in one step
  int64_t logit_rows = 0;      // rows sampled in one step
  int64_t n_vocab = 0;
  int64_t max_matmul_k = 0;    // widest input of a matmul (hidden, attention output, FFN width)
  int64_t hidden = 0;
  int32_t moe_top_k = 0;       // routed experts: top-k, experts per layer, expert FFN width
  int32_t moe_n_expert = 0;
  int64_t moe_ffn = 0;
  int64_t n_head = 0, head_dim = 0;  // the largest attention layer (MLA: heads and latent rank)
  int64_t max_kv_len = 0;      // the longest key range one query attends to (the context)
  int64_t lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0;  // Gated DeltaNet layers
};

enum class RouterScoring : uint8_t { kSoftmax = 0, kSigmoid = 1 };

struct RouterParams {
  int32_t n_expert_used = 0;  // k
  RouterScoring scoring = RouterScoring::kSoftmax;
  /** Divide the k selected weights by their sum (Mixtral, Qwen3-MoE); false keeps the raw scores
   *  of the full softmax (Qwen2-MoE, OLMoE). */
  bool norm_topk_prob = false;
  /** Selected weights are multiplied by this after normalisation (DeepSeek's routed_scaling_factor). */
  float scaling = 1.0f;
  /** Group-limited selection (DeepSeek-V3, GLM-4.5): the E experts form n_group equal groups of
   *  consecutive ids; a group's score is the sum of its two best selection scores, the topk_group best
   *  groups are kept (ties to the lower group) and the k experts are chosen among theirs only.
   *  n_group <= 1: every expert is eligible. E must be a multiple of n_group, each group >= 2 experts. */
  int32_t n_group = 1;
  int32_t topk_group = 1;
  /** F32 [E] on the device, or empty: added to the scores for selection only (DeepSeek-V3's
   *  e_score_correction_bias, llama.cpp's exp_probs_b); the weights are the unbiased scores. */
  Tensor bias;
};

/** The gated unit between an expert's gate/up and down projections. */
enum class ExpertGlu : uint8_t {
  /** h = silu(g) * u (SwiGLU). */
  kSwiglu = 0,
  /** gpt-oss's clamped SwiGLU (transformers GptOssExperts; llama.cpp swiglu_oai): g = min(g, limit),
   *  u = clamp(u, -limit, limit), h = (u + 1) * g * sigmoid(alpha * g). */
  kSwigluOai = 1,
  /** h = gelu_tanh(g) * u, gelu_tanh(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GEGLU with
   *  PyTorch's approximate="tanh" GELU: transformers Gemma4TextExperts, hidden_activation
   *  gelu_pytorch_tanh). */
  kGeluTanh = 2,
  /** DeepSeek-V4's clamped SwiGLU (transformers DeepseekV4Experts._apply_gate): g = min(g, limit),
   *  u = clamp(u, -limit, limit), h = silu(g) * u. */
  kSwigluClamp = 3,
};

/** One MoE layer's routed experts as individually addressed views (expert e = entry e), so
 *  stacked GGUF tensors (views of [n_expert, N, K]), separate HF tensors and cache slots all fit. */
struct ExpertBank {
  std::vector<Tensor> gate;  // [n_expert] each [n_ff, n_embd]
  std::vector<Tensor> up;    // [n_expert] each [n_ff, n_embd]
  std::vector<Tensor> down;  // [n_expert] each [n_embd, n_ff]
  ExpertGlu glu = ExpertGlu::kSwiglu;
  float glu_alpha = 1.702f;  // kSwigluOai
  float glu_limit = 7.0f;    // kSwigluOai, kSwigluClamp
  /** Per-expert biases (gpt-oss), F32 on the device of whatever reads the bank, or empty (none);
   *  indexed by expert id (not by cache slot): gate_bias, up_bias [n_expert, n_ff] are added to the
   *  gate and up projections before the GLU, down_bias [n_expert, n_embd] to the down projection. */
  Tensor gate_bias, up_bias, down_bias;
  int32_t n_expert() const { return static_cast<int32_t>(gate.size()); }
  bool has_bias() const { return !gate_bias.empty() || !up_bias.empty() || !down_bias.empty(); }
};

// DeepSeek-V4 (transformers DeepseekV4ForCausalLM; the ops below model/deepseek_v4.cpp calls).
// "Tail RoPE": V4 rotates the LAST n_rot dims of each head, as adjacent pairs (x[d0 + 2i],
// x[d0 + 2i + 1]), d0 = head_dim - n_rot, with angle pos * inv_freq[i] (cos/sin times attn_factor).

/** Manifold-constrained hyper-connections (mHC): n residual streams per token. */
struct HyperConnParams {
  int32_t n_streams = 0;       // hc_mult
  int32_t sinkhorn_iters = 0;  // hc_sinkhorn_iters
  float eps = 1e-6f;           // hc_eps
};

/** One compressor of V4's compressed attention (CSA / HCA, or the CSA indexer's keys). Per token the
 *  value pages (KvLayer::v) hold, from column `col`, its projections kv [width] then gate [width],
 *  width = head_dim (HCA) or 2 head_dim (overlap: CSA's two series Ca = [0, hd), Cb = [hd, 2 hd)). */
struct CompressParams {
  int32_t rate = 0;       // compress rate m: source tokens per compressed entry
  int32_t head_dim = 0;   // width of one entry
  bool overlap = false;   // entry w pools Ca of window w-1 with Cb of window w (CSA)
  int32_t col = 0;        // first column of this compressor's kv in the value pages
  int32_t entry_col = 0;  // paged entries (KvLayer::e): first column of this compressor's entries there
  float eps = 1e-6f;      // its kv_norm (RMSNorm) epsilon
  RopeParams rope;        // tail RoPE of the entries (compress_rope_theta; n_rot, inv_freq, attn_factor)
  /** Paged entries: the block tables I32 [S, max_blocks] (the batch's layout) of the pool that holds
   *  the entry pages, when it is not the one of kv's pages (DeepSeek-V4 keeps kv.v in the
   *  sliding-window pool and the entry rows in the full pool, kv/kv_cache.h); empty: the batch's. */
  Tensor entry_tables;
};

/** `b` addressing the entry pages: its block tables replaced by `entry_tables` [S, max_blocks] when
 *  given (CompressParams::entry_tables), else `b` itself. Throws kInvalidArgument when the tables are
 *  not I32 [>= S, >= 1]. */
BatchInfo entry_batch(const char* op, const BatchInfo& b, const Tensor& entry_tables);

/** V4's lightning indexer (CSA): scores compressed entries and keeps the top_k per query. */
struct IndexerParams {
  int32_t n_head = 0;      // index_n_heads
  int32_t head_dim = 0;    // index_head_dim
  int32_t rate = 0;        // the CSA compress rate
  int32_t top_k = 0;       // index_topk
  RopeParams rope;         // tail RoPE of the queries (as the indexer's keys)
  /** The candidates of a query are its own visible entries only (Qwen4-Exp's QSA indexer runs
   *  torch.topk per query over them), not the sequence's with the invisible ones at -inf (V4). */
  bool per_query = false;
  /** Paged keys (keys given as KvLayer::e pages [n_pages, rows, 1, width]): their first column and
   *  the key pages' page size; unused for keys [S, M, head_dim]. */
  int32_t key_col = 0;
  int32_t page_size = 0;
};

/** V4's attention: shared-KV MQA over a sliding window of the normalised kv plus compressed entries. */
struct CompressedAttentionParams {
  int32_t n_head = 0;
  int32_t head_dim = 0;
  float scale = 0.0f;          // head_dim^-0.5
  int32_t window = 0;          // sliding_window: keys at positions (p - window, p]
  int32_t rate = 0;            // compress rate: entry w is visible to position p when w < (p + 1) / rate
  RopeParams rope;             // tail RoPE of queries, window keys and (inverse) of the output
  Tensor sinks;                // F32 [n_head]: per-head sink logit in the softmax denominator
  Tensor entry_tables;         // paged entries' block tables when not the batch's (CompressParams::entry_tables)
};

/** Qwen4-Exp's hashed n-gram embedding ids (Ops::ngram_hash). */
struct NgramHashParams {
  int32_t n = 0;      // ngram_size: n-grams of 2 .. n tokens
  int32_t heads = 0;  // heads_per_ngram
  int32_t eos = 0;    // eos_token_id: segment separator and padding
};

struct MoeExpertsParams {
  /** false: out = sum; true: out += sum (lets partial results from several executors add up). */
  bool accumulate = false;
};

/** Work recorded once from a backend's queue and replayed as a whole (a CUDA graph): every replay
 *  runs the same kernels on the same buffers, so inputs change only through those buffers' contents. */
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  /** False once something the recording points at has moved (a backend scratch region regrew):
   *  the caller records it again. */
  virtual bool valid() const = 0;
  /** Queues one replay on the backend's stream (asynchronous, like any op). Throws kInternal. */
  virtual void launch() = 0;
};

// ----------------------------------------------------------------------------------------------

class Ops {
 public:
  virtual ~Ops() = default;

  /** "cpu", "cuda". */
  virtual const char* name() const = 0;
  /** Where this backend's tensors live. */
  virtual Device device() const = 0;
  /** dtype of activations this backend computes in: F32 (CPU); F32 or BF16 (CUDA, chosen at construction). */
  virtual DType activation_dtype() const = 0;

  // ---- memory --------------------------------------------------------------------------------

  /** `bytes` of uninitialised device memory (host memory on CPU). Throws kOutOfMemory naming the size. */
  virtual Buffer alloc(int64_t bytes) = 0;
  /** `bytes` of uninitialised host memory that copies to and from this backend run fastest with:
   *  pinned on CUDA (the copy engine reads and writes it directly at the bus's speed, where pageable
   *  memory is staged through a driver buffer: the engine's per-step inputs and logits), plain host
   *  memory otherwise. Throws kOutOfMemory naming the size. */
  virtual Buffer alloc_host(int64_t bytes) { return Buffer::host(bytes); }
  /** An allocator of large host blocks this backend's kernels read in place once filled (expert
   *  banks): make_host_allocator() by default; CUDA: pinned and mapped after the fill for its
   *  device (backend/host_allocator.h). */
  virtual std::unique_ptr<HostAllocator> host_allocator() const;
  /** Makes a host weight view usable by this backend. CPU: returns `host` unchanged (weights stay in
   *  the mapped file) and leaves `storage` empty. CUDA: copies it into device memory owned by
   *  `storage` and returns a view of that. */
  virtual Tensor make_resident(const Tensor& host, Buffer& storage) = 0;
  /** Like make_resident, but the copy stays in host memory that this backend's kernels read over the
   *  bus: for weights a step reads a few rows of (the token embedding table at decode), so their
   *  bytes need not take GPU memory. CUDA: pinned, mapped host memory owned by `storage`, returned as
   *  a Device::kCuda view at its UVA address. CPU: make_resident. Throws kOutOfMemory naming the
   *  size when the memory cannot be allocated, kInvalidArgument as make_resident does. */
  virtual Tensor make_host_mapped(const Tensor& host, Buffer& storage) { return make_resident(host, storage); }
  /** dst = src, between any two devices. Same numel; dtypes equal, or both in {F32, F16, BF16}
   *  (converted, round to nearest even). Blocks until the copy is done when dst is on the host. */
  virtual void copy(const Tensor& src, Tensor dst) = 0;
  /** Sets every element of an F32/F16/BF16/I32 tensor to zero. */
  virtual void zero(Tensor t) = 0;
  /** Waits for all queued work. */
  virtual void synchronize() = 0;

  /** Whether a matmul or expert GEMV with weights of `weight` type reads int8 activations (CUDA's
   *  integer-dot GEMV), so that a producer's int8 form (ActQ8) saves it a quantize launch. The caller
   *  asks producers for forms only then (ForwardContext::q8_forms). CPU: false (it ignores handles). */
  virtual bool reads_int8_activations(DType /*weight*/) const { return false; }
  /** Whether capture() records graphs (CUDA); false: the caller runs its steps eagerly. */
  virtual bool supports_graphs() const { return false; }
  /** A decode batch whose longest key range (BatchInfo::max_kv_len, tokens) is at most this takes
   *  launches of another shape (CUDA: the decode attention merges its splits in a thread-block
   *  cluster; numerically close to, not bit-equal with, the general form). A graph recorded with
   *  max_kv_len at this bound replays any such step, so graph users record one graph per side of it.
   *  0 (the default): one shape for every range. */
  virtual int32_t decode_short_kv_len() const { return 0; }
  /** Records the work `body` queues on this backend without running it, for replay with
   *  StepGraph::launch(). `body` must read its inputs from buffers that outlive the graph and must
   *  not synchronize with the host; run it eagerly once first so one-time scratch exists. Throws
   *  kUnsupported when the backend has no graphs or `body` did something a graph cannot hold (a
   *  host synchronisation), and rethrows what `body` throws (the recording is discarded). */
  virtual std::unique_ptr<StepGraph> capture(const std::function<void()>& body);

  // ---- elementwise and normalisation ----------------------------------------------------------

  /** out[t, :] = table[ids[t], :]. table [V, H] in any weight dtype (also an activation, as a row
   *  gather); ids I32 [T]; out [T, H] activation dtype. Throws kInvalidArgument for an id outside
   *  [0, V) (CPU checks; CUDA clamps, so validate ids on the host first). */
  virtual void embedding(const Tensor& table, const Tensor& ids, Tensor out) = 0;

  /** out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * (w + weight_offset). x, out [R, D] (may alias);
   *  w [D] F32/F16/BF16. For per-head norms pass x reshaped to [T * n_head, head_dim]. */
  /** `out_q8` (optional): set to out's int8 form when the backend wrote it as well, else emptied. */
  virtual void rms_norm(const RmsNormParams& p, const Tensor& x, const Tensor& w, Tensor out,
                        ActQ8* out_q8 = nullptr) = 0;

  /** The residual add that ends a sub-block fused with the RMSNorm that starts the next: x += r,
   *  then out = rms_norm(x) (x rounded to its dtype first, so it equals add then rms_norm). x, r,
   *  out [R, D] activation dtype; out must not alias x or r; w [D] as in rms_norm. The default runs
   *  add then rms_norm; CUDA does both in one pass over the row for 256 < D <= 8192. `out_q8` as in
   *  rms_norm. */
  virtual void add_rms_norm(const RmsNormParams& p, Tensor x, const Tensor& r, const Tensor& w, Tensor out,
                            ActQ8* out_q8 = nullptr);

  /** Rotary embedding in place: x [T, n_heads * head_dim], positions I32 [T]. Each head's first
   *  n_rot dims are rotated per `p.mode` by angle positions[t] * inv_freq[i]; the rest are kept. */
  virtual void rope(const RopeParams& p, Tensor x, const Tensor& positions) = 0;

  /** Per-head RMSNorm (QK-norm: weight w [head_dim]) then rotary embedding, in place: x [T, n_heads *
   *  head_dim]. The default runs rms_norm on x viewed as [T * n_heads, head_dim], then rope; a backend
   *  may fuse them (CUDA: one kernel, the normalised head never leaves registers). */
  virtual void norm_rope(const RmsNormParams& np, const Tensor& w, const RopeParams& p, Tensor x,
                         const Tensor& positions);
  /** A per-head QK-norm model's attention inputs: norm_rope of q (weight wq) and of k (weight wk)
   *  at batch.positions, then kv_write(batch, k, v, kv). q [T, n_head * head_dim]; k, v [T, n_head_kv *
   *  head_dim], one dtype. The default makes the three calls; CUDA does them in one launch. */
  virtual void qk_norm_rope_store(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& p,
                                  Tensor q, Tensor k, const Tensor& v, const BatchInfo& batch, KvLayer kv);

  /** A per-head QK-norm model's whole attention: qk_norm_rope_store(np, wq, wk, rp, q, k, v, batch, kv),
   *  then attention(ap, batch, q, kv, out). Shapes as there. Afterwards q and k hold either their
   *  normalised, rotated heads or their inputs (read only out and the KV pages). The default makes
   *  the two calls; CUDA does both in the decode attention kernel for a batch of one decode token
   *  (head_dim 128 or 256). Throws what they throw. `out_q8` as in attention. */
  virtual void qk_norm_rope_attention(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& rp,
                                      const AttentionParams& ap, Tensor q, Tensor k, const Tensor& v,
                                      const BatchInfo& batch, KvLayer kv, Tensor out, ActQ8* out_q8 = nullptr);

  /** y = x W^T (+ bias): x [T, K] activations, w [N, K] any weight dtype (K a whole number of
   *  blocks), bias [N] F32/F16/BF16 or empty, y [T, N] activation dtype. fp32 accumulation. y must
   *  not alias x. `x_q8` (optional): x's int8 form as its producer wrote it (ActQ8's rules). */
  virtual void matmul(const Tensor& x, const Tensor& w, Tensor y, const Tensor& bias,
                      const ActQ8* x_q8 = nullptr) = 0;

  /** out = silu(gate) * up, elementwise; gate, up, out [T, F] (out may alias either). */
  virtual void swiglu(const Tensor& gate, const Tensor& up, Tensor out) = 0;
  /** out = a + b, elementwise, equal shapes (out may alias a or b). */
  virtual void add(const Tensor& a, const Tensor& b, Tensor out) = 0;
  /** out = s * x (out may alias x). */
  virtual void scale(const Tensor& x, float s, Tensor out) = 0;
  /** out = 1 / (1 + exp(-x)) (out may alias x). */
  virtual void sigmoid(const Tensor& x, Tensor out) = 0;
  /** out = x * sigmoid(gate), elementwise; gate, x, out of equal shape (out may alias x or gate): an
   *  output gate (Qwen3-Next's gated attention). */
  virtual void sigmoid_mul(const Tensor& gate, const Tensor& x, Tensor out) = 0;
  /** y[t, :] += alpha * row_scale[t] * x[t, :]; x, y [T, D]; row_scale F32 or activation dtype, [T]
   *  or [T, 1], or empty (= 1). Used for gated shared experts and weighted sums. */
  virtual void add_scaled_rows(const Tensor& x, const Tensor& row_scale, float alpha, Tensor y) = 0;

  /** out = gelu_tanh(gate) * up, elementwise, gelu_tanh as ExpertGlu::kGeluTanh (PyTorch's GELU with
   *  approximate="tanh"); gate, up, out [T, F] activation dtype (out may alias either). Gemma's MLP. */
  virtual void gelu_tanh_mul(const Tensor& gate, const Tensor& up, Tensor out) = 0;
  /** out = cap * tanh(x / cap), elementwise (logit soft-capping: transformers Gemma4ForCausalLM's
   *  final_logit_softcapping); x, out of equal shape, activation dtype (may alias); cap > 0, else
   *  kInvalidArgument. */
  virtual void softcap(const Tensor& x, float cap, Tensor out) = 0;
  /** out[j, t, :] = table[ids[t], j D .. (j+1) D) for j < n: a row gather whose rows are split into n
   *  equal column blocks, block-major (Gemma 4's per-layer embeddings: table [V, n_layer * D] gives
   *  each layer's [T, D] as one contiguous slice). table [V, n D] F32/F16/BF16; ids I32 [T]; out
   *  [n, T, D] activation dtype. Throws kInvalidArgument for shapes or an id outside [0, V) (CPU checks;
   *  CUDA clamps as embedding does). */
  virtual void embedding_split(const Tensor& table, const Tensor& ids, Tensor out) = 0;
  /** weights[t, j] *= scale[ids[t, j]] for every entry with ids[t, j] >= 0 (Gemma 4's router
   *  per_expert_scale, applied after the top-k renormalisation). ids I32 [T, k]; weights F32 [T, k];
   *  scale F32 [E] on this device. Throws kInvalidArgument for shapes (CPU also for an id >= E). */
  virtual void moe_expert_scale(const Tensor& ids, const Tensor& scale, Tensor weights) = 0;

  /** Row softmax: x, out [R, C] F32 or activation dtype (may alias); max-subtracted, fp32 sums. */
  virtual void softmax(const Tensor& x, Tensor out) = 0;
  /** The k largest entries of each row, descending; ties go to the lower column index. x [R, C];
   *  ids I32 [R, k]; values F32 [R, k]. Throws kInvalidArgument if k > C or k < 1. */
  virtual void topk(const Tensor& x, int32_t k, Tensor ids, Tensor values) = 0;

  // ---- attention ------------------------------------------------------------------------------

  /** Stores the batch's new keys and values into the pages: token t (sequence s = seq_index[t],
   *  position p = positions[t]) goes to page block_tables[s, p / page_size], slot p % page_size.
   *  k [T, Wk], v [T, Wv] activation dtype, where Wk, Wv are the heads x head dim of kv.k, kv.v
   *  ([n_pages, page_size, heads, dim]; the two may differ in width, as MLA's latent and RoPE-key
   *  pages do, but not in pages or page size). */
  virtual void kv_write(const BatchInfo& batch, const Tensor& k, const Tensor& v, KvLayer kv) = 0;

  /** Causal depthwise convolution with SiLU over each sequence's rows, carrying the last
   *  conv_kernel - 1 inputs in the sequence's state slot (Gated DeltaNet's short convolution;
   *  transformers causal_conv1d_fn / causal_conv1d_update with activation silu, no bias):
   *    out[t, c] = silu(sum_{j<K} w[c, j] * x_seq[p - (K-1) + j, c]),   p = positions[t]
   *  where inputs before the sequence's first row come from conv_state (zeros when that row is at
   *  position 0). Afterwards the slot holds the sequence's last K-1 inputs. x, out [T, C] activation
   *  dtype (must not alias); w F32 [C, K]; conv_state F32 [n_slots, K-1, C] (StateLayer::conv);
   *  batch.state_slots required. Throws kInvalidArgument for shapes or a slot out of range (CPU). */
  virtual void ssm_conv(const BatchInfo& batch, const Tensor& x, const Tensor& w, Tensor conv_state, Tensor out) = 0;

  /** The gated delta rule over each sequence's rows, carrying S in the sequence's state slot. For
   *  each value head h (key head kh = h / (Hv / Hk), or h % Hk with p.v_tiled) and token t of the sequence, in order:
   *    q = l2norm(q_kh) / sqrt(dk),  k = l2norm(k_kh),  beta = sigmoid(b[t, h]),
   *    g = -exp(a_log[h]) * softplus(a[t, h] + dt_bias[h]),
   *    S <- exp(g) S;  S <- S + k (beta (v_h - S^T k))^T;  out[t, h] = S^T q
   *  (S [dk, dv], zero when the sequence's first row is at position 0). qkv [T, 2 Hk dk + Hv dv] holds
   *  q, k, v side by side (the short convolution's output); out [T, Hv dv]: activation dtype; a, b
   *  [T, Hv]: F32 or the activation dtype, one dtype (F32 keeps the decay exact: its exponent
   *  multiplies a's rounding); fp32 arithmetic. ssm_state F32 [n_slots, Hv, dk, dv] (StateLayer::ssm); batch.state_slots
   *  required. Throws kInvalidArgument for shapes or a slot out of range (CPU). */
  virtual void gated_delta_rule(const GatedDeltaParams& p, const BatchInfo& batch, const Tensor& qkv, const Tensor& a,
                                const Tensor& b, Tensor ssm_state, Tensor out) = 0;

  /** Causal GQA attention over the paged cache (after kv_write of this layer): query t at
   *  position p of sequence s attends to that sequence's keys at positions 0..p (and > p -
   *  sliding_window when set). q, out [T, n_head * head_dim] activation dtype (QK-norm and RoPE
   *  already applied by the model). Softmax in fp32. `out_q8` (optional): set to out's int8 form when
   *  the backend wrote it as well (CUDA: the decode kernel, up to 16 rows), else emptied. */
  virtual void attention(const AttentionParams& p, const BatchInfo& batch, const Tensor& q, KvLayer kv,
                         Tensor out, ActQ8* out_q8 = nullptr) = 0;

  /** Multi-head latent attention in latent space (DeepSeek-V2 paper §2.1.2, the "absorbed" form that
   *  FlashMLA computes): one shared latent KV head. kv.k holds each token's normalised latent c
   *  [n_pages, page_size, 1, kv_lora_rank], kv.v its rotated RoPE key r [n_pages, page_size, 1,
   *  rope_dim] (both written by kv_write). For query t at position p of sequence s and head h:
   *    out[t, h] = sum_j softmax_j(scale * (q_lat[t, h] . c_j + q_rope[t, h] . r_j)) c_j
   *  over that sequence's positions j = 0..p. q_lat, out [T, n_head * kv_lora_rank]; q_rope
   *  [T, n_head * rope_dim]; activation dtype; softmax in fp32. Pages as KvLayer: F32 (CPU), F32 or
   *  BF16 (CUDA), or fp8 / q8_0 codes with scales (both; read as code * scale). Throws
   *  kInvalidArgument for shapes, kUnsupported for a page dtype or shape the backend has no kernel for. */
  virtual void attention_mla(const MlaAttentionParams& p, const BatchInfo& batch, const Tensor& q_lat,
                             const Tensor& q_rope, KvLayer kv, Tensor out) = 0;

  /** One matmul per head: y[t, h N .. (h+1) N) = x[t, h K .. (h+1) K) w[h]^T, for MLA's absorbed
   *  up-projections (W_UK into the query, W_UV after attention). x [T, n_head * K] activation dtype;
   *  w [n_head, N, K] F32/F16/BF16; y [T, n_head * N] activation dtype (must not alias x). fp32
   *  accumulation. Throws kInvalidArgument for shapes, kUnsupported for another weight dtype. */
  virtual void head_matmul(const Tensor& x, const Tensor& w, Tensor y) = 0;

  // ---- mixture of experts ---------------------------------------------------------------------

  /** Router: logits [T, E] (F32 or activation dtype) -> ids I32 [T, k], weights F32 [T, k]. Scores
   *  are softmax (over all E) or sigmoid of the logits; the k best of score + p.bias (when given)
   *  are selected (descending, ties to the lower id; within p.n_group's kept groups), their scores
   *  optionally renormalised to sum 1, then multiplied by p.scaling. A row with a NaN or inf logit
   *  (a diverged token) gets experts 0..k-1 with weight 0: its ids stay valid and distinct for the
   *  caches and sorts the batch shares. Throws kInvalidArgument for a bias that is not F32 [E] or
   *  groups that do not divide E. */
  virtual void moe_route(const RouterParams& p, const Tensor& logits, Tensor ids, Tensor weights) = 0;

  /** A MoE layer's whole router: logits = x w^T + bias (matmul: x [T, H], w [E, H], bias [E]
   *  F32/F16/BF16 or empty (gpt-oss's router has one), logits [T, E] activation dtype), then moe_route(p, logits, ids, weights), then moe_mask_rows(n_valid, ids) when n_valid is
   *  not empty. The default makes those calls; CUDA does all three in one launch for batches of up to
   *  16 tokens (the block that computes a token's last logit routes the token). Its logits may differ
   *  from the unfused matmul's in the last bits (another summation order), so a router near-tie can
   *  resolve differently above 16 tokens; graph and eager decode agree (16 is a graph-size boundary).
   *  Throws what they throw. `x_q8` (optional, in and out): x's int8 form; a valid one (ActQ8's rules)
   *  is kept; otherwise a backend may write x's form while it reads x (CUDA's fused router) and set
   *  the handle to it, for the experts and shared expert after. The default only passes it to matmul. */
  virtual void moe_router(const RouterParams& p, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor logits,
                          Tensor ids, Tensor weights, const Tensor& n_valid, ActQ8* x_q8 = nullptr);

  /** Padding rows route nowhere: ids[t, :] = -1 for every row t >= n_valid[0]. ids I32 [T, k];
   *  n_valid I32 [1] on this device, read by the kernel (so a recorded graph masks however many rows
   *  each replay pads). Throws kInvalidArgument for a wrong dtype or shape. */
  virtual void moe_mask_rows(const Tensor& n_valid, Tensor ids) = 0;

  /** Expert parallelism's routes for one rank (moe/expert_parallel_experts.h): out[i] = ids[i] - begin
   *  when begin <= ids[i] < end (an expert of this rank's block, as its local id), else -1 (another
   *  rank's expert, or a negative id: no expert). ids, out I32 of one shape (may alias), on this
   *  device; the kernel reads ids, so a recorded graph masks each replay's routes. Throws
   *  kInvalidArgument for dtypes, shapes or a range not inside 0 <= begin <= end <= n_expert; the CPU
   *  also for an id >= n_expert (naming it and its entry). CUDA cannot throw inside a graph: it writes
   *  -1 for such an id (routes it nowhere, as moe_expert_scale skips one), so callers that need the
   *  check validate ids on the host. */
  virtual void moe_local_ids(const Tensor& ids, int32_t begin, int32_t end, int32_t n_expert, Tensor out) = 0;

  /** Routed expert FFN: out[t] (=|+=) sum_j weights[t, j] * down_e(glu(gate_e x[t], up_e x[t]))
   *  with e = ids[t, j], glu per bank.glu and the bank's biases (when given) added to each projection. x, out [T, H] activation dtype; ids I32 [T, k] (entries < 0 are skipped:
   *  another executor computes them); weights F32 [T, k]; bank experts in any weight dtype.
   *  Throws kInvalidArgument for an id >= bank.n_expert(). `x_q8` (optional): x's int8 form (ActQ8). */
  virtual void moe_experts(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
                           const ExpertBank& bank, Tensor out, const ActQ8* x_q8 = nullptr) = 0;
  // ---- DeepSeek-V4 ----------------------------------------------------------------------------
  // Each has a CPU implementation; a backend without one throws kUnsupported naming the op
  // (backend/deepseek_v4_ops.cpp).

  /** Hyper-connection weights and collapse (transformers DeepseekV4HyperConnection / HyperHead).
   *  mixes F32 [T, (2 + n) n] = fn . rms(streams) (block mode) or [T, n] (head mode, post empty);
   *  base F32 [(2 + n) n] or [n]; scale F32 [3] or [1]. Block mode:
   *    pre = sigmoid(mix_pre s0 + b_pre) + eps,  post = 2 sigmoid(mix_post s1 + b_post),
   *    comb = softmax_rows(mix_comb s2 + b_comb) + eps, then columns / (sum + eps), then
   *    sinkhorn_iters - 1 times rows / (sum + eps), columns / (sum + eps);
   *  head mode: pre = sigmoid(mix s0 + b) + eps. collapsed[t] = sum_j pre[t, j] streams[t, j].
   *  streams [T, n H], collapsed [T, H] activation dtype; post F32 [T, n], comb F32 [T, n n]
   *  (comb[t, j n + k]: stream j's share of output stream k). Throws kInvalidArgument for shapes. */
  virtual void hc_pre(const HyperConnParams& p, const Tensor& streams, const Tensor& mixes, const Tensor& base,
                      const Tensor& scale, Tensor collapsed, Tensor post, Tensor comb);
  /** Hyper-connection expansion: out[t, k] = post[t, k] y[t] + sum_j comb[t, j n + k] streams[t, j].
   *  streams, out [T, n H] (must not alias); y [T, H]; post F32 [T, n]; comb F32 [T, n n]. */
  virtual void hc_post(const HyperConnParams& p, const Tensor& streams, const Tensor& y, const Tensor& post,
                       const Tensor& comb, Tensor out);
  /** V4 compressor (DeepseekV4HCACompressor / CSACompressor / Indexer's compressor): first stores
   *  this step's projections proj [T, 2 width] into kv.v's columns [col, col + 2 width) of each
   *  token's slot (as kv_write), then for each batch sequence s with last position P computes its
   *  entries w < (P + 1) / rate from the pages:
   *    e_w[d] = sum_j softmax_j(gate_j[d] + ape[j][d]) kv_j[d]  over the rate tokens of window w
   *  (overlap: 2 rate slots, Ca of window w-1 with ape[j][0, hd) then Cb of window w with
   *  ape[j][hd, 2 hd); window -1 contributes nothing), then e_w = rmsnorm(e_w) * norm_w and tail RoPE
   *  at position w rate. entries [S, M, head_dim] activation dtype, M >= every sequence's count
   *  (rows past it are left as they were). ape F32 [rate, width]; norm_w [head_dim] F32/BF16.
   *  Paged entries (entries = kv.e, 4-D: KvLayer::e says where entry w lives): only the entries whose
   *  window closes in this step (last position (w + 1) rate - 1 among the sequence's positions of
   *  the step) are pooled, into columns [p.entry_col, + head_dim) of their rows; earlier ones were
   *  written by the steps that closed them (O(new entries) a step, not O(context)). */
  virtual void compress_kv(const CompressParams& p, const BatchInfo& batch, const Tensor& proj, KvLayer kv,
                           const Tensor& ape, const Tensor& norm_w, Tensor entries);
  /** Lightning indexer top-k (DeepseekV4Indexer): for query t (position p, sequence s), q_h = tail
   *  RoPE of q[t, h] at p, score_w = sum_h w[t, h] n_head^-0.5 relu(q_h . K[s, w]) head_dim^-0.5 over
   *  the visible entries w < (p + 1) / rate; ids[t] = the min(top_k, visible) best (a set, in no
   *  particular order), then -1. Ties (the ReLU often zeroes every head) are broken as torch.topk on
   *  the CPU breaks them, over the sequence's n = (its last position this step + 1) / rate entries
   *  with the invisible ones at -inf (backend/cpu/indexer_topk.cpp says how); CUDA too, repeating
   *  those steps where the last pick ties (backend/torch_topk_order.h), while M more I32 fit its
   *  shared memory beside the scores (else it takes the lower w).
   *  q [T, n_head head_dim]; w [T, n_head]; keys [S, M, head_dim], or paged (KvLayer::e pages
   *  [n_pages, rows, 1, width] at columns [p.key_col, + head_dim), p.page_size > 0; no M bound);
   *  ids I32 [T, top_k]. */
  virtual void indexer_topk(const IndexerParams& p, const BatchInfo& batch, const Tensor& q, const Tensor& w,
                            const Tensor& keys, Tensor ids);
  /** V4 attention (DeepseekV4Attention, eager): query t at position p of sequence s, q_h = tail RoPE
   *  of q[t, h] at p; its keys, each also its value, are kv.k's normalised kv at positions j in
   *  (p - window, p] with tail RoPE at j, and the entries[s, w] (selected[t] lists them, -1 skipped;
   *  empty: all w < (p + 1) / rate; entries empty: none). out = softmax with the head's sink in the
   *  denominator, then tail RoPE at -p (undoing the values' rotation). q, out [T, n_head head_dim];
   *  kv.k [pages, page_size, 1, head_dim]; entries [S, M, head_dim], or paged (kv.e: KvLayer::e
   *  pages [pages, rows, 1, width], each entry its columns [0, head_dim)); selected I32 [T, k]. */
  virtual void attention_compressed(const CompressedAttentionParams& p, const BatchInfo& batch, const Tensor& q,
                                    KvLayer kv, const Tensor& entries, const Tensor& selected, Tensor out);
  /** V4 router (DeepseekV4TopKRouter / HashRouter): s = sqrt(softplus(logits)); ids = tid2eid[token]
   *  (hash layers: tid2eid I32 [V, k], tokens I32 [T]) or the k best of s + p.bias (ties to the lower
   *  id); weights = s[ids] / (sum + 1e-20) when p.norm_topk_prob, times p.scaling. logits [T, E];
   *  ids I32 [T, k]; weights F32 [T, k]. Throws kInvalidArgument for shapes or a token outside V. */
  virtual void moe_route_sqrtsoftplus(const RouterParams& p, const Tensor& logits, const Tensor& tokens,
                                      const Tensor& tid2eid, Tensor ids, Tensor weights);
  /** out = silu(min(gate, limit)) * clamp(up, -limit, limit) (DeepseekV4MLP); [T, F], may alias. */
  virtual void swiglu_clamp(const Tensor& gate, const Tensor& up, float limit, Tensor out);

  // ---- Qwen4-Exp ------------------------------------------------------------------------------
  // CPU and CUDA implementations (backend/cpu/, backend/cuda/); a backend without one throws
  // kUnsupported naming the op (backend/qwen4_exp_ops.cpp).

  /** Hashed n-gram ids of transformers' Qwen4ExpTextNGramEmbedding. For token t (position p of its
   *  sequence), tok_j = the token at p - j: this step's rows, then `history` (the sequence's last
   *  n - 1 tokens before this step, oldest first; not read when its first row is at position 0), and
   *  p.eos for positions < 0; shifted_j = tok_j when none of tok_1 .. tok_j is p.eos, else p.eos
   *  (shifted_0 = tok_0). For n-gram g = 2..n and head i < p.heads: m = xor_{j<g} shifted_j * mult[j]
   *  (int64), ids[t, (g - 2) heads + i] = m mod sizes[h] + offsets[h], h = (g - 2) heads + i.
   *  Afterwards history holds each sequence's last n - 1 tokens (p.eos for positions < 0).
   *  tokens I32 [T]; mult I64 [n]; sizes, offsets I64 [(n - 1) heads]; history I32 [n_slots, n - 1]
   *  (StateLayer::tokens, batch.state_slots); ids I32 [T, (n - 1) heads]. Throws kInvalidArgument. */
  virtual void ngram_hash(const NgramHashParams& p, const BatchInfo& batch, const Tensor& tokens,
                          const Tensor& mult, const Tensor& sizes, const Tensor& offsets, Tensor history,
                          Tensor ids);
  /** Qwen4ExpTextPLELayer's stream gate: for token t and stream k < n (rows of D = value's width),
   *  g = sum_d key[t, k D + d] query[t, k D + d] w[k D + d] / sqrt(D), g = sign(g) sqrt(max(|g|, 1e-6)),
   *  out[t, k D .. (k+1) D) = sigmoid(g) value[t]. key, query, out [T, n D]; value [T, D]; activation
   *  dtype; w F32 [n D] (the product of the two norms' weights). Throws kInvalidArgument for shapes. */
  virtual void ple_gate(const Tensor& key, const Tensor& query, const Tensor& w, const Tensor& value, Tensor out);
  /** A weighted sum over n streams (Qwen4ExpTextGatedResidual's mean of the mixed streams, with its
   *  norm weight and 1/n in w): out[t, d] = sum_k x[t, k D + d] w[k D + d]. x [T, n D], out [T, D]
   *  activation dtype; w F32 [n D]. Throws kInvalidArgument for shapes. */
  virtual void stream_weighted_sum(const Tensor& x, const Tensor& w, Tensor out);
  /** Qwen4-Exp's sparse attention (Qwen4ExpTextAttention with its QSA indexer's mask): query t at
   *  position p of sequence s attends, GQA as `attention`, to the keys at the positions of the blocks
   *  selected[t, j] >= 0 (block w: positions [w block, (w + 1) block)) and of the tail [((p + 1) /
   *  block) block, p]; softmax in fp32 over those. kv.k [pages, page_size, n_head_kv, head_dim]; kv.v
   *  [pages, page_size, 1 or n_head_kv, width] whose first n_head_kv head_dim values of each slot are
   *  the token's values. q, out [T, n_head head_dim]; selected I32 [T, k]. Throws kInvalidArgument. */
  virtual void attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& batch, const Tensor& q,
                             KvLayer kv, const Tensor& selected, Tensor out);

  // ---- sampling -------------------------------------------------------------------------------
  /** One token from each logit row, by the sampler backend/sampling.h defines: logits F32 [R, V]
   *  (CUDA overwrites each row's edited entries with their edited values; the CPU leaves them); rows
   *  U8 [R * sizeof(SampleRow)]; edits U8 [n * sizeof(LogitEdit)], each row naming its range (ranges
   *  disjoint, ids unique within a row; their `raw` fields are written), or empty; out U8 [R * sizeof(SampleResult)] (a row with `skip` set
   *  leaves its result as it was). All on this device. Throws kInvalidArgument for a wrong dtype or
   *  size, and (CPU) for an edit range or id outside the row; the CUDA kernel skips such edits, so
   *  callers validate them on the host (engine/sampler.h does). `host_rows`, when given, are the same
   *  R rows in host memory: CUDA then skips the stages no row needs (the thresholds, the draw).
   *  `masks`: U8 [M * sample_mask_words(V) * 4], M allowed-token masks (bit id % 32 of word id / 32) that
   *  rows name by SampleRow::mask_index (kInvalidArgument for an index >= M), or empty when none does;
   *  CUDA also writes -inf into a masked row's disallowed entries. */
  virtual void sample(const Tensor& logits, const Tensor& rows, Tensor edits, Tensor out,
                      const SampleRow* host_rows = nullptr, const Tensor& masks = Tensor()) = 0;
  /** The longest logit row sample() takes (CUDA: 524,288); the engine checks its vocabulary against it
   *  when it loads. */
  virtual int64_t max_sample_row() const { return INT64_MAX; }

  /** Device bytes this backend's own scratch (per-op workspaces it allocates on first use and keeps)
   *  reaches over steps of shape `s`, for the memory plan to count against --gpu-memory-limit; 0 on
   *  the CPU, whose scratch is host memory. An upper bound: the largest step of each op. */
  virtual int64_t workspace_bytes(const WorkspaceShape& s) const {
    (void)s;
    return 0;
  }
};

}  // namespace ft
