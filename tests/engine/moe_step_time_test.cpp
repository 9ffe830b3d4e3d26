// The planner's predicted decode step against the measured ones (issue 37's stats), through
// Engine::step on the qwen3_moe fixture: every decode step (each sequence one token) is timed by
// batch size, mixed and prefill steps are not; hybrid's prediction is its calibration's time of the
// candidate it chose (timed at batch 1); offload has none and says why; the --decode-log-interval
// line carries the window's step time and the plan's.
#include <algorithm>

#include "../model/fixture_util.h"
#include "log_capture.h"

namespace ft::testing {
namespace {

EngineOptions step_time_options(MoeStrategy s) {
  EngineOptions o = small_engine_options();
  o.moe.strategy = s;
  o.moe.cache = {CacheSizeMode::kSlots, 16, 0.0};  // 2 x the fixture's 8 experts
  o.moe.cpu_int8 = false;
  return o;
}

/** One sequence's block table and its next position. */
struct Seq {
  BlockTable table;
  int64_t pos = 0;
};

/** Runs one step of `seqs` each given `n[i]` tokens (token ids 1, 2, ...). */
void run_step(Engine& e, std::vector<Seq*> seqs, std::vector<int64_t> n) {
  const KvPools pools = e.kv().pools();
  std::vector<std::vector<int32_t>> ids(seqs.size());
  StepBatch b;
  for (size_t i = 0; i < seqs.size(); ++i) {
    Seq& s = *seqs[i];
    ASSERT_TRUE(s.table.advance(pools, s.pos, s.pos + n[i]));
    for (int64_t t = 0; t < n[i]; ++t) ids[i].push_back(static_cast<int32_t>(1 + (s.pos + t) % 50));
    b.items.push_back({&s.table.pages(), s.pos, ids[i].data(), n[i], 1, &s.table.swa_pages(), s.table.state_slot()});
    s.pos += n[i];
  }
  e.step(b);
}

TEST(MoeStepTime, HybridPredictsFromItsCalibrationAndTimesDecodeSteps) {
  LogCapture log(spdlog::level::info);
  EngineOptions o = step_time_options(MoeStrategy::kHybrid);  // no cap: calibrated at load
  o.decode_log_interval = 2;
  auto e = Engine::load(shared_dir() + "/fixtures/hf/qwen3_moe", o);
  const KvPools pools = e->kv().pools();
  Seq a, b;
  run_step(*e, {&a}, {5});                            // prefill: not timed
  for (int i = 0; i < 4; ++i) run_step(*e, {&a}, {1});  // 4 decode steps at batch 1
  run_step(*e, {&a, &b}, {1, 3});                     // mixed: counted in the log window, not timed
  for (int i = 0; i < 3; ++i) run_step(*e, {&a, &b}, {1, 1});  // 3 at batch 2
  const std::optional<MoeReport> r = e->moe_report();
  a.table.release(pools);
  b.table.release(pools);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(r->calibration.has_value());
  const StepTimeReport& t = r->step_time;
  ASSERT_EQ(t.measured.size(), 2u);
  EXPECT_EQ(t.measured.at(1).steps, 4);  // the calibration's own steps are not counted
  EXPECT_EQ(t.measured.at(2).steps, 3);
  EXPECT_GT(t.measured.at(1).mean_ms(), 0.0);
  EXPECT_GT(t.measured.at(2).mean_ms(), 0.0);
  const auto& ms = r->calibration->ms_per_step;
  const auto chosen = std::find_if(ms.begin(), ms.end(), [&](const auto& c) { return c.first == r->calibration->choice; });
  ASSERT_NE(chosen, ms.end());
  ASSERT_TRUE(t.predicted_ms.has_value()) << t.no_prediction;
  EXPECT_EQ(*t.predicted_ms, chosen->second);
  EXPECT_GT(*t.predicted_ms, 0.0);
  EXPECT_EQ(t.predicted_batch, 1);
  EXPECT_EQ(t.predicted_from, "calibration: " + r->calibration->choice);
  EXPECT_TRUE(t.no_prediction.empty());
  // 8 decode steps (the mixed one included) make 4 log windows; the third holds only the mixed step
  // and one batch-2 step, the others two timed steps each.
  std::vector<std::string> lines;
  for (const std::string& l : log.lines())
    if (l.find("moe: 2 steps, hit rate") != std::string::npos) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u);
  const std::string planned = fmt::format("(planned {:.2f} ms at batch 1)", *t.predicted_ms);
  for (const std::string& l : lines) {
    EXPECT_NE(l.find(", step "), std::string::npos) << l;
    EXPECT_NE(l.find(planned), std::string::npos) << l;
  }
  EXPECT_NE(lines[0].find(" ms at batch 1 ("), std::string::npos) << lines[0];
  EXPECT_NE(lines[3].find(" ms at batch 2 ("), std::string::npos) << lines[3];
}

TEST(MoeStepTime, OffloadHasNoPredictionAndSaysWhy) {
  LogCapture log(spdlog::level::info);
  EngineOptions o = step_time_options(MoeStrategy::kOffload);
  o.decode_log_interval = 3;
  auto e = Engine::load(shared_dir() + "/fixtures/hf/qwen3_moe", o);
  Seq a;
  run_step(*e, {&a}, {4});
  for (int i = 0; i < 3; ++i) run_step(*e, {&a}, {1});
  const std::optional<MoeReport> r = e->moe_report();
  a.table.release(e->kv().pools());
  ASSERT_TRUE(r.has_value());
  const StepTimeReport& t = r->step_time;
  EXPECT_FALSE(t.predicted_ms.has_value());
  EXPECT_EQ(t.predicted_batch, 0);
  EXPECT_NE(t.no_prediction.find("offload strategy"), std::string::npos) << t.no_prediction;
  ASSERT_EQ(t.measured.size(), 1u);
  EXPECT_EQ(t.measured.at(1).steps, 3);
  EXPECT_GT(t.measured.at(1).seconds, 0.0);
  std::vector<std::string> lines;
  for (const std::string& l : log.lines())
    if (l.find("moe: 3 steps, hit rate") != std::string::npos) lines.push_back(l);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" ms at batch 1 (planned: none)"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace ft::testing
