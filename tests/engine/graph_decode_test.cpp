// Decode graphs through the engine on the CPU build: ReplayOps is the CPU backend with a "graph"
// that records the step's closure and re-runs it, so the engine's graph path (padding to recorded
// batch sizes, the spare KV page, fixed input buffers, the capacity-wide batch description) is
// exercised without a GPU and must equal eager decode bit for bit. tests/engine/cuda_graph_test.cpp runs
// the same checks with real CUDA graphs.
#include <set>

#include "backend/cpu/cpu_ops.h"
#include "graph_decode.h"

namespace ft::testing {
namespace {

/** CPU backend whose capture() keeps `body` and whose launch() runs it again: a replay reads its
 *  inputs from the same buffers, as a CUDA graph does. `short_len`: its Ops::decode_short_kv_len. */
class ReplayOps : public CpuOps {
 public:
  explicit ReplayOps(int* captures, int32_t short_len = 0)
      : CpuOps(1), captures_(captures), short_len_(short_len) {}
  bool supports_graphs() const override { return true; }
  int32_t decode_short_kv_len() const override { return short_len_; }
  std::unique_ptr<StepGraph> capture(const std::function<void()>& body) override {
    ++*captures_;
    struct Replay final : StepGraph {
      explicit Replay(std::function<void()> f) : fn(std::move(f)) {}
      bool valid() const override { return true; }
      void launch() override { fn(); }
      std::function<void()> fn;
    };
    return std::make_unique<Replay>(body);
  }

 private:
  int* captures_;
  int32_t short_len_;
};

/** ReplayOps with a short key range of `short_len`, whose attention records each pure decode call's
 *  BatchInfo::max_kv_len and counts calls whose bound is shorter than a query's key range (a launch
 *  shaped for short ranges would read too few keys). */
class ShortRangeReplayOps final : public ReplayOps {
 public:
  ShortRangeReplayOps(int* captures, int32_t short_len) : ReplayOps(captures, short_len) {}
  void attention(const AttentionParams& p, const BatchInfo& batch, const Tensor& q, KvLayer kv, Tensor out,
                 ActQ8* out_q8) override {
    if (batch.n_tokens == batch.n_seqs) {
      decode_bounds.insert(batch.max_kv_len);
      for (int32_t t = 0; t < batch.n_tokens; ++t)
        if (batch.positions.ptr<int32_t>()[t] >= batch.max_kv_len) ++too_short;
    }
    CpuOps::attention(p, batch, q, kv, out, out_q8);
  }
  std::set<int32_t> decode_bounds;
  int too_short = 0;
};

/** CPU backend that claims graphs but whose every recording fails (as a CUDA capture can). */
class FailingGraphOps final : public CpuOps {
 public:
  explicit FailingGraphOps(int* attempts) : CpuOps(1), attempts_(attempts) {}
  bool supports_graphs() const override { return true; }
  std::unique_ptr<StepGraph> capture(const std::function<void()>&) override {
    ++*attempts_;
    fail(ErrorCode::kInternal, "recording failed (test)");
  }

