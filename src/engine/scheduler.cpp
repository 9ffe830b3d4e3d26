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
  if (max_step_tokens < 0 || (max_step_tokens > 0 && max_step_tokens < max_running))
    fail(ErrorCode::kInvalidArgument, "max_step_tokens must be 0 (no limit) or >= max_running {} (got {})", max_running,
         max_step_tokens);
  if (max_logit_rows < 0 || (max_logit_rows > 0 && max_logit_rows < max_running))
    fail(ErrorCode::kInvalidArgument, "max_logit_rows must be 0 (no limit) or >= max_running {} (got {})", max_running,
         max_logit_rows);
}

Scheduler::Scheduler(const SchedulerConfig& config, KvPools pools, LowerTiers tiers)
    : config_(config), pools_(pools), pool_(pools.full), swa_pool_(pools.swa),
      cache_(std::make_unique<PrefixCache>(*pools.full, pools.swa, pools.states)), tiers_(tiers) {
  config_.validate();
  if (tiers_.io && tiers_.host) {
    cache_->set_evict_hook([this](const PrefixCache::Evicted& e) {
      tiers_.host->put(e.path_hash, e.path, tiers_.io->save(e.page, e.swa_page, e.state_slot));
    });
  }
  if (pools.states) {
    if (pools.states->n_pages() < config_.max_running)
      fail(ErrorCode::kInternal, "scheduler: {} recurrent-state slots for up to {} running sequences",
           pools.states->n_pages(), config_.max_running);
  }
  if (swa_pool_ && pools.window < 1)
    fail(ErrorCode::kInternal, "scheduler: a sliding-window pool needs a window >= 1 (got {})", pools.window);
}

std::vector<uint64_t> Scheduler::release_all_kv() {
  std::vector<uint64_t> moved;
  StepPlan unused;
  // Youngest first, each to the queue's front: the oldest ends up first, as admitted.
  while (!running_.empty()) {
    Sequence& s = *running_.back();
    moved.insert(moved.begin(), s.id);
    preempt(s, unused);
  }
  cache_->evict(cache_->n_pages());
  if (swa_pool_) cache_->evict_swa(cache_->n_swa_pages());
  if (pools_.states) cache_->evict_states(cache_->n_states());
  return moved;
}

void Scheduler::set_pools(KvPools pools) {
  if (!running_.empty() || cache_->n_pages() > 0 || pool_->n_free() != pool_->n_pages())
    fail(ErrorCode::kInternal, "scheduler: new KV pools while {} sequences run and the prefix cache holds {} pages",
         running_.size(), cache_->n_pages());
  if (!pools.full || (pools.swa && pools.window < 1))
    fail(ErrorCode::kInternal, "scheduler: new KV pools without a full pool, or a sliding-window pool without a window");
  if ((pools.swa != nullptr) != (swa_pool_ != nullptr) || (pools.states != nullptr) != (pools_.states != nullptr))
    fail(ErrorCode::kInternal, "scheduler: the new KV pools are of another kind (sliding-window or recurrent-state pools)");
  if (pools.states && pools.states->n_pages() < config_.max_running)
    fail(ErrorCode::kInternal, "scheduler: {} recurrent-state slots for up to {} running sequences",
         pools.states->n_pages(), config_.max_running);
  auto cache = std::make_unique<PrefixCache>(*pools.full, pools.swa, pools.states);
  pools_ = pools;
  pool_ = pools.full;
  swa_pool_ = pools.swa;
  cache_ = std::move(cache);
  if (tiers_.io && tiers_.host) {
    cache_->set_evict_hook([this](const PrefixCache::Evicted& e) {
      tiers_.host->put(e.path_hash, e.path, tiers_.io->save(e.page, e.swa_page, e.state_slot));
    });
  }
}

int64_t Scheduler::context_limit() const {
  return std::min<int64_t>(config_.max_seq_len, static_cast<int64_t>(pool_->n_pages()) * pool_->page_size());
}

void Scheduler::submit(uint64_t id, std::vector<int32_t> prompt, int32_t max_new_tokens, uint64_t after,
                       bool prompt_logits) {
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
  s->after = after;
  s->prompt_logits = prompt_logits;
  waiting_.push_back(s.get());
  read_ahead(*s);
  seqs_.emplace(id, std::move(s));
}

