#pragma once
// Engine: a loaded checkpoint + model on a backend, its KV cache and planned step buffers, and one
// forward step over a batch of sequences (engine/step_batch.h; prefill chunks and decode tokens mixed).
// The serving loop (engine/service.h, through engine/engine_runner.h) builds on step().
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "backend/sampling.h"
#include "dist/collective.h"
#include "dist/expert_parallel.h"
#include "engine/cache_resize.h"
#include "engine/engine_options.h"
#include "engine/graph_runner.h"
#include "engine/memory_plan.h"
#include "engine/moe_runtime.h"
#include "engine/step_batch.h"
#include "formats/checkpoint.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace ft {

class Engine {
 public:
  /** Opens `path` (GGUF or HF folder), builds the model on the backend named by options.device and
   *  plans KV and step buffers. Throws ft::Error from the loader (missing tensor, bad shape,
   *  unsupported arch...), kUnsupported for cuda in a build without CUDA, kInvalidArgument for
   *  options EngineOptions::validate refuses; from the memory plan (plan_memory, engine/memory_plan.h):
   *  kInvalidArgument for contradictory MoE flags, kOutOfMemory when the model or the chosen strategy
   *  does not fit the memory limit. */
  static std::unique_ptr<Engine> load(const std::string& path, const EngineOptions& options);
  /** Same over a checkpoint the caller opened (open_checkpoint), e.g. to read its tokenizer first. */
  static std::unique_ptr<Engine> load(std::unique_ptr<Checkpoint> ckpt, const EngineOptions& options);
  /** Same over an opened checkpoint and a backend the caller made (make_cuda_ops, CpuOps; tests).
   *  `comm`: this engine's rank in a group of options.tensor_parallel ranks (engine/rank_group.h makes
   *  the group and runs one engine a rank; it must outlive the engine); null for one rank. With it the
   *  engine loads its tensor-parallel shard (load_model's TpShard), all-reduces over it in the forward,
   *  and with options.expert_parallel keeps only its block of the experts (Model::keep_owned_experts;
   *  ExpertParallelExperts). Every rank must then run the same steps in the same order. Throws, besides
   *  the above, kInvalidArgument when comm's size is not options.tensor_parallel (or comm is missing
   *  for a size above 1), kUnsupported for expert parallelism on a backend other than the CPU (the
   *  route masking reads host ids) and what the shard's load refuses (dist/tensor_parallel.h). */
  Engine(std::unique_ptr<Checkpoint> ckpt, std::unique_ptr<Ops> ops, const EngineOptions& options,
         dist::Collective* comm = nullptr);
  ~Engine();

  const ModelConfig& config() const { return model_->config(); }
  const Checkpoint& checkpoint() const { return *ckpt_; }
  Ops& ops() { return *ops_; }
  const EngineOptions& options() const { return options_; }
  KvCache& kv() { return *kv_; }

  /** Runs one forward over `batch`: queues its copies_before, writes the items' K/V into their pages,
   *  queues its copies_after and returns the logits [R, n_vocab] (R = sum of n_logits, in item order)
   *  as host floats (pinned memory on CUDA), valid until the next step. Throws kInvalidArgument for
   *  limits exceeded (tokens, sequences, logit rows, pages) or bad token ids (the copies_before may
   *  have run then, the copies_after have not). */
  std::span<const float> step(const StepBatch& batch);
  /** Runs one forward as step() does, then samples each logit row on the backend (Ops::sample; the
   *  sampler of backend/sampling.h) instead of returning the logits: `rows` [R] (R = sum of n_logits,
   *  in item order; a row with `skip` set draws nothing and its result is left unset), `edits` the
   *  ranges they name. Returns the results [R] (pinned host memory on CUDA), valid until the next step:
   *  a few hundred bytes a row cross the bus instead of 4 * n_vocab. Throws what step() throws, and
   *  kInvalidArgument for a row count other than R, an edit range outside `edits`, two rows sharing an
   *  edit, an edit id outside the vocabulary or twice in a row (engine/sampler.h's Sampler::prepare
   *  makes valid rows), or a row naming a mask outside `masks` (M allowed-token masks of
   *  sample_mask_words(n_vocab) words each, uploaded with the rows; SampleRow::mask_index). */
  std::span<const SampleResult> step_sample(const StepBatch& batch, std::span<const SampleRow> rows,
                                            std::span<const LogitEdit> edits, std::span<const uint32_t> masks = {});