 private:
  int* attempts_;
};

EngineOptions graph_options(int32_t max_bs) {
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = max_bs;
  return o;
}

class GraphDecode : public ::testing::TestWithParam<std::string> {};

TEST_P(GraphDecode, ReplayEqualsEagerBitForBit) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  int captures = 0;
  Engine graphed(open_checkpoint(dir), std::make_unique<ReplayOps>(&captures), graph_options(4));
  Engine eager(open_checkpoint(dir), std::make_unique<CpuOps>(1), graph_options(4));  // CpuOps: no graphs
  EXPECT_EQ(graphed.graph_batch_sizes(), (std::vector<int32_t>{1, 2, 4}));
  expect_graph_equals_eager(graphed, eager, graph_decode_requests(read_reference(dir)));
  EXPECT_EQ(captures, 3);
  // The padding rows wrote only the spare page: every pool page is free again.
  EXPECT_EQ(graphed.kv().pool().n_free(), graphed.kv().pool().n_pages());
  if (const PagePool* states = graphed.kv().state_pool()) EXPECT_EQ(states->n_free(), states->n_pages());
}

INSTANTIATE_TEST_SUITE_P(Models, GraphDecode, ::testing::Values("qwen3", "qwen2_moe", "qwen3_next", "qwen3_5"));

TEST(GraphDecode, ShortKeyRangesGetTheirOwnGraphs) {
  // A backend whose decode launches change shape at 44 keys: each batch size records one graph per
  // side of that bound, and a step replays the graph whose bound holds its longest range. The
  // requests' decode steps (prompts 37, 130 and 18; 12, 7 and 3 tokens) run at positions 37.., 130..
  // and 18..: steps 1-2 at batch 4 and 3-6 at batch 2 reach past 44 keys, step 7 (position 43, batch 1)
  // fits, steps 8-11 do not. So 4 recordings (4 long, 2 long, 1 short, 1 long) and 7 replays, and
  // the logits equal an eager engine's (the CPU's attention has one shape).
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3";
  int captures = 0;
  auto ops = std::make_unique<ShortRangeReplayOps>(&captures, 44);
  ShortRangeReplayOps* seen = ops.get();
  Engine graphed(open_checkpoint(dir), std::move(ops), graph_options(4));
  Engine eager(open_checkpoint(dir), std::make_unique<CpuOps>(1), graph_options(4));
  const auto reqs = graph_decode_requests(read_reference(dir));
  ASSERT_EQ(reqs[0].prompt.size(), 37u);
  ASSERT_EQ(reqs[1].prompt.size(), 130u);
  ASSERT_EQ(reqs[2].prompt.size(), 18u);
  const auto g = generate(graphed, reqs), e = generate(eager, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(g[i].tokens, e[i].tokens) << i;
    EXPECT_TRUE(same_bits(g[i].step_logits, e[i].step_logits)) << i;
  }
  EXPECT_EQ(captures, 4);
  EXPECT_EQ(graphed.graph_replays(), 7);
  const int32_t capacity = static_cast<int32_t>(graphed.kv().pool().n_pages()) * graphed.kv().pool().page_size();
  EXPECT_EQ(seen->decode_bounds, (std::set<int32_t>{44, capacity}));  // decode steps ran only with the graphs' bounds
  EXPECT_EQ(seen->too_short, 0);
}

TEST(GraphDecode, SizesFollowTheFlagAndLimits) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3";
  int captures = 0;
  EngineOptions o = graph_options(16);
  EXPECT_EQ(Engine(open_checkpoint(dir), std::make_unique<ReplayOps>(&captures), o).graph_batch_sizes(),
            (std::vector<int32_t>{1, 2, 4, 8, 16}));
  o.cuda_graph_max_bs = 12;
  o.max_seqs = 6;  // never more sequences than a step may hold
  EXPECT_EQ(Engine(open_checkpoint(dir), std::make_unique<ReplayOps>(&captures), o).graph_batch_sizes(),
            (std::vector<int32_t>{1, 2, 4, 6}));
  o.cuda_graph_max_bs = 0;
  EXPECT_TRUE(Engine(open_checkpoint(dir), std::make_unique<ReplayOps>(&captures), o).graph_batch_sizes().empty());
  o.cuda_graph_max_bs = -1;
  try {
    Engine(open_checkpoint(dir), std::make_unique<ReplayOps>(&captures), o);
    ADD_FAILURE() << "a negative --cuda-graph-max-bs was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("--cuda-graph-max-bs"), std::string::npos);
  }
  EXPECT_EQ(captures, 0);  // nothing is recorded before the first decode step
}

TEST(GraphDecode, EveryMoeStrategyReplaysLikeEager) {
  // offload, cpu and hybrid record their decode steps too (cpu and hybrid exchange with the CPU
  // executor through moe/host_exchange.h, which no step waits on): same tokens, logits and cache
  // traffic as eager engines. The hybrid engines pin their fetch cap, so both use the same.
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  for (MoeStrategy st : {MoeStrategy::kOffload, MoeStrategy::kCpu, MoeStrategy::kHybrid}) {
    SCOPED_TRACE(moe_strategy_name(st));
    int captures = 0;
    EngineOptions o = graph_options(4);
    o.moe.strategy = st;
    if (st == MoeStrategy::kHybrid) o.moe.fetch_cap = 1;
    if (st != MoeStrategy::kCpu) {  // cpu has no cache (EngineOptions::validate refuses a size for it)
      o.moe.cache.mode = CacheSizeMode::kSlots;  // the smallest legal cache (2 x 64 of 4 x 64 experts): steps miss
      o.moe.cache.slots = 128;
    }
    Engine graphed(open_checkpoint(dir), std::make_unique<ReplayOps>(&captures), o);
    EXPECT_EQ(graphed.graph_batch_sizes(), (std::vector<int32_t>{1, 2, 4}));
    o.cuda_graph_max_bs = 0;
    Engine eager(open_checkpoint(dir), std::make_unique<CpuOps>(1), o);
    expect_graph_equals_eager(graphed, eager, graph_decode_requests(read_reference(dir)));
    EXPECT_GT(captures, 0);
    const auto a = graphed.moe_report(), b = eager.moe_report();
    ASSERT_TRUE(a && b);
    EXPECT_EQ(a->total.hits, b->total.hits);
    EXPECT_EQ(a->total.misses, b->total.misses);
    EXPECT_EQ(a->total.cpu_experts, b->total.cpu_experts);
    if (st != MoeStrategy::kOffload) {
      EXPECT_GT(a->total.cpu_experts, 0);
    }
  }
}

