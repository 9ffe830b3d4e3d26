// Scheduler with recurrent-state slots (KvPools::states, linear-attention models): every running
// sequence holds exactly one slot, the slot returns when the sequence finishes, is cancelled or
// preempted; a prefill is cut at its last page boundary, whose state is saved as a snapshot the prefix
// cache keeps, and a later hit is shortened to a node with a snapshot and restores it.
#include <gtest/gtest.h>

#include <set>

#include "engine/scheduler.h"
#include "util/error.h"

namespace ft {
namespace {

struct StateSetup {
  PagePool pages{12, 4};
  PagePool states{3, 1};
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
  EXPECT_EQ(slots.size(), 2u);
  s.check_integrity();
  s.complete(plan);
  const int32_t freed = s.find(1)->state_slot;
  ASSERT_TRUE(s.finish(1));
  s.check_integrity();
  plan = s.schedule();  // sequence 3 is admitted into a free slot
  ASSERT_NE(s.find(3), nullptr);
  EXPECT_GE(s.find(3)->state_slot, 0);
  EXPECT_NE(s.find(3)->state_slot, s.find(2)->state_slot);
  (void)freed;
  s.check_integrity();
  s.complete(plan);
  ASSERT_TRUE(s.finish(3));  // cancelled mid-generation
  ASSERT_TRUE(s.finish(2));
  s.check_integrity();
  // What the sequences no longer hold is free or a snapshot of the prefix cache.
  EXPECT_EQ(st.states.n_free() + s.state_snapshots(), 3);
}

TEST(SchedulerState, PrefillSnapshotsItsLastBoundaryAndAHitRestoresIt) {
  StateSetup st;
  Scheduler s(config(2), st.pools());
  s.submit(1, prompt(14, 0), 2);  // boundary: (14 - 1) / 4 * 4 = 12
  StepPlan plan = s.schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].n_tokens, 12);  // cut at the boundary
  const int32_t slot = s.find(1)->state_slot;
  ASSERT_EQ(plan.state_saves.size(), 1u);
  EXPECT_EQ(plan.state_saves[0].from, slot);
  const int32_t snap = plan.state_saves[0].to;
  EXPECT_NE(snap, slot);
  EXPECT_TRUE(plan.state_restores.empty());
  s.check_integrity();
  s.complete(plan);
  EXPECT_EQ(s.state_snapshots(), 1);
  plan = s.schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start, 12);
  EXPECT_EQ(plan.seqs[0].n_tokens, 2);
  EXPECT_TRUE(plan.state_saves.empty());
  s.complete(plan);
  ASSERT_TRUE(s.finish(1));
  s.check_integrity();

  // The same prompt with another ending: the hit is the 3 pages up to the snapshot, restored first.
  std::vector<int32_t> p2 = prompt(12, 0);
  for (int32_t t : {90, 91, 92, 93, 94}) p2.push_back(t);
  s.submit(2, p2, 2);
  plan = s.schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start, 12);
  EXPECT_EQ(s.find(2)->n_cached, 12);
  ASSERT_EQ(plan.state_restores.size(), 1u);
  EXPECT_EQ(plan.state_restores[0].from, snap);
  EXPECT_EQ(plan.state_restores[0].to, s.find(2)->state_slot);
  s.check_integrity();
  s.complete(plan);
  ASSERT_TRUE(s.finish(2));

  // A prompt sharing only 2 pages finds no snapshot on them: it is computed whole.
  std::vector<int32_t> p3 = prompt(8, 0);
  for (int32_t t : {70, 71, 72, 73, 74, 75}) p3.push_back(t);
  s.submit(3, p3, 2);
  plan = s.schedule();
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].start, 0);
  EXPECT_TRUE(plan.state_restores.empty());
  s.check_integrity();
}

TEST(SchedulerState, SnapshotsGiveWayToRunningSequences) {
  StateSetup st;  // 3 slots, 2 running at most: at most one snapshot survives while both run
  Scheduler s(config(2), st.pools());
  for (uint64_t id = 1; id <= 4; ++id) {
    s.submit(id, prompt(9, 100 * static_cast<int32_t>(id)), 1);
    for (int step = 0; step < 6 && s.find(id); ++step) {
      StepPlan plan = s.schedule();
      s.complete(plan);
      for (const ScheduledSeq& e : plan.seqs)
        if (e.sample) s.finish(e.seq->id);
      s.check_integrity();
    }
  }
  EXPECT_LE(s.state_snapshots(), 3);
  s.submit(10, prompt(9, 1000), 4);
  s.submit(11, prompt(9, 2000), 4);
  StepPlan plan = s.schedule();
  EXPECT_EQ(plan.seqs.size(), 2u);  // both admitted: unused snapshots were dropped for their slots
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
    EXPECT_LE(s.state_slots_in_use(), 3);  // 2 running + a snapshot being saved
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
  EXPECT_EQ(st.states.n_free() + s.state_snapshots(), 3);
}

TEST(SchedulerState, TooFewSlotsForMaxRunningIsAnInternalError) {
  StateSetup st;
  EXPECT_THROW({ Scheduler s(config(4), st.pools()); }, Error);
}

}  // namespace
}  // namespace ft
