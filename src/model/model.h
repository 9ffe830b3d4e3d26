#pragma once
// Model: an immutable, loaded architecture (config + resident weights) with one forward over a
// batch. Per-step buffers live in ForwardState (planned once for a maximum batch size); the batch,
// KV layers and expert executor arrive in a ForwardContext. Model code calls only Ops, blocks and
// moe/, never a specific backend.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "dist/collective.h"
#include "dist/expert_parallel.h"
#include "dist/tensor_parallel.h"
#include "model/config.h"
#include "moe/expert_compute.h"
#include "moe/moe_ffn.h"
#include "util/error.h"

namespace ft {

class WeightLoader;

class KvCache;

/** Called with (name, layer, tensor) for every named intermediate (attn_norm, attn_out, ffn_inp,
 *  ffn_norm, ffn_out / ffn_moe_out, l_out per layer; layer -1 for result_norm and logits) when set. */
using DumpHook = std::function<void(const std::string& name, int64_t layer, const Tensor& t)>;

/** Planned activations for up to max_tokens tokens per forward (views sliced to T rows per step). */
struct ForwardState {
  int64_t max_tokens = 0;
  Tensor x;          // [T, H] residual stream
  Tensor h;          // [T, H] normed input of a sub-block
  Tensor q;          // [T, n_head * head_dim]
  Tensor qkv;        // [1, (n_head + 2 n_kv) * head_dim]: the fused QKV projection of a single token
  Tensor k;          // [T, n_head_kv * head_dim]
  Tensor v;          // [T, n_head_kv * head_dim]
  Tensor attn;       // [T, n_head * head_dim] (MLA: [T, n_head * v_head_dim])
  // Multi-head latent attention only (config.is_mla()):
  Tensor q_a;        // [T, q_lora_rank]
  Tensor q_nope;     // [T, n_head * qk_nope]
  Tensor q_pe;       // [T, n_head * qk_rope]
  Tensor q_lat;      // [T, n_head * kv_lora_rank]
  Tensor kv_c;       // [T, kv_lora_rank]
  Tensor k_pe;       // [T, qk_rope]
  Tensor attn_lat;   // [T, n_head * kv_lora_rank]
  Tensor attn_gate;  // [T, n_head * head_dim] attention output gate (config.attn_output_gate)
  // Linear attention only (config.layer_linear):
  Tensor lin_qkv;    // [T, conv dim] q, k, v projections
  Tensor lin_conv;   // [T, conv dim] after the short convolution
  Tensor lin_z;      // [T, Hv * dv] output gate
  Tensor lin_a;      // F32 [T, Hv] decay input
  Tensor lin_b;      // F32 [T, Hv] beta input
  Tensor lin_out;    // [T, Hv * dv] delta-rule output
  Tensor sub_out;    // [T, H] output of a sub-block (attention or FFN)
  Tensor ff_gate;    // [T, max FFN width]
  Tensor ff_up;      // [T, max FFN width]
  MoeScratch moe;
  Tensor out_rows;   // [T, H] rows whose logits are wanted
  // Per-layer inputs only (config.ple_dim > 0, Gemma 4): [n_layer, T, ple_dim] viewed from the first
  // n_layer * T * ple_dim elements, and a second sub-block output (its MoE branch).
  Tensor ple;        // [T, n_layer * ple_dim]
  Tensor ple_proj;   // [T, n_layer * ple_dim]
  Tensor sub_out2;   // [T, H]
  std::vector<Buffer> storage;

  /** Allocates every buffer through `ops` for `config` and `max_tokens`. Throws kOutOfMemory. */
  ForwardState(Ops& ops, const ModelConfig& config, int64_t max_tokens);
};

/** Everything one forward needs besides the weights. */
struct ForwardContext {
  Ops& ops;
  const BatchInfo& batch;
  Tensor token_ids;    // I32 [T]
  Tensor logit_rows;   // I32 [R]: token rows (0..T-1) whose logits are computed (empty: none)
  Tensor logits;       // [R, n_vocab] activation dtype: output
  const KvCache& kv;
  ExpertCompute* experts;  // required for MoE models
  ForwardState& state;
  const DumpHook* dump = nullptr;
  /** The batch with the sliding-window pool's block tables, for layers kv.in_swa_pool(l) (nullptr:
   *  the cache has no such pool). */
  const BatchInfo* swa_batch = nullptr;
  /** Whether producers are asked for int8 activation forms (ActQ8): some weight of the model is read
   *  by an integer-dot GEMV (Ops::reads_int8_activations). Off, q8() hands out no handle and every
   *  reader quantizes for itself (the same bytes; only launches differ). */
  bool q8_forms = false;
  /** The tensor-parallel group of this rank (null: one rank, nothing reduced). Required, with
   *  group_size() and rank() equal to the model's tensor_parallel(), for a model loaded as a shard;
   *  the shared blocks all-reduce each block's partial output over it (attention after its output
   *  projection, the dense FFN and the shared expert after their down projections). */
  dist::Collective* tp = nullptr;

  /** `form`'s handle for the ops that write or read it, or null when q8_forms is off. */
  ActQ8* q8(ActQ8& form) const { return q8_forms ? &form : nullptr; }

  /** The batch whose block tables address layer `l`'s KV pages. Throws kInternal when the layer's
   *  pages are the sliding-window pool's and no swa_batch was given. */
  const BatchInfo& kv_batch(int64_t l) const {
    if (!kv.in_swa_pool(static_cast<int32_t>(l))) return batch;
    FT_CHECK(swa_batch != nullptr);
    return *swa_batch;
  }