TEST(GraphDecode, HybridCalibrationRecordsAgainForEachCap) {
  // Without --moe-fetch-cap the engine times each candidate fetch policy on decode steps at start. A
  // recorded graph holds the policy it was recorded with, so each change drops the graphs: the steps
  // after the calibration replay graphs of the chosen one and give what an eager engine pinned to it
  // (--moe-cpu-cost) gives
  // (on the CPU backend the executor's experts equal the backend's bit for bit for these BF16 experts
  // (--moe-cpu-int8 changes only Q4_K ones), so the cache's
  // state after the calibration does not change the logits).
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  int captures = 0;
  EngineOptions o = graph_options(4);
  o.moe.strategy = MoeStrategy::kHybrid;
  o.moe.cache.mode = CacheSizeMode::kSlots;
  o.moe.cache.slots = 128;
  // A prompt's streamed layers stream whole: a CPU share takes uncached experts, and the cache after
  // the calibration's steps holds others than the pinned engine's, so the CPU would add other experts
  // in another order (bf16 tolerance, not the same bits).
  o.moe.prefill_cpu_share = 0.0;
  Engine graphed(open_checkpoint(dir), std::make_unique<ReplayOps>(&captures), o);
  const auto report = graphed.moe_report();
  ASSERT_TRUE(report);
  ASSERT_GT(report->cpu_cost, 0);  // a planned split (hybrid's calibration times ten)
  const int calibration_captures = captures;
  EXPECT_GE(calibration_captures, 5);  // the batch-1 graph recorded once per candidate
  o.moe.cpu_cost = report->cpu_cost;
  o.moe.cpu_token_cost = report->cpu_token_cost;
  o.cuda_graph_max_bs = 0;
  Engine eager(open_checkpoint(dir), std::make_unique<CpuOps>(1), o);
  const auto reqs = graph_decode_requests(read_reference(dir));
  const int64_t replays = graphed.graph_replays();
  const auto g = generate(graphed, reqs), e = generate(eager, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(g[i].tokens, e[i].tokens) << i;
    EXPECT_TRUE(same_bits(g[i].step_logits, e[i].step_logits)) << i;
  }
  EXPECT_EQ(graphed.graph_replays() - replays, 8);  // as in expect_graph_equals_eager
  EXPECT_EQ(captures - calibration_captures, 3);    // batch sizes 4, 2, 1 recorded afresh
}

TEST(GraphDecode, FailedRecordingFallsBackToEagerOnce) {
  // A recording that fails leaves that step's eager result in place and the batch size eager from
  // then on: same tokens and logits as an engine without graphs, one attempt per batch size.
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3";
  int attempts = 0;
  Engine failing(open_checkpoint(dir), std::make_unique<FailingGraphOps>(&attempts), graph_options(4));
  Engine eager(open_checkpoint(dir), std::make_unique<CpuOps>(1), graph_options(4));
  const auto reqs = graph_decode_requests(read_reference(dir));
  const auto f = generate(failing, reqs), e = generate(eager, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(f[i].tokens, e[i].tokens);
    EXPECT_TRUE(same_bits(f[i].step_logits, e[i].step_logits));
  }
  EXPECT_EQ(attempts, 3);  // batch sizes 4, 2, 1: once each
  EXPECT_EQ(failing.graph_replays(), 0);
}

TEST(KvCacheDtype, CpuKeepsF32) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3";
  EngineOptions o = small_engine_options();
  auto load = [&](const std::string& dt) {
    o.kv_cache_dtype = kv_cache_dtype_from_name(dt).value();
    return Engine::load(dir, o);
  };
  EXPECT_EQ(load("auto")->kv().config().dtype, DType::F32);
  EXPECT_EQ(load("f32")->kv().config().dtype, DType::F32);
  // (f16, once refused here with kInvalidArgument, cannot be given now that the field is an enum: `ft`
  // refuses it at --kv-cache-dtype, and -ctk f16 means bf16.)
  for (const auto& [dt, code] : {std::pair<std::string, ErrorCode>{"bf16", ErrorCode::kUnsupported}}) {
    try {
      load(dt);
      ADD_FAILURE() << "--kv-cache-dtype " << dt << " was accepted on the CPU backend";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << dt;
      EXPECT_NE(std::string(e.what()).find("--kv-cache-dtype"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ft::testing
