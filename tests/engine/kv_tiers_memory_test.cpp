// The KV tiers' host memory in the engine's memory plan (the start-up banner's table): a "KV host tier"
// row of the most host memory their saved pages take (KvTiers::pool_bytes: the --kv-host-gib bound,
// the prompt cache's write queue, a margin), none without a tier; the saved pages come from that pool.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine/engine.h"
#include "engine/kv_tiers.h"
#include "engine/memory_plan.h"
#include "kv/kv_page_io.h"
#include "test_util.h"

namespace ft {
namespace {

std::string fixture(const std::string& name) { return testing::shared_dir() + "/fixtures/hf/" + name; }

const MemoryRow* row_named(const std::vector<MemoryRow>& rows, const std::string& name) {
  for (const MemoryRow& r : rows)
    if (r.name == name) return &r;
  return nullptr;
}

TEST(KvTiersMemory, TheHostTierIsARowOfTheMemoryPlan) {
  EngineOptions o;
  o.threads = 1;
  o.kv_tokens = 256;
  o.page_size = 16;
  o.max_step_tokens = 64;
  o.max_logit_rows = 16;
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

}  // namespace
}  // namespace ft