  /** Refuses a resize this engine cannot make, changing nothing (cheap: nothing is allocated):
   *  kInvalidArgument when neither size is given, for sizes < 1, for kv_tokens that cannot hold
   *  `longest` tokens (the longest request queued or running: prompt + max_tokens), for
   *  expert_slots on a dense model or a plan without an expert cache (fused, cpu); kUnsupported
   *  for kv_tokens with the KV tiers on (--kv-host-gib, --prompt-cache-dir) and for expert_slots
   *  over a checkpoint that gave its experts' memory to the banks. */
  void check_resize(const CacheResize& r, int64_t longest) const;
  /** Rebuilds the KV cache with r.kv_tokens (whole pages; its pools are new objects: the caller
   *  holds no page of the old ones) and the MoE runtime's expert cache with r.expert_slots, then
   *  plans the memory again and checks it against --gpu-memory-limit as at start; the decode graphs
   *  are dropped and recorded again. Call between steps. On any error (check_resize's, a plan that
   *  does not fit: kOutOfMemory saying what would) the engine is rebuilt at its old sizes (the KV
   *  cache anew where the attempt replaced it: its contents are lost then) and the error rethrown. */
  void resize_caches(const CacheResize& r);

  /** The memory plan (engine/memory_plan.h): what the start-up banner and /v1/stats print. */
  const MemoryPlan& memory_plan() const { return plan_; }
  /** The MoE plan (nullptr for a dense model). */
  const MoePlan* moe_plan() const { return plan_.moe ? &*plan_.moe : nullptr; }
  /** The memory budget the plan was made for (nullptr for a dense model). */
  const GpuMemoryBudget* moe_budget() const { return plan_.budget ? &*plan_.budget : nullptr; }
  /** Bytes of weights in host memory the backend reads over the bus (--embed-weights). */
  int64_t host_mapped_weight_bytes() const { return plan_.host_mapped_bytes; }
  /** The MoE counters (offload, hybrid, cpu), nullopt for fused or a dense model. Thread-safe: waits
   *  for a running step to end. */
  std::optional<MoeReport> moe_report();

  /** Optional hook receiving every named intermediate of the next steps (debugging; steps with a
   *  hook run eagerly). */
  void set_dump_hook(DumpHook hook) { dump_ = std::move(hook); }

  /** Padded decode batch sizes replayed as graphs, ascending (empty: graphs off for this engine). */
  const std::vector<int32_t>& graph_batch_sizes() const { return graphs_.batch_sizes(); }
  /** Decode steps replayed from a graph so far (recording steps excluded). */
  int64_t graph_replays() const { return graphs_.replays(); }

  /** This engine's rank group (null: one rank) and its rank in it (0 without one). */
  dist::Collective* rank_group() const { return comm_; }
  int rank() const { return comm_ ? comm_->rank() : 0; }

  /** What the engine placed on its backend's device (MemoryPlan::placed). */
  const PlacedMemory& placed_memory() const { return plan_.placed; }
  /** The shapes that size the backend's scratch: this engine's step limits and the model's widths. */
  WorkspaceShape workspace_shape() const;

 private:
  // The constructor's steps.
  /** EngineOptions::validate, --embed-weights host for a model whose LM head is tied to the table,
   *  and a --prompt-cache-dir that cannot be made or written (DiskPageStore::check_folder), before the
   *  weights load. */
  void check_options() const;
  /** The constructor's second plan with options_.streamed_step_tokens tokens a forward (the first one
   *  streams routed experts at prefill): step buffers and the workspace made again for them, or for
   *  the first size when that plan does not fit (kOutOfMemory, warned). */
  void plan_streamed_steps(bool graphs);
  /** The decode graphs' input buffers for the step size and sequences of options_ (none without graphs). */
  void reserve_graph_inputs(bool graphs);
  /** Allocates the KV cache of `config`; kOutOfMemory names the flags that size it. */
  void make_kv_cache(const KvCacheConfig& config);
  /** Allocates the planned device step inputs, the logits and their host copy. */
  void make_step_buffers();
  /** Bytes of the device step and forward buffers (the graphs' input block included). */
  int64_t step_buffer_bytes() const;
  /** plan_memory's inputs for this engine as it stands (options, KV cache, step buffers, workspace). */
  MemoryPlanInputs plan_inputs();
  /** Builds the MoE runtime as plan_ planned it (moe, budget, moe_inputs) and records in plan_.moe
   *  what it runs (prefetch, the provisional fetch cap). When the banks' fill finds host memory
   *  shrunk (HostMemoryShrunk), plans again with the host memory measured now (more layers resident
   *  on the GPU, the expert cache smaller) and builds again, up to 3 fills, logging it; throws
   *  kOutOfMemory with the fill's numbers when that plan does not fit either, for a checkpoint that
   *  released the copied layers, in a rank group, or after the third fill. */
  void build_moe();
  /** Hybrid without --moe-fetch-cap (auto's planner included): the fetch policy of the calibration
   *  file (options.moe.calibration_dir, calibration_key) when it holds one of the candidates and
   *  not options.moe.recalibrate; else time_fetch_candidates, written to that file. In a rank group
   *  (comm_) nothing is timed: the default policy stays (the ranks' timing steps would have to match). */
  void calibrate_fetch_cap();
  /** Times a few decode steps of a throw-away sequence at each candidate fetch policy
   *  (MoeRuntime::fetch_candidates), sets the first within noise of the fastest
   *  (MoeRuntime::choose_fetch_candidate) and returns the timings; nullopt, with the default (a cap
   *  of half of top-k) set, when the KV pool cannot hold the sequence or a step fails. */
  std::optional<FetchCalibration> time_fetch_candidates(const std::vector<MoeRuntime::FetchCandidate>& caps);
  /** What the calibration's timings depend on, as text: the host CPU and device, the threads, the
   *  model's tensors (names, types, shapes), the MoE plan and the candidates' names. */
  std::string calibration_key(const std::vector<MoeRuntime::FetchCandidate>& caps) const;
  /** resize_caches' work over options_ (under step_mu_): a KV cache of options_.kv_tokens when its
   *  pages differ (or `force_kv`, or none is allocated), the memory plan, the MoE runtime when its planned cache differs (or
   *  none is built), and new decode graphs. Returns whether a new MoE runtime needs its start-up
   *  calibration (calibrate_fetch_cap, whose steps take step_mu_). */
  bool rebuild_caches(bool force_kv);
  /** Forgets the recorded decode graphs (synchronizes first). */
  void drop_graphs();

