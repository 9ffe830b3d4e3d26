// The persistent prompt cache behind a real server (issue 39): a server started with
// --prompt-cache-dir answers a request and stops; a new server on the same folder answers a request
// sharing its prefix with the prefix's whole pages loaded from disk (usage.prompt_tokens_details.
// cached_tokens) and the same output; /v1/stats and /metrics report the tiers.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/engine_runner.h"
#include "engine/kv_tiers.h"
#include "server_fixture.h"
#include "test_util.h"

namespace ft::testing {
namespace {

/** The demo model on the CPU engine with a prompt cache in `dir` and a host tier, served in-process. */
class CacheServer {
 public:
  explicit CacheServer(const std::string& dir) : template_(kChatMLTemplate, "", "<|im_end|>") {
    signal(SIGPIPE, SIG_IGN);
    const std::string path = write_demo_model();
    EngineOptions eo;
    eo.threads = 1;
    eo.device = "cpu";
    eo.page_size = 16;
    eo.kv_tokens = 512;
    eo.max_seqs = 2;
    eo.max_logit_rows = 2;
    eo.max_step_tokens = 66;
    eo.kv_host_gib = 0.01;
    eo.prompt_cache_dir = dir;
    eo.prompt_cache_gib = 0.05;
    engine_ = Engine::load(path, eo);
    std::filesystem::remove(path);
    runner_ = std::make_unique<EngineRunner>(*engine_);
    tiers_ = std::make_unique<KvTiers>(*engine_);
    ServiceConfig sc;
    sc.scheduler.max_running = 2;
    sc.scheduler.max_prefill_tokens = 64;
    sc.scheduler.max_seq_len = 256;
    sc.check_integrity = true;
    sc.tiers = tiers_->view();
    service_ = std::make_unique<EngineService>(*runner_, engine_->kv().pools(), sc);
    server::ServerOptions so;
    so.port = 0;
    server::ServedModel sm;
    sm.name = "demo";
    sm.arch = "qwen3moe";
    sm.vocab = &demo_vocab();
    sm.chat_template = &template_;
    sm.kv_bytes_per_token = engine_->memory_plan().kv_bytes_per_token;
    http_ = std::make_unique<server::HttpServer>(so, sm, *service_);
    port_ = http_->bind();
    thread_ = std::thread([this] { http_->serve(); });
  }
  ~CacheServer() {
    http_->stop();
    service_->shutdown(std::chrono::milliseconds(0));
    thread_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(20, 0);
    return c;
  }

 private:
  ChatTemplate template_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineRunner> runner_;
  std::unique_ptr<KvTiers> tiers_;  // outlives the service: the writer drains its queue when it closes
  std::unique_ptr<EngineService> service_;
  std::unique_ptr<server::HttpServer> http_;
  std::thread thread_;
  int port_ = 0;
};

nlohmann::json chat(httplib::Client& c, const std::string& text) {
  const nlohmann::json body = {{"model", "demo"},
                               {"messages", {{{"role", "user"}, {"content", text}}}},
                               {"max_tokens", 10},
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
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ft::testing
