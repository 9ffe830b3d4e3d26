// POST /v1/admin/cache over a real Engine (the demo model: 4 MoE layers of 8 experts, offload with an
// expert cache of 16 slots, KV 512 tokens, on the CPU backend) behind an in-process server: a resize of
// both caches while a greedy completion streams leaves its text as without the resize (it recomputes
// its KV), answers the new sizes and memory plan, and /v1/stats shows them; bad bodies, sizes the
// engine cannot take and a plan over --gpu-memory-limit get 400 and change nothing; no API key
// configured gets 403, a wrong key 401.
#include <gtest/gtest.h>

#include <atomic>
#include <regex>

#include <nlohmann/json.hpp>

#include "engine/cache_resize.h"
#include "engine/engine.h"
#include "engine_server.h"
#include "util/error.h"

namespace ft::testing {
namespace {

constexpr const char* kKey = "admin-test-key";

struct AdminServerConfig {
  MoeStrategy strategy = MoeStrategy::kOffload;
  std::string api_key = kKey;
  int64_t gpu_memory_limit = 0;  // --gpu-memory-limit (bytes; 0: none)
};

/** The demo model on the CPU engine, served in-process with the resize route wired as `ft serve` does. */
class AdminServer : public EngineServer {
 public:
  explicit AdminServer(const AdminServerConfig& cfg = {}) : EngineServer(options(cfg), 60) {
    ServiceConfig sc = demo_service_config();
    sc.check_integrity = true;
    server::ServerOptions so;
    so.api_key = cfg.api_key;
    server::ServedModel sm;
    sm.moe_report = [e = &engine()] { return e->moe_report(); };
    sm.memory_rows = memory_rows(engine().memory_plan());
    sm.memory_limit = memory_limit(engine().memory_plan());
    sm.kv_bytes_total = engine().memory_plan().kv_bytes;
    sm.resize_caches = [this](const CacheResize& r) { return resize_served_caches(service(), engine(), r); };
    serve(sc, so, sm);
  }

