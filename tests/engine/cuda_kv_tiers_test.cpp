// The host KV tier and the prompt cache on the CUDA backend (issue 39). Pages go to pinned host memory
// and back through copies queued on the engine's stream (backend/stream_copy.h, kv/kv_page_io.h):
//  - a page saved and then overwritten by later device work keeps what it held when saved, and a page
//    loaded is there for the device work queued after it, with no synchronisation in between;
//  - a tiny KV pool forces a served prefix to the host tier, and a second request that reaches it gets
//    it back: cached tokens equal to the prefix and logits bit-identical to an engine that kept the
//    prefix on the device (the same kernels run on the same values);
//  - an engine caching to --prompt-cache-dir, restarted, loads the prefix from disk with the same
//    logits as the first engine's device hit.
// qwen3 (full attention), gpt_oss (sliding-window layers: the node's swa page rides along) and
// qwen3_next (linear attention: the recurrent-state snapshot rides along). The MoE models run fused,
// so both engines compute every expert the same way.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <random>

#include "engine/engine.h"
#include "engine/engine_runner.h"
#include "engine/kv_tiers.h"
#include "engine/scheduler.h"
#include "engine/tier_engine.h"
#include "formats/checkpoint.h"
#include "backend/op_harness.h"
#include "kv/kv_page_io.h"
#include "test_util.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return shared_dir() + "/fixtures/hf/" + name; }

EngineOptions fused_tier_options(int64_t kv_tokens, double host_gib, const std::string& cache_dir = "") {
  EngineOptions o = tier_options(kv_tokens, host_gib, cache_dir);  // tier_engine.h
  o.moe.strategy = MoeStrategy::kFused;
  return o;
}

/** A CUDA engine, its tiers and a scheduler over them (tests/engine/tier_engine.h). */
struct CudaTierEngine : TierEngine {
  CudaTierEngine(const std::string& dir, const EngineOptions& o)
      : TierEngine(std::make_unique<Engine>(open_checkpoint(dir), make_cuda_ops(0), o)) {}
};

/** Logits equal bit for bit; the message says by how much they differ when not. */
void expect_same_logits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const bool same = std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0;
  EXPECT_TRUE(same) << what << ": logits differ (rel L2 " << rel_l2(got, want) << ")";
  report("kv tiers", what + " rel L2 vs the device-kept run", rel_l2(got, want));
}

class CudaKvTiers : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
      GTEST_SKIP() << "no CUDA device visible (set FT_REQUIRE_GPU=1 to make this a failure)";
    }
  }
};

TEST_P(CudaKvTiers, HostTierRestoreGivesBitIdenticalLogits) {
  const std::string model = GetParam();
  CudaTierEngine ref(fixture(model), fused_tier_options(1024, 0)), tier(fixture(model), fused_tier_options(64, 0.01));
  ASSERT_NE(tier.tiers.host(), nullptr);
  const auto* io = dynamic_cast<const KvPageIo*>(tier.tiers.view().io);
  ASSERT_NE(io, nullptr);
  EXPECT_STREQ(io->pool()->kind(), "cuda-pinned");
  const int64_t V = ref.engine->config().n_vocab;
  const std::vector<int32_t> a = prompt_of(1, 40, V), b = prompt_of(2, 50, V);
  for (CudaTierEngine* e : {&ref, &tier}) {
    e->run(a, 3);
    e->run(b, 3);  // 4 pages: evicts a's two cached pages (to the host tier when there is one)
  }
  EXPECT_EQ(tier.tiers.host()->stats().entries, 2);
  EXPECT_GT(io->pool()->reserved_bytes(), 0);  // the pages went to pinned blocks, not the heap
  const std::vector<float> want = ref.run(a, 4), got = tier.run(a, 4);
  EXPECT_EQ(ref.cached, 32);  // the two whole pages before the last prompt token
  EXPECT_EQ(tier.cached, 32);
  EXPECT_EQ(tier.sched.tier_hits().host, 2);
  EXPECT_EQ(tier.tokens, ref.tokens);
  tier.tiers.host()->check_integrity();
  expect_same_logits(got, want, model + " host tier");
}

TEST_P(CudaKvTiers, PromptCacheSurvivesARestart) {
  const std::string model = GetParam();
  const std::string dir = scratch_path("cuda_prompt_cache_" + model);
  fs::remove_all(dir);
  std::vector<int32_t> a2, want_tokens;
  std::vector<float> want;
  {
    CudaTierEngine first(fixture(model), fused_tier_options(1024, 0, dir));
    const std::vector<int32_t> a = prompt_of(3, 40, first.engine->config().n_vocab);
    a2 = a;
    a2.resize(36);  // shares a's first two pages, then differs
    for (int32_t& t : std::span<int32_t>(a2).subspan(33)) t = (t + 7) % 1000;
    first.run(a, 3);
    want = first.run(a2, 3);  // a2 hits a's pages on the device
    want_tokens = first.tokens;
    EXPECT_EQ(first.cached, 32);
  }  // the writer finishes its queue (each page once its copy from the device is done) before the store closes
  CudaTierEngine second(fixture(model), fused_tier_options(1024, 0, dir));
  ASSERT_NE(second.tiers.disk(), nullptr);
  EXPECT_GE(second.tiers.disk()->stats().entries, 2);
  EXPECT_EQ(second.tiers.disk()->skipped(), 0);
  const std::vector<float> got = second.run(a2, 3);
  EXPECT_EQ(second.cached, 32);
  EXPECT_EQ(second.sched.tier_hits().disk, 2);
  EXPECT_EQ(second.tokens, want_tokens);
  expect_same_logits(got, want, model + " prompt cache");
  second.tiers.disk()->flush();  // its writer may still be writing a2's last pages into the folder
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, CudaKvTiers,
                         ::testing::Values("qwen3", "gpt_oss", "qwen3_next", "deepseek_v4", "qwen4_exp"));

