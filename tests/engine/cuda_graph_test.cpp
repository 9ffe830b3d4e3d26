// CUDA-graph decode through the engine: decode steps replayed from CUDA graphs (padded to the
// recorded batch sizes 1, 2, 4) equal eager decode bit for bit, for a dense and a MoE fixture
// (fused) and for MoE offload with the smallest legal expert cache (admission and gather inside
// the graph, so a replay with new routes proves the step never synchronises with the host).
#include "graph_decode.h"
#include "backend/cuda_factory.h"
#include "backend/op_harness.h"
#include "qwen4_exp_variant.h"

namespace ft::testing {
namespace {

class CudaGraphDecode : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
      GTEST_SKIP() << "no CUDA device visible (set FT_REQUIRE_GPU=1 to make this a failure)";
    }
  }
  static EngineOptions options(int32_t max_bs) {
    EngineOptions o = small_engine_options();
    o.cuda_graph_max_bs = max_bs;
    return o;
  }
};

TEST_P(CudaGraphDecode, ReplayEqualsEagerBitForBit) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  Engine graphed(open_checkpoint(dir), make_cuda_ops(0), options(4));
  Engine eager(open_checkpoint(dir), make_cuda_ops(0), options(0));
  EXPECT_EQ(graphed.graph_batch_sizes(), (std::vector<int32_t>{1, 2, 4}));
  expect_graph_equals_eager(graphed, eager, graph_decode_requests(read_reference(dir)));
}

TEST_P(CudaGraphDecode, ProgrammaticLaunchChangesNoBit) {
  // Launched with programmatic dependent launch (backend/cuda/pdl.cuh) the decode kernels are the same
  // kernels, so graphed and eager decode with it equal eager decode without it bit for bit. A kernel
  // that read, before its wait, what the kernel before it writes would show up here as a difference.
  if (!cuda_pdl_enabled(0)) GTEST_SKIP() << "programmatic dependent launch needs sm_90 code on an sm_90+ GPU";
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  const auto reqs = graph_decode_requests(read_reference(dir));
  set_cuda_pdl(false);
  ASSERT_FALSE(cuda_pdl_enabled(0));
  Engine plain(open_checkpoint(dir), make_cuda_ops(0), options(0));
  const auto want = generate(plain, reqs);
  set_cuda_pdl(true);
  ASSERT_TRUE(cuda_pdl_enabled(0));
  Engine graphed(open_checkpoint(dir), make_cuda_ops(0), options(4));
  Engine eager(open_checkpoint(dir), make_cuda_ops(0), options(0));
  for (Engine* e : {&graphed, &eager}) {
    const auto got = generate(*e, reqs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      SCOPED_TRACE(std::string(e == &graphed ? "graphed" : "eager") + ", request " + std::to_string(i));
      EXPECT_EQ(got[i].tokens, want[i].tokens);
      EXPECT_TRUE(same_bits(got[i].step_logits, want[i].step_logits));
    }
  }
  EXPECT_GT(graphed.graph_replays(), 0);
}

TEST_P(CudaGraphDecode, OffloadSmallestCacheReplayEqualsEager) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  EngineOptions o = options(4);
  int64_t smallest = 0;  // the smallest legal cache (2 x experts per layer): misses every step
  {
    Engine probe(open_checkpoint(dir), make_cuda_ops(0), o);
    if (!probe.moe_plan()) GTEST_SKIP() << GetParam() << " is dense";
    smallest = std::min<int64_t>(2 * probe.config().n_expert, probe.moe_budget()->total_experts);
  }
  o.moe.strategy = MoeStrategy::kOffload;
  o.moe.cache = {CacheSizeMode::kSlots, smallest, 0.0};
  Engine graphed(open_checkpoint(dir), make_cuda_ops(0), o);
  o.cuda_graph_max_bs = 0;
  Engine eager(open_checkpoint(dir), make_cuda_ops(0), o);
  expect_graph_equals_eager(graphed, eager, graph_decode_requests(read_reference(dir)));
  const auto a = graphed.moe_report(), b = eager.moe_report();
  ASSERT_TRUE(a && b);
  EXPECT_GT(a->total.misses, 0);
  EXPECT_EQ(a->total.hits, b->total.hits);
  EXPECT_EQ(a->total.misses, b->total.misses);
}

