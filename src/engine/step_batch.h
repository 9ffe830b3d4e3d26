#pragma once
// StepBatch: the one batch type of a step, from the scheduler's plan (engine/scheduler.h StepPlan) to
// the forward (Engine::step, ModelRunner::forward): each sequence's part of the step as a StepItem
// pointing into the sequence's own tokens and block tables (nothing copied), plus the recurrent-state
// copies the step needs around its forward. The engine stages it once, into its device inputs.
#include <cstdint>
#include <vector>

#include "kv/page_pool.h"

namespace ft {

struct StepPlan;  // engine/scheduler.h

/** One sequence's part of a step: `n` tokens at positions start .. start + n - 1. Positions
 *  [0, start) must already be in the sequence's pages (earlier steps); `pages` is its block table
 *  (page j holds positions [j * page_size, (j + 1) * page_size)) and must cover start + n positions.
 *  The caller owns page allocation (kv/page_pool.h BlockTable, or the scheduler). With a
 *  sliding-window pool (KvCache::pools().swa), `swa_pages` is the sequence's block table there, indexed
 *  like `pages`: the entries from KvPools::first_swa_page(start) to the last page must be held.
 *  The pointers are borrowed: what they point to must stay unchanged until the step returns. */
struct StepItem {
  const std::vector<int32_t>* pages = nullptr;
  int64_t start = 0;
  const int32_t* tokens = nullptr;  // [n] token ids
  int64_t n = 0;
  /** Logit rows wanted: 0 none, 1 the last token, n every token (others are invalid). */
  int64_t n_logits = 1;
  const std::vector<int32_t>* swa_pages = nullptr;
  /** The sequence's recurrent-state slot (KvCache::state_pool(); BlockTable::state_slot()), required
   *  for a model with recurrent layers, -1 otherwise. The slot carries the state after position
   *  start - 1 (nothing when start is 0). */
  int32_t state_slot = -1;
};

/** One step's batch: S items (sequences) of T tokens in all, R = the sum of their n_logits logit rows,
 *  in item order. copies_before are queued before the forward (snapshots restored into the slots of
 *  sequences starting from a prefix hit), copies_after after it (slots saved as snapshots for the
 *  prefix cache), each in order. */
struct StepBatch {
  std::vector<StepItem> items;
  std::vector<StateCopy> copies_before, copies_after;

  int64_t n_tokens() const {
    int64_t t = 0;
    for (const StepItem& it : items) t += it.n;
    return t;
  }
  int64_t n_logit_rows() const {
    int64_t r = 0;
    for (const StepItem& it : items) r += it.n_logits;
    return r;
  }
  void clear() {
    items.clear();
    copies_before.clear();
    copies_after.clear();
  }
};

/** Fills `batch` (cleared first) from `plan`: item s is plan.seqs[s]'s chunk, its tokens read in place
 *  from the sequence's token vector, its block tables and state slot the sequence's, n_logits =
 *  logit_rows(plan.seqs[s]); the copies are the plan's state restores and saves. The pointers stay
 *  valid until the scheduler's next submit, schedule, append or finish. */
void fill_step_batch(const StepPlan& plan, StepBatch& batch);

}  // namespace ft
