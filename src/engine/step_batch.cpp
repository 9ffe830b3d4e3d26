#include "engine/step_batch.h"

#include "engine/scheduler.h"

namespace ft {

void fill_step_batch(const StepPlan& plan, StepBatch& batch) {
  batch.clear();
  batch.items.reserve(plan.seqs.size());
  for (const ScheduledSeq& e : plan.seqs) {
    const Sequence& s = *e.seq;
    StepItem& it = batch.items.emplace_back();
    it.pages = &s.pages;
    it.start = e.start;
    it.tokens = s.tokens.data() + e.start;
    it.n = e.n_tokens;
    it.n_logits = logit_rows(e);
    it.swa_pages = &s.swa_pages;
    it.state_slot = s.state_slot;
  }
  batch.copies_before = plan.state_restores;
  batch.copies_after = plan.state_saves;
}

}  // namespace ft
