// Scheduler step limits (SchedulerConfig): max_step_tokens leaves the prefill what the decodes do not
// take, max_logit_rows cuts the chunks of a sequence that keeps its prompt's logits, and
// reserve_at_admission takes a sequence's whole budget of pages when it is admitted, and
// prefill_before_decode holds decodes until every prompt is computed (ft bench).
#include <gtest/gtest.h>

#include <numeric>

#include "engine/scheduler.h"
#include "util/error.h"

namespace ft {
namespace {

std::vector<int32_t> ids(int32_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), 1);
  return t;
}

/** The chunk `id` got in `p` (0: none). */
int32_t chunk_of(const StepPlan& p, uint64_t id) {
  for (const ScheduledSeq& e : p.seqs)
    if (e.seq->id == id) return e.n_tokens;
  return 0;
}

SchedulerConfig limits(int64_t step_tokens, int64_t logit_rows) {
  SchedulerConfig c;
  c.max_running = 2;
  c.max_prefill_tokens = 32;
  c.max_step_tokens = step_tokens;
  c.max_logit_rows = logit_rows;
  c.prefix_cache = false;
  return c;
}

TEST(SchedulerLimits, DecodesTakeTheirShareOfTheStepTokens) {
  PagePool pool(64, 4);
  Scheduler s(limits(32, 0), pool);
  s.submit(1, ids(4), 8);
  s.submit(2, ids(100), 8);
  StepPlan p = s.schedule();
  EXPECT_EQ(chunk_of(p, 1), 4);
  EXPECT_EQ(chunk_of(p, 2), 28);
  s.complete(p);
  s.append(1, 7);
  p = s.schedule();  // 1 decodes: 31 tokens are left for 2's prefill
  EXPECT_EQ(p.n_decode, 1);
  EXPECT_EQ(chunk_of(p, 2), 31);
  EXPECT_EQ(p.n_tokens, 32);
  s.check_integrity();
}

TEST(SchedulerLimits, PromptLogitsChunksFitTheLogitRows) {
  PagePool pool(64, 4);
  Scheduler s(limits(0, 8), pool);
  s.submit(1, ids(4), 8);
  s.submit(2, ids(20), 8, 0, /*prompt_logits=*/true);
  StepPlan p = s.schedule();  // 1 takes one row, 2's chunk the other 7
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(logit_rows(p.seqs[0]), 1);
  EXPECT_EQ(chunk_of(p, 2), 7);
  EXPECT_EQ(logit_rows(p.seqs[1]), 7);
  s.complete(p);
  s.append(1, 7);
  p = s.schedule();
  EXPECT_EQ(chunk_of(p, 2), 7);
  s.complete(p);
  s.append(1, 8);
  p = s.schedule();  // the last 6 prompt tokens; the step samples 2's first token
  EXPECT_EQ(chunk_of(p, 2), 6);
  s.complete(p);
  s.append(1, 9);
  s.append(2, 3);
  p = s.schedule();  // both decode, one row each
  for (const ScheduledSeq& e : p.seqs) EXPECT_EQ(logit_rows(e), 1);
  EXPECT_THROW(Scheduler(limits(0, 1), pool), Error);  // fewer rows than running sequences
  EXPECT_THROW(Scheduler(limits(1, 0), pool), Error);  // fewer step tokens than running sequences
}

TEST(SchedulerLimits, ReserveAtAdmissionTakesTheWholeBudget) {
  PagePool pool(16, 4);
  SchedulerConfig c = limits(0, 0);
  c.reserve_at_admission = true;
  Scheduler s(c, pool);
  s.submit(1, ids(5), 11);  // 16 positions: 4 pages at once
  s.submit(2, ids(5), 47);  // 52 positions: 13 pages, more than the 12 left
  StepPlan p = s.schedule();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(s.pages_in_use(), 4);
  EXPECT_EQ(s.n_waiting(), 1);
  s.check_integrity();
  s.complete(p);
  EXPECT_TRUE(s.finish(1));
  p = s.schedule();
  EXPECT_EQ(chunk_of(p, 2), 5);
  EXPECT_EQ(s.pages_in_use(), 13);
  s.check_integrity();
}

TEST(SchedulerLimits, PrefillBeforeDecodeHoldsDecodesUntilEveryPromptIsComputed) {
  PagePool pool(64, 4);
  SchedulerConfig c = limits(0, 0);
  c.max_running = 3;
  c.max_prefill_tokens = 8;
  c.prefill_before_decode = true;
  Scheduler s(c, pool);
  s.submit(1, ids(4), 8);
  s.submit(2, ids(6), 8);
  s.submit(3, ids(6), 8);
  StepPlan p = s.schedule();  // 1 whole, 2 in part; 3 waits
  EXPECT_EQ(chunk_of(p, 1), 4);
  EXPECT_EQ(chunk_of(p, 2), 4);
  s.complete(p);
  s.append(1, 7);
  p = s.schedule();  // 1 could decode but 2 and 3 have prompt left: prefill only
  EXPECT_EQ(p.n_decode, 0);
  EXPECT_EQ(chunk_of(p, 1), 0);
  EXPECT_EQ(chunk_of(p, 2), 2);
  EXPECT_EQ(chunk_of(p, 3), 6);
  s.complete(p);
  s.append(2, 7);
  s.append(3, 7);
  p = s.schedule();  // every prompt computed: the whole batch decodes together
  EXPECT_EQ(p.n_decode, 3);
  EXPECT_EQ(p.n_prefill_tokens, 0);
  s.check_integrity();
}

TEST(SchedulerLimits, PrefillBeforeDecodeRunsHeldDecodesWhenNoPromptCanStep) {
  PagePool pool(4, 4);  // 16 positions: 1 holds 3 pages, 2 (2 pages) cannot be admitted beside it
  SchedulerConfig c = limits(0, 0);
  c.reserve_at_admission = true;
  c.prefill_before_decode = true;
  Scheduler s(c, pool);
  s.submit(1, ids(4), 8);
  s.submit(2, ids(4), 4);
  StepPlan p = s.schedule();
  EXPECT_EQ(chunk_of(p, 1), 4);
  EXPECT_EQ(s.n_waiting(), 1);
  s.complete(p);
  s.append(1, 7);
  p = s.schedule();  // 2 waits for pages: 1's decode is not held back
  EXPECT_EQ(p.n_decode, 1);
  EXPECT_EQ(chunk_of(p, 1), 1);
  s.check_integrity();
}

}  // namespace
}  // namespace ft
