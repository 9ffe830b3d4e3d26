// The benchmark over a rank group (ft bench -tp N, issue 43): run_bench(ServingEngine&) drives the
// group's runner, so two ranks (threads over the in-process collective) sample the ids one rank samples,
// TP2 and TP2 with the experts split under an expert cache; the report says which figures are rank 0's
// and carries each rank's plan and counters. The synthetic model is generated once and shared by the
// ranks (formats/shared_checkpoint.h): a page goes back to the OS only once every view released it.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/serving_engine.h"
#include "formats/shared_checkpoint.h"
#include "tools/benchmark.h"
#include "tools/synthetic_checkpoint.h"

namespace ft {
namespace {

std::unique_ptr<SyntheticCheckpoint> tiny_moe() {
  SyntheticSpec spec;
  spec.preset = "tiny-moe";  // 4 heads, 2 KV heads, 8 experts top-2, 2 layers
  spec.weight_type = DType::BF16;
  spec.threads = 1;
  return std::make_unique<SyntheticCheckpoint>(spec);
}

BenchOptions small_bench() {
  BenchOptions bo;
  bo.prompt_tokens = 12;
  bo.gen_tokens = 5;
  bo.batches = {1, 3};
  bo.copy_bytes = 1 << 20;
  bo.threads = 1;
  bo.keep_sampled = true;
  return bo;
}

struct BenchRun {
  BenchReport report;
  int64_t released = 0;  // bytes the synthetic checkpoint gave back to the OS
};

/** ft bench's run of tiny-moe on `ranks` ranks (CPU, one thread a rank) with `strategy`. */
BenchRun bench(int ranks, bool expert_parallel, MoeStrategy strategy) {
  const BenchOptions bo = small_bench();
  EngineOptions eo;
  eo.threads = 1;
  eo.device = DeviceChoice::kCpu;
  eo.tensor_parallel = ranks;
  eo.expert_parallel = expert_parallel;
  eo.moe.strategy = strategy;
  if (strategy == MoeStrategy::kOffload) eo.moe.cache = {CacheSizeMode::kSlots, 8, 0.0};
  plan_bench_engine(bo, eo);
  std::unique_ptr<SyntheticCheckpoint> ckpt = tiny_moe();
  const SyntheticCheckpoint* synth = ckpt.get();
  std::unique_ptr<ServingEngine> served = ServingEngine::load_shared(std::move(ckpt), eo);
  BenchRun run;
  run.report = run_bench(*served, bo);
  run.released = synth->released_bytes();
  return run;
}

void expect_same_ids(const BenchReport& got, const BenchReport& want, const char* what) {
  ASSERT_EQ(got.batches.size(), want.batches.size()) << what;
  for (size_t i = 0; i < want.batches.size(); ++i) {
    const BenchBatch& g = got.batches[i];
    ASSERT_EQ(g.sampled.size(), static_cast<size_t>(g.batch)) << what;
    for (const std::vector<int32_t>& ids : g.sampled) EXPECT_EQ(ids.size(), 1u + 5 + 4) << what;  // prompt, G, routes
    EXPECT_EQ(g.sampled, want.batches[i].sampled) << what << ", batch " << g.batch;
    EXPECT_EQ(g.experts_per_layer, want.batches[i].experts_per_layer) << what;  // the same routes, from rank 0
  }
}

TEST(BenchRanks, GroupSamplesWhatOneRankSamples) {
  const BenchRun one = bench(1, false, MoeStrategy::kFused);
  EXPECT_EQ(one.report.tensor_parallel, 1);
  EXPECT_TRUE(one.report.ranks.empty());
  EXPECT_FALSE(bench_json(one.report).contains("ranks"));  // one rank's JSON keeps its keys
  const BenchRun tp2 = bench(2, false, MoeStrategy::kFused);
  expect_same_ids(tp2.report, one.report, "TP2");
  EXPECT_EQ(tp2.report.tensor_parallel, 2);
  EXPECT_FALSE(tp2.report.expert_parallel);
  ASSERT_EQ(tp2.report.ranks.size(), 2u);
  EXPECT_EQ(tp2.report.ranks[1].rank, 1);
  EXPECT_EQ(tp2.report.ranks[1].moe_plan, "moe: strategy fused");
  EXPECT_EQ(tp2.report.weight_bytes, one.report.weight_bytes);  // the whole model, counted once
  EXPECT_EQ(tp2.released, 0);  // fused: the experts are read in place, nothing released

  const BenchRun ep = bench(2, true, MoeStrategy::kOffload);
  expect_same_ids(ep.report, one.report, "TP2+EP2 offload");
  EXPECT_TRUE(ep.report.expert_parallel);
  ASSERT_EQ(ep.report.ranks.size(), 2u);
  for (const BenchRank& rk : ep.report.ranks) EXPECT_EQ(rk.moe_cache_slots, 8);
  for (const BenchBatch& b : ep.report.batches) {
    ASSERT_EQ(b.rank_moe.size(), 2u);
    EXPECT_EQ(b.rank_moe[0].hits, b.moe.hits);  // the top level is rank 0's
    // Each rank looks its own experts up: together every token's top-2 in both layers, at least once a step.
    EXPECT_GE(b.rank_moe[0].lookups() + b.rank_moe[1].lookups(), 2 * 5);
  }
  const nlohmann::json j = bench_json(ep.report);
  ASSERT_TRUE(j.contains("ranks"));
  EXPECT_EQ(j["ranks"]["tensor_parallel"], 2);
  EXPECT_EQ(j["ranks"]["expert_parallel"], true);
  EXPECT_EQ(j["ranks"]["per_rank"].size(), 2u);
  EXPECT_EQ(j["results"][0]["moe_cache"]["ranks"].size(), 2u);
  // Each rank banked its own experts and dropped the other's: every expert page went back once both
  // views released it (the banks copied them; the ids above prove no rank read a released page).
  EXPECT_GE(ep.released, one.report.routed_expert_bytes * 9 / 10) << one.report.routed_expert_bytes;
}

TEST(SharedCheckpoint, APageGoesBackOnceEveryViewReleasedIt) {
  std::unique_ptr<SyntheticCheckpoint> ckpt = tiny_moe();
  const SyntheticCheckpoint* synth = ckpt.get();
  std::vector<std::unique_ptr<Checkpoint>> views = share_checkpoint(std::move(ckpt), 2);
  ASSERT_EQ(views.size(), 2u);
  const TensorInfo& t = views[1]->get("blk.0.ffn_up_exps.weight");  // [8, 256, 256] BF16: 1 MiB
  EXPECT_EQ(&t, &synth->get("blk.0.ffn_up_exps.weight"));           // the same tensors, not a copy
  EXPECT_EQ(views[0]->path(), synth->path());
  EXPECT_TRUE(views[0]->releases_memory());
  views[0]->release(t.data, t.bytes);
  views[0]->release(t.data, t.bytes);  // twice from one view: still one view's release
  EXPECT_EQ(synth->released_bytes(), 0);
  views[1]->release(t.data, t.bytes / 2);  // the first half's pages: both views released them
  const int64_t half = synth->released_bytes();
  EXPECT_GT(half, 0);
  EXPECT_LE(half, t.bytes / 2);
  views[1]->release(t.data, t.bytes);
  EXPECT_GT(synth->released_bytes(), half);
  EXPECT_LE(synth->released_bytes(), t.bytes);
  EXPECT_GE(synth->released_bytes(), t.bytes - 2 * 65536);  // whole pages inside the tensor
  views.clear();  // the checkpoint goes with the last view
  EXPECT_THROW(share_checkpoint(nullptr, 2), Error);
  EXPECT_THROW(share_checkpoint(tiny_moe(), 9), Error);
}

}  // namespace
}  // namespace ft
