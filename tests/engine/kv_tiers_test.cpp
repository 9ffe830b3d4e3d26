// The host KV tier and the prompt cache on a real model (issue 39): a tiny KV pool forces a cached
// prefix to the host tier, and a restart finds it on disk; either way the hit counts as cached tokens
// and the logits are bit-identical to a run that kept the prefix on the device.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>

#include "engine/engine.h"
#include "engine/engine_runner.h"
#include "engine/kv_tiers.h"
#include "engine/scheduler.h"
#include "engine/tier_engine.h"
#include "log_capture.h"
#include "test_util.h"
#include "util/error.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

std::string fixture(const std::string& name) { return testing::shared_dir() + "/fixtures/hf/" + name; }

using testing::tier_options;  // tier_engine.h

/** A CPU engine, its tiers and a scheduler over them (tests/engine/tier_engine.h). */
struct CpuTierEngine : testing::TierEngine {
  CpuTierEngine(const std::string& dir, const EngineOptions& o) : TierEngine(Engine::load(dir, o)) {}
};

using testing::prompt_of;

void host_tier_round_trip(const std::string& model, const std::string& kv_dtype) {
  SCOPED_TRACE(model + " " + kv_dtype);
  EngineOptions small = tier_options(64, 0.01), big = tier_options(1024, 0);  // 4 pages of 16, or 64
  small.kv_cache_dtype = big.kv_cache_dtype = kv_cache_dtype_from_name(kv_dtype).value();
  CpuTierEngine ref(fixture(model), big), tier(fixture(model), small);
  const int64_t V = ref.engine->config().n_vocab;
  const std::vector<int32_t> a = prompt_of(1, 40, V), b = prompt_of(2, 50, V);
  for (CpuTierEngine* e : {&ref, &tier}) {
    e->run(a, 3);
    e->run(b, 3);  // 4 pages: evicts a's two cached pages (to the host tier when there is one)
  }
  ASSERT_NE(tier.tiers.host(), nullptr);
  EXPECT_EQ(tier.tiers.host()->stats().entries, 2);
  const std::vector<float> want = ref.run(a, 4), got = tier.run(a, 4);
  // The two whole pages before the last prompt token, from the device or the host tier.
  EXPECT_EQ(ref.cached, 32);
  EXPECT_EQ(tier.cached, 32);
  EXPECT_EQ(tier.sched.tier_hits().host, 2);
  tier.tiers.host()->check_integrity();
  ASSERT_EQ(got.size(), want.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << "logits differ after a host-tier restore";
}

TEST(KvTiers, HostTierRestoreGivesBitIdenticalLogits) {
  host_tier_round_trip("qwen3", "auto");
  host_tier_round_trip("llama", "q8_0");  // quantized pages: codes and scales travel together
}

TEST(KvTiers, HostTierCarriesSlidingWindowPagesAndStateSnapshots) {
  host_tier_round_trip("gemma4", "auto");      // sliding-window layers: the node's swa page rides along
  host_tier_round_trip("qwen3_next", "auto");  // linear attention: the state snapshot at the hit's end
}

TEST(KvTiers, HostTierCarriesCompressedKvModels) {
  // deepseek_v4: the projections and the compressed entries and indexer keys (the pages' entry rows,
  // written once: a restore that left them out gives other logits);
  // qwen4_exp: QSA pages (V, then the indexer's key) plus the DeltaNet state, the PLE conv window and
  // the n-gram token history in the state snapshot.
  for (const char* model : {"deepseek_v4", "qwen4_exp"}) {
    host_tier_round_trip(model, "auto");
    host_tier_round_trip(model, "fp8");  // each value-page part with its own scales
  }
}

/** Prompts a (40 tokens) and a2 (a's first 33 tokens, then others): a's first two pages are a2's. */
struct Restart {
  std::vector<int32_t> a, a2, want_tokens;
};

/** Runs a then a2 on an engine caching to `dir`, then a2 on a new engine over the same folder: its
 *  two pages come from disk and its logits equal the first engine's (a device hit there). */
Restart restart_round_trip(const std::string& model, const std::string& dir) {
  SCOPED_TRACE(model);
  Restart r;
  std::vector<float> want;
  {
    CpuTierEngine first(fixture(model), tier_options(1024, 0, dir));
    r.a = prompt_of(3, 40, first.engine->config().n_vocab);
    r.a2 = r.a;
    r.a2.resize(36);  // shares a's first two pages, then differs
    for (int32_t& t : std::span<int32_t>(r.a2).subspan(33)) t = (t + 7) % 1000;
    first.run(r.a, 3);
    first.tokens.clear();
    want = first.run(r.a2, 3);  // a2 hits a's pages on the device
    r.want_tokens = first.tokens;
    EXPECT_EQ(first.cached, 32);
  }  // the writer finishes its queue before the store closes
  CpuTierEngine second(fixture(model), tier_options(1024, 0, dir));
  EXPECT_NE(second.tiers.disk(), nullptr);
  if (!second.tiers.disk()) return r;
  EXPECT_GE(second.tiers.disk()->stats().entries, 2);
  const std::vector<float> got = second.run(r.a2, 3);
  EXPECT_EQ(second.cached, 32);
  EXPECT_EQ(second.sched.tier_hits().disk, 2);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got.size() == want.size() && std::equal(got.begin(), got.end(), want.begin()))
      << "logits differ after a prompt-cache load";
  return r;
}