void Scheduler::read_ahead(const Sequence& s) {
  if (!config_.prefix_cache || !tiers_.io || !tiers_.disk) return;
  const int32_t ps = pool_->page_size();
  const int64_t max_tokens = static_cast<int64_t>(s.tokens.size()) - 1;  // as admit()'s lookup
  const PrefixCache::Peek on_device = cache_->peek(s.tokens, max_tokens);
  uint64_t hash = cache_->path_hash_of(on_device.node);
  std::vector<PageRef> pages;
  for (int64_t n = on_device.n_tokens; n + ps <= max_tokens; n += ps) {  // extend_from_tiers' walk
    const std::span<const int32_t> path(s.tokens.data(), static_cast<size_t>(n + ps));
    hash = chain_hash(hash, path.subspan(static_cast<size_t>(n)));
    if (tiers_.host && tiers_.host->contains(hash, path)) continue;
    if (!tiers_.disk->contains(hash, path)) break;
    pages.push_back({hash, path});
  }
  tiers_.disk->prefetch(pages);
}

bool Scheduler::alloc_pages(int32_t n, std::vector<int32_t>& out) {
  if (n <= 0) return true;
  if (pool_->n_free() < n) cache_->evict(n - pool_->n_free());
  return pool_->allocate(n, out);
}

bool Scheduler::alloc_swa_pages(int32_t n, std::vector<int32_t>& out) {
  if (n <= 0) return true;
  if (swa_pool_->n_free() < n) cache_->evict_swa(n - swa_pool_->n_free());
  return swa_pool_->allocate(n, out);
}

bool Scheduler::reserve(Sequence& s, int64_t n_positions) {
  const int64_t ps = pool_->page_size();
  const int64_t total = (n_positions + ps - 1) / ps;
  const int64_t want = total - static_cast<int64_t>(s.pages.size());
  const int64_t swa_want = swa_pool_ ? total - static_cast<int64_t>(s.swa_pages.size()) : 0;
  if (swa_want > 0 && swa_pool_->n_free() + cache_->n_swa_unreferenced() < swa_want) return false;
  const size_t had = s.pages.size();
  if (want > 0 && !alloc_pages(static_cast<int32_t>(want), s.pages)) return false;
  if (swa_want > 0 && !alloc_swa_pages(static_cast<int32_t>(swa_want), s.swa_pages)) {  // all or nothing
    pool_->release(std::vector<int32_t>(s.pages.begin() + static_cast<std::ptrdiff_t>(had), s.pages.end()));
    s.pages.resize(had);
    return false;
  }
  return true;
}

void Scheduler::release_pages(Sequence& s) {
  if (s.state_slot >= 0) pools_.states->release({s.state_slot});
  if (s.snapshot_slot >= 0) pools_.states->release({s.snapshot_slot});
  s.state_slot = s.snapshot_slot = s.restore_from = -1;
  if (swa_pool_) {
    // The window before the end of its cached pages is where the next turn's hit ends: kept longest.
    const auto end = static_cast<int64_t>(s.nodes.size());
    for (int64_t j = pools_.first_swa_page(end * pool_->page_size()); j < end; ++j)
      if (s.swa_pages[static_cast<size_t>(j)] < 0) cache_->keep_swa(s.nodes[static_cast<size_t>(j)]);
    std::vector<int32_t> priv;
    for (size_t j = 0; j < s.swa_pages.size(); ++j) {
      if (s.swa_pages[j] < 0) continue;
      if (j < s.nodes.size()) cache_->release_swa(s.nodes[j], PrefixCache::SwaRelease::kSequenceEnded);
      else priv.push_back(s.swa_pages[j]);
    }
    swa_pool_->release(priv);
    s.swa_pages.clear();
    s.n_swa_released = 0;
  }
  cache_->release(s.nodes);
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
    const int32_t swa = swa_pool_ ? s.swa_pages[j] : -1;  // -1: already below the window
    const PrefixCache::Inserted r = cache_->insert(parent, page_tokens, s.pages[j], swa);
    if (!r.adopted) {  // another sequence cached the same tokens first: share its page, free ours
      pool_->release({s.pages[j]});
      s.pages[j] = r.page;
    }
    if (swa >= 0 && !r.swa_adopted) {  // the node had a swa page already: read that one
      swa_pool_->release({swa});
      s.swa_pages[j] = r.swa_page;
    }
    s.nodes.push_back(r.node);
  }
}