TEST_P(CudaGraphDecode, Bf16KvCache) {
  // --kv-cache-dtype bf16: prompt logits within the fixture tolerance of the reference (dense models;
  // MoE routers may flip near-ties on bf16 keys, as with bf16 activations), graphs still exact.
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  EngineOptions o = options(4);
  o.kv_cache_dtype = KvCacheDtype::kBf16;
  Engine graphed(open_checkpoint(dir), make_cuda_ops(0), o);
  if (graphed.moe_plan()) GTEST_SKIP() << GetParam() << " is a MoE model";
  EXPECT_EQ(graphed.kv().config().dtype, DType::BF16);
  const std::vector<RefCase> cases = read_reference(dir);
  const int64_t V = graphed.config().n_vocab;
  for (const RefCase& c : cases) {
    const auto r = generate(graphed, {greedy_request(c.input_ids, 1)})[0];
    EXPECT_LE(max_row_rel_l2(r.prompt_logits, c.logits, V), 2e-2) << c.name;
  }
  o.cuda_graph_max_bs = 0;
  Engine eager(open_checkpoint(dir), make_cuda_ops(0), o);
  expect_graph_equals_eager(graphed, eager, graph_decode_requests(cases));
}

TEST_P(CudaGraphDecode, StepsAcrossTheShortKeyRangeEqualEager) {
  // Two sequences decode past the backend's short bound (Ops::decode_short_kv_len: the decode
  // attention merges in a cluster up to it): prompts of bound - 4 and 10 tokens, 8 tokens each. Steps
  // whose longest range fits replay that bound's graph, later ones the capacity's. Eager decode picks
  // its form by the same bound, so every step equals it bit for bit.
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  const int32_t short_len = make_cuda_ops(0)->decode_short_kv_len();
  if (cuda_pdl_enabled(0)) {
    EXPECT_GT(short_len, 0);  // sm_90 code on an sm_90+ GPU: clusters
  }
  const int32_t bound = short_len > 0 ? short_len : 1024;
  EngineOptions o = options(4);
  o.kv_tokens = 2 * bound;
  // Both prompts in one prefill step, so every later step is a pure decode of both (generate() runs the
  // server's loop, which would otherwise decode the short request beside the long prompt's last chunk).
  o.max_step_tokens = 2 * bound;
  std::vector<int32_t> long_prompt(static_cast<size_t>(bound - 4));
  for (size_t i = 0; i < long_prompt.size(); ++i) long_prompt[i] = static_cast<int32_t>((i * 7919 + 13) % 500);
  std::vector<GenerateRequest> reqs = {greedy_request(long_prompt, 8),
                                       greedy_request(std::vector<int32_t>(long_prompt.begin(), long_prompt.begin() + 10), 8)};
  for (GenerateRequest& r : reqs) r.prompt_logits = false, r.step_logits = true;
  Engine graphed(open_checkpoint(dir), make_cuda_ops(0), o);
  o.cuda_graph_max_bs = 0;
  Engine eager(open_checkpoint(dir), make_cuda_ops(0), o);
  const auto g = generate(graphed, reqs), e = generate(eager, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE("request " + std::to_string(i));
    EXPECT_EQ(g[i].tokens, e[i].tokens);
    EXPECT_TRUE(same_bits(g[i].step_logits, e[i].step_logits));
  }
  // 7 decode steps at positions bound - 4 .. bound + 2: 4 fit the bound, 3 do not; one recording per
  // side (one in all without a short form).
  EXPECT_EQ(graphed.graph_replays(), short_len > 0 ? 5 : 6);
}