 private:
  static EngineOptions options(const AdminServerConfig& cfg) {
    EngineOptions eo = demo_engine_options();
    eo.gpu_memory_limit = cfg.gpu_memory_limit;
    eo.moe.strategy = cfg.strategy;
    if (cfg.strategy == MoeStrategy::kOffload || cfg.strategy == MoeStrategy::kHybrid) eo.moe.cache = {CacheSizeMode::kSlots, 16, 0.0};
    return eo;
  }
};

const httplib::Headers kAuth = {{"Authorization", std::string("Bearer ") + kKey}};

/** A greedy completion of 160 tokens (prompt + 160 fit the 256-token context), streamed or not. */
std::string completion_body(bool stream) {
  return nlohmann::json{{"model", "demo"},   {"prompt", "The expert cache is resized while this runs"},
                        {"max_tokens", 160}, {"temperature", 0},
                        {"ignore_eos", true}, {"stream", stream}}
      .dump();
}

Reply resize(httplib::Client& c, const nlohmann::json& body, const httplib::Headers& h = kAuth) {
  return post(c, "/v1/admin/cache", body.dump(), h);
}

nlohmann::json stats(httplib::Client& c) {
  const Reply r = get(c, "/v1/stats", kAuth);
  EXPECT_EQ(r.status, 200) << r.raw;
  return r.body;
}

/** The text of a /v1/completions SSE body, its deltas joined. */
std::string streamed_text(const std::string& raw) {
  std::string text;
  for (const std::string& e : sse_events(raw)) {
    if (e == "[DONE]") continue;
    const nlohmann::json j = nlohmann::json::parse(e);
    if (j.contains("choices") && !j["choices"].empty()) text += j["choices"][0].value("text", "");
  }
  return text;
}

TEST(AdminCache, ResizesBothCachesWhileAGreedyRequestStreams) {
  std::string want;
  {  // the text without a resize
    AdminServer s;
    auto c = s.client();
    const Reply r = post(c, "/v1/completions", completion_body(false), kAuth);
    ASSERT_EQ(r.status, 200) << r.raw;
    want = r.body["choices"][0]["text"];
    ASSERT_FALSE(want.empty());
  }
  AdminServer s;
  auto c = s.client();
  const int64_t prompt_before = s.service().stats().prompt_tokens_computed_total;
  std::atomic<bool> first{false};
  std::string raw;
  std::thread streaming([&] {
    auto sc = s.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = completion_body(true);
    req.headers = kAuth;
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      raw.append(data, len);
      first = true;
      return true;
    };
    sc.send(req);
  });
  for (int i = 0; i < 2000 && !first; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(first);
  const Reply r = resize(c, {{"expert_slots", 24}, {"kv_tokens", 384}});
  streaming.join();
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "cache_sizes");
  EXPECT_EQ(r.body["expert_slots"], 24);
  EXPECT_EQ(r.body["kv_tokens"], 384);
  EXPECT_EQ(r.body["kv_pages"], 24);
  EXPECT_EQ(r.body["context_limit"], 256);  // --max-seq-len still bounds it
  // The request went on: same greedy text, and its KV was computed again (more prompt tokens than it has).
  EXPECT_EQ(streamed_text(raw), want);
  EXPECT_NE(raw.find("[DONE]"), std::string::npos);
  const EngineStats es = s.service().stats();
  EXPECT_EQ(es.requests_finished, 1);
  EXPECT_EQ(es.requests_cancelled, 0);
  EXPECT_GT(es.prompt_tokens_computed_total - prompt_before, 40) << "the running request recomputed its KV";
  // The engine, the response and /v1/stats agree on the new sizes and plan.
  const MemoryPlan& plan = s.engine().memory_plan();
  EXPECT_EQ(plan.kv_tokens, 384);
  EXPECT_EQ(plan.moe->cache.n_slots, 24);
  const nlohmann::json st = stats(c);
  EXPECT_EQ(st["kv"]["tokens_total"], 384);
  EXPECT_EQ(st["kv"]["bytes_total"], plan.kv_bytes);
  EXPECT_EQ(st["moe"]["cache_slots"], 24);
  EXPECT_EQ(st["memory"], r.body["memory"]);
  const std::vector<MemoryRow> rows = memory_rows(plan);
  ASSERT_EQ(st["memory"]["rows"].size(), rows.size());
  bool slots_row = false, kv_row = false;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(st["memory"]["rows"][i]["device_bytes"], rows[i].device);
    slots_row = slots_row || (rows[i].name == "expert slots" && rows[i].detail.rfind("24 slots", 0) == 0);
    kv_row = kv_row || (rows[i].name == "KV cache" && rows[i].detail.rfind("384 tokens", 0) == 0);
  }
  EXPECT_TRUE(slots_row && kv_row) << st["memory"].dump();
  // Served as before after it, and either size alone may change.
  const Reply again = post(c, "/v1/completions", completion_body(false), kAuth);
  ASSERT_EQ(again.status, 200) << again.raw;
  EXPECT_EQ(again.body["choices"][0]["text"], want);
  const Reply kv_only = resize(c, {{"kv_tokens", 500}});  // whole pages: 512
  ASSERT_EQ(kv_only.status, 200) << kv_only.raw;
  EXPECT_EQ(kv_only.body["kv_tokens"], 512);
  EXPECT_EQ(kv_only.body["expert_slots"], 24);
  const Reply slots_only = resize(c, {{"expert_slots", 16}});
  ASSERT_EQ(slots_only.status, 200) << slots_only.raw;
  EXPECT_EQ(slots_only.body["kv_tokens"], 512);
  EXPECT_EQ(slots_only.body["expert_slots"], 16);
  EXPECT_EQ(post(c, "/v1/completions", completion_body(false), kAuth).body["choices"][0]["text"], want);
}

