#pragma once
// MoeRuntime: the engine's MoE part (issue 7). From the plan the engine's memory plan made
// (engine/memory_plan.h: plan_memory budgets the flags --moe-strategy, --moe-cache-*, --moe-cpu-layers,
// --kv-reserve-tokens and --gpu-memory-limit against what the engine placed, and calls plan_moe) it
// makes the ExpertCompute the model's MoE layers call (ResidentExperts for fused, OffloadedExperts for
// offload / hybrid / cpu). It also reports the counters: snapshots for
// /v1/stats and /metrics (MoeReport) and the --decode-log-interval lines.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/ops.h"
#include "engine/calibration_cache.h"
#include "model/model.h"
#include "moe/moe_plan.h"
#include "moe/offloaded_experts.h"

namespace ft {

/** What MoeRuntime needs besides the model and its plan (plan_memory makes both, engine/memory_plan.h). */
struct MoeRuntimeConfig {
  MoeOptions moe;                    // strategy, prefetch, CPU executor's formats (the plan is made already)
  int64_t max_tokens = 0;            // most tokens per forward
  int64_t stream_min_tokens = 64;    // forwards this long stream whole expert layers (MoeRuntimeOptions)
  int cpu_threads = 0;               // CPU expert executor workers (<= 0: one per physical core, less one with a GPU)
  int64_t decode_log_interval = 0;   // log the counters every N decode steps (0: never)
  /** When set, called with each routed expert matrix of the checkpoint once the expert banks hold
   *  a copy of it (Checkpoint::release), so a model in anonymous memory is not held twice. */
  std::function<void(const void* data, int64_t bytes)> release_source;
  /** release_source gives anonymous memory back (Checkpoint::releases_memory): the banks' fill then
   *  needs little host memory beyond what the checkpoint holds (check_bank_host_memory). */
  bool source_releases_memory = false;
  /** Measures host memory for the banks' fill (MoeRuntimeOptions::host_room; empty: host_memory_room()). */
  HostMemoryProbe host_room;
  /** Sees the experts' fill or upload (MoeRuntimeOptions::progress) while the runtime is built;
   *  null: none. */
  ProgressSink* progress = nullptr;
};

/** Counters of one MoE layer as reported. */
struct MoeLayerReport {
  int64_t layer = 0;                 // model layer index
  MoeLayerMode mode = MoeLayerMode::kCache;
  MoeLayerStats stats;
};

/** Wall time of the decode steps of one batch size (MoeRuntime::record_decode_step). */
struct DecodeStepTimes {
  int64_t steps = 0;
  double seconds = 0.0;  // summed wall time
  double mean_ms() const { return steps > 0 ? 1e3 * seconds / static_cast<double>(steps) : 0.0; }
};

/** The planner's predicted decode step against the measured ones (issue 37's stats). */
struct StepTimeReport {
  /** The start-up calibration's time (ms per decode step) of the candidate in use; nullopt without
   *  one, `no_prediction` then says why. */
  std::optional<double> predicted_ms;
  int64_t predicted_batch = 0;        // the batch size (sequences) the prediction was timed at; 0 without one
  std::string predicted_from;         // "calibration: cpu 0.5" ("" without a prediction)
  std::string no_prediction;          // why predicted_ms is unset ("" when it is set)
  /** Decode steps (every sequence of the step one token, logits read back) since start or the
   *  calibration, by batch size (sequences in the step). */
  std::map<int64_t, DecodeStepTimes> measured;
};

/** The MoE block of /v1/stats and /metrics (only for offload, hybrid and cpu). */
struct MoeReport {
  MoeStrategy strategy = MoeStrategy::kOffload;
  int64_t cache_slots = 0;             // 0: no expert cache (cpu)
  int64_t slot_bytes = 0;             // the largest slot class's
  /** The cache's slot classes (moe/slot_classes.h; one for a single record size), empty without a cache. */
  std::vector<SlotClass> slot_classes;
  int32_t fetch_cap = -1;              // hybrid: experts fetched per layer per step at most; -1 none
  int32_t cpu_cost = 0;                // hybrid: the planned split's costs (FetchPolicy, kFetchCostUnit); 0 none
  int32_t cpu_token_cost = 0;
  bool prefetch = false;               // next-layer prefetch (--moe-prefetch) in use
  int32_t prefetch_depth = 0;          // cache layers predicted ahead (--moe-prefetch-depth, as in use); 0 off
  int32_t cpu_threads = 0;             // workers of the CPU expert executor; 0: no layer computes on the CPU
  BankFormat bank_format = BankFormat::kStored;  // how the expert banks hold their records
  std::vector<MoeLayerReport> layers;  // MoE layers only, ascending
  MoeLayerStats total;
  std::optional<FetchCalibration> calibration;  // the start-up calibration in use (none: not calibrated)
  bool calibration_cached = false;     // read from calibration_file rather than timed at this start
  std::string calibration_file;        // the calibration file read or written ("" none)
  StepTimeReport step_time;            // predicted vs measured decode step
};

/** "dense", "resident", "cache", "cpu". */
const char* moe_layer_mode_name(MoeLayerMode m);

/** hits / lookups (hits, fetched misses, and misses hybrid computed on the CPU), 0 without lookups. */
double moe_hit_rate(const MoeLayerStats& s);

class MoeRuntime {
 public:
  /** Builds the experts of `model` (which must have routed experts) on `ops` as `plan` (made by
   *  plan_memory for `budget`) places them. Throws ft::Error: what the builders throw (kOutOfMemory
   *  when an allocation fails). */
  MoeRuntime(Ops& ops, const Model& model, const MoeRuntimeConfig& config, MoePlan plan, GpuMemoryBudget budget);

