#pragma once
// EngineService: the serving loop. One worker thread owns the model and runs steps: it asks the
// Scheduler for a plan, runs ModelRunner::forward over it, samples each finished row with the
// request's own Sampler and hands tokens to the request's TokenSink. Any thread may submit or cancel.
// Requests join and leave between steps; a cancelled request (client gone) is finished and its KV pages
// returned at the next step boundary.
// Without the worker thread (ServiceConfig::worker_thread false) the same loop runs on the caller's
// thread in run_until_idle(): engine/generate.h drives `ft run` and the model tests through it.
// Logits leave the runner only for a request that asks (GenerationRequest::prompt_logits /
// step_logits, TokenSink::on_logits); other steps sample on the runner's backend.
//
// Text is not the engine's business: the server's TokenSink detokenizes and matches stop strings and
// tells the engine to stop by returning false.
//
// Determinism: every request samples with its own Sampler (own RNG, seeded from SamplingParams::seed), and
// ModelRunner::forward must be batch-invariant, so the same request with the same seed gives the same
// tokens alone or next to others, greedy or sampled. A request without a seed draws a random one
// (ft serve --seed sets a default), so only seeded sampled requests repeat.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/model_runner.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/step_batch.h"
#include "engine/token_constraint.h"

namespace ft {

enum class FinishReason : uint8_t {
  kStop,       // an end-of-generation token or a stop string
  kLength,     // max_tokens or the context limit
  kCancelled,  // the client went away, or the server is shutting down
  kError,      // the forward failed (message in FinishInfo::error)
};

/** "stop", "length", "cancelled", "error". */
const char* finish_reason_name(FinishReason r);

struct FinishInfo {
  FinishReason reason = FinishReason::kStop;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // sampled tokens, including a final end-of-generation token
  int32_t cached_tokens = 0;      // prompt tokens reused from the prefix cache
  std::string error;
};

/** Receives one request's tokens. Called on the engine thread; must return quickly and must not call
 *  back into the EngineService. */
class TokenSink {
 public:
  virtual ~TokenSink() = default;
  /** A sampled token. `eog`: it is an end-of-generation id and the request ends with it. Return false
   *  to end the request after this token (a stop string was found): it then finishes with kStop. */
  virtual bool on_token(const SampledToken& token, bool eog) = 0;
  /** Called at most once, when the request is first admitted (its prefix-cache lookup done), before its
   *  first token: `cached_tokens` of its prompt were taken from the prefix cache (FinishInfo's count).
   *  A request cancelled or timed out while still queued never gets it. */
  virtual void on_admitted(int32_t cached_tokens) { (void)cached_tokens; }
  /** Only for a request that asked for logits (GenerationRequest::prompt_logits / step_logits): the
   *  raw logits float32 [vocab] computed at `position` (predicting position + 1), valid during the call.
   *  Called before the token sampled from them reaches on_token. A position comes again when a
   *  preempted request recomputes it. */
  virtual void on_logits(int64_t position, std::span<const float> logits) {
    (void)position;
    (void)logits;
  }
  /** Called exactly once per accepted request, last. */
  virtual void on_finish(const FinishInfo& info) = 0;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 16;          // >= 1
  SamplingParams sampling;
  std::vector<int32_t> eog_ids;     // ids that end generation; also masked by sampling.min_tokens
  bool ignore_eos = false;          // eog ids do not end generation (still masked for min_tokens)
  /** Ids that end generation even with ignore_eos (vLLM's stop_token_ids); masked for min_tokens and
   *  reported to the sink as eog, like eog_ids. */
  std::vector<int32_t> stop_ids;
  /** Past this time the request ends as if it had reached max_tokens (kLength), whether it is
   *  generating or still queued (--request-timeout, a request's `timeout`); max(): none. */
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  /** Constrained decoding (structured outputs, required tool calls): every sampled token is one the
   *  constraint allows; end-of-generation and stop ids only once it is complete (eog ids not with
   *  ignore_eos). A request whose constraint is complete with no other token allowed ends there (kStop);
   *  one whose constraint allows nothing while incomplete ends with kError. Null: unconstrained. Used only
   *  on the engine thread once submitted. */
  std::shared_ptr<TokenConstraint> constraint;
  /** An earlier request with the same prompt (another choice of one API request, OpenAI's `n`), or 0:
   *  this one starts once that one's prompt is computed and shares its whole pages through the prefix
   *  cache (Scheduler::submit). */
  uint64_t after = 0;
  /** Hand the sink (on_logits) the logits of every prompt position, and of every position a token is
   *  sampled from. Those steps return logits and sample on the host; prompt chunks are cut to the
   *  scheduler's max_logit_rows. Off (the default): no logits leave the runner. */
  bool prompt_logits = false;
  bool step_logits = false;
  /** Teacher forcing (ft bench): the k-th token appended after the prompt is feed_tokens[k] instead of
   *  the k-th sampled one, which still reaches the sink (and the sampler's history); past its end the
   *  sampled tokens are fed. Ids must be in the vocabulary; not with a constraint. Empty: none. */
  std::vector<int32_t> feed_tokens;
  std::shared_ptr<TokenSink> sink;  // required
};

/** Figures for /v1/stats and /metrics. Rates are over the last `window_s` seconds. */
struct EngineStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t context_limit = 0;
  int32_t page_size = 0;
  int32_t kv_pages_total = 0;
  int32_t kv_pages_used = 0;    // held by requests (private pages + cached pages they reference)
  int32_t kv_pages_cached = 0;  // held by the prefix cache (some may also count as used)
  int32_t kv_pages_free = 0;
  int32_t kv_swa_pages_total = 0;  // the sliding-window layers' pool (0: none)
  int32_t kv_swa_pages_used = 0;   // its pages held by requests' windows
  int32_t state_slots_total = 0;   // recurrent-state slots (linear-attention models; 0: none)
  int32_t state_slots_used = 0;    // held by requests
  int32_t state_snapshots = 0;     // held by the prefix cache (states at cached prompts' ends)
  /** Prefix-cache pages hit on the device and restored from the host and disk tiers, since start. */
  int64_t kv_hit_pages_device = 0, kv_hit_pages_host = 0, kv_hit_pages_disk = 0;
  bool kv_host_tier = false, kv_disk_tier = false;  // whether each tier is on
  PageStoreStats kv_host, kv_disk;                  // the tiers' counters (zero when off)
  double window_s = 0;
  double prompt_tokens_per_s = 0;      // prompt tokens computed (prefill) per second
  double generation_tokens_per_s = 0;  // tokens sampled per second
  double mean_ttft_s = 0;              // submit -> first token, over all requests that produced one
  int64_t requests_total = 0;          // accepted
  int64_t requests_finished = 0;       // finished for any reason
  int64_t requests_cancelled = 0;
  int64_t requests_rejected = 0;       // refused by submit (context length, overload, bad params)
  int64_t prompt_tokens_total = 0;     // prompt tokens of accepted requests
  int64_t prompt_tokens_computed_total = 0;  // prefill tokens actually run (cache hits excluded)
  int64_t cached_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t steps_total = 0;
  double uptime_s = 0;
};