void Scheduler::release_swa_below_window(Sequence& s) {
  if (!swa_pool_) return;
  const auto first = static_cast<int32_t>(
      std::min<int64_t>(pools_.first_swa_page(s.n_computed), static_cast<int64_t>(s.swa_pages.size())));
  std::vector<int32_t> priv;
  for (; s.n_swa_released < first; ++s.n_swa_released) {
    const auto j = static_cast<size_t>(s.n_swa_released);
    if (s.swa_pages[j] < 0) continue;
    if (j < s.nodes.size()) cache_->release_swa(s.nodes[j], PrefixCache::SwaRelease::kWindowMoved);
    else priv.push_back(s.swa_pages[j]);
    s.swa_pages[j] = -1;
  }
  swa_pool_->release(priv);
}

void Scheduler::shorten_to_cached_window(Sequence& s, std::vector<int32_t> node_swa_pages) {
  if (!swa_pool_) return;
  const int64_t ps = pool_->page_size();
  auto window_cached = [&](size_t k) {
    for (auto j = static_cast<size_t>(pools_.first_swa_page(static_cast<int64_t>(k) * ps)); j < k; ++j)
      if (node_swa_pages[j] < 0) return false;
    return true;
  };
  size_t k = s.nodes.size();
  while (k > 0 && !window_cached(k)) --k;
  cache_->release(std::span<const PrefixCache::NodeId>(s.nodes.data() + k, s.nodes.size() - k));
  s.nodes.resize(k);
  s.pages.resize(k);
  s.n_computed = static_cast<int32_t>(static_cast<int64_t>(k) * ps);
  const auto first = static_cast<size_t>(pools_.first_swa_page(s.n_computed));
  s.swa_pages.assign(k, -1);
  for (size_t j = first; j < k; ++j) {
    cache_->use_swa(s.nodes[j]);
    s.swa_pages[j] = node_swa_pages[j];
  }
  s.n_swa_released = static_cast<int32_t>(std::min(first, k));
}

void Scheduler::extend_from_tiers(Sequence& s, std::vector<int32_t>& swa_pages, int64_t max_tokens) {
  if (!tiers_.enabled()) return;
  const int32_t ps = pool_->page_size();
  std::vector<PrefixCache::NodeId> swa_held;  // restored nodes whose swa reference we hold meanwhile
  std::pair<PrefixCache::NodeId, std::shared_ptr<const PageContents>> deepest_state;  // restored with a snapshot
  while (static_cast<int64_t>(s.n_computed) + ps <= max_tokens) {
    const PrefixCache::NodeId parent = s.nodes.empty() ? PrefixCache::kRoot : s.nodes.back();
    const std::span<const int32_t> path(s.tokens.data(), static_cast<size_t>(s.n_computed + ps));
    const std::span<const int32_t> page_tokens = path.subspan(static_cast<size_t>(s.n_computed));
    const uint64_t hash = chain_hash(cache_->path_hash_of(parent), page_tokens);
    if (pool_->n_free() + cache_->n_unreferenced() < 1) break;  // no device page to restore into
    std::shared_ptr<const PageContents> c;
    int64_t* hit = nullptr;
    if (tiers_.host && (c = tiers_.host->get(hash, path))) hit = &hits_.host;
    else if (tiers_.disk && (c = tiers_.disk->get(hash, path))) hit = &hits_.disk;
    if (!c) break;
    std::vector<int32_t> page;  // evicting for it may spill other nodes to the host tier; ours are referenced
    if (!alloc_pages(1, page)) break;
    int32_t swa = -1;
    if (swa_pool_ && !c->swa.empty()) {
      std::vector<int32_t> sp;
      if (alloc_swa_pages(1, sp)) swa = sp[0];
    }
    tiers_.io->load(*c, page[0], swa, -1);
    const PrefixCache::Inserted r = cache_->insert(parent, page_tokens, page[0], swa);
    FT_CHECK(r.adopted && (swa < 0 || r.swa_adopted));  // the device had no such node: acquire stopped here
    if (swa >= 0) swa_held.push_back(r.node);
    if (pools_.states && !c->state.empty()) deepest_state = {r.node, c};
    s.nodes.push_back(r.node);
    s.pages.push_back(r.page);
    swa_pages.push_back(swa);
    s.n_computed += ps;
    ++*hit;
  }
  // Recurrent layers: only the snapshot where the hit ends is of use (shorten_to_state_snapshot), so
  // only the deepest restored one takes a slot, and only a free one (the sequence needs its own).
  if (deepest_state.second && pools_.states->n_free() > 1) {
    const int32_t slot = take_state_slot();
    tiers_.io->load(*deepest_state.second, -1, -1, slot);
    if (!cache_->attach_state(deepest_state.first, slot)) pools_.states->release({slot});
  }
  for (PrefixCache::NodeId n : swa_held) cache_->release_swa(n, PrefixCache::SwaRelease::kSequenceEnded);
  // Evictions for the restored pages may have taken swa pages of the device's nodes: read them again.
  if (swa_pool_)
    for (size_t j = 0; j < s.nodes.size(); ++j) swa_pages[j] = cache_->node_swa_page(s.nodes[j]);
}