  ExpertCompute& experts() { return *experts_; }
  /** Replaces experts() by wrap(experts()) (expert parallelism: ExpertParallelExperts around this
   *  rank's strategy); the counters still read the strategy inside. Throws kInvalidArgument when
   *  wrap gives null. */
  void wrap_experts(const std::function<std::unique_ptr<ExpertCompute>(std::unique_ptr<ExpertCompute>)>& wrap);
  const MoePlan& plan() const { return plan_; }
  /** The budget plan_moe was given (limit, resident bytes, KV, slot and expert bytes). */
  const GpuMemoryBudget& budget() const { return budget_; }
  /** The counters now, or nullopt for fused (no cache, no CPU experts). Not thread-safe against a
   *  running forward: the engine serializes (Engine::moe_report). CUDA: synchronizes the stream. */
  std::optional<MoeReport> report();
  /** Called before every forward (`decode` as in after_step): a step without decode tokens in the
   *  middle of a log window reads the counters first, so after_step can leave it out. */
  void before_step(bool decode);
  /** Records the wall time of one decode step of `batch` sequences (each one token; the engine
   *  times from the step's start to its results on the host, so no synchronisation is added).
   *  Ignored during the calibration; the next --decode-log-interval line reports the window's mean
   *  against the prediction. Call before after_step of the same step. */
  void record_decode_step(int64_t batch, double seconds);
  /** The prediction (the calibration's time of its choice, timed at batch 1) and the measured
   *  decode steps so far. */
  StepTimeReport step_time() const;
  /** Why no calibration is in use although this plan asked for one (a rank group keeps the
   *  default policy, no KV room, a failed step); read by step_time(). */
  void set_no_calibration(std::string why) { no_calibration_ = std::move(why); }
  /** Called after every forward; counts decode steps (`decode`: some sequence advanced by one
   *  token) and every decode_log_interval of them logs (spdlog info) the counters gathered since the
   *  last line: a total line (format_moe_stats) and a per-layer line. Steps without decode tokens
   *  (prefill only) are left out of the window they fall in; a step mixing both counts in full. */
  void after_step(bool decode);

  /** One fetch policy the start-up calibration times: "cpu 0.5" (a planned split whose CPU expert
   *  costs 0.5 fetches), "offload" (every miss fetched). */
  struct FetchCandidate {
    std::string name;
    FetchPolicy policy;
  };
  /** Hybrid without --moe-fetch-cap: the policies to time at start, empty when the cap is given or
   *  the strategy has none. Planned splits with an expert's CPU time at 1/4, 1/2, 1, 2 and 4
   *  fetches (each further token at the share this machine's executor measured at construction),
   *  then, for auto's planner, offload. */
  std::vector<FetchCandidate> fetch_candidates() const;
  /** The calibration's choice among candidates timed at `seconds` per decode step each: the first
   *  within kFetchTie of the fastest. Candidates that time within the noise of each other then
   *  resolve the same way on every start (on the CPU backend's small models they differ by ~0.3%,
   *  and runs picked caps 7, 1 and 4 when caps were timed), and the earlier ones fetch less.
   *  Throws kInvalidArgument for an empty list. */
  static size_t choose_fetch_candidate(const std::vector<double>& seconds);
  static constexpr double kFetchTie = 0.03;
  /** Sets the policy of every cache layer (calibration, then its choice); the strategy reads
   *  offload when it fetches every miss, hybrid otherwise. Throws kInvalidArgument without a
   *  hybrid cache. */
  void set_fetch_policy(const FetchCandidate& c);
  /** The policy used until (or without) a calibration: a cap of half of top-k, at least 1. */
  FetchCandidate default_fetch_candidate() const {
    return {fmt::format("cap {}", std::max<int32_t>(1, n_expert_used_ / 2)), FetchPolicy(std::max<int32_t>(1, n_expert_used_ / 2))};
  }
  /** Brackets the start-up calibration's steps: while it runs nothing is logged, and afterwards
   *  the counters (report(), the log windows) leave out what its steps did, so only real traffic
   *  and the --moe-preload fill before it (counted as prefetched) are counted. */
  void begin_calibration();
  void end_calibration();
  /** Records the calibration the engine applied (timed now, or read from `file` when `cached`) for
   *  report(); `file` is "" when none is kept. */
  void set_calibration(FetchCalibration c, bool cached, std::string file);

 private:
  MoePlan plan_;
  GpuMemoryBudget budget_;
  int64_t log_interval_ = 0;
  std::unique_ptr<ExpertCompute> experts_;
  OffloadedExperts* offloaded_ = nullptr;  // experts_ when it is one
  int64_t decode_steps_ = 0;
  std::vector<MoeLayerStats> logged_;      // counters at the last log line, less prefill-only steps since
  std::vector<MoeLayerStats> before_;      // counters before a prefill-only step inside a window
  /** The cache's counters minus those of the calibration (the device counters never reset). */
  std::vector<MoeLayerStats> counters();

  bool calibrate_ = false;                 // hybrid without an explicit cap
  bool calibrating_ = false;
  std::vector<MoeLayerStats> baseline_;    // the calibration's own counts (empty: none)
  std::vector<MoeLayerStats> calibration_start_;  // counters when the calibration began
  int32_t n_expert_used_ = 0;
  double token_share_ = 0.0;  // CPU time of a further token of an expert over its first (measured)
  std::optional<FetchCalibration> calibration_;
  bool calibration_cached_ = false;
  std::string calibration_file_;
  std::string no_calibration_;             // set_no_calibration
  std::map<int64_t, DecodeStepTimes> step_times_;  // record_decode_step, by batch size
  DecodeStepTimes window_steps_;           // ... since the last log line
  double window_batch_ = 0.0;              // summed batch sizes of window_steps_
};

}  // namespace ft
