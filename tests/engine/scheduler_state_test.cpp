// Scheduler with recurrent-state slots (KvPools::states, linear-attention models): every running
// sequence holds exactly one slot, the slot returns when the sequence finishes, is cancelled or
// preempted, and a prompt computed before gives no prefix hit (no state snapshots are cached).
#include <gtest/gtest.h>

#include <set>

#include "engine/scheduler.h"
#include "util/error.h"

namespace ft {
namespace {

struct StateSetup {
  PagePool pages{12, 4};
  PagePool states{2, 1};
  KvPools pools() {
    KvPools p(pages);
    p.states = &states;
    return p;
  }
};

SchedulerConfig config(int32_t max_running) {
  SchedulerConfig c;
  c.max_running = max_running;
  c.max_prefill_tokens = 64;
  c.max_seq_len = 48;
  return c;
}

std::vector<int32_t> prompt(int32_t n, int32_t base) {
  std::vector<int32_t> p;
  for (int32_t i = 0; i < n; ++i) p.push_back(base + i);
  return p;
}

TEST(SchedulerState, RunningSequencesHoldOneSlotEachAndReturnIt) {
  StateSetup st;
  Scheduler s(config(2), st.pools());
  s.submit(1, prompt(6, 10), 4);
  s.submit(2, prompt(5, 20), 4);
  s.submit(3, prompt(7, 30), 4);
  StepPlan plan = s.schedule();
  ASSERT_EQ(plan.seqs.size(), 2u);  // max_running 2
  std::set<int32_t> slots;
  for (const ScheduledSeq& e : plan.seqs) slots.insert(e.seq->state_slot);
  EXPECT_EQ(slots, (std::set<int32_t>{0, 1}));
  EXPECT_EQ(s.state_slots_in_use(), 2);
  s.check_integrity();
  s.complete(plan);
  const int32_t freed = s.find(1)->state_slot;
  ASSERT_TRUE(s.finish(1));
  EXPECT_EQ(s.state_slots_in_use(), 1);
  s.check_integrity();
  plan = s.schedule();  // sequence 3 takes the freed slot
  ASSERT_NE(s.find(3), nullptr);
  EXPECT_EQ(s.find(3)->state_slot, freed);
  s.check_integrity();
  s.complete(plan);
  ASSERT_TRUE(s.finish(3));  // cancelled mid-generation
  ASSERT_TRUE(s.finish(2));
  EXPECT_EQ(s.state_slots_in_use(), 0);
  EXPECT_EQ(st.states.n_free(), 2);
  s.check_integrity();
}

TEST(SchedulerState, NoPrefixHitWithoutAStateSnapshot) {
  StateSetup st;
  Scheduler s(config(2), st.pools());
  s.submit(1, prompt(12, 0), 2);
  StepPlan plan = s.schedule();
  s.complete(plan);
  ASSERT_TRUE(s.finish(1));
  s.submit(2, prompt(12, 0), 2);  // the same 3 full pages
  plan = s.schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start, 0);  // computed whole: a hit could not restore the state
  EXPECT_EQ(s.find(2)->n_cached, 0);
  EXPECT_EQ(s.pages_cached(), 0);
  s.check_integrity();
}

TEST(SchedulerState, PreemptionReturnsTheSlot) {
  StateSetup st;
  Scheduler s(config(2), st.pools());
  s.submit(1, prompt(20, 0), 20);  // 10 of the 12 pages once grown to 40 tokens
  s.submit(2, prompt(20, 100), 20);
  for (int step = 0; step < 60 && !s.idle(); ++step) {
    StepPlan plan = s.schedule();
    if (plan.empty()) break;
    s.check_integrity();
    EXPECT_LE(s.state_slots_in_use(), 2);
    s.complete(plan);
    for (const ScheduledSeq& e : plan.seqs)
      if (e.sample) {
        const Sequence* q = s.find(e.seq->id);
        if (q->n_generated() + 1 >= q->max_new_tokens) s.finish(e.seq->id);
        else s.append(e.seq->id, 7);
      }
    s.check_integrity();
  }
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(st.states.n_free(), 2);
}

TEST(SchedulerState, TooFewSlotsForMaxRunningIsAnInternalError) {
  StateSetup st;
  EXPECT_THROW({ Scheduler s(config(3), st.pools()); }, Error);
}

}  // namespace
}  // namespace ft