void Scheduler::write_through(const Sequence& s, size_t from) {
  if (!tiers_.io || !tiers_.disk) return;
  for (size_t j = from; j < s.nodes.size(); ++j) {
    const PrefixCache::NodeId n = s.nodes[j];
    const std::span<const int32_t> path(s.tokens.data(), (j + 1) * static_cast<size_t>(pool_->page_size()));
    const uint64_t hash = cache_->path_hash_of(n);
    if (tiers_.disk->contains(hash, path)) continue;
    tiers_.disk->put(hash, path, tiers_.io->save(cache_->node_page(n), cache_->node_swa_page(n), cache_->node_state(n)));
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

int32_t Scheduler::positions_available(const Sequence& s) const {
  int64_t pages = static_cast<int64_t>(s.pages.size()) + pool_->n_free() + cache_->n_unreferenced();
  if (swa_pool_)
    pages = std::min<int64_t>(
        pages, static_cast<int64_t>(s.swa_pages.size()) + swa_pool_->n_free() + cache_->n_swa_unreferenced());
  return static_cast<int32_t>(std::min<int64_t>(pages * pool_->page_size(), INT32_MAX));
}

bool Scheduler::leader_ready(const Sequence& s) const {
  if (s.after == 0 || !config_.prefix_cache) return true;
  // The leader was queued first, so with s at the queue's front it is running or gone; only a leader
  // still prefilling is waited for (never one that waits itself: no cycle can hold the queue).
  const Sequence* leader = find(s.after);
  return leader == nullptr || leader->state != SeqState::kRunning || leader->n_computed >= leader->n_prompt;
}

bool Scheduler::admit(Sequence& s, int32_t& budget, int64_t& rows, StepPlan& plan) {
  const int32_t n_tokens = static_cast<int32_t>(s.tokens.size());
  if (config_.prefix_cache) {
    PrefixCache::Match m = cache_->acquire(s.tokens, n_tokens - 1);  // compute >= 1 token for the logits
    s.nodes = std::move(m.nodes);
    s.pages = std::move(m.pages);
    s.n_computed = static_cast<int32_t>(m.n_tokens);
    hits_.device += static_cast<int64_t>(s.nodes.size());
    extend_from_tiers(s, m.swa_pages, n_tokens - 1);
    shorten_to_cached_window(s, std::move(m.swa_pages));
    shorten_to_state_snapshot(s);
  }
  // Admit only when the whole known sequence fits next to the running ones, so admissions do not
  // thrash with preemptions.
  const int32_t ps = pool_->page_size();
  // With reserve_at_admission, the pages of its whole budget (the full pool's; sliding-window pages
  // still follow the window).
  const int64_t whole = config_.reserve_at_admission ? int64_t{s.n_prompt} + s.max_new_tokens : n_tokens;
  const auto need = static_cast<int32_t>((whole + ps - 1) / ps - static_cast<int64_t>(s.pages.size()));
  int32_t chunk = std::min({n_tokens - s.n_computed, budget, positions_available(s) - s.n_computed});
  if (s.prompt_logits && s.n_computed < s.n_prompt) chunk = static_cast<int32_t>(std::min<int64_t>(chunk, rows));
  chunk = cut_at_snapshot(s, chunk);
  const int32_t slot = chunk >= 1 && pools_.states ? take_state_slot() : -1;
  if (chunk < 1 || need > pool_->n_free() + cache_->n_unreferenced() || (pools_.states && slot < 0) ||
      !reserve(s, s.n_computed + chunk) ||
      (config_.reserve_at_admission &&
       !alloc_pages(static_cast<int32_t>((whole + ps - 1) / ps) - static_cast<int32_t>(s.pages.size()), s.pages))) {
    if (slot >= 0) pools_.states->release({slot});
    release_pages(s);
    s.n_computed = 0;
    return false;
  }
  s.state_slot = slot;
  if (!s.admitted_once) {
    s.n_cached = s.n_computed;
    s.admitted_once = true;
  }
  s.state = SeqState::kRunning;
  waiting_.pop_front();
  running_.push_back(&s);
  budget -= chunk;
  plan.seqs.push_back({&s, s.n_computed, chunk, s.n_computed + chunk == n_tokens});
  rows -= logit_rows(plan.seqs.back());
  plan.n_prefill_tokens += chunk;
  plan.n_tokens += chunk;
  return true;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  bool hold = config_.prefill_before_decode &&
              ((n_running() < config_.max_running && !waiting_.empty()) ||
               std::any_of(running_.begin(), running_.end(), [](const Sequence* s) {
                 return static_cast<int32_t>(s->tokens.size()) - s->n_computed > 1;
               }));
  for (;;) {
    // 1. Decodes: every running sequence with exactly one token to compute. Short of pages, preempt
    //    the youngest running sequence (possibly this one). prefill_before_decode: none while
    //    prompts are still to compute (`hold`).
    for (size_t i = 0; i < running_.size() && !hold; ++i) {
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
    // 2. Prefill chunks of running sequences, oldest first, under the step's budget (tokens and
    //    logit rows: what the decodes leave of the step's limits).
    int32_t budget = config_.max_prefill_tokens;
    if (config_.max_step_tokens > 0)
      budget = static_cast<int32_t>(std::min<int64_t>(budget, config_.max_step_tokens - plan.n_tokens));
    int64_t rows = config_.max_logit_rows > 0 ? config_.max_logit_rows - static_cast<int64_t>(plan.seqs.size())
                                              : INT64_MAX;
    for (Sequence* sp : running_) {
      if (budget <= 0 || rows <= 0) break;
      Sequence& s = *sp;
      const int32_t remaining = static_cast<int32_t>(s.tokens.size()) - s.n_computed;
      if (remaining <= 1) continue;
      int32_t chunk = std::min(remaining, budget);
      if (s.prompt_logits && s.n_computed < s.n_prompt) chunk = static_cast<int32_t>(std::min<int64_t>(chunk, rows));
      chunk = cut_at_snapshot(s, std::min(chunk, positions_available(s) - s.n_computed));
      if (chunk <= 0 || !reserve(s, s.n_computed + chunk)) continue;
      plan.seqs.push_back({sp, s.n_computed, chunk, s.n_computed + chunk == static_cast<int32_t>(s.tokens.size())});
      rows -= logit_rows(plan.seqs.back());
      plan.n_prefill_tokens += chunk;
      plan.n_tokens += chunk;
      budget -= chunk;
    }
    // 3. Admissions in FIFO order; the first that does not fit stops the rest (no overtaking).
    while (!waiting_.empty() && n_running() < config_.max_running && budget > 0 && rows > 0) {
      if (!leader_ready(*waiting_.front()) || !admit(*waiting_.front(), budget, rows, plan)) break;
    }
    if (!plan.empty() || running_.empty()) return finish_plan(plan);
    if (hold) {  // no prompt could take a step: the held decodes run
      hold = false;
      continue;
    }
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
    const size_t had = s.nodes.size();
    cache_full_pages(s);
    release_swa_below_window(s);
    if (s.snapshot_slot >= 0) {  // the step saved the state after position n_computed - 1 there
      const auto j = static_cast<size_t>(s.n_computed / pool_->page_size());
      FT_CHECK(s.n_computed % pool_->page_size() == 0 && j >= 1 && j <= s.nodes.size());
      if (!cache_->attach_state(s.nodes[j - 1], s.snapshot_slot)) pools_.states->release({s.snapshot_slot});
      s.snapshot_slot = -1;
    }
    write_through(s, had);
  }
}

int32_t Scheduler::snapshot_boundary(const Sequence& s) const {
  const int32_t ps = pool_->page_size();
  return (static_cast<int32_t>(s.tokens.size()) - 1) / ps * ps;
}

int32_t Scheduler::cut_at_snapshot(const Sequence& s, int32_t chunk) const {
  if (!pools_.states || !config_.prefix_cache) return chunk;
  const int32_t b = snapshot_boundary(s);
  return s.n_computed < b && s.n_computed + chunk > b ? b - s.n_computed : chunk;
}

void Scheduler::shorten_to_state_snapshot(Sequence& s) {
  if (!pools_.states) return;
  size_t k = s.nodes.size();
  while (k > 0 && cache_->node_state(s.nodes[k - 1]) < 0) --k;
  cache_->release(std::span<const PrefixCache::NodeId>(s.nodes.data() + k, s.nodes.size() - k));
  s.nodes.resize(k);
  s.pages.resize(k);
  s.n_computed = static_cast<int32_t>(k) * pool_->page_size();
  s.restore_from = k > 0 ? cache_->node_state(s.nodes[k - 1]) : -1;
}

int32_t Scheduler::take_state_slot() {
  std::vector<int32_t> slot;
  if (pools_.states->n_free() == 0) cache_->evict_states(1);
  return pools_.states->allocate(1, slot) ? slot[0] : -1;
}

StepPlan& Scheduler::finish_plan(StepPlan& plan) {
  if (!pools_.states) return plan;
  for (const ScheduledSeq& e : plan.seqs) {
    Sequence& s = *e.seq;
    if (s.restore_from >= 0) {
      plan.state_restores.push_back({s.restore_from, s.state_slot});
      s.restore_from = -1;
    }
    const int32_t b = snapshot_boundary(s);
    if (config_.prefix_cache && b > 0 && e.start + e.n_tokens == b && s.snapshot_slot < 0) {
      const int32_t snap = take_state_slot();
      if (snap < 0) continue;  // every slot is in use: no snapshot this time
      s.snapshot_slot = snap;
      plan.state_saves.push_back({s.state_slot, snap});
    }
  }
  return plan;
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
  return priv + cache_->n_pages() - cache_->n_unreferenced();
}

int32_t Scheduler::swa_pages_in_use() const {
  if (!swa_pool_) return 0;
  int32_t priv = 0;
  for (const Sequence* s : running_)
    for (size_t j = s->nodes.size(); j < s->swa_pages.size(); ++j) priv += s->swa_pages[j] >= 0;
  return priv + cache_->n_swa_pages() - cache_->n_swa_unreferenced();
}

void Scheduler::check_swa_integrity() const {
  auto bad = [](const std::string& what) { fail(ErrorCode::kInternal, "scheduler integrity: {}", what); };
  std::set<int32_t> priv;
  std::unordered_map<PrefixCache::NodeId, int32_t> refs;
  for (const auto& [id, sp] : seqs_) {
    const Sequence& s = *sp;
    if (!swa_pool_) {
      if (!s.swa_pages.empty()) bad(fmt::format("sequence {} holds sliding-window pages without their pool", id));
      continue;
    }
    // reserve_at_admission: the full pool's pages of the whole budget, the window's only as computed.
    if (config_.reserve_at_admission ? s.swa_pages.size() > s.pages.size() : s.swa_pages.size() != s.pages.size())
      bad(fmt::format("sequence {} has {} sliding-window entries for {} pages", id, s.swa_pages.size(), s.pages.size()));
    if (s.n_swa_released > pools_.first_swa_page(s.n_computed))
      bad(fmt::format("sequence {} released sliding-window pages its window still reads", id));
    for (size_t j = 0; j < s.swa_pages.size(); ++j) {
      const int32_t p = s.swa_pages[j];
      if ((p < 0) != (static_cast<int32_t>(j) < s.n_swa_released))
        bad(fmt::format("sequence {} sliding-window entry {} is {} (released below {})", id, j, p, s.n_swa_released));
      if (p < 0) continue;
      if (j < s.nodes.size()) {
        if (cache_->node_swa_page(s.nodes[j]) != p) bad(fmt::format("sequence {} swa page {} != its node's", id, j));
        ++refs[s.nodes[j]];
      } else if (!priv.insert(p).second) {
        bad(fmt::format("sliding-window page {} held privately twice", p));
      }
    }
  }
  if (!swa_pool_) return;
  for (const auto& [node, n] : refs)
    if (cache_->node_swa_ref(node) != n)
      bad(fmt::format("node {} has swa_ref {}, sequences hold {}", node, cache_->node_swa_ref(node), n));
  if (static_cast<int32_t>(refs.size()) != cache_->n_swa_pages() - cache_->n_swa_unreferenced())
    bad(fmt::format("{} swa pages referenced by sequences, the cache counts {}", refs.size(),
                    cache_->n_swa_pages() - cache_->n_swa_unreferenced()));
  const int64_t total = static_cast<int64_t>(priv.size()) + cache_->n_swa_pages() + swa_pool_->n_free();
  if (total != swa_pool_->n_pages())
    bad(fmt::format("{} private + {} cached + {} free sliding-window pages != {} in the pool", priv.size(),
                    cache_->n_swa_pages(), swa_pool_->n_free(), swa_pool_->n_pages()));
}

int32_t Scheduler::state_slots_in_use() const {
  return pools_.states ? pools_.states->n_pages() - pools_.states->n_free() - cache_->n_states() : 0;
}

void Scheduler::check_integrity() const {
  auto bad = [](const std::string& what) { fail(ErrorCode::kInternal, "scheduler integrity: {}", what); };
  cache_->check_integrity();
  if (tiers_.host) tiers_.host->check_integrity();
  if (tiers_.disk) tiers_.disk->check_integrity();
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
        if (cache_->node_page(s.nodes[j]) != s.pages[j]) bad(fmt::format("sequence {} page {} != its node's page", id, j));
        ++refs[s.nodes[j]];
      } else {
        if (cache_->holds_page(s.pages[j])) bad(fmt::format("sequence {} private page {} is in the cache", id, s.pages[j]));
        if (!private_pages.insert(s.pages[j]).second) bad(fmt::format("page {} held privately twice", s.pages[j]));
      }
    }
  }
  if (seqs_.size() != running_.size() + waiting_.size()) bad("sequence lists and storage disagree");
  if (pools_.states) {
    std::set<int32_t> slots;
    for (const Sequence* s : running_)
      if (s->state_slot < 0 || !slots.insert(s->state_slot).second)
        bad(fmt::format("running sequence {} has state slot {} (missing or shared)", s->id, s->state_slot));
    for (const Sequence* s : waiting_)
      if (s->state_slot >= 0) bad(fmt::format("waiting sequence {} holds state slot {}", s->id, s->state_slot));
    for (const Sequence* s : running_)
      if (s->snapshot_slot >= 0 && !slots.insert(s->snapshot_slot).second)
        bad(fmt::format("sequence {}'s pending snapshot slot {} is held twice", s->id, s->snapshot_slot));
    const int32_t held = static_cast<int32_t>(slots.size()) + cache_->n_states();
    if (held + pools_.states->n_free() != pools_.states->n_pages())
      bad(fmt::format("{} state slots held by sequences, {} by the prefix cache + {} free != {}", slots.size(),
                      cache_->n_states(), pools_.states->n_free(), pools_.states->n_pages()));
  }
  for (const auto& [node, n] : refs)
    if (cache_->node_ref(node) != n) bad(fmt::format("node {} has ref {}, sequences hold {}", node, cache_->node_ref(node), n));
  int32_t referenced = 0;
  for (const auto& kv : refs) referenced += kv.second > 0;
  if (referenced != cache_->n_pages() - cache_->n_unreferenced())
    bad(fmt::format("{} cache nodes referenced by sequences, cache counts {}", referenced,
                    cache_->n_pages() - cache_->n_unreferenced()));
  const int64_t total = static_cast<int64_t>(private_pages.size()) + cache_->n_pages() + pool_->n_free();
  if (total != pool_->n_pages())
    bad(fmt::format("{} private + {} cached + {} free pages != {} in the pool", private_pages.size(), cache_->n_pages(),
                    pool_->n_free(), pool_->n_pages()));
  check_swa_integrity();
}

}  // namespace ft