/** The copies' order on the stream, on qwen3's cache: a page saved and then zeroed by later device work
 *  keeps its old bytes (the copy out ran first), and loaded into another page it is there for a read
 *  queued after, with no synchronisation between them; the host sees the bytes after wait_ready(). */
TEST(CudaKvPageIo, CopiesAreOrderedWithTheStream) {
  if (cuda_device_count() == 0) {
    if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
    GTEST_SKIP() << "no CUDA device visible";
  }
  EngineOptions o = fused_tier_options(64, 0.01);
  o.kv_cache_dtype = KvCacheDtype::kF32;  // pages compared byte for byte with the f32 values written
  CudaTierEngine e(fixture("qwen3"), o);
  auto* io = dynamic_cast<KvPageIo*>(e.tiers.view().io);
  ASSERT_NE(io, nullptr);
  Ops& ops = e.engine->ops();
  const KvCache& kv = e.engine->kv();
  // Page 1 of every layer's K and V: random bytes of the page's dtype (finite floats).
  std::vector<std::vector<float>> wrote;
  for (int32_t l = 0; l < kv.config().n_layer; ++l) {
    const KvLayer layer = kv.layer(l);
    for (const Tensor* t : {&layer.k, &layer.v}) {
      const Tensor page = t->slice(1, 1);
      wrote.push_back(rand_bf16(static_cast<size_t>(page.numel()), 100 + static_cast<uint32_t>(wrote.size())));
      ops.copy(Tensor(wrote.back().data(), DType::F32, page.shape.data(), page.ndim), page);
    }
  }
  ops.synchronize();
  std::shared_ptr<PageContents> c = io->save(1, -1, -1);
  EXPECT_TRUE(c->kv.get_allocator().pooled(c->kv.data())) << "the page's bytes are not in the pinned pool";
  ASSERT_NE(c->ready, nullptr);
  for (int32_t l = 0; l < kv.config().n_layer; ++l) {  // queued after the copy out
    const KvLayer layer = kv.layer(l);
    ops.zero(layer.k.slice(1, 1));
    ops.zero(layer.v.slice(1, 1));
  }
  io->load(*c, 2, -1, -1);  // queued after the zeroing; no wait
  c.reset();                // the pool block may go back at once: only the device uses it, in order
  size_t i = 0;
  for (int32_t l = 0; l < kv.config().n_layer; ++l) {
    const KvLayer layer = kv.layer(l);
    for (const Tensor* t : {&layer.k, &layer.v}) {
      const Tensor p1 = t->slice(1, 1), p2 = t->slice(2, 1);
      std::vector<float> got(static_cast<size_t>(p2.numel())), zeroed(static_cast<size_t>(p1.numel()));
      ops.copy(p2, Tensor(got.data(), DType::F32, p2.shape.data(), p2.ndim));
      ops.copy(p1, Tensor(zeroed.data(), DType::F32, p1.shape.data(), p1.ndim));
      EXPECT_EQ(got, wrote[i]) << "layer " << l << (t == &layer.k ? " K" : " V") << ": the loaded page";
      EXPECT_EQ(std::count(zeroed.begin(), zeroed.end(), 0.0f), static_cast<std::ptrdiff_t>(zeroed.size()));
      ++i;
    }
  }
  // The host's view of a saved page, after its fence: the bytes the device held.
  std::shared_ptr<PageContents> d = io->save(2, -1, -1);
  d->wait_ready();
  size_t off = 0;
  i = 0;
  for (int32_t l = 0; l < kv.config().n_layer; ++l) {
    const KvLayer layer = kv.layer(l);
    for (const Tensor* t : {&layer.k, &layer.v}) {
      const int64_t bytes = t->slice(2, 1).bytes();
      ASSERT_LE(off + static_cast<size_t>(bytes), d->kv.size());
      ASSERT_EQ(t->dtype, DType::F32);
      EXPECT_EQ(std::memcmp(d->kv.data() + off, wrote[i].data(), static_cast<size_t>(bytes)), 0) << "layer " << l;
      off += static_cast<size_t>(bytes);
      ++i;
    }
  }
  EXPECT_EQ(off, d->kv.size());
}

}  // namespace
}  // namespace ft::testing