TEST(KvTiers, PromptCacheCarriesSlidingWindowPagesAndStateSnapshots) {
  for (const char* model : {"gemma4", "qwen3_next"}) {
    const std::string dir = testing::scratch_path(std::string("prompt_cache_") + model);
    fs::remove_all(dir);
    restart_round_trip(model, dir);
    fs::remove_all(dir);
  }
}

TEST(KvTiers, PromptCacheCarriesCompressedKvModels) {
  for (const char* model : {"deepseek_v4", "qwen4_exp"}) {
    const std::string dir = testing::scratch_path(std::string("prompt_cache_") + model);
    fs::remove_all(dir);
    restart_round_trip(model, dir);
    fs::remove_all(dir);
  }
}

TEST(KvTiers, PromptCacheSurvivesARestartAndSkipsATruncatedFile) {
  const std::string dir = testing::scratch_path("prompt_cache");
  fs::remove_all(dir);
  const Restart r = restart_round_trip("qwen3", dir);
  const std::vector<int32_t>& a = r.a;
  const std::vector<int32_t>& a2 = r.a2;
  const std::vector<int32_t>& want_tokens = r.want_tokens;
  // Truncate the second page's file: a restart skips it with a warning naming the field and offset.
  std::string victim;
  uint64_t h = kRootPathHash;
  h = chain_hash(h, std::span<const int32_t>(a.data(), 16));
  h = chain_hash(h, std::span<const int32_t>(a.data() + 16, 16));
  for (const auto& de : fs::directory_iterator(dir))
    if (de.path().filename().string().find(fmt::format("-{:016x}.ftpc", h)) != std::string::npos) victim = de.path();
  ASSERT_FALSE(victim.empty());
  fs::resize_file(victim, fs::file_size(victim) - 100);
  testing::LogCapture log(spdlog::level::warn);
  CpuTierEngine third(fixture("qwen3"), tier_options(1024, 0, dir));
  third.run(a2, 3);
  EXPECT_EQ(third.cached, 16);  // the first page only
  EXPECT_EQ(third.tokens, want_tokens);
  int warned = 0;
  for (const std::string& l : log.lines())
    if (l.find("prompt cache: skipping " + victim) != std::string::npos && l.find("truncated") != std::string::npos &&
        l.find("offsets 24..56") != std::string::npos)
      ++warned;
  EXPECT_EQ(warned, 1);
  third.tiers.disk()->flush();  // its writer may still be writing a2's pages into the folder
  fs::remove_all(dir);
}

