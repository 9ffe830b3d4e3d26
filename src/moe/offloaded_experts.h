#pragma once
// OffloadedExperts: the ExpertCompute of the offload, hybrid and cpu strategies (and of
// --moe-cpu-layers), built from a MoePlan. It owns the expert banks (host records, pinned when the
// backend is CUDA), the expert cache with its slots (HostExpertSlots on the CPU backend: "offload"
// on CPU means slots in a separate buffer filled by the gather's CPU twin; CUDA slots otherwise)
// and the CPU expert executor. Per layer:
//   kCache: admission + gather, then ops.moe_experts over the slot bank with slot ids (the same
//           kernel as fused, so offload equals fused bit for bit); hybrid: the misses its
//           FetchPolicy does not fetch (over the fetch cap, or the planner's CPU share) come back as
//           cpu_ids and the executor adds their share to the output (with prefetch the policy
//           applies to the prefetch, and a prefetched layer's own misses all go to the CPU);
//           A step of at least stream_min_tokens tokens streams instead (prefill): the whole
//           layer is copied into one of the cache's staging regions, taken in turn, while the
//           layer before computes from its own (ExpertSlots::stream_layer), and ops.moe_experts
//           runs with the router's ids over that region; no admission, no fetch cap, no CPU
//           share. The last streamed layers stay cached for the decode steps after;
//   kCpu:   the executor computes the layer's routed experts from the banks.
// The CPU part goes through the exchange (moe/host_exchange.h): the device side copies x, ids and
// weights to pinned host staging right after the admission and posts a request; a dispatcher thread
// runs the executor on them while the GPU gathers and computes its share; the device side waits for
// the result and adds it. No host synchronisation: hybrid and cpu decode steps are CUDA graphs too.
// The CPU backend runs the same protocol with the host twin of the device side.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "moe/cpu_expert_executor.h"
#include "moe/host_exchange.h"
#include "moe/expert_bank.h"
#include "moe/expert_compute.h"
#include "moe/expert_slots.h"
#include "moe/moe_plan.h"

namespace ft {

struct MoeRuntimeOptions {
  int64_t max_tokens = 0;     // most tokens per compute() call (the engine's max_step_tokens)
  int32_t n_expert_used = 0;  // k: columns of the routed ids
  int cpu_threads = 0;        // CPU expert executor workers (<= 0: one per physical core)
  int cpu_spin_us = 0;        // ThreadPool: how long workers poll for the next layer's job before sleeping
  bool cpu_int8 = false;      // CpuExpertExecutor's int8 activations (the engine sets --moe-cpu-int8's value, on by default)
  bool cpu_bf16 = false;      // CpuExpertExecutor's bf16 activations (the engine sets --moe-cpu-bf16's value, off by default)
  int bank_threads = 0;       // parallel bank fill (<= 0: hardware threads)
  /** The banks' form; unset: kEc12 where ec12_bankable(host), else kStored. */
  std::optional<BankFormat> bank_format;
  /** Runs once per MoE layer as soon as the banks hold its experts (during construction only): the
   *  caller may release the checkpoint's copy of them (ExpertBanks' layer_filled). */
  std::function<void(int64_t layer)> bank_layer_filled;
  /** bank_layer_filled gives the checkpoint's anonymous memory back, so the banks' fill needs host
   *  memory only for the layers in flight (check_bank_host_memory). */
  bool source_releases_memory = false;
  /** Measures the host memory the banks' fill may still take, before it and before each layer
   *  (ExpertBanks' host_room; empty: host_memory_room()). */
  HostMemoryProbe host_room;
  /** Sees the banks' fill (ExpertBanks) or the resident experts' upload (ResidentExperts) as a phase
   *  (during construction only; null: none). */
  ProgressSink* progress = nullptr;
  /** Steps of at least this many tokens stream whole layers through the staging regions instead
   *  of admitting experts one by one (a prefill chunk touches nearly every expert; a decode batch
   *  touches few and gains from the cache's hits). Keep it above the CUDA-graph batch sizes. */
  int64_t stream_min_tokens = 64;
  /** --moe-prefetch: cache layers ask for the next cache layer's predicted routes (prefetch_targets)
   *  and fetch them while they compute. */
  bool prefetch = false;
  /** --moe-prefetch-depth: offload's cache layers predict the cache layer this many ahead (1 to
   *  PrefetchTargets::kMax; the first cache layer of a step predicts every layer up to it). Hybrid
   *  uses 1; a cache that cannot hold every expert runs the deepest d with 2d x max_experts slots
   *  (PrefetchLedger: the admissions spare 2d - 1). */
  int prefetch_depth = 1;
  /** --moe-preload: the constructor fills the empty expert cache (preload_cache), so the first
   *  prompt's streamed layers copy that share from device memory and the first decode steps hit. */
  bool preload = false;
  /** --moe-prefill-cpu (MoeOptions::prefill_cpu_share): a streamed layer's CPU share of its uncached
   *  experts, [0, 1], or < 0: from the layer's FetchPolicy (stream_cpu_share). Needs the exchange
   *  (the hybrid strategy or CPU layers); without it nothing goes to the CPU. */
  double prefill_cpu_share = -1.0;
};

/** Per-layer counters of the MoE runtime. */
struct MoeLayerStats {
  int64_t hits = 0;         // distinct experts found in the cache, summed over admissions
  int64_t misses = 0;       // distinct experts fetched into the cache
  int64_t bytes = 0;        // bytes fetched host -> cache
  int64_t cpu_experts = 0;  // distinct experts computed by the CPU executor
  int64_t prefetched = 0;   // experts fetched ahead by --moe-prefetch (their bytes are in `bytes`)
  int64_t cpu_misses = 0;   // of cpu_experts, those of a cache layer (hybrid, over the fetch cap): not in the cache
  int64_t cpu_ns = 0;       // nanoseconds the CPU executor worked on this layer's experts (wall clock)
  int64_t cpu_bytes = 0;    // bytes of expert records (gate + up + down as stored) the CPU executor read

