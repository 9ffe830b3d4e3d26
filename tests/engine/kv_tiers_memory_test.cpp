// The KV tiers' host memory in the engine's memory plan (the start-up banner's table): a "KV host tier"
// row of the most host memory their saved pages take (KvTiers::pool_bytes: the --kv-host-gib bound,
// the prompt cache's write queue, a margin), none without a tier; the saved pages come from that pool.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/engine.h"
#include "engine/kv_tiers.h"
#include "engine/memory_plan.h"
#include "kv/kv_page_io.h"
#include "kv/page_store.h"
#include "log_capture.h"
#include "test_util.h"
#include "util/progress.h"

namespace ft {
namespace {

std::string fixture(const std::string& name) { return testing::shared_dir() + "/fixtures/hf/" + name; }

/** The qwen3 fixture's engine for these tests: 256 KV tokens in pages of 16, one thread. */
EngineOptions tier_options() {
  EngineOptions o;
  o.threads = 1;
  o.kv_tokens = 256;
  o.page_size = 16;
  o.max_step_tokens = 64;
  o.max_logit_rows = 16;
  return o;
}

const MemoryRow* row_named(const std::vector<MemoryRow>& rows, const std::string& name) {
  for (const MemoryRow& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

TEST(KvTiersMemory, TheHostTierIsARowOfTheMemoryPlan) {
  EngineOptions o = tier_options();
  EXPECT_EQ(row_named(memory_rows(Engine::load(fixture("qwen3"), o)->memory_plan()), "KV host tier"), nullptr);
  o.kv_host_gib = 0.5;
  auto e = Engine::load(fixture("qwen3"), o);
  const std::vector<MemoryRow> rows = memory_rows(e->memory_plan());
  const MemoryRow* r = row_named(rows, "KV host tier");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->device, 0);
  EXPECT_EQ(r->host, (int64_t{1} << 29) + KvTiers::kPoolMargin);
  EXPECT_EQ(r->detail, "evicted prefix pages (--kv-host-gib 0.5), at most; taken as used");
  EXPECT_NE(memory_table(e->memory_plan(), "device").find("KV host tier"), std::string::npos);
  KvTiers tiers(*e);
  auto* io = dynamic_cast<KvPageIo*>(tiers.view().io);
  ASSERT_NE(io, nullptr);
  ASSERT_NE(io->pool(), nullptr);
  EXPECT_EQ(io->pool()->cap_bytes(), r->host);
  const std::shared_ptr<PageContents> c = io->save(0, -1, -1);
  EXPECT_TRUE(c->kv.get_allocator().pooled(c->kv.data()));
  EXPECT_EQ(static_cast<int64_t>(c->kv.size()), io->kv_bytes());
  c->wait_ready();
  // With a prompt cache: its write queue in the pool and its read-ahead map (heap) beside it, each bounded
  // by min(--prompt-cache-gib, 1 GiB); the pool's cap leaves the read-ahead out.
  o.prompt_cache_dir = testing::scratch_path("kv_tiers_memory_disk");
  o.prompt_cache_gib = 0.25;
  auto d = Engine::load(fixture("qwen3"), o);
  const std::vector<MemoryRow> drows = memory_rows(d->memory_plan());
  const MemoryRow* rd = row_named(drows, "KV host tier");
  ASSERT_NE(rd, nullptr);
  EXPECT_EQ(rd->host, (int64_t{1} << 29) + 2 * (int64_t{1} << 28) + KvTiers::kPoolMargin);
  EXPECT_EQ(rd->detail, "evicted prefix pages (--kv-host-gib 0.5), prompt-cache writes queued and reads ahead, at most; "
                        "taken as used");
  EXPECT_EQ(KvTiers::pool_bytes(o), (int64_t{1} << 29) + (int64_t{1} << 28) + KvTiers::kPoolMargin);
  std::filesystem::remove_all(o.prompt_cache_dir);
}

TEST(KvTiersMemory, TheHostTierCountsAPageAsItsLogLineSays) {
  // The trial saw the log say 46080 bytes a page and the tier count 46592 for the same page: the tier
  // added its path (4 bytes a token: a page ending 128 tokens in). Both are KvPageIo::page_bytes() now.
  EngineOptions o = tier_options();
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  o.kv_host_gib = 0.5;
  testing::LogCapture log(spdlog::level::info);
  auto e = Engine::load(fixture("qwen3"), o);
  KvTiers tiers(*e);
  auto* io = dynamic_cast<KvPageIo*>(tiers.view().io);
  ASSERT_NE(io, nullptr);
  // qwen3's fixture: 2 layers x K and V x 2 heads x (16 E4M3 codes + one f32 scale) x 16 tokens.
  EXPECT_EQ(io->page_bytes(), 2 * 2 * 2 * (16 + 4) * 16);
  EXPECT_EQ(log.wait_for([](const std::string& l) { return l.find("(2560 bytes a page, host memory)") != std::string::npos; })
                .size(),
            1u);
  const std::shared_ptr<PageContents> c = io->save(0, -1, -1);
  c->wait_ready();
  EXPECT_EQ(c->bytes(), io->page_bytes());
  std::vector<int32_t> path(32);  // the second page of a path: what the prefix cache evicts first
  for (size_t i = 0; i < path.size(); ++i) path[i] = static_cast<int32_t>(i + 1);
  tiers.host()->put(path_hash(path, 16), path, c);
  EXPECT_EQ(tiers.host()->stats().entries, 1);
  EXPECT_EQ(tiers.host()->stats().bytes, 2560);
  tiers.host()->check_integrity();
  // A tier of exactly one page's bytes holds that page.
  HostPageStore one(io->page_bytes(), 16);
  one.put(path_hash(path, 16), path, c);
  EXPECT_EQ(one.stats().entries, 1);
  EXPECT_EQ(one.stats().dropped, 0);
}

TEST(KvTiersMemory, AHostTierBelowOnePageIsRefused) {
  // It was taken, dropped every page and the memory plan booked 256 MiB for it.
  EngineOptions o = tier_options();
  o.kv_cache_dtype = KvCacheDtype::kFp8;  // pages of 2560 bytes (above)
  o.kv_host_gib = 1e-6;                  // 1074 bytes
  auto e = Engine::load(fixture("qwen3"), o);
  try {
    KvTiers tiers(*e);
    ADD_FAILURE() << "--kv-host-gib 1e-6 was taken";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument);
    EXPECT_STREQ(err.what(), "--kv-host-gib 1e-06 (1074 bytes) holds no KV page of this model: a page of 16 tokens is "
                             "2560 bytes (every layer's K and V); give at least 2.39e-06, or leave the flag out");
  }
  // The least value named holds one page; the table's row and the store bound the same bytes.
  o.kv_host_gib = 2.39e-06;  // 2566 bytes
  auto ok = Engine::load(fixture("qwen3"), o);
  KvTiers tiers(*ok);
  EXPECT_EQ(tiers.host()->stats().capacity_bytes, 2566);
  const MemoryRow* r = row_named(memory_rows(ok->memory_plan()), "KV host tier");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->host, 2566 + KvTiers::kPoolMargin);
  auto* io = dynamic_cast<KvPageIo*>(tiers.view().io);
  ASSERT_NE(io, nullptr);
  std::vector<int32_t> path(16, 7);
  tiers.host()->put(path_hash(path, 16), path, io->save(0, -1, -1));
  EXPECT_EQ(tiers.host()->stats().entries, 1);
}

/** Counts the load's phases begun (util/progress.h). */
struct PhaseCount : ProgressSink {
  void begin(const std::string&, int64_t) override { ++begun; }
  void add(int64_t) override {}
  void finish(bool) override {}
  int begun = 0;
};

TEST(KvTiersMemory, AnUnwritablePromptCacheFolderIsRefusedBeforeTheWeightsLoad) {
  // It ended in "internal error: filesystem error" after the load (KvTiers opening the store).
  EngineOptions o = tier_options();
  o.prompt_cache_dir = "/proc/1";
  PhaseCount phases;
  o.progress = &phases;
  try {
    Engine::load(fixture("qwen3"), o);
    ADD_FAILURE() << "--prompt-cache-dir /proc/1 was taken";
  } catch (const Error& err) {
    EXPECT_EQ(err.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(std::string(err.what()).rfind("--prompt-cache-dir /proc/1: cannot write files in this folder (", 0), 0u)
        << err.what();
  }
  EXPECT_EQ(phases.begun, 0);  // no "weights" phase began
}

}  // namespace
}  // namespace ft