  void dump_if(const char* name, int64_t layer, const Tensor& t) const {
    if (dump && *dump) (*dump)(name, layer, t);
  }
};

class Model {
 public:
  virtual ~Model() = default;
  const ModelConfig& config() const { return config_; }

  /** Runs the batch: writes this step's K/V into the cache pages and the logits of ctx.logit_rows.
   *  Throws ft::Error for inconsistent inputs (sizes, ids) from the ops it calls. */
  virtual void forward(ForwardContext& ctx) const = 0;

  /** Host views of the routed experts of every layer (empty banks for dense layers; empty vector for
   *  a dense model), for building an ExpertCompute. */
  const HostExpertBanks& host_experts() const { return host_experts_; }
  /** Expert parallelism: host_experts() becomes rank `rank`'s block of every MoE layer's experts
   *  (slice_banks, moe/expert_parallel_experts.h: n_expert / n_ranks contiguous experts a rank, local ids
   *  from 0), so what is planned and built over them (the memory plan, the MoE runtime's cache and CPU
   *  pool) holds this rank's experts only; the router still routes over all of them and
   *  ExpertParallelExperts maps its ids. Call once, before anything is built over the banks. Returns
   *  each layer's owned range ({0, 0} dense) and sets `n_expert` to each layer's full count (0 dense).
   *  Throws ft::Error(kInvalidArgument) as slice_banks does (a layer whose experts n_ranks does not
   *  divide) and when called twice. */
  std::vector<dist::ExpertRange> keep_owned_experts(int rank, int n_ranks, std::vector<int32_t>& n_expert);
  /** Bytes of the checkpoint's weights this rank does not hold: the other ranks' slices of the tensors
   *  tensor parallelism cuts (WeightLoader::tp_unloaded_bytes) and, after keep_owned_experts, the other
   *  ranks' experts. 0 for one rank. The memory plan's weights are the checkpoint's less these. */
  int64_t unloaded_weight_bytes() const { return unloaded_weight_bytes_; }
  void add_unloaded_weight_bytes(int64_t bytes) { unloaded_weight_bytes_ += bytes; }
  /** The tensor-parallel shard this model's weights are (size 1: the whole model); config() is then
   *  the rank's (n_head, n_head_kv, n_ff, n_ff_shexp divided by the size). */
  const dist::TpShard& tensor_parallel() const { return tp_; }
  /** Bytes of the host copies made at load (host_storage_: converted expert layouts, F32 biases). */
  int64_t host_converted_bytes() const {
    int64_t n = 0;
    for (const Buffer& b : host_storage_) n += b.bytes();
    return n;
  }
  /** Bytes of the weights kept in host memory the backend reads over the bus (move_embeddings_to_host). */
  int64_t host_mapped_bytes() const { return host_mapped_bytes_; }
  /** Whether the LM head is the token embedding table (which then stays where the LM head reads it). */
  bool embeddings_tied() const { return embeddings_tied_; }
  /** Moves the tables a step reads a few rows of to host memory the backend reads over the bus
   *  (WeightLoader::get_host_mapped; a decode step reads one row per token), freeing their device
   *  copies: the token embedding table unless the LM head is tied to it (it reads all of it every
   *  step), and the architecture's per-layer tables (Gemma 4's per-layer embeddings, unless tied;
   *  Qwen4-Exp's n-gram tables, tied or not). Returns true when they are in host memory (now or from
   *  an earlier call), false, changing nothing, when nothing can move (movable_embedding_bytes() 0).
   *  Throws what the loader throws. */
  virtual bool move_embeddings_to_host(WeightLoader& ld) = 0;
  /** The bytes move_embeddings_to_host moves (or moved): what host_mapped_bytes() is once it has run.
   *  0: it moves nothing (a tied table and no other, or an architecture that keeps its tables). */
  virtual int64_t movable_embedding_bytes() const { return 0; }
  /** Places the tables that waited for the memory plan: plan_memory calls it once it has decided (after
   *  any move_embeddings_to_host). The tables move_embeddings_to_host can move are loaded as metadata
   *  only (WeightLoader::unplaced: an untied token embedding table, Gemma 4's per-layer table, Qwen4-Exp's
   *  n-gram tables, 51-95 GiB in Qwen3.8), so that a table the plan keeps in host memory never passes
   *  through the device (issue 37: the load's peak device memory is the plan's); those still unplaced
   *  are uploaded to the device here. Idempotent; the default has none. Code that runs a model without
   *  an engine calls it after load_model. Throws what the loader throws (kOutOfMemory when the device
   *  cannot hold them). */
  /** Bytes of the tables place_deferred would still upload (loaded as metadata, not moved to host memory):
   *  counted in the plan's weights but not yet in the device's used memory. */
  virtual int64_t unplaced_bytes() const { return 0; }
  virtual void place_deferred(WeightLoader& ld, Ops& ops) {
    (void)ld;
    (void)ops;
  }

 protected:
  explicit Model(ModelConfig config) : config_(std::move(config)) {}

  ModelConfig config_;
  HostExpertBanks host_experts_;
  std::vector<Buffer> storage_;  // device copies of resident weights (empty on CPU)
  /** Host copies of weights converted at load (WeightLoader::take_host_storage): gpt-oss's fused HF
   *  experts re-laid out per expert (as many bytes as those experts have in the checkpoint), and F32
   *  copies of small vectors (biases, attention sinks). Empty for checkpoints read in place. */
  std::vector<Buffer> host_storage_;
  int64_t host_mapped_bytes_ = 0;
  bool embeddings_tied_ = false;
  bool experts_owned_ = false;  // keep_owned_experts ran
  int64_t unloaded_weight_bytes_ = 0;
  dist::TpShard tp_;  // the tensor-parallel shard the weights were loaded for (size 1: whole)
};

}  // namespace ft
