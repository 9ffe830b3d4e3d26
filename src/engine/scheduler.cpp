#include "engine/scheduler.h"

#include <algorithm>
#include <set>
#include <string>
#include <unordered_map>

#include "util/error.h"

namespace ft {

void SchedulerConfig::validate() const {
  if (max_running < 1) fail(ErrorCode::kInvalidArgument, "max_running_requests must be >= 1 (got {})", max_running);
  if (max_prefill_tokens < 1)
    fail(ErrorCode::kInvalidArgument, "max_prefill_tokens must be >= 1 (got {})", max_prefill_tokens);
  if (max_waiting < 0) fail(ErrorCode::kInvalidArgument, "max_waiting must be >= 0 (got {})", max_waiting);
  if (max_seq_len < 2) fail(ErrorCode::kInvalidArgument, "max_seq_len must be >= 2 (got {})", max_seq_len);
}

Scheduler::Scheduler(const SchedulerConfig& config, PagePool& pool) : config_(config), pool_(&pool), cache_(pool) {
  config_.validate();
}

int64_t Scheduler::context_limit() const {
  return std::min<int64_t>(config_.max_seq_len, static_cast<int64_t>(pool_->n_pages()) * pool_->page_size());
}

void Scheduler::submit(uint64_t id, std::vector<int32_t> prompt, int32_t max_new_tokens) {
  if (prompt.empty()) fail(ErrorCode::kInvalidArgument, "the prompt is empty (it must hold at least one token)");
  if (max_new_tokens < 1) fail(ErrorCode::kInvalidArgument, "max_tokens must be >= 1 (got {})", max_new_tokens);
  if (seqs_.count(id)) fail(ErrorCode::kInvalidArgument, "request id {} is already queued", id);
  const int64_t limit = context_limit();
  const int64_t want = static_cast<int64_t>(prompt.size()) + max_new_tokens;
  if (want > limit)
    fail(ErrorCode::kContextLength,
         "This model's maximum context length is {} tokens. However, you requested {} tokens ({} in the prompt, "
         "{} for the completion). Please reduce the length of the prompt or max_tokens.",
         limit, want, prompt.size(), max_new_tokens);
  const int32_t free_slots = std::max(0, config_.max_running - n_running());
  if (n_waiting() >= config_.max_waiting + free_slots)
    fail(ErrorCode::kOverloaded, "the server is overloaded: {} requests running and {} waiting (limit {}); retry later",
         n_running(), n_waiting(), config_.max_waiting);
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->n_prompt = static_cast<int32_t>(prompt.size());
  s->tokens = std::move(prompt);
  s->max_new_tokens = max_new_tokens;
  waiting_.push_back(s.get());
  seqs_.emplace(id, std::move(s));
}

bool Scheduler::alloc_pages(int32_t n, std::vector<int32_t>& out) {
  if (n <= 0) return true;
  if (pool_->n_free() < n) cache_.evict(n - pool_->n_free());
  return pool_->allocate(n, out);
}

bool Scheduler::reserve(Sequence& s, int64_t n_positions) {
  const int64_t ps = pool_->page_size();
  const int64_t want = (n_positions + ps - 1) / ps - static_cast<int64_t>(s.pages.size());
  return want <= 0 || alloc_pages(static_cast<int32_t>(want), s.pages);
}

void Scheduler::release_pages(Sequence& s) {
  cache_.release(s.nodes);
  std::vector<int32_t> priv(s.pages.begin() + static_cast<std::ptrdiff_t>(s.nodes.size()), s.pages.end());
  pool_->release(priv);
  s.pages.clear();
  s.nodes.clear();
}

void Scheduler::cache_full_pages(Sequence& s) {
  if (!config_.prefix_cache) return;
  const int32_t ps = pool_->page_size();
  const size_t full = static_cast<size_t>(s.n_computed / ps);
  while (s.nodes.size() < full) {
    const size_t j = s.nodes.size();
    const PrefixCache::NodeId parent = j == 0 ? PrefixCache::kRoot : s.nodes[j - 1];
    std::span<const int32_t> page_tokens(s.tokens.data() + j * static_cast<size_t>(ps), static_cast<size_t>(ps));
    const PrefixCache::Inserted r = cache_.insert(parent, page_tokens, s.pages[j]);
    if (!r.adopted) {  // another sequence cached the same tokens first: share its page, free ours
      pool_->release({s.pages[j]});
      s.pages[j] = r.page;
    }
    s.nodes.push_back(r.node);
  }
}

void Scheduler::preempt(Sequence& s, StepPlan& plan) {
  release_pages(s);
  s.n_computed = 0;
  s.state = SeqState::kWaiting;
  ++s.n_preempted;
  running_.erase(std::find(running_.begin(), running_.end(), &s));
  waiting_.push_front(&s);
  plan.preempted.push_back(s.id);
}

namespace {

int32_t positions_available(const Sequence& s, const PagePool& pool, int32_t evictable) {
  const int64_t pages = static_cast<int64_t>(s.pages.size()) + pool.n_free() + evictable;
  return static_cast<int32_t>(std::min<int64_t>(pages * pool.page_size(), INT32_MAX));
}

}  // namespace

bool Scheduler::admit(Sequence& s, int32_t& budget, StepPlan& plan) {
  const int32_t n_tokens = static_cast<int32_t>(s.tokens.size());
  if (config_.prefix_cache) {
    PrefixCache::Match m = cache_.acquire(s.tokens, n_tokens - 1);  // compute >= 1 token for the logits
    s.nodes = std::move(m.nodes);
    s.pages = std::move(m.pages);
    s.n_computed = static_cast<int32_t>(m.n_tokens);
  }
  // Admit only when the whole known sequence fits next to the running ones, so admissions do not
  // thrash with preemptions.
  const int32_t ps = pool_->page_size();
  const int32_t need = (n_tokens + ps - 1) / ps - static_cast<int32_t>(s.pages.size());
  const int32_t chunk = std::min(n_tokens - s.n_computed, budget);
  if (need > pool_->n_free() + cache_.n_unreferenced() || !reserve(s, s.n_computed + chunk)) {
    release_pages(s);
    s.n_computed = 0;
    return false;
  }
  if (!s.admitted_once) {
    s.n_cached = s.n_computed;
    s.admitted_once = true;
  }
  s.state = SeqState::kRunning;
  waiting_.pop_front();
  running_.push_back(&s);
  budget -= chunk;
  plan.seqs.push_back({&s, s.n_computed, chunk, s.n_computed + chunk == n_tokens});
  plan.n_prefill_tokens += chunk;
  plan.n_tokens += chunk;
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  for (;;) {
    // 1. Decodes: every running sequence with exactly one token to compute. Short of pages, preempt
    //    the youngest running sequence (possibly this one).
    for (size_t i = 0; i < running_.size(); ++i) {
      Sequence& s = *running_[i];
      const int32_t remaining = static_cast<int32_t>(s.tokens.size()) - s.n_computed;
      if (remaining != 1) continue;
      bool ok = true;
      while (!reserve(s, s.n_computed + 1)) {
        Sequence* victim = running_.back();
        preempt(*victim, plan);
        if (victim == &s) {
          ok = false;
          break;
        }
      }
      if (!ok) break;  // s was the youngest: nothing after it is running
      plan.seqs.push_back({&s, s.n_computed, 1, true});
      ++plan.n_decode;
      ++plan.n_tokens;
    }
    // 2. Prefill chunks of running sequences, oldest first, under the step's budget.
    int32_t budget = config_.max_prefill_tokens;
    for (Sequence* sp : running_) {
      if (budget <= 0) break;
      Sequence& s = *sp;
      const int32_t remaining = static_cast<int32_t>(s.tokens.size()) - s.n_computed;
      if (remaining <= 1) continue;
      int32_t chunk = std::min(remaining, budget);
      chunk = std::min(chunk, positions_available(s, *pool_, cache_.n_unreferenced()) - s.n_computed);
      if (chunk <= 0 || !reserve(s, s.n_computed + chunk)) continue;
      plan.seqs.push_back({sp, s.n_computed, chunk, s.n_computed + chunk == static_cast<int32_t>(s.tokens.size())});
      plan.n_prefill_tokens += chunk;
      plan.n_tokens += chunk;
      budget -= chunk;
    }
    // 3. Admissions in FIFO order; the first that does not fit stops the rest (no overtaking).
    while (!waiting_.empty() && n_running() < config_.max_running && budget > 0) {
      if (!admit(*waiting_.front(), budget, plan)) break;
    }
    if (!plan.empty() || running_.empty()) return plan;
    // Every running sequence is stuck mid-prefill with the pool full: give the youngest's pages to
    // the others and plan again (a single sequence always fits: submit() checks it).
    preempt(*running_.back(), plan);
  }
}

void Scheduler::complete(const StepPlan& plan) {
  for (const ScheduledSeq& e : plan.seqs) {
    Sequence& s = *e.seq;
    FT_CHECK(s.state == SeqState::kRunning && e.start == s.n_computed);
    s.n_computed += e.n_tokens;
    cache_full_pages(s);
  }
}

void Scheduler::append(uint64_t id, int32_t token) {
  auto it = seqs_.find(id);
  FT_CHECK(it != seqs_.end() && it->second->state == SeqState::kRunning);
  FT_CHECK(it->second->n_computed == static_cast<int32_t>(it->second->tokens.size()));
  it->second->tokens.push_back(token);
}

bool Scheduler::finish(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return false;
  Sequence* s = it->second.get();
  if (s->state == SeqState::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), s));
  } else if (s->state == SeqState::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), s));
  }
  release_pages(*s);
  s->state = SeqState::kFinished;
  seqs_.erase(it);
  return true;
}

