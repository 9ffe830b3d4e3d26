// RankGroup (engine/rank_group.h): a model on 2 ranks (threads over the in-process collective), rank 0
// scheduling and sending each step: the group's logits equal one engine's and transformers', its greedy
// tokens through the serving loop are transformers' (TP2, TP2 with the experts split under each rank's
// strategy; standard attention, full-width QK-norm, MLA, linear attention with its states); a step the
// engine refuses leaves the group serving; a rank that cannot load fails the load without a hang; the
// flags that cannot go with ranks are refused. The wire form of a step and the channel are checked too.
#include <gtest/gtest.h>

#include <thread>

#include "../model/fixture_util.h"
#include "dist/step_channel.h"
#include "engine/engine_runner.h"
#include "engine/rank_group.h"
#include "engine/service.h"
#include "engine/service_testing.h"
#include "engine/step_codec.h"

namespace ft::testing {
namespace {

struct GroupCase {
  const char* fixture;
  bool expert_parallel;
  MoeStrategy strategy = MoeStrategy::kAuto;  // each rank's, over its own experts
};

/** The small options with `strategy` (offload and hybrid: an 8-slot expert cache). */
EngineOptions case_options(MoeStrategy strategy) {
  EngineOptions o = small_engine_options();
  o.moe.strategy = strategy;
  if (strategy == MoeStrategy::kOffload || strategy == MoeStrategy::kHybrid) o.moe.cache = {CacheSizeMode::kSlots, 8, 0.0};
  return o;
}

std::string fixture_dir(const char* name) { return shared_dir() + "/fixtures/hf/" + name; }

std::unique_ptr<RankGroup> load_group(const std::string& dir, int ranks, bool expert_parallel,
                                      MoeStrategy strategy = MoeStrategy::kAuto) {
  EngineOptions o = case_options(strategy);
  o.tensor_parallel = ranks;
  o.expert_parallel = expert_parallel;
  return RankGroup::load(open_checkpoint(dir), dir, o);
}

class RankGroupFixtures : public ::testing::TestWithParam<GroupCase> {};

TEST_P(RankGroupFixtures, StepsEqualOneEngineAndTransformers) {
  const GroupCase c = GetParam();
  const std::string dir = fixture_dir(c.fixture);
  const std::vector<RefCase> refs = read_reference(dir);
  ASSERT_FALSE(refs.empty()) << dir;
  auto one = Engine::load(dir, small_engine_options());  // fused: what every strategy computes
  auto group = load_group(dir, 2, c.expert_parallel, c.strategy);
  EngineRunner one_runner(*one);
  const int64_t V = one->config().n_vocab;
  ASSERT_EQ(group->runner().vocab_size(), V);
  for (const RefCase& ref : refs) {
    // The prompt, every row, then greedy decode steps, on both, each in its own pages.
    std::vector<int32_t> seq = ref.input_ids;
    BlockTable t1, tg, s1, sg;  // s: the sliding-window pool's pages (gemma4), indexed as the others
    const int64_t total = static_cast<int64_t>(seq.size() + ref.greedy.size());
    ASSERT_TRUE(t1.reserve(one->kv().pool(), total));
    ASSERT_TRUE(tg.reserve(group->leader().kv().pool(), total));
    const bool swa = one->kv().swa_pool() != nullptr;
    if (swa) {
      ASSERT_TRUE(s1.reserve(*one->kv().pools().swa, total));
      ASSERT_TRUE(sg.reserve(*group->leader().kv().pools().swa, total));
    }
    const std::vector<int32_t>* w1 = swa ? &s1.pages() : nullptr;
    const std::vector<int32_t>* wg = swa ? &sg.pages() : nullptr;
    const auto n = static_cast<int64_t>(seq.size());
    const int32_t slot = one->kv().state_pool() ? 0 : -1;  // recurrent layers: one sequence at a time in slot 0
    const std::span<const float> a = one_runner.forward(StepBatch{{{&t1.pages(), 0, seq.data(), n, n, w1, slot}}});
    const std::vector<float> single(a.begin(), a.end());
    const std::span<const float> b = group->runner().forward(StepBatch{{{&tg.pages(), 0, seq.data(), n, n, wg, slot}}});
    const std::vector<float> grouped(b.begin(), b.end());
    EXPECT_LE(max_row_rel_l2(grouped, single, V), 1e-5) << c.fixture << " " << ref.name;
    EXPECT_LE(max_row_rel_l2(grouped, ref.logits, V), 2e-2) << c.fixture << " " << ref.name;
    for (size_t k = 0; k + 1 < ref.greedy.size(); ++k) {
      seq.push_back(ref.greedy[k]);
      const int64_t pos = static_cast<int64_t>(seq.size()) - 1;
      const std::span<const float> x = one_runner.forward(StepBatch{{{&t1.pages(), pos, &seq[pos], 1, 1, w1, slot}}});
      const std::vector<float> xs(x.begin(), x.end());
      const std::span<const float> y = group->runner().forward(StepBatch{{{&tg.pages(), pos, &seq[pos], 1, 1, wg, slot}}});
      EXPECT_LE(row_rel_l2(y.data(), xs.data(), V), 1e-5) << c.fixture << " decode step " << k;
    }
    t1.release(one->kv().pool());
    tg.release(group->leader().kv().pool());
    if (swa) {
      s1.release(*one->kv().pools().swa);
      sg.release(*group->leader().kv().pools().swa);
    }
  }
  EXPECT_EQ(group->failure(), "");
  if (c.strategy == MoeStrategy::kHybrid)  // no start-up timing in a group: its steps would have to match
    for (int r = 0; r < group->size(); ++r) EXPECT_FALSE(group->engine(r).moe_report()->calibration.has_value()) << r;
}

TEST_P(RankGroupFixtures, ServedGreedyTokensAreTransformers) {
  const GroupCase c = GetParam();
  const std::string dir = fixture_dir(c.fixture);
  const std::vector<RefCase> refs = read_reference(dir);
  ASSERT_FALSE(refs.empty()) << dir;
  auto group = load_group(dir, 2, c.expert_parallel, c.strategy);
  ServiceConfig sc;
  sc.scheduler.max_running = 4;
  sc.check_integrity = true;
  EngineService svc(group->runner(), group->leader().kv().pools(), sc);
  std::vector<std::shared_ptr<CollectSink>> sinks;
  for (const RefCase& ref : refs) {  // served together: batched steps
    sinks.push_back(std::make_shared<CollectSink>());
    svc.submit(greedy(ref.input_ids, static_cast<int32_t>(ref.greedy.size()), sinks.back()));
  }
  for (size_t i = 0; i < refs.size(); ++i) {
    EXPECT_EQ(sinks[i]->wait().reason, FinishReason::kLength);
    EXPECT_EQ(sinks[i]->tokens, refs[i].greedy) << c.fixture << " " << refs[i].name;
  }
  svc.shutdown(std::chrono::milliseconds(0));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RankGroupFixtures,
                         ::testing::Values(GroupCase{"qwen3", false}, GroupCase{"qwen3_moe", false},
                                           GroupCase{"qwen3_moe", true}, GroupCase{"mixtral", true},
                                           GroupCase{"deepseek_v3", true}, GroupCase{"qwen3_next", true},
                                           GroupCase{"olmoe", false}, GroupCase{"deepseek_v4", true},
                                           GroupCase{"qwen4_exp", true}, GroupCase{"gemma4", false},
                                           GroupCase{"qwen3_moe", true, MoeStrategy::kOffload},
                                           GroupCase{"qwen3_moe", true, MoeStrategy::kCpu},
                                           GroupCase{"qwen3_moe", true, MoeStrategy::kHybrid}),
                         [](const auto& info) {
                           const GroupCase& c = info.param;
                           return std::string(c.fixture) + (c.expert_parallel ? "_ep" : "_tp") +
                                  (c.strategy == MoeStrategy::kAuto ? "" : std::string("_") + moe_strategy_name(c.strategy));
                         });

TEST(RankGroup, PrefixHitsRestoreTheStatesOnEveryRank) {
  // qwen3_next (linear attention): a repeated prompt starts from the prefix cache, its recurrent state
  // restored from a snapshot (the step's state copies, sent to every rank with the step).
  const std::string dir = fixture_dir("qwen3_next");
  const std::vector<RefCase> refs = read_reference(dir);
  ASSERT_FALSE(refs.empty());
  const RefCase& ref = refs.back();  // the longest: whole pages to reuse
  auto group = load_group(dir, 2, true);
  ServiceConfig sc;
  sc.check_integrity = true;
  EngineService svc(group->runner(), group->leader().kv().pools(), sc);
  for (int round = 0; round < 2; ++round) {
    auto sink = std::make_shared<CollectSink>();
    svc.submit(greedy(ref.input_ids, static_cast<int32_t>(ref.greedy.size()), sink));
    const FinishInfo f = sink->wait();
    EXPECT_EQ(sink->tokens, ref.greedy) << "round " << round;
    if (round == 1) EXPECT_GT(f.cached_tokens, 0) << "prompt of " << ref.input_ids.size() << " tokens";
  }
  svc.shutdown(std::chrono::milliseconds(0));
  EXPECT_EQ(group->failure(), "");
}

TEST(RankGroup, EachRankPlansOnlyTheWeightsItHolds) {
  // A rank's memory plan counts its shard (heads and FFN columns cut) and, with --expert-parallel on,
  // its own experts only: the other ranks' experts are not dense weights of its (a trial found them
  // counted so, making a plan that fits refused once the experts were split).
  const std::string dir = fixture_dir("qwen3_moe");
  auto one = Engine::load(dir, small_engine_options());
  auto tp = load_group(dir, 2, false);
  auto ep = load_group(dir, 2, true);
  const int64_t experts = one->moe_budget()->expert_bytes;
  const int64_t dense = one->memory_plan().placed.weights - experts;
  ASSERT_GT(experts, 0);
  for (int r = 0; r < 2; ++r) {
    const int64_t tp_experts = tp->engine(r).moe_budget()->expert_bytes;
    const int64_t tp_dense = tp->engine(r).memory_plan().placed.weights - tp_experts;
    EXPECT_EQ(tp_experts, experts) << r;  // copied to every rank
    EXPECT_LT(tp_dense, dense) << r;      // attention and the dense FFN cut in two (embeddings whole)
    EXPECT_GT(tp_dense, dense / 2) << r;
    const int64_t ep_experts = ep->engine(r).moe_budget()->expert_bytes;
    EXPECT_EQ(ep_experts, experts / 2) << r;
    EXPECT_EQ(ep->engine(r).memory_plan().placed.weights - ep_experts, tp_dense) << r;
  }
}

TEST(RankGroup, ARefusedStepLeavesTheGroupServing) {
  const std::string dir = fixture_dir("qwen3_moe");
  auto group = load_group(dir, 2, true);
  BlockTable t;
  ASSERT_TRUE(t.reserve(group->leader().kv().pool(), 8));
  std::vector<int32_t> bad = {1, 2, 100000};  // outside the vocabulary: every rank refuses it alike
  EXPECT_THROW(group->runner().forward(StepBatch{{{&t.pages(), 0, bad.data(), 3, 1}}}), Error);
  std::vector<int32_t> good = {1, 2, 3};
  const std::span<const float> y = group->runner().forward(StepBatch{{{&t.pages(), 0, good.data(), 3, 1}}});
  EXPECT_EQ(static_cast<int64_t>(y.size()), group->leader().config().n_vocab);
  EXPECT_EQ(group->failure(), "");
  t.release(group->leader().kv().pool());
}

TEST(RankGroup, ARankThatCannotLoadFailsTheLoad) {
  // qwen3_moe has 4 heads and 2 KV heads: 3 ranks cannot split them; every rank refuses, none hangs.
  try {
    load_group(fixture_dir("qwen3_moe"), 3, false);
    FAIL() << "3 ranks loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("tensor-parallel size"), std::string::npos) << e.what();
  }
}

TEST(RankGroup, FlagsThatCannotGoWithRanksAreRefused) {
  EngineOptions o = small_engine_options();
  o.expert_parallel = true;  // nothing to split over
  EXPECT_THROW(o.validate(), Error);
  o.tensor_parallel = 2;
  EXPECT_NO_THROW(o.validate());
  o.kv_host_gib = 1;
  EXPECT_THROW(o.validate(), Error);
  o.kv_host_gib = 0;
  o.prompt_cache_dir = "/tmp/x";
  EXPECT_THROW(o.validate(), Error);
  o.prompt_cache_dir.clear();
  o.tensor_parallel = kMaxTensorParallel + 1;
  EXPECT_THROW(o.validate(), Error);
  // An engine given tensor_parallel 2 but no group of 2 is refused before it loads.
  o.tensor_parallel = 2;
  o.expert_parallel = false;
  EXPECT_THROW(Engine::load(fixture_dir("qwen3"), o), Error);
  o.tensor_parallel = 1;
  EXPECT_THROW(load_group(fixture_dir("qwen3"), 1, false), Error);
}

TEST(RankGroup, ResizingTheCachesIsRefused) {
  auto group = load_group(fixture_dir("qwen3_moe"), 2, false);
  CacheResize r;
  r.kv_tokens = 512;
  EXPECT_THROW(group->leader().check_resize(r, 0), Error);
}

TEST(StepCodec, RoundTripsAStep) {
  std::vector<int32_t> pages = {3, 4, 9}, swa = {-1, 7, 8}, toks = {5, 6, 7, 8}, toks2 = {11};
  StepBatch b;
  b.items.push_back({&pages, 16, toks.data(), 4, 4, &swa, 2});
  b.items.push_back({&pages, 40, toks2.data(), 1, 1, nullptr, -1});
  b.copies_before.push_back({1, 2});
  b.copies_after.push_back({2, 5});
  const std::vector<uint8_t> bytes = encode_step(b);
  DecodedStep d;
  decode_step(bytes, d);
  ASSERT_EQ(d.batch.items.size(), 2u);
  const StepItem& x = d.batch.items[0];
  EXPECT_EQ(x.start, 16);
  EXPECT_EQ(x.n, 4);
  EXPECT_EQ(x.n_logits, 4);
  EXPECT_EQ(x.state_slot, 2);
  EXPECT_EQ(std::vector<int32_t>(x.tokens, x.tokens + 4), toks);
  EXPECT_EQ(*x.pages, pages);
  ASSERT_NE(x.swa_pages, nullptr);
  EXPECT_EQ(*x.swa_pages, swa);
  EXPECT_EQ(d.batch.items[1].swa_pages, nullptr);
  EXPECT_EQ(d.batch.items[1].tokens[0], 11);
  ASSERT_EQ(d.batch.copies_before.size(), 1u);
  EXPECT_EQ(d.batch.copies_before[0].from, 1);
  EXPECT_EQ(d.batch.copies_after[0].to, 5);
  // Truncated anywhere, or with a byte more: refused naming where.
  for (size_t cut : {size_t{0}, size_t{7}, size_t{20}, bytes.size() - 1}) {
    std::vector<uint8_t> t(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_THROW(decode_step(t, d), Error) << cut;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  try {
    decode_step(longer, d);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("trailing"), std::string::npos) << e.what();
  }
}

TEST(StepChannel, EveryReceiverGetsEveryMessageInOrder) {
  dist::StepChannel ch(3);
  std::vector<std::vector<int>> got(3);
  std::vector<std::thread> rx;
  for (int r = 0; r < 3; ++r)
    rx.emplace_back([&, r] {
      while (auto m = ch.receive(r)) got[static_cast<size_t>(r)].push_back(m->at(0));
    });
  for (int i = 0; i < 50; ++i) ch.send({static_cast<uint8_t>(i)});
  ch.close();
  for (std::thread& t : rx) t.join();
  std::vector<int> want(50);
  for (int i = 0; i < 50; ++i) want[static_cast<size_t>(i)] = i;
  for (int r = 0; r < 3; ++r) EXPECT_EQ(got[static_cast<size_t>(r)], want) << r;
  EXPECT_EQ(ch.pending(), 0u);
  EXPECT_THROW(ch.send({1}), Error);
  EXPECT_THROW(ch.receive(3), Error);
}

}  // namespace
}  // namespace ft::testing
