#include "engine/service.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "util/error.h"
#include "util/log.h"

namespace ft {

using Clock = std::chrono::steady_clock;

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "error";
}

EngineService::EngineService(ModelRunner& runner, KvPools pools, const ServiceConfig& config)
    : runner_(&runner), config_(config), context_limit_(0), sched_(config.scheduler, pools, config.tiers), started_(Clock::now()) {
  context_limit_ = sched_.context_limit();
  if (config_.worker_thread) worker_ = std::thread([this] { loop(); });
}

EngineService::~EngineService() { shutdown(std::chrono::milliseconds(0)); }

uint64_t EngineService::submit(GenerationRequest request) {
  auto reject = [this](const Error& e) -> Error {
    std::lock_guard<std::mutex> lk(mu_);
    ++totals_.requests_rejected;
    return e;
  };
  if (!request.sink) throw reject(Error(ErrorCode::kInternal, "submit: a request needs a sink"));
  const int32_t vocab = runner_->vocab_size();
  for (size_t i = 0; i < request.prompt.size(); ++i) {
    if (request.prompt[i] < 0 || request.prompt[i] >= vocab)
      throw reject(Error(ErrorCode::kInvalidArgument,
                         fmt::format("prompt token {} at index {} is outside the vocabulary [0, {})",
                                     request.prompt[i], i, vocab)));
  }
  for (int32_t id : request.stop_ids)
    if (id < 0 || id >= vocab)
      throw reject(Error(ErrorCode::kInvalidArgument,
                         fmt::format("stop token {} is outside the vocabulary [0, {})", id, vocab)));
  for (size_t i = 0; i < request.feed_tokens.size(); ++i)
    if (request.feed_tokens[i] < 0 || request.feed_tokens[i] >= vocab)
      throw reject(Error(ErrorCode::kInvalidArgument,
                         fmt::format("fed token {} at index {} is outside the vocabulary [0, {})",
                                     request.feed_tokens[i], i, vocab)));
  if (!request.feed_tokens.empty() && request.constraint)
    throw reject(Error(ErrorCode::kInvalidArgument, "a request cannot both feed its tokens and be constrained"));
  Active a;
  try {
    std::vector<int32_t> masked = request.eog_ids;  // what min_tokens holds back
    masked.insert(masked.end(), request.stop_ids.begin(), request.stop_ids.end());
    a.sampler = std::make_unique<Sampler>(request.sampling, vocab, std::move(masked), request.prompt);
  } catch (const Error& e) {
    throw reject(e);
  }
  a.eog.insert(request.eog_ids.begin(), request.eog_ids.end());
  a.stop.insert(request.stop_ids.begin(), request.stop_ids.end());
  a.submitted = Clock::now();
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!accepting_) {
      ++totals_.requests_rejected;
      fail(ErrorCode::kOverloaded, "the server is shutting down");
    }
    id = next_id_++;
    try {
      sched_.submit(id, request.prompt, request.max_tokens, request.after, request.prompt_logits);
    } catch (const Error&) {
      ++totals_.requests_rejected;
      throw;
    }
    ++totals_.requests_total;
    totals_.prompt_tokens_total += static_cast<int64_t>(request.prompt.size());
    a.req = std::move(request);
    active_.emplace(id, std::move(a));
  }
  cv_.notify_all();
  return id;
}

bool EngineService::accepting() const {
  std::lock_guard<std::mutex> lk(mu_);
  return accepting_;
}

void EngineService::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!active_.count(id)) return;
    cancels_.insert(id);
  }
  cv_.notify_all();
}

void EngineService::shutdown(std::chrono::milliseconds grace) {
  {
    std::unique_lock<std::mutex> lk(mu_);
    accepting_ = false;
    idle_cv_.wait_for(lk, grace, [&] { return sched_.idle(); });
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) {
    worker_.join();
  } else {
    std::lock_guard<std::mutex> lk(mu_);
    cancel_all_locked();
  }
}

void EngineService::cancel_all_locked() {
  std::vector<uint64_t> ids;
  for (const auto& kv : active_) ids.push_back(kv.first);
  for (uint64_t id : ids) finish_locked(id, FinishReason::kCancelled);
}