const Sequence* Scheduler::find(uint64_t id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? nullptr : it->second.get();
}

int32_t Scheduler::pages_in_use() const {
  int32_t priv = 0;
  for (const Sequence* s : running_) priv += static_cast<int32_t>(s->pages.size() - s->nodes.size());
  return priv + cache_.n_pages() - cache_.n_unreferenced();
}

void Scheduler::check_integrity() const {
  auto bad = [](const std::string& what) { fail(ErrorCode::kInternal, "scheduler integrity: {}", what); };
  cache_.check_integrity();
  const int32_t ps = pool_->page_size();
  std::set<int32_t> private_pages;
  std::unordered_map<PrefixCache::NodeId, int32_t> refs;
  if (static_cast<int32_t>(running_.size()) > config_.max_running) bad("more running sequences than max_running");
  for (const auto& [id, sp] : seqs_) {
    const Sequence& s = *sp;
    if (s.id != id) bad(fmt::format("sequence {} stored under id {}", s.id, id));
    const bool running = std::find(running_.begin(), running_.end(), &s) != running_.end();
    const bool waiting = std::find(waiting_.begin(), waiting_.end(), &s) != waiting_.end();
    if (running == waiting || (running != (s.state == SeqState::kRunning)))
      bad(fmt::format("sequence {} is in {} lists (state {})", id, int(running) + int(waiting), int(s.state)));
    if (waiting && (!s.pages.empty() || !s.nodes.empty() || s.n_computed != 0))
      bad(fmt::format("waiting sequence {} holds pages or computed tokens", id));
    if (s.nodes.size() > s.pages.size()) bad(fmt::format("sequence {} has more nodes than pages", id));
    if (s.n_computed > static_cast<int32_t>(s.tokens.size()))
      bad(fmt::format("sequence {} computed {} of {} tokens", id, s.n_computed, s.tokens.size()));
    if (static_cast<int64_t>(s.pages.size()) * ps < s.n_computed)
      bad(fmt::format("sequence {}: {} pages cannot hold {} computed tokens", id, s.pages.size(), s.n_computed));
    if (static_cast<int64_t>(s.nodes.size()) * ps > s.n_computed)
      bad(fmt::format("sequence {} shares pages beyond its computed tokens", id));
    for (size_t j = 0; j < s.pages.size(); ++j) {
      if (j < s.nodes.size()) {
        if (cache_.node_page(s.nodes[j]) != s.pages[j]) bad(fmt::format("sequence {} page {} != its node's page", id, j));
        ++refs[s.nodes[j]];
      } else {
        if (cache_.holds_page(s.pages[j])) bad(fmt::format("sequence {} private page {} is in the cache", id, s.pages[j]));
        if (!private_pages.insert(s.pages[j]).second) bad(fmt::format("page {} held privately twice", s.pages[j]));
      }
    }
  }
  if (seqs_.size() != running_.size() + waiting_.size()) bad("sequence lists and storage disagree");
  for (const auto& [node, n] : refs)
    if (cache_.node_ref(node) != n) bad(fmt::format("node {} has ref {}, sequences hold {}", node, cache_.node_ref(node), n));
  int32_t referenced = 0;
  for (const auto& kv : refs) referenced += kv.second > 0;
  if (referenced != cache_.n_pages() - cache_.n_unreferenced())
    bad(fmt::format("{} cache nodes referenced by sequences, cache counts {}", referenced,
                    cache_.n_pages() - cache_.n_unreferenced()));
  const int64_t total = static_cast<int64_t>(private_pages.size()) + cache_.n_pages() + pool_->n_free();
  if (total != pool_->n_pages())
    bad(fmt::format("{} private + {} cached + {} free pages != {} in the pool", private_pages.size(), cache_.n_pages(),
                    pool_->n_free(), pool_->n_pages()));
}

}  // namespace ft