TEST(AdminCache, BadBodiesAreRefusedAndChangeNothing) {
  AdminServer s;
  auto c = s.client();
  const nlohmann::json before = stats(c)["memory"];
  const std::pair<std::string, std::string> cases[] = {
      {R"({"kv_tokens": -16})", "kv_tokens"},      {R"({"kv_tokens": 0})", "kv_tokens"},
      {R"({"expert_slots": 1.5})", "expert_slots"}, {R"({"expert_slots": "24"})", "expert_slots"},
      {R"({"kv_tokens": true})", "kv_tokens"},     {R"({"kv_tokens": 256, "slots": 8})", "slots"},
      {R"({})", ""},                               {R"([24])", ""},
      {R"({"kv_tokens": 18446744073709551615})", "kv_tokens"},
  };
  for (const auto& [body, param] : cases) {
    const Reply r = post(c, "/v1/admin/cache", body, kAuth);
    EXPECT_EQ(r.status, 400) << body << " -> " << r.raw;
    EXPECT_EQ(r.body["error"]["type"], "invalid_request_error") << r.raw;
    if (!param.empty()) {
      EXPECT_EQ(r.body["error"]["param"], param) << r.raw;
    }
  }
  // Too few slots for the model (2 x 8 experts a layer at least): the engine refuses, sizes stay.
  const Reply few = resize(c, {{"expert_slots", 8}, {"kv_tokens", 256}});
  EXPECT_EQ(few.status, 400) << few.raw;
  EXPECT_NE(few.raw.find("16"), std::string::npos) << few.raw;
  // In the request's terms (the CLI's refusal names --moe-cache-slots), the field as param.
  EXPECT_EQ(few.body["error"]["param"], "expert_slots") << few.raw;
  EXPECT_NE(few.raw.find("expert_slots 8 is below the minimum of 16"), std::string::npos) << few.raw;
  EXPECT_EQ(few.raw.find("--moe-cache-slots"), std::string::npos) << few.raw;
  EXPECT_EQ(stats(c)["memory"], before);
  EXPECT_EQ(s.engine().memory_plan().kv_tokens, 512);
  EXPECT_EQ(s.engine().memory_plan().moe->cache.n_slots, 16);
  // KV that cannot hold a request queued or running (checked against the longest one).
  try {
    s.engine().check_resize(CacheResize{std::nullopt, 32}, 190);
    ADD_FAILURE() << "kv_tokens 32 accepted for a request of 190 tokens";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("190"), std::string::npos) << e.what();
  }
  const Reply ok = post(c, "/v1/completions", completion_body(false), kAuth);
  EXPECT_EQ(ok.status, 200) << ok.raw;
}

TEST(AdminCache, APlanOverTheMemoryLimitIsRefusedAndTheOldSizesStay) {
  int64_t device = 0;
  {
    AdminServer probe;
    auto c = probe.client();
    device = stats(c)["memory"]["device_bytes"];
  }
  AdminServerConfig cfg;
  cfg.gpu_memory_limit = device + (int64_t{1} << 20);  // room for a little more, not for 64k KV tokens
  AdminServer s(cfg);
  auto c = s.client();
  const nlohmann::json before = stats(c)["memory"];
  const Reply r = resize(c, {{"kv_tokens", 65536}});
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["code"], "memory_limit_exceeded") << r.raw;
  EXPECT_NE(r.raw.find("--gpu-memory-limit"), std::string::npos) << r.raw;
  // In the request's terms, the field as param: no start-up flag stands for it.
  EXPECT_EQ(r.body["error"]["param"], "kv_tokens") << r.raw;
  EXPECT_NE(r.raw.find("kv_tokens 65536"), std::string::npos) << r.raw;
  for (const char* flag : {"--kv-tokens", "-c/", "--moe-cache-slots"})
    EXPECT_EQ(r.raw.find(flag), std::string::npos) << flag << " in " << r.raw;
  EXPECT_EQ(stats(c)["memory"], before);
  // All 32 experts cached: over the limit too, refused naming expert_slots and how many fit.
  const Reply slots = resize(c, {{"expert_slots", 32}});
  EXPECT_EQ(slots.status, 400) << slots.raw;
  EXPECT_EQ(slots.body["error"]["code"], "memory_limit_exceeded") << slots.raw;
  EXPECT_EQ(slots.body["error"]["param"], "expert_slots") << slots.raw;
  EXPECT_NE(slots.raw.find("expert_slots 32"), std::string::npos) << slots.raw;
  for (const char* flag : {"--kv-tokens", "-c/", "--moe-cache-slots"})
    EXPECT_EQ(slots.raw.find(flag), std::string::npos) << flag << " in " << slots.raw;
  EXPECT_EQ(stats(c)["memory"], before);
  EXPECT_EQ(s.engine().memory_plan().kv_tokens, 512);
  EXPECT_EQ(s.engine().memory_plan().moe->cache.n_slots, 16);
  const Reply ok = post(c, "/v1/completions", completion_body(false), kAuth);
  EXPECT_EQ(ok.status, 200) << ok.raw;
  // What the refusals say fits does: the most KV tokens beside the 16 slots (one page more does not),
  // then the most slots beside that KV.
  std::smatch m;
  const std::string kv_said = r.body["error"]["message"], slots_said = slots.body["error"]["message"];
  ASSERT_TRUE(std::regex_search(kv_said, m, std::regex("kv_tokens (\\d+) or less"))) << kv_said;
  const int64_t kv_fit = std::stoll(m[1]);
  EXPECT_GT(kv_fit, 512) << kv_said;
  EXPECT_EQ(resize(c, {{"kv_tokens", kv_fit + s.engine().options().page_size}}).status, 400);
  const Reply kv_ok = resize(c, {{"kv_tokens", kv_fit}});
  ASSERT_EQ(kv_ok.status, 200) << kv_ok.raw;
  ASSERT_TRUE(std::regex_search(slots_said, m, std::regex("holds at most (\\d+) expert slots"))) << slots_said;
  ASSERT_EQ(resize(c, {{"kv_tokens", 512}}).status, 200);
  const int64_t slots_fit = std::stoll(m[1]);
  EXPECT_GT(slots_fit, 16) << slots_said;
  EXPECT_LT(slots_fit, 32) << slots_said;
  EXPECT_EQ(resize(c, {{"expert_slots", slots_fit + 1}}).status, 400);
  const Reply slots_ok = resize(c, {{"expert_slots", slots_fit}});
  EXPECT_EQ(slots_ok.status, 200) << slots_ok.raw;
  EXPECT_EQ(slots_ok.body["expert_slots"], slots_fit) << slots_ok.raw;
}