  /** Queues the recurrent-state copies (KvCache::copy_state), in order. */
  void copy_states(std::span<const StateCopy> copies);

  void forward(const BatchInfo& batch, const BatchInfo* swa_batch, const Tensor& ids, const Tensor& rows,
               const Tensor& logits);
  /** What begin_step queued: the logit rows and whether the step decodes. */
  struct StepStart {
    int64_t rows = 0;
    bool decode = false;
    bool all_decode = false;  // every item one token: a decode step, timed for the MoE stats
    int64_t seqs = 0;         // the step's sequences (its batch size)
    std::chrono::steady_clock::time_point start;  // when begin_step began
  };
  /** A step's checks, staging and forward (graph or eager), up to the logits in d_logits_ (queued, not
   *  waited for). `before_forward`, if set, runs after the checks and before anything is queued, with
   *  the step's logit rows (step_sample queues its upload there). Throws kInvalidArgument as step()
   *  does, and what before_forward throws. */
  StepStart begin_step(const std::vector<StepItem>& items,
                       const std::function<void(int64_t rows)>& before_forward = {});
  /** After the step's results reached the host: the MoE counters, and a decode step's wall time from
   *  begin_step to here (MoeRuntime::record_decode_step; only when logit rows came back, so the
   *  time covers the device's work without a synchronisation of its own). */
  void end_step(const StepStart& st);
  /** The sampling buffers (step_sample) for at least `n_edits` edits and `mask_words` words of masks. */
  void reserve_sample_buffers(int64_t n_edits, int64_t mask_words);

  /** Expert parallelism over comm_ (options.expert_parallel): the model keeps its block of the experts,
   *  recorded for wrap_expert_parallel. */
  void keep_owned_experts();
  /** Wraps the MoE runtime's experts in ExpertParallelExperts over comm_ (after build_moe). */
  void wrap_expert_parallel();

  EngineOptions options_;
  dist::Collective* comm_ = nullptr;  // the rank group (null: one rank)
  std::vector<dist::ExpertRange> ep_ranges_;  // expert parallelism: each layer's owned experts
  std::vector<int32_t> ep_n_expert_;          // and its full expert count
  std::unique_ptr<Checkpoint> ckpt_;
  std::unique_ptr<Ops> ops_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<MoeRuntime> moe_;
  bool q8_forms_ = false;  // ForwardContext::q8_forms: a weight of the checkpoint is read by an integer-dot GEMV
  std::mutex step_mu_;  // held by step() and moe_report()
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<ForwardState> state_;
  int32_t max_blocks_ = 0;
  // Planned device-side step inputs and output.
  std::vector<Buffer> storage_;
  Tensor d_ids_, d_pos_, d_seq_, d_start_, d_tables_, d_swa_tables_, d_slots_, d_rows_, d_logits_;
  StepStaging h_;    // host staging of the step inputs
  Buffer h_logits_;  // F32 [R, n_vocab] of the last step (Ops::alloc_host)
  /** h_logits_ of at least `bytes` (see step()). */
  void reserve_host_logits(int64_t bytes);
  // step_sample: device block [rows, edits and masks (in), then from sample_out_offset_ the results], its
  // pinned staging in each direction, and an F32 copy of BF16 logits.
  Buffer d_sample_, h_sample_in_, h_sample_out_, d_logits_f32_;
  int64_t sample_edit_cap_ = 0, sample_mask_cap_ = 0, sample_out_offset_ = 0;  // mask cap in words
  bool sample_busy_ = false;  // an upload from h_sample_in_ may still be in flight
  DumpHook dump_;
  MemoryPlan plan_;
  // Decode graphs (declared last, so they are destroyed before the model and the backend).
  GraphRunner graphs_;
};

}  // namespace ft