  /** Cache lookups: hits, fetched misses, and misses the CPU computed instead of fetching. */
  int64_t lookups() const { return hits + misses + cpu_misses; }
};

/** Every counter of MoeLayerStats, for the code that treats them alike (operator-, operator+). */
inline constexpr int64_t MoeLayerStats::*kMoeLayerCounters[] = {
    &MoeLayerStats::hits,       &MoeLayerStats::misses,     &MoeLayerStats::bytes,  &MoeLayerStats::cpu_experts,
    &MoeLayerStats::prefetched, &MoeLayerStats::cpu_misses, &MoeLayerStats::cpu_ns, &MoeLayerStats::cpu_bytes};
static_assert(sizeof(MoeLayerStats) == sizeof(kMoeLayerCounters) / sizeof(kMoeLayerCounters[0]) * sizeof(int64_t),
              "a MoeLayerStats counter is missing from kMoeLayerCounters");

/** The counters gathered between `before` and `now` (field by field). */
MoeLayerStats operator-(const MoeLayerStats& now, const MoeLayerStats& before);

/** Field-by-field sum. */
MoeLayerStats operator+(const MoeLayerStats& a, const MoeLayerStats& b);

/** Sum of the per-layer counters. */
MoeLayerStats total_moe_stats(const std::vector<MoeLayerStats>& layers);

/** The --decode-log-interval line for the counters gathered between `before` and `now` (same
 *  layers) over `steps` decode steps: "moe: 16 steps, hit rate 87.5% (112 hits, 16 misses
 *  fetched, ...), 4 CPU experts (0.41 ms/step on the CPU)". Throws kInvalidArgument for mismatched
 *  sizes. */
std::string format_moe_stats(const std::vector<MoeLayerStats>& now, const std::vector<MoeLayerStats>& before,
                             int64_t steps);

class OffloadedExperts final : public ExpertCompute {
 public:
  /** Builds banks, slots (plan.cache.n_slots, when a layer uses the cache) and the executor.
   *  Throws ft::Error(kInvalidArgument) for a plan that is not for these banks (layer count,
   *  resident layers mixed in, no MoE layer), bad options; what the parts throw (kOutOfMemory...). */
  OffloadedExperts(Ops& ops, const HostExpertBanks& host, const MoePlan& plan, const MoeRuntimeOptions& options);
  /** Waits for the backend's queued work (which may wait on the exchange) before the dispatcher stops. */
  ~OffloadedExperts() override;

