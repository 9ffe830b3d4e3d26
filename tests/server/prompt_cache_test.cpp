// The persistent prompt cache behind a real server (issue 39): a server started with
// --prompt-cache-dir answers a request and stops; a new server on the same folder answers a request
// sharing its prefix with the prefix's whole pages loaded from disk (usage.prompt_tokens_details.
// cached_tokens) and the same output; /v1/stats and /metrics report the tiers.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine_server.h"
#include "prometheus_text.h"
#include "test_util.h"

namespace ft::testing {
namespace {

/** The demo model on the CPU engine with a prompt cache in `dir` and a host tier, served in-process. */
class CacheServer : public EngineServer {
 public:
  /** `dir` "" : no prompt cache; `kv_tokens`: the device KV pool (small: pages go to the host tier). */
  explicit CacheServer(const std::string& dir, int64_t kv_tokens = 512) : EngineServer(options(dir, kv_tokens)) {
    ServiceConfig sc = demo_service_config();
    sc.check_integrity = true;
    server::ServedModel sm;
    sm.kv_bytes_per_token = engine().memory_plan().kv_bytes_per_token;
    serve(sc, {}, sm, /*tiers=*/true);
  }

 private:
  static EngineOptions options(const std::string& dir, int64_t kv_tokens) {
    EngineOptions eo = demo_engine_options();
    eo.kv_tokens = kv_tokens;
    eo.kv_host_gib = 0.01;
    eo.prompt_cache_dir = dir;
    eo.prompt_cache_gib = 0.05;
    return eo;
  }
};

nlohmann::json chat(httplib::Client& c, const std::string& text, int max_tokens = 10) {
  const nlohmann::json body = {{"model", "demo"},
                               {"messages", {{{"role", "user"}, {"content", text}}}},
                               {"max_tokens", max_tokens},
                               {"temperature", 0},
                               {"ignore_eos", true}};
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << (r ? r->body : "no response");
  return r ? nlohmann::json::parse(r->body) : nlohmann::json();
}

const std::string kPrompt = "A long conversation with an agent resends this same prefix every turn, again and again.";

TEST(PromptCache, SecondServerLoadsThePrefixFromDisk) {
  const std::string dir = scratch_path("server_prompt_cache");
  std::filesystem::remove_all(dir);
  std::string want;
  int64_t prompt_tokens = 0;
  {
    CacheServer s(dir);
    auto c = s.client();
    const nlohmann::json first = chat(c, kPrompt);
    EXPECT_EQ(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    const nlohmann::json again = chat(c, kPrompt);  // a device hit: the reference output
    prompt_tokens = again["usage"]["prompt_tokens"].get<int64_t>();
    EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"], (prompt_tokens - 1) / 16 * 16);
    want = again["choices"][0]["message"]["content"].get<std::string>();
  }
  ASSERT_GT(prompt_tokens, 32);
  CacheServer s(dir);
  auto c = s.client();
  const nlohmann::json got = chat(c, kPrompt);
  EXPECT_EQ(got["usage"]["prompt_tokens_details"]["cached_tokens"], (prompt_tokens - 1) / 16 * 16);
  EXPECT_EQ(got["choices"][0]["message"]["content"], want);

  auto r = c.Get("/v1/stats");
  ASSERT_TRUE(r && r->status == 200);
  const nlohmann::json tiers = nlohmann::json::parse(r->body)["kv"]["tiers"];
  EXPECT_EQ(tiers["disk"]["hit_pages"], (prompt_tokens - 1) / 16);
  EXPECT_GT(tiers["disk"]["bytes_read"].get<int64_t>(), 0);
  // Read ahead once queued: taken from memory when the reader was done by admission, else from the file.
  ASSERT_TRUE(tiers["disk"]["read_ahead_hit_pages"].is_number_integer()) << tiers.dump();
  EXPECT_LE(tiers["disk"]["read_ahead_hit_pages"].get<int64_t>(), (prompt_tokens - 1) / 16);
  EXPECT_FALSE(tiers["host"].contains("read_ahead_hit_pages"));
  EXPECT_GE(tiers["disk"]["pages"].get<int64_t>(), (prompt_tokens - 1) / 16);
  EXPECT_EQ(tiers["host"]["pages"], 0);  // nothing was evicted from the device
  EXPECT_EQ(tiers["device"]["hit_pages"], 0);
  EXPECT_GT(tiers["device"]["pages"].get<int64_t>(), 0);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m && m->status == 200);
  EXPECT_NE(m->body.find(fmt::format("freetoken_kv_tier_hit_pages_total{{tier=\"disk\"}} {}", (prompt_tokens - 1) / 16)),
            std::string::npos)
      << m->body;
  EXPECT_NE(m->body.find("freetoken_kv_tier_pages{tier=\"host\"} 0"), std::string::npos);
  EXPECT_NE(m->body.find("freetoken_kv_tier_bytes_read_total{tier=\"disk\"}"), std::string::npos);
  EXPECT_NE(m->body.find("freetoken_kv_disk_read_ahead_hit_pages_total "), std::string::npos);
  EXPECT_EQ(exposition_problems(m->body), "") << m->body;  // every tier's family whole
  std::filesystem::remove_all(dir);
}

TEST(PromptCache, HostTierServesAPrefixEvictedFromTheDevice) {
  CacheServer s("", 64);  // 4 pages of 16 tokens
  auto c = s.client();
  const std::string p1 = "the first prompt", p2 = "another, longer question!!";  // 4 pages with its reply
  const nlohmann::json first = chat(c, p1, 8);
  const int64_t n = first["usage"]["prompt_tokens"].get<int64_t>();
  ASSERT_GT(n, 32);
  ASSERT_LE(n + 8, 64);
  chat(c, p2, 8);  // needs every page: p1's cached pages go to the host tier
  auto r = c.Get("/v1/stats");
  ASSERT_TRUE(r && r->status == 200);
  nlohmann::json tiers = nlohmann::json::parse(r->body)["kv"]["tiers"];
  EXPECT_GE(tiers["host"]["pages"].get<int64_t>(), (n - 1) / 16);
  EXPECT_TRUE(tiers["disk"].is_null());
  const nlohmann::json again = chat(c, p1, 8);
  EXPECT_EQ(again["usage"]["prompt_tokens_details"]["cached_tokens"], (n - 1) / 16 * 16);
  EXPECT_EQ(again["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"]);
  r = c.Get("/v1/stats");
  ASSERT_TRUE(r && r->status == 200);
  tiers = nlohmann::json::parse(r->body)["kv"]["tiers"];
  EXPECT_EQ(tiers["host"]["hit_pages"].get<int64_t>() + tiers["device"]["hit_pages"].get<int64_t>(), (n - 1) / 16);
  EXPECT_GE(tiers["host"]["hit_pages"].get<int64_t>(), 1);
  EXPECT_GT(tiers["host"]["bytes_read"].get<int64_t>(), 0);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m && m->status == 200);
  EXPECT_NE(m->body.find("freetoken_kv_tier_bytes_written_total{tier=\"host\"}"), std::string::npos) << m->body;
  EXPECT_EQ(m->body.find("tier=\"disk\""), std::string::npos);
  EXPECT_EQ(m->body.find("read_ahead"), std::string::npos);
}

}  // namespace
}  // namespace ft::testing