struct ServiceConfig {
  SchedulerConfig scheduler;
  double stats_window_s = 10.0;
  bool check_integrity = false;  // run Scheduler::check_integrity() after every step (tests)
  /** The prefix cache's host and disk tiers (engine/kv_tiers.h; none by default); must outlive the service. */
  LowerTiers tiers;
  /** false: no worker thread; the caller runs the loop with run_until_idle() (engine/generate.h). */
  bool worker_thread = true;
};

/** A change to what the runner computes with, applied between two steps (EngineService::change):
 *  the server's POST /v1/admin/cache resizing the KV and expert caches. */
struct ServiceChange {
  /** Checks the change against the requests queued or running when it is applied (`longest`: the
   *  most KV tokens one of them may need, prompt + max_tokens); throws to refuse it, before anything
   *  is released. Empty: no check. */
  std::function<void(int64_t longest)> check;
  /** Makes the change (on the serving loop's thread, no step running); throws when it fails. */
  std::function<void()> apply;
  /** Set when the change replaces the KV pools: every running sequence's KV is released first and
   *  the prefix cache emptied (Scheduler::release_all_kv: they recompute, none is dropped), and after
   *  apply, thrown or not, the scheduler takes the pools this returns (the runner's pools now). */
  std::function<KvPools()> pools;
};

class EngineService {
 public:
  /** `runner` and `pools` (the KV pages, or one PagePool) must outlive the service. The worker thread starts at
   *  once (unless config.worker_thread is false). */
  EngineService(ModelRunner& runner, KvPools pools, const ServiceConfig& config);
  /** Cancels whatever is left and joins the worker. */
  ~EngineService();
  EngineService(const EngineService&) = delete;
  EngineService& operator=(const EngineService&) = delete;

  /** Queues a request; returns its id. The sink then receives its tokens and exactly one on_finish.
   *  Throws ft::Error (and never calls the sink): kInvalidArgument for bad sampling params, an empty
   *  prompt, max_tokens < 1 or a token id outside the vocabulary; kContextLength when prompt +
   *  max_tokens exceed context_limit(); kOverloaded when the queue is full or the service stops. */
  uint64_t submit(GenerationRequest request);

  /** Without a worker thread (ServiceConfig::worker_thread false): runs the serving loop's steps on the
   *  calling thread until every submitted request finished. A forward that throws ends its step's
   *  requests (kError to their sinks) and its exception is rethrown here once the rest finished. */
  void run_until_idle();

  /** Without a worker thread: one iteration of the loop on the calling thread (cancellations,
   *  deadlines, then one planned step). Returns false when no step ran (nothing is left, or nothing
   *  could be planned). A forward that throws ends its step's requests (kError to their sinks) and
   *  its exception is rethrown here. */
  bool run_step();

  /** Ends a request at the next step boundary (finish reason kCancelled). Unknown ids are ignored. */
  void cancel(uint64_t id);

  /** Stops accepting requests, lets running and waiting ones finish for up to `grace`, cancels the rest
   *  and joins the worker. Idempotent. */
  void shutdown(std::chrono::milliseconds grace);