  /** out [T, H] = routed experts of `layer` (see ExpertCompute). Throws kInvalidArgument for a
   *  dense layer, T over max_tokens, ids not [T, n_expert_used]. */
  void compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
               const ActQ8* x_q8 = nullptr) override;
  /** Throws ft::Error(kInternal) when the expert slots' prefetch copies since the last check failed
   *  or timed out (ExpertSlots::check); then waits for the queued work (when a layer exchanges with
   *  the CPU) and throws the same when a CPU share since the last check failed or timed out. */
  void check() override;
  /** With MoeRuntimeOptions::prefetch, for a cache layer: the cache layer prefetch_depth() ahead
   *  (the first cache layer of a step names every cache layer up to it, nearest first).
   *  None for a step that streams (n_tokens >= stream_min_tokens), which would drop the
   *  predictions, and for a cache of fewer than 2 x max_experts slots (the admissions after a
   *  prefetch spare its slots and need that many). */
  PrefetchTargets prefetch_targets(int64_t layer, int64_t n_tokens) const override;
  /** The depth in use (MoeRuntimeOptions::prefetch_depth, lowered as described there), 0 without
   *  prefetch; chosen once, at construction. */
  int prefetch_depth() const { return depth_; }
  /** Why the depth in use is below the one asked for ("" when it is not, or without prefetch). */
  const std::string& prefetch_depth_note() const { return depth_note_; }
  /** Whether any decode step prefetches (prefetch_target is >= 0 for some layer). */
  bool prefetches() const;
  /** Keeps the predicted routes for the compute() that follows: its admission path prefetches them
   *  just before its own admission (offload) or right after its own gather (hybrid); streamed and
   *  CPU layers drop them. */
  void prefetch(int64_t target, const Tensor& ids) override;

  /** Sets the FetchPolicy of every cache layer (a cap, a planned split, or every miss fetched: the
   *  start-up calibration tries several) and chooses the prefetch depth again (deeper when every
   *  miss is fetched). Call between steps. Throws kInvalidArgument for a plan without a cache
   *  layer, or a policy that leaves misses to the CPU without the CPU executor (not hybrid). */
  void set_fetch_policy(const FetchPolicy& policy);
  /** Seconds (best of `reps`) the CPU expert executor takes for one expert of the first MoE layer
   *  with `n_tokens` tokens routed to it, a different expert each run so its weights come from
   *  memory (synthetic inputs; for the planner's calibration). Call
   *  between steps. Throws kInvalidArgument without the executor or for n_tokens outside
   *  [1, max_tokens], reps < 1. */
  double time_cpu_expert(int64_t n_tokens, int reps);
  /** The share (1/65536) of `layer`'s uncached experts that a streamed step of T tokens of width H
   *  leaves to the CPU: MoeRuntimeOptions::prefill_cpu_share when given, else the split that ends
   *  both paths together under the layer's FetchPolicy costs, in fetches: U uncached experts
   *  (estimated from the cache's share of the experts), an expert with m = T k / E tokens costs the
   *  CPU c = cpu_cost x t(m) / t(1) on the measured curve (set_cpu_time_curve; without one
   *  cpu_cost + (m - 1) cpu_token_cost), and the exchange returns T x H fp32 over the same
   *  link (o fetches): share s = (U + o) / (U (1 + c)), kept only where the CPU's s U c beats the
   *  link's U alone (long prompts: many tokens per expert and large outputs stream as offload).
   *  0 without the exchange, for offload's policy and for a plain cap. */
  int32_t stream_cpu_share(int32_t layer, int64_t T, int64_t H) const;
  /** The CPU executor's measured time of one expert against its token count (time_cpu_expert's
   *  points, ascending tokens, the first at 1 token): stream_cpu_share scales the planner's 1-token
   *  cost by it (piecewise linear, the last slope beyond the last point) instead of the linear
   *  per-token cost, which a prefill's AMX tiles beat (H100 host: 0.09 ms at 1 token, 0.21 at 16,
   *  about as much at 32). Throws kInvalidArgument for points not ascending from 1 token or times
   *  not > 0. */
  void set_cpu_time_curve(std::vector<std::pair<int64_t, double>> points);