void EngineService::run_until_idle() {
  if (worker_.joinable()) fail(ErrorCode::kInternal, "run_until_idle: the service runs its own worker thread");
  forward_error_ = nullptr;
  std::exception_ptr error;
  for (;;) {
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (sched_.idle() && cancels_.empty()) break;
    }
    const bool ran = run_once();
    if (forward_error_ && !error) error = forward_error_;
    if (!ran) {
      std::lock_guard<std::mutex> lk(mu_);
      if (!sched_.idle()) {  // a lone sequence always fits: this is a bug, not a wait
        cancel_all_locked();
        fail(ErrorCode::kInternal, "run_until_idle: the scheduler planned nothing for the requests left");
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

bool EngineService::run_step() {
  if (worker_.joinable()) fail(ErrorCode::kInternal, "run_step: the service runs its own worker thread");
  forward_error_ = nullptr;
  const bool ran = run_once();
  if (forward_error_) std::rethrow_exception(std::exchange(forward_error_, nullptr));
  return ran;
}

void EngineService::finish_locked(uint64_t id, FinishReason reason, const std::string& error) {
  auto it = active_.find(id);
  if (it == active_.end()) return;
  FinishInfo info;
  info.reason = reason;
  info.error = error;
  info.prompt_tokens = static_cast<int32_t>(it->second.req.prompt.size());
  info.completion_tokens = it->second.generated;
  if (const Sequence* s = sched_.find(id); s && s->admitted_once) info.cached_tokens = s->n_cached;
  sched_.finish(id);
  ++totals_.requests_finished;
  if (reason == FinishReason::kCancelled) ++totals_.requests_cancelled;
  totals_.cached_tokens_total += info.cached_tokens;
  std::shared_ptr<TokenSink> sink = it->second.req.sink;
  active_.erase(it);
  cancels_.erase(id);
  sink->on_finish(info);
}

void EngineService::finish_past_deadline_locked() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<uint64_t> late;
  for (const auto& [id, a] : active_)
    if (now >= a.req.deadline) late.push_back(id);
  for (uint64_t id : late) finish_locked(id, FinishReason::kLength);
}

void EngineService::record_rates_locked(int64_t prompt_tokens, int64_t gen_tokens) {
  const auto now = Clock::now();
  window_.push_back({now, prompt_tokens, gen_tokens});
  const auto horizon = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.stats_window_s));
  while (!window_.empty() && window_.front().t < horizon) window_.pop_front();
  totals_.prompt_tokens_computed_total += prompt_tokens;
  totals_.generation_tokens_total += gen_tokens;
  ++totals_.steps_total;
}

void EngineService::change(const ServiceChange& c) {
  std::unique_lock<std::mutex> lk(mu_);
  if (!accepting_ || stop_) fail(ErrorCode::kOverloaded, "the server is shutting down");
  if (!worker_.joinable()) {
    apply_change_locked(c);
    return;
  }
  // One change at a time: a second caller waits for the first to be applied.
  change_cv_.wait(lk, [&] { return pending_change_ == nullptr; });
  PendingChange pending;
  pending.change = &c;
  pending_change_ = &pending;
  cv_.notify_all();
  change_cv_.wait(lk, [&] { return pending.done; });
  if (pending.error) std::rethrow_exception(pending.error);
}

bool EngineService::run_pending_change_locked() {
  if (!pending_change_) return false;
  PendingChange& p = *pending_change_;
  try {
    apply_change_locked(*p.change);
  } catch (...) {
    p.error = std::current_exception();
  }
  p.done = true;
  pending_change_ = nullptr;
  change_cv_.notify_all();
  return true;
}