TEST(AdminCache, FusedHasNoExpertCacheToSize) {
  AdminServerConfig cfg;
  cfg.strategy = MoeStrategy::kFused;
  AdminServer s(cfg);
  auto c = s.client();
  const Reply r = resize(c, {{"expert_slots", 24}});
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_NE(r.raw.find("fused"), std::string::npos) << r.raw;
  const Reply kv = resize(c, {{"kv_tokens", 256}});  // its KV cache still resizes
  EXPECT_EQ(kv.status, 200) << kv.raw;
  EXPECT_EQ(kv.body["kv_tokens"], 256);
  EXPECT_TRUE(kv.body["expert_slots"].is_null());
}

// Hybrid: the new runtime is calibrated again as at start (its fetch policy timed over a throw-away
// sequence in the free KV pages) and serves on.
TEST(AdminCache, HybridIsCalibratedAgain) {
  AdminServerConfig cfg;
  cfg.strategy = MoeStrategy::kHybrid;
  AdminServer s(cfg);
  auto c = s.client();
  ASSERT_EQ(post(c, "/v1/completions", completion_body(false), kAuth).status, 200);
  const Reply r = resize(c, {{"expert_slots", 32}});
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["expert_slots"], 32);
  const nlohmann::json st = stats(c);
  EXPECT_EQ(st["moe"]["cache_slots"], 32);
  EXPECT_FALSE(st["moe"]["calibration"].is_null()) << st["moe"].dump();
  const Reply after = post(c, "/v1/completions", completion_body(false), kAuth);
  EXPECT_EQ(after.status, 200) << after.raw;
  EXPECT_EQ(after.body["usage"]["completion_tokens"], 160);
}

TEST(AdminCache, NeedsAnApiKey) {
  {
    AdminServerConfig cfg;
    cfg.api_key = "";
    AdminServer s(cfg);
    auto c = s.client();
    const Reply r = resize(c, {{"kv_tokens", 256}}, {});
    EXPECT_EQ(r.status, 403) << r.raw;
    EXPECT_NE(r.raw.find("--api-key"), std::string::npos) << r.raw;
    EXPECT_EQ(s.engine().memory_plan().kv_tokens, 512);
  }
  AdminServer s;
  auto c = s.client();
  EXPECT_EQ(resize(c, {{"kv_tokens", 256}}, {}).status, 401);
  EXPECT_EQ(resize(c, {{"kv_tokens", 256}}, {{"Authorization", "Bearer wrong"}}).status, 401);
  EXPECT_EQ(s.engine().memory_plan().kv_tokens, 512);
}

}  // namespace
}  // namespace ft::testing