  /** Workers of the CPU expert executor (0: no layer computes on the CPU). */
  int cpu_threads() const { return cpu_ ? cpu_->n_threads() : 0; }

  /** Counters per model layer (reads the device cache's counters: synchronizes on CUDA). */
  std::vector<MoeLayerStats> stats();

  const MoePlan& plan() const { return plan_; }
  const ExpertBanks& banks() const { return *banks_; }
  /** The expert cache, or nullptr when no layer uses one. */
  ExpertSlots* slots() { return slots_.get(); }

 private:
  /** The dispatcher's handler: the executor on a request's staged inputs. */
  void serve(const ExchangeRequest& r);
  /** Fills the empty cache: each cache layer gets its pool's slots (less the two staging regions)
   *  divided by the pool's layers (classes: per class), its experts 0, 1, ... fetched by prefetch
   *  admissions (counted as prefetched in the stats), then the prefetches are finished.
   *  Synchronizes. */
  void preload_cache();
  /** The streaming path of compute() for a cache layer. */
  void run_streamed(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
                    const ActQ8* x_q8);
  /** Makes later work wait for a staging copy still pending (a streamed step that stopped early). */
  void drain_streams();
  /** The next staging region in turn. */
  int32_t take_region();
  /** Sets depth_ and depth_note_ from the options, the plan and the slots. */
  void choose_prefetch_depth();
  /** A tensor on the backend, kept in storage_. */
  Tensor alloc(DType dtype, std::initializer_list<int64_t> shape);

  Ops& ops_;
  MoePlan plan_;
  MoeRuntimeOptions opt_;
  std::unique_ptr<HostAllocator> alloc_;
  std::unique_ptr<ExpertBanks> banks_;
  std::unique_ptr<ExpertSlots> slots_;
  std::unique_ptr<CpuExpertExecutor> cpu_;
  std::vector<Buffer> storage_;
  Tensor slot_ids_, cpu_ids_;            // I32 [max_tokens * k] on the backend
  std::vector<std::atomic<int64_t>> cpu_experts_;  // per layer (counted on the dispatcher's thread)
  std::vector<std::atomic<int64_t>> cpu_ns_;       // per layer, likewise
  std::vector<std::atomic<int64_t>> cpu_bytes_;    // per layer, likewise
  // The exchange with the CPU executor (when a layer needs it); destroyed device side first.
  std::unique_ptr<ExchangeBuffers> xbuf_;
  std::unique_ptr<ExchangeDispatcher> dispatcher_;
  std::unique_ptr<ExchangeDevice> exchange_;
  std::vector<int32_t> next_cache_layer_;  // per layer: the next kCache layer after it, or -1
  int32_t pending_layer_ = -1;             // the layer streaming ahead of its compute, or -1
  int32_t pending_region_ = 0;             // ... into this staging region
  int32_t region_cursor_ = 0;              // the staging region the next stream_layer takes
  int32_t region_share_[2] = {0, 0};       // the CPU share each region's last stream_layer claimed
  int32_t first_cache_layer_ = -1;
  double uncached_share_ = 1.0;            // estimated share of a cache layer's experts not in the cache
  std::vector<std::pair<int64_t, double>> cpu_curve_;  // set_cpu_time_curve's points (empty: none)
  int depth_ = 0;                          // prefetch_depth()
  std::string depth_note_;                 // prefetch_depth_note()
  PrefetchTargets hints_;                  // predicted routes waiting for the next compute()
  Tensor hint_ids_[PrefetchTargets::kMax];
  int32_t prefetched_layer_ = -1;          // the layer whose experts the last admission prefetched
  int64_t timed_expert_ = 0;               // time_cpu_expert's next expert (each run reads a new one)
};

/** The ExpertCompute for `plan`: ResidentExperts for fused (or a dense model), SplitExperts when
 *  resident layers mix with banked ones (moe/split_experts.h), OffloadedExperts otherwise. Throws what those constructors throw. */
std::unique_ptr<ExpertCompute> make_expert_compute(Ops& ops, const HostExpertBanks& host, const MoePlan& plan,
                                                   const MoeRuntimeOptions& options);

}  // namespace ft