void EngineService::apply_change_locked(const ServiceChange& c) {
  int64_t longest = 0;
  for (const auto& [id, a] : active_)
    longest = std::max<int64_t>(longest, static_cast<int64_t>(a.req.prompt.size()) + a.req.max_tokens);
  if (c.check) c.check(longest);
  if (c.pools) {
    const std::vector<uint64_t> moved = sched_.release_all_kv();
    if (!moved.empty()) spdlog::info("{} running requests go back to the queue and recompute their KV", moved.size());
  }
  std::exception_ptr error;
  try {
    if (c.apply) c.apply();
  } catch (...) {
    error = std::current_exception();
  }
  if (c.pools) {
    sched_.set_pools(c.pools());
    context_limit_ = sched_.context_limit();
  }
  if (config_.check_integrity) sched_.check_integrity();
  if (error) std::rethrow_exception(error);
}

void EngineService::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !sched_.idle() || !cancels_.empty() || pending_change_; });
      if (stop_) {
        if (pending_change_) {
          pending_change_->error = std::make_exception_ptr(
              Error(ErrorCode::kOverloaded, "the server is shutting down: the change was not applied"));
          pending_change_->done = true;
          pending_change_ = nullptr;
          change_cv_.notify_all();
        }
        for (uint64_t id : std::vector<uint64_t>(cancels_.begin(), cancels_.end())) finish_locked(id, FinishReason::kCancelled);
        cancels_.clear();
        cancel_all_locked();
        idle_cv_.notify_all();
        return;
      }
    }
    if (!run_once()) {  // nothing fits right now (should not happen: a lone sequence always fits)
      std::unique_lock<std::mutex> lk(mu_);
      if (!sched_.idle()) cv_.wait_for(lk, std::chrono::milliseconds(5));
    }
  }
}

bool EngineService::run_once() {
  std::vector<Active*>& planned = planned_;
  StepPlan plan;
  {
    std::unique_lock<std::mutex> lk(mu_);
    for (uint64_t id : std::vector<uint64_t>(cancels_.begin(), cancels_.end())) finish_locked(id, FinishReason::kCancelled);
    cancels_.clear();
    finish_past_deadline_locked();
    if (run_pending_change_locked()) return true;
    if (sched_.idle()) {
      idle_cv_.notify_all();
      return false;
    }
    plan = sched_.schedule();
    if (plan.empty()) return false;
    fill_step_batch(plan, batch_);  // reads the sequences in place: only this thread appends to them
    planned.clear();
    for (const ScheduledSeq& e : plan.seqs) planned.push_back(&active_.at(e.seq->id));
  }
  // The sinks run without the lock; only this thread erases from active_.
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    Active& a = *planned[i];
    if (a.admitted) continue;
    a.admitted = true;
    a.req.sink->on_admitted(plan.seqs[i].seq->n_cached);
  }
  step(plan, planned);
  std::string error;
  if (results_.size() < plan.seqs.size()) error = "internal error: the model returned too few samples";
  if (error.empty()) {  // before the sinks see the tokens: the pages below a sliding window are gone
    std::lock_guard<std::mutex> lk(mu_);
    sched_.complete(plan);
  }
  sampled_.clear();
  int64_t gen = 0;
  if (error.empty()) {
    for (size_t i = 0; i < plan.seqs.size(); ++i) {
      if (!plan.seqs[i].sample) continue;
      Active& a = *planned[i];
      if (a.constraint_failed) {
        sampled_.push_back(Sampled{plan.seqs[i].seq->id, 0, true, FinishReason::kError});
        continue;
      }
      if (!std::isfinite(results_[i].logprob)) {
        // No finite logit to sample from (a diverged sequence, or logit_bias removing every token):
        // this request ends with an error; the others of the step go on.
        sampled_.push_back(Sampled{plan.seqs[i].seq->id, 0, true, FinishReason::kError});
        continue;
      }
      const SampledToken tok = a.sampler->take(results_[i]);
      ++a.generated;
      ++gen;
      if (!a.first_token) {
        a.first_token = true;
        const double ttft = std::chrono::duration<double>(Clock::now() - a.submitted).count();
        std::lock_guard<std::mutex> lk(mu_);
        ttft_sum_s_ += ttft;
        ++ttft_count_;
      }
      const bool eog = (!a.req.ignore_eos && a.eog.count(tok.id) > 0) || a.stop.count(tok.id) > 0;
      // The constraint advances over every token but the end-of-generation one it allowed.
      if (a.req.constraint && !eog) {
        a.mask_ready = false;
        if (!a.req.constraint->accept(tok.id)) a.constraint_failed = true;
      }
      const bool go_on = a.req.sink->on_token(tok, eog);
      Sampled s{plan.seqs[i].seq->id, tok.id, false, FinishReason::kStop};
      if (static_cast<size_t>(a.generated) <= a.req.feed_tokens.size())  // teacher forcing
        s.token = a.req.feed_tokens[static_cast<size_t>(a.generated) - 1];
      if (eog || !go_on) {
        s.finish = true;
      } else if (a.generated >= a.req.max_tokens) {
        s.finish = true;
        s.reason = FinishReason::kLength;
      } else if (a.constraint_failed) {
        s.finish = true;
        s.reason = FinishReason::kError;
      } else if (a.req.constraint && constrain(a) == 0) {
        // Nothing may follow: a complete value ends the request, an incomplete one is an error.
        s.finish = true;
        s.reason = a.constraint_failed ? FinishReason::kError : FinishReason::kStop;
      }
      sampled_.push_back(s);
    }
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (!error.empty()) {
      for (const ScheduledSeq& e : plan.seqs) finish_locked(e.seq->id, FinishReason::kError, error);
    } else {
      for (const Sampled& s : sampled_) {
        if (s.reason == FinishReason::kError) {
          const auto it = active_.find(s.id);
          finish_locked(s.id, s.reason,
                        it != active_.end() && it->second.constraint_failed
                            ? "constrained decoding reached a state where the vocabulary has no allowed token "
                              "(the grammar cannot be continued with this model's tokens)"
                            : "the model's logits for this sequence had no finite value to sample (its activations "
                              "diverged, or logit_bias removed every token)");
        } else if (s.finish) {
          finish_locked(s.id, s.reason);
        } else {
          sched_.append(s.id, s.token);
        }
      }
      record_rates_locked(plan.n_prefill_tokens, gen);
    }
    if (config_.check_integrity) sched_.check_integrity();
    if (sched_.idle()) idle_cv_.notify_all();
  }
  return true;
}

