#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <optional>

#include "engine/engine_runner.h"
#include "engine/service.h"
#include "kv/page_pool.h"
#include "util/error.h"

namespace ft {
namespace {

using Clock = std::chrono::steady_clock;

/** One request's tokens, logits and timing, as the service hands them over. */
class ResultSink : public TokenSink {
 public:
  ResultSink(const GenerateRequest& req, GenerateResult& out, int64_t n_vocab)
      : req_(req), out_(out), V_(static_cast<size_t>(n_vocab)) {}

  void on_logits(int64_t position, std::span<const float> logits) override {
    const auto n_prompt = static_cast<int64_t>(req_.prompt.size());
    // Each array takes its next position once (a preempted request recomputes some).
    if (req_.prompt_logits && position < n_prompt && position == static_cast<int64_t>(out_.prompt_logits.size() / V_))
      out_.prompt_logits.insert(out_.prompt_logits.end(), logits.begin(), logits.end());
    if (req_.step_logits && position == n_prompt - 1 + static_cast<int64_t>(out_.step_logits.size() / V_))
      out_.step_logits.insert(out_.step_logits.end(), logits.begin(), logits.end());
  }
  bool on_token(const SampledToken& token, bool /*eog*/) override {
    if (!first_token_) first_token_ = Clock::now();
    if (req_.max_tokens <= 0) return false;  // only the prompt was wanted: the service's first token is dropped
    out_.tokens.push_back(token.id);
    if (req_.on_token) req_.on_token(token.id);
    return true;
  }
  void on_finish(const FinishInfo& info) override { finish_ = info; }

  /** When its prompt was computed (its first token sampled); nullopt if it never was. */
  const std::optional<Clock::time_point>& first_token() const { return first_token_; }
  const std::optional<FinishInfo>& finish() const { return finish_; }

 private:
  const GenerateRequest& req_;
  GenerateResult& out_;
  size_t V_;
  std::optional<Clock::time_point> first_token_;
  std::optional<FinishInfo> finish_;
};

/** The checks generate() promises, before anything is queued. */
void check_requests(Engine& engine, const std::vector<GenerateRequest>& requests, const GenerateOptions& options) {
  const EngineOptions& eo = engine.options();
  const auto n = static_cast<int64_t>(requests.size());
  if (n > eo.max_seqs)
    fail(ErrorCode::kInvalidArgument, "generate: {} requests, the engine runs at most {} at once", n, eo.max_seqs);
  if (n > eo.max_step_tokens || n > eo.max_logit_rows)
    fail(ErrorCode::kInvalidArgument, "generate: {} requests, the engine's steps hold at most {} tokens and {} logit rows",
         n, eo.max_step_tokens, eo.max_logit_rows);
  if (options.max_prefill_tokens < 1) fail(ErrorCode::kInvalidArgument, "generate: max_prefill_tokens must be >= 1");
  // Every request's pages for prompt + max_tokens must be free at once (they run together).
  const PagePool& pool = *engine.kv().pools().full;
  int64_t free = pool.n_free();
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& r = requests[i];
    if (r.prompt.empty()) fail(ErrorCode::kInvalidArgument, "generate: request {} has an empty prompt", i);
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + std::max(r.max_tokens, 1);  // the service samples >= 1
    const int64_t pages = (total + pool.page_size() - 1) / pool.page_size();
    if (pages > free)
      fail(ErrorCode::kOutOfMemory, "generate: request {} needs KV for {} tokens ({} pages), {} of {} pages are free", i,
           total, pages, free, pool.n_pages());
    free -= pages;
  }
}

}  // namespace

std::vector<GenerateResult> generate(Engine& engine, const std::vector<GenerateRequest>& requests,
                                     const GenerateOptions& options, GenerateStats* stats) {
  EngineRunner runner(engine);
  return generate(engine, runner, requests, options, stats);
}

std::vector<GenerateResult> generate(Engine& engine, ModelRunner& runner, const std::vector<GenerateRequest>& requests,
                                     const GenerateOptions& options, GenerateStats* stats) {
  check_requests(engine, requests, options);
  std::vector<GenerateResult> results(requests.size());
  if (requests.empty()) return results;
  const EngineOptions& eo = engine.options();
  const auto n = static_cast<int32_t>(requests.size());
  ServiceConfig sc;
  sc.worker_thread = false;
  sc.scheduler.max_running = n;  // all together: admission never holds one back
  sc.scheduler.max_waiting = n;
  sc.scheduler.max_prefill_tokens = static_cast<int32_t>(
      std::min<int64_t>({options.max_prefill_tokens, eo.max_step_tokens, std::numeric_limits<int32_t>::max()}));
  sc.scheduler.max_step_tokens = eo.max_step_tokens;
  sc.scheduler.max_logit_rows = eo.max_logit_rows;
  sc.scheduler.max_seq_len = std::numeric_limits<int64_t>::max();  // the pool is the limit
  sc.scheduler.prefix_cache = false;  // every prompt position computed here (its logits, the references)
  sc.scheduler.reserve_at_admission = true;  // pages for prompt + max_tokens up front, as promised
  EngineService service(runner, engine.kv().pools(), sc);
  const int64_t V = engine.config().n_vocab;
  std::vector<std::shared_ptr<ResultSink>> sinks;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& r = requests[i];
    GenerationRequest g;
    g.prompt = r.prompt;
    g.max_tokens = std::max(r.max_tokens, 1);  // max_tokens 0: the prompt (its logits) only
    g.sampling = r.sampling;
    g.eog_ids = engine.config().eos_ids;
    g.ignore_eos = !r.stop_at_eos;
    g.prompt_logits = r.prompt_logits;
    g.step_logits = r.step_logits && r.max_tokens > 0;
    sinks.push_back(std::make_shared<ResultSink>(r, results[i], V));
    g.sink = sinks.back();
    service.submit(std::move(g));
  }
  const Clock::time_point t0 = Clock::now();
  service.run_until_idle();
  const Clock::time_point t2 = Clock::now();
  // Prefill ends when the last prompt was computed; decode is the rest.
  Clock::time_point t1 = t0;
  int64_t prompt_tokens = 0, decoded = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const ResultSink& s = *sinks[i];
    if (s.finish() && s.finish()->reason == FinishReason::kError)
      fail(ErrorCode::kInternal, "generate: request {}: {}", i, s.finish()->error);
    if (s.first_token()) t1 = std::max(t1, *s.first_token());
    prompt_tokens += static_cast<int64_t>(requests[i].prompt.size());
    decoded += std::max<int64_t>(0, static_cast<int64_t>(results[i].tokens.size()) - 1);
  }
  if (stats) {
    stats->prefill_tokens += prompt_tokens;
    stats->decode_tokens += decoded;
    stats->prefill_seconds += std::chrono::duration<double>(t1 - t0).count();
    stats->decode_seconds += std::chrono::duration<double>(t2 - t1).count();
  }
  return results;
}

}  // namespace ft