TEST_P(CudaGraphDecode, HostEmbeddingsEqualDeviceBitForBit) {
  // --embed-weights host: the same gather kernel reads the table from pinned host memory, so graphed
  // decode equals the device table's bit for bit, and the table's bytes leave the GPU's budget (the
  // expert cache's resident bytes shrink by them). MoE fixtures run offload.
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  EngineOptions o = options(4);
  o.embed_weights = EmbedPlacement::kDevice;
  auto device = std::make_unique<Engine>(open_checkpoint(dir), make_cuda_ops(0), o);
  const bool moe = device->moe_plan() != nullptr;
  if (moe) {
    o.moe.strategy = MoeStrategy::kOffload;
    device = std::make_unique<Engine>(open_checkpoint(dir), make_cuda_ops(0), o);
  }
  EXPECT_EQ(device->host_mapped_weight_bytes(), 0);
  o.embed_weights = EmbedPlacement::kHost;
  Engine host(open_checkpoint(dir), make_cuda_ops(0), o);
  const ModelConfig& c = host.config();
  // The fixtures' tables are bf16; qwen4_exp's n-gram tables move with the token table (issue 42).
  const int64_t tables = GetParam() == "qwen4_exp" ? qwen4_exp_table_bytes(dir).first + qwen4_exp_table_bytes(dir).second
                                                   : c.n_vocab * c.n_embd * 2;
  EXPECT_EQ(host.host_mapped_weight_bytes(), tables);
  if (moe) {
    EXPECT_EQ(host.moe_budget()->resident_bytes, device->moe_budget()->resident_bytes - host.host_mapped_weight_bytes());
  }
  const auto reqs = graph_decode_requests(read_reference(dir));
  const auto h = generate(host, reqs), d = generate(*device, reqs);
  ASSERT_EQ(h.size(), d.size());
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(h[i].tokens, d[i].tokens) << i;
    EXPECT_TRUE(same_bits(h[i].step_logits, d[i].step_logits)) << i;
  }
  EXPECT_GT(host.graph_replays(), 0);
}

TEST(CudaEmbedWeights, Qwen4ExpNgramShardsApartReadFromPinnedHostMemory) {
  if (cuda_device_count() == 0) {
    if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
    GTEST_SKIP() << "no CUDA device visible";
  }
  // qwen4_exp with its n-gram shards apart in the file: host stacks each table in pinned, mapped host
  // memory (WeightLoader::get_stacked_host_mapped), and graphed decode reading it equals the device
  // tables' (stacked on the GPU) bit for bit.
  const Qwen4ExpVariant apart("cuda_apart", false);
  const auto [token, ngram] = qwen4_exp_table_bytes(apart.dir());
  EngineOptions o = small_engine_options();
  o.cuda_graph_max_bs = 4;
  o.moe.strategy = MoeStrategy::kOffload;
  o.embed_weights = EmbedPlacement::kDevice;
  Engine device(open_checkpoint(apart.dir()), make_cuda_ops(0), o);
  o.embed_weights = EmbedPlacement::kHost;
  Engine host(open_checkpoint(apart.dir()), make_cuda_ops(0), o);
  EXPECT_EQ(host.host_mapped_weight_bytes(), token + ngram);
  EXPECT_EQ(host.moe_budget()->resident_bytes, device.moe_budget()->resident_bytes - token - ngram);
  const auto reqs = graph_decode_requests(read_reference(shared_dir() + "/fixtures/hf/qwen4_exp"));
  const auto h = generate(host, reqs), d = generate(device, reqs);
  ASSERT_EQ(h.size(), d.size());
  for (size_t i = 0; i < h.size(); ++i) {
    EXPECT_EQ(h[i].tokens, d[i].tokens) << i;
    EXPECT_TRUE(same_bits(h[i].step_logits, d[i].step_logits)) << i;
  }
  EXPECT_GT(host.graph_replays(), 0);
}

TEST(CudaEmbedWeights, TiedTableRefusesHost) {
  if (cuda_device_count() == 0) {
    if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
    GTEST_SKIP() << "no CUDA device visible";
  }
  // The LM head reads a tied table whole every step: host is refused (auto keeps it on the GPU).
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_tied";
  EngineOptions o = small_engine_options();
  o.embed_weights = EmbedPlacement::kHost;
  try {
    Engine e(open_checkpoint(dir), make_cuda_ops(0), o);
    ADD_FAILURE() << "--embed-weights host was accepted for a tied model";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("ties its token embedding table"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaGraphDecode,
                         ::testing::Values("qwen3", "llama", "qwen2_moe", "mixtral", "olmoe", "qwen3_next", "qwen3_5",
                                           "qwen4_exp"));

}  // namespace
}  // namespace ft::testing