int64_t EngineService::constrain(Active& a) {
  const int32_t vocab = runner_->vocab_size();
  a.mask.assign(static_cast<size_t>(sample_mask_words(vocab)), 0u);
  a.mask_ready = true;
  int64_t n = 0;
  try {
    n = a.req.constraint->allowed(a.mask, std::max(1, a.req.max_tokens - a.generated));
    if (a.req.constraint->complete()) {
      const auto allow = [&](int32_t id) {
        if (id < 0 || id >= vocab || sample_mask_allows(a.mask.data(), id)) return;
        a.mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31);
        ++n;
      };
      if (!a.req.ignore_eos)
        for (int32_t id : a.eog) allow(id);
      for (int32_t id : a.stop) allow(id);
    }
  } catch (const std::exception& e) {
    spdlog::error("a request's constraint failed: {}", e.what());
    a.constraint_failed = true;
    return 0;
  }
  // Incomplete with nothing allowed: a dead end (complete with nothing allowed ends the request well).
  if (n == 0 && !a.req.constraint->complete()) a.constraint_failed = true;
  return n;
}

void EngineService::step(StepPlan& plan, const std::vector<Active*>& planned) {
  rows_.assign(plan.seqs.size(), SampleRow{});
  edits_.clear();
  masks_.clear();
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    Active& a = *planned[i];
    if (!plan.seqs[i].sample) {
      rows_[i].skip = 1;
      continue;
    }
    a.sampler->prepare(rows_[i], edits_);
    if (!a.req.constraint) continue;
    // The first token's mask (later ones are computed as each token is accepted).
    if (!a.mask_ready && constrain(a) == 0) a.constraint_failed = true;
    if (a.constraint_failed) {
      rows_[i].skip = 1;
      continue;
    }
    rows_[i].mask_index = static_cast<int32_t>(masks_.size() / a.mask.size());
    masks_.insert(masks_.end(), a.mask.begin(), a.mask.end());
  }
  forward_error_ = nullptr;
  try {
    if (wants_logits(plan, planned)) step_with_logits(plan, planned);
    else results_ = runner_->forward_sample(batch_, rows_, edits_, masks_);
  } catch (const std::exception& e) {
    spdlog::error("forward failed for a batch of {} sequences: {}", plan.seqs.size(), e.what());
    forward_error_ = std::current_exception();
    results_ = {};
  }
}