  /** Applies `change` between two steps and waits for it: the running step finishes, then (with
   *  change.pools) the running sequences go back to the queue and the prefix cache empties, then
   *  change.apply runs; the requests queued or running go on afterwards (with new pools they
   *  recompute their KV). Without a worker thread it runs on the caller's thread at once. Rethrows
   *  what change.check (nothing changed then) or change.apply threw; throws kOverloaded once
   *  shutdown() began. */
  void change(const ServiceChange& change);

  int64_t context_limit() const {
    std::lock_guard<std::mutex> lk(mu_);
    return context_limit_;
  }
  /** Requests that run at once (SchedulerConfig::max_running, --max-running-requests). */
  int32_t max_running() const { return config_.scheduler.max_running; }
  EngineStats stats() const;
  /** False once shutdown() began: new requests are refused while the running ones drain. */
  bool accepting() const;

 private:
  struct Active {
    GenerationRequest req;
    std::unique_ptr<Sampler> sampler;
    std::unordered_set<int32_t> eog;
    std::unordered_set<int32_t> stop;  // GenerationRequest::stop_ids
    std::chrono::steady_clock::time_point submitted;
    bool first_token = false;
    bool admitted = false;  // its sink was told on_admitted
    int32_t generated = 0;
    std::vector<uint32_t> mask;  // req.constraint's allowed ids for the next token (sample_mask_words)
    bool mask_ready = false;
    bool constraint_failed = false;  // its constraint allowed nothing, or threw: the request ends (kError)
  };
  struct Sampled {
    uint64_t id;
    int32_t token;
    bool finish;
    FinishReason reason;
  };

  /** A change() waiting for the loop. */
  struct PendingChange {
    const ServiceChange* change = nullptr;
    bool done = false;
    std::exception_ptr error;
  };
  /** Runs `c` (see change()); under mu_, between steps. */
  void apply_change_locked(const ServiceChange& c);
  /** Runs the pending change, if any, and wakes its caller; under mu_. Returns whether one ran. */
  bool run_pending_change_locked();
  void loop();
  /** One iteration of the loop: cancellations and deadlines, then a planned step if any sequence is
   *  waiting or running. Returns false when nothing ran. */
  bool run_once();
  /** Ends every request left (kCancelled). */
  void cancel_all_locked();
  /** Whether the planned step hands logits to a sink (then it samples on the host). */
  bool wants_logits(const StepPlan& plan, const std::vector<Active*>& planned) const;
  /** forward() with the planned rows, each sink's rows to it, each sequence's last row sampled on
   *  the host. */
  void step_with_logits(StepPlan& plan, const std::vector<Active*>& planned);
  /** Prepares each planned sequence's sampling row (skipped where it does not sample yet) and runs the
   *  runner's forward_sample; on an exception results_ is empty. */
  void step(StepPlan& plan, const std::vector<Active*>& planned);
  void finish_locked(uint64_t id, FinishReason reason, const std::string& error = {});
  /** Computes a.mask from a.req.constraint for the next token (its budget: the tokens max_tokens
   *  leaves) and returns the count of ids allowed, end-of-generation and stop ids included; 0 when it
   *  allows nothing or throws (logged). */
  int64_t constrain(Active& a);
  void record_rates_locked(int64_t prompt_tokens, int64_t gen_tokens);
  /** Ends (kLength) every request whose deadline has passed. */
  void finish_past_deadline_locked();

  ModelRunner* runner_;
  ServiceConfig config_;
  int64_t context_limit_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work arrived / shutting down
  std::condition_variable idle_cv_;  // the scheduler became idle
  Scheduler sched_;
  std::unordered_map<uint64_t, Active> active_;
  std::unordered_set<uint64_t> cancels_;
  uint64_t next_id_ = 1;
  bool accepting_ = true;
  bool stop_ = false;
  PendingChange* pending_change_ = nullptr;  // a change() waiting for the loop (worker thread)
  std::condition_variable change_cv_;        // a pending change was applied

  // Statistics (under mu_).
  struct Sample {
    std::chrono::steady_clock::time_point t;
    int64_t prompt, gen;
  };
  std::deque<Sample> window_;
  std::chrono::steady_clock::time_point started_;
  double ttft_sum_s_ = 0;
  int64_t ttft_count_ = 0;
  EngineStats totals_;

  StepBatch batch_;                          // the step's sequences, from its plan (fill_step_batch)
  std::vector<SampleRow> rows_;              // this step's sampling rows, one a sequence
  std::vector<LogitEdit> edits_;             // their edits
  std::vector<uint32_t> masks_;              // the constrained rows' allowed-token masks
  std::span<const SampleResult> results_;    // the runner's, until its next forward
  std::vector<Sampled> sampled_;
  std::vector<Active*> planned_;             // the step's sequences' requests, in plan order
  std::vector<float> last_rows_;             // step_with_logits: each sequence's last logit row
  std::exception_ptr forward_error_;         // the last forward's exception (run_until_idle rethrows it)
  std::thread worker_;
};

}  // namespace ft
