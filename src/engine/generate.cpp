#include "engine/generate.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "kv/page_pool.h"
#include "util/error.h"

namespace ft {
namespace {

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

struct Active {
  const GenerateRequest* req;
  GenerateResult* out;
  std::unique_ptr<Sampler> sampler;
  BlockTable table;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t n_done = 0;           // tokens whose KV is cached
  bool finished = false;
};

}  // namespace

std::vector<GenerateResult> generate(Engine& engine, const std::vector<GenerateRequest>& requests,
                                     const GenerateOptions& options, GenerateStats* stats) {
  const ModelConfig& c = engine.config();
  const int64_t V = c.n_vocab;
  if (static_cast<int64_t>(requests.size()) > engine.options().max_seqs)
    fail(ErrorCode::kInvalidArgument, "generate: {} requests, the engine runs at most {} at once", requests.size(),
         engine.options().max_seqs);
  const int64_t budget = std::min({options.max_prefill_tokens, engine.options().max_step_tokens});
  if (budget < 1) fail(ErrorCode::kInvalidArgument, "generate: max_prefill_tokens must be >= 1");
  std::vector<GenerateResult> results(requests.size());
  std::vector<Active> act;
  const KvPools pools = engine.kv().pools();
  PagePool& pool = *pools.full;
  struct Releaser {
    std::vector<Active>& a;
    const KvPools& p;
    ~Releaser() {
      for (Active& x : a) x.table.release(p);
    }
  } releaser{act, pools};
  // Before a sequence computes positions [start, end): its sliding-window pages (the full pool's pages
  // are reserved for the whole request at the start).
  auto advance = [&](Active& a, int64_t end) {
    if (!a.table.advance(pools, a.n_done, end))
      fail(ErrorCode::kOutOfMemory, "generate: the sliding-window KV pool ({} pages) or the recurrent-state slots ({}) are full",
           pools.swa ? pools.swa->n_pages() : 0, pools.states ? pools.states->n_pages() : 0);
  };
  act.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& r = requests[i];
    if (r.prompt.empty()) fail(ErrorCode::kInvalidArgument, "generate: request {} has an empty prompt", i);
    Active a{&r, &results[i], std::make_unique<Sampler>(r.sampling, static_cast<int32_t>(V), c.eos_ids, r.prompt), {},
             r.prompt, 0, r.max_tokens <= 0};
    const int64_t total = static_cast<int64_t>(r.prompt.size()) + std::max(r.max_tokens, 0);
    if (!a.table.reserve(pool, total))
      fail(ErrorCode::kOutOfMemory, "generate: request {} needs KV for {} tokens ({} pages), {} of {} pages are free", i,
           total, a.table.pages_needed(pool, total), pool.n_free(), pool.n_pages());
    act.push_back(std::move(a));
  }
  auto record = [&](Active& a, int32_t id) {
    a.out->tokens.push_back(id);
    a.tokens.push_back(id);
    if (a.req->on_token) a.req->on_token(id);
    const bool eos = std::find(c.eos_ids.begin(), c.eos_ids.end(), id) != c.eos_ids.end();
    if ((eos && a.req->stop_at_eos) || static_cast<int32_t>(a.out->tokens.size()) >= a.req->max_tokens)
      a.finished = true;
  };
  auto accept = [&](Active& a, const float* logits) {
    if (a.req->step_logits) a.out->step_logits.insert(a.out->step_logits.end(), logits, logits + V);
    record(a, a.sampler->sample(logits).id);
  };

  // Prefill: pack prompt chunks of all requests, at most `budget` tokens (and logit rows) per forward.
  const double t0 = now_s();
  const int64_t max_rows = engine.options().max_logit_rows;
  for (;;) {
    std::vector<StepItem> items;
    std::vector<Active*> owners;
    int64_t used = 0, rows = 0;
    for (Active& a : act) {
      const int64_t left = static_cast<int64_t>(a.req->prompt.size()) - a.n_done;
      if (left <= 0 || used >= budget) continue;
      int64_t n = std::min(left, budget - used);
      if (a.req->prompt_logits) n = std::min(n, max_rows - rows);
      if (n <= 0) continue;
      const bool last = n == left;
      const int64_t n_logits = a.req->prompt_logits ? n : (last && !a.finished ? 1 : 0);
      if (rows + n_logits > max_rows) continue;
      advance(a, a.n_done + n);
      items.push_back({&a.table.pages(), a.n_done, a.tokens.data() + a.n_done, n, n_logits, &a.table.swa_pages(),
                       a.table.state_slot()});
      owners.push_back(&a);
      used += n;
      rows += n_logits;
    }
    if (items.empty()) break;
    const std::span<const float> logits = engine.step(items);
    int64_t row = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      Active& a = *owners[i];
      const StepItem& it = items[i];
      if (a.req->prompt_logits)
        a.out->prompt_logits.insert(a.out->prompt_logits.end(), logits.begin() + row * V,
                                    logits.begin() + (row + it.n_logits) * V);
      a.n_done += it.n;
      advance(a, a.n_done);  // releases the sliding-window pages below the next position's window
      row += it.n_logits;
      if (a.n_done == static_cast<int64_t>(a.req->prompt.size()) && !a.finished)
        accept(a, logits.data() + (row - 1) * V);
    }
    if (stats) stats->prefill_tokens += used;
  }
  const double t1 = now_s();

  // Decode: one token for every unfinished sequence per forward.
  std::vector<SampleRow> rows;
  std::vector<LogitEdit> edits;
  for (;;) {
    std::vector<StepItem> items;
    std::vector<Active*> owners;
    for (Active& a : act) {
      if (a.finished) continue;
      advance(a, a.n_done + 1);
      items.push_back({&a.table.pages(), a.n_done, a.tokens.data() + a.n_done, 1, 1, &a.table.swa_pages(),
                       a.table.state_slot()});
      owners.push_back(&a);
    }
    if (items.empty()) break;
    if (std::any_of(owners.begin(), owners.end(), [](const Active* a) { return a->req->step_logits; })) {
      const std::span<const float> logits = engine.step(items);
      for (size_t i = 0; i < items.size(); ++i) {
        owners[i]->n_done += 1;
        accept(*owners[i], logits.data() + static_cast<int64_t>(i) * V);
      }
    } else {  // sampled on the backend: a few bytes a row come back instead of the logits
      rows.assign(items.size(), SampleRow{});
      edits.clear();
      for (size_t i = 0; i < items.size(); ++i) owners[i]->sampler->prepare(rows[i], edits);
      const std::span<const SampleResult> got = engine.step_sample(items, rows, edits);
      for (size_t i = 0; i < items.size(); ++i) {
        owners[i]->n_done += 1;
        record(*owners[i], owners[i]->sampler->take(got[i]).id);
      }
    }
    if (stats) stats->decode_tokens += static_cast<int64_t>(items.size());
  }
  if (stats) {
    stats->prefill_seconds += t1 - t0;
    stats->decode_seconds += now_s() - t1;
  }
  return results;
}

}  // namespace ft