bool EngineService::wants_logits(const StepPlan& plan, const std::vector<Active*>& planned) const {
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const GenerationRequest& r = planned[i]->req;
    if ((r.prompt_logits && plan.seqs[i].start < plan.seqs[i].seq->n_prompt) || (r.step_logits && plan.seqs[i].sample))
      return true;
  }
  return false;
}

void EngineService::step_with_logits(StepPlan& plan, const std::vector<Active*>& planned) {
  const auto V = static_cast<size_t>(runner_->vocab_size());
  const std::span<const float> logits = runner_->forward(batch_);
  last_rows_.resize(plan.seqs.size() * V);
  size_t row = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& e = plan.seqs[i];
    const GenerationRequest& r = planned[i]->req;
    const auto n = static_cast<size_t>(batch_.items[i].n_logits);
    const int64_t first = e.start + e.n_tokens - static_cast<int64_t>(n);  // position of the first row
    FT_CHECK((row + n) * V <= logits.size());
    for (size_t k = 0; k < n; ++k) {
      const int64_t pos = first + static_cast<int64_t>(k);
      const bool sampled_row = k + 1 == n && e.sample;
      if ((r.prompt_logits && pos < e.seq->n_prompt) || (r.step_logits && sampled_row))
        r.sink->on_logits(pos, logits.subspan((row + k) * V, V));
    }
    std::copy_n(logits.begin() + static_cast<std::ptrdiff_t>((row + n - 1) * V), V,
                last_rows_.begin() + static_cast<std::ptrdiff_t>(i * V));
    row += n;
  }
  results_ = runner_->sample_on_host(last_rows_, rows_, edits_, masks_);
}

EngineStats EngineService::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  EngineStats s = totals_;
  const auto now = Clock::now();
  s.uptime_s = std::chrono::duration<double>(now - started_).count();
  s.running = sched_.n_running();
  s.waiting = sched_.n_waiting();
  s.context_limit = context_limit_;
  s.page_size = sched_.pool().page_size();
  s.kv_pages_total = sched_.pool().n_pages();
  s.kv_pages_free = sched_.pool().n_free();
  s.kv_pages_used = sched_.pages_in_use();
  s.kv_pages_cached = sched_.pages_cached();
  s.kv_swa_pages_total = sched_.pools().swa ? sched_.pools().swa->n_pages() : 0;
  s.kv_swa_pages_used = sched_.swa_pages_in_use();
  s.state_slots_total = sched_.pools().states ? sched_.pools().states->n_pages() : 0;
  s.state_slots_used = sched_.state_slots_in_use();
  s.state_snapshots = sched_.state_snapshots();
  const Scheduler::TierHits hits = sched_.tier_hits();
  s.kv_hit_pages_device = hits.device;
  s.kv_hit_pages_host = hits.host;
  s.kv_hit_pages_disk = hits.disk;
  s.kv_host_tier = sched_.tiers().host != nullptr;
  s.kv_disk_tier = sched_.tiers().disk != nullptr;
  if (s.kv_host_tier) s.kv_host = sched_.tiers().host->stats();
  if (s.kv_disk_tier) s.kv_disk = sched_.tiers().disk->stats();
  s.window_s = config_.stats_window_s;
  const double span = std::max(1e-3, std::min(config_.stats_window_s, s.uptime_s));
  const auto horizon = now - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.stats_window_s));
  int64_t p = 0, g = 0;
  for (const Sample& w : window_) {
    if (w.t < horizon) continue;
    p += w.prompt;
    g += w.gen;
  }
  s.prompt_tokens_per_s = static_cast<double>(p) / span;
  s.generation_tokens_per_s = static_cast<double>(g) / span;
  s.mean_ttft_s = ttft_count_ ? ttft_sum_s_ / static_cast<double>(ttft_count_) : 0.0;
  return s;
}

}  // namespace ft