TEST(KvTiers, PromptCachePagesAreReadAheadWhileTheRequestIsQueued) {
  // A request queued behind a running one has its prompt's disk pages read while it waits: at its
  // admission they come from memory (their files are gone by then), with the logits of a device hit.
  const std::string dir = testing::scratch_path("prompt_cache_ahead");
  fs::remove_all(dir);
  std::vector<int32_t> a, want_tokens;
  std::vector<float> want;
  {
    CpuTierEngine first(fixture("qwen3"), tier_options(1024, 0, dir));
    a = prompt_of(5, 40, first.engine->config().n_vocab);
    first.run(a, 3);
    first.tokens.clear();
    want = first.run(a, 3);  // a device hit on a's two whole pages
    want_tokens = first.tokens;
    EXPECT_EQ(first.cached, 32);
  }
  CpuTierEngine e(fixture("qwen3"), tier_options(1024, 0, dir));  // one running request at a time
  DiskPageStore* disk = e.tiers.disk();
  ASSERT_NE(disk, nullptr);
  struct Run {
    int32_t n = 0, generated = 0, cached = 0;
    std::vector<float> rows;
    std::vector<int32_t> tokens;
  };
  std::map<uint64_t, Run> runs;
  const int64_t V = e.engine->config().n_vocab;
  auto step = [&] {
    StepPlan plan = e.sched.schedule();
    ASSERT_EQ(plan.seqs.size(), 1u);
    StepBatch b;
    fill_step_batch(plan, b);
    std::span<const float> logits = e.runner.forward(b);
    e.sched.complete(plan);
    const uint64_t id = plan.seqs[0].seq->id;
    Run& r = runs[id];
    r.cached = e.sched.find(id)->n_cached;
    if (plan.seqs[0].sample) {
      r.rows.insert(r.rows.end(), logits.data(), logits.data() + V);
      const auto tok = static_cast<int32_t>(std::max_element(logits.data(), logits.data() + V) - logits.data());
      r.tokens.push_back(tok);
      if (++r.generated == r.n) e.sched.finish(id);
      else e.sched.append(id, tok);
    }
    e.sched.check_integrity();
  };
  runs[1].n = 3;
  e.sched.submit(1, prompt_of(6, 30, V), 3);
  step();  // request 1 runs
  runs[2].n = 3;
  e.sched.submit(2, a, 3);  // queued behind it: its two pages are read ahead now
  EXPECT_EQ(e.sched.n_waiting(), 1);
  disk->flush_read_ahead();
  EXPECT_EQ(disk->read_ahead_pages(), 2);
  EXPECT_EQ(disk->files_read(), 2);
  uint64_t h = kRootPathHash;
  for (int32_t page = 0; page < 2; ++page) {
    h = chain_hash(h, std::span<const int32_t>(a.data() + page * 16, 16));
    EXPECT_TRUE(fs::remove(disk->file_of(h)));
  }
  for (int i = 0; i < 100 && !e.sched.idle(); ++i) step();
  ASSERT_TRUE(e.sched.idle());
  EXPECT_EQ(runs[2].cached, 32);
  EXPECT_EQ(e.sched.tier_hits().disk, 2);
  EXPECT_EQ(disk->stats().read_ahead_hits, 2);
  EXPECT_EQ(disk->files_read(), 2);  // admission read no file
  EXPECT_EQ(disk->read_ahead_pages(), 0);
  disk->check_integrity();
  EXPECT_EQ(runs[2].tokens, want_tokens);
  EXPECT_TRUE(runs[2].rows == want) << "logits differ after a read-ahead prompt-cache load";
  disk->flush();
  fs::remove_all(dir);
}

TEST(KvTiers, CorruptOrForeignFilesAreNeverLoaded) {
  const std::string dir = testing::scratch_path("prompt_cache_bad");
  fs::remove_all(dir);
  std::vector<int32_t> a;
  std::vector<int32_t> want_tokens;
  {
    CpuTierEngine first(fixture("qwen3"), tier_options(1024, 0, dir));
    a = prompt_of(4, 20, first.engine->config().n_vocab);
    first.run(a, 2);
    want_tokens = first.tokens;
  }
  std::vector<fs::path> files;
  for (const auto& de : fs::directory_iterator(dir)) files.push_back(de.path());
  ASSERT_EQ(files.size(), 1u);  // one whole page of 16 (the 21st token's page is not full)
  {  // flip a byte of the KV: the checksum catches it when the page is read
    std::fstream f(files[0], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c = 0;
    f.read(&c, 1);
    f.seekp(200);
    c = static_cast<char>(c ^ 0x5a);
    f.write(&c, 1);
  }
  testing::LogCapture log(spdlog::level::warn);
  {
    CpuTierEngine second(fixture("qwen3"), tier_options(1024, 0, dir));
    second.run(a, 2);
    EXPECT_EQ(second.cached, 0);
    EXPECT_EQ(second.tokens, want_tokens);
  }
  bool checksum = false;
  for (const std::string& l : log.lines()) checksum |= l.find("checksum at offset") != std::string::npos;
  EXPECT_TRUE(checksum);
  fs::remove_all(dir);
}

TEST(KvTiers, UnsupportedCombinationsAreRefusedAtLoad) {
  EngineOptions o = tier_options(256, -1);
  try {
    Engine::load(fixture("qwen3"), o);
    FAIL() << "a negative --kv-host-gib loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    // EngineOptions::validate's words (the engine checks its options there first, as `ft` does).
    EXPECT_NE(std::string(e.what()).find("--kv-host-gib must be between 0 (off) and 1e6 GiB (got -1)"),
              std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ft
