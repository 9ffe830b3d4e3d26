// The request log (server/request_log.h, issue 41): one line per HTTP request once it is over, with the
// generation's tokens, time to first token, decode rate and finish; errors with their type; the polled
// routes at debug; --log-format json with typed keys.
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include "log_capture.h"
#include "server/request_log.h"
#include "server/server_fixture.h"

namespace ft {
namespace {

using json = nlohmann::json;
using testing::get;
using testing::LogCapture;
using testing::post;
using testing::Reply;
using testing::TestServer;
using testing::TestServerConfig;
using namespace std::chrono_literals;

std::string chat_body(const std::string& user, int max_tokens, const std::string& extra = "") {
  json b = {{"model", "test-model"}, {"messages", {{{"role", "user"}, {"content", user}}}}, {"max_tokens", max_tokens},
            {"temperature", 0}};
  if (!extra.empty()) b.update(json::parse(extra));
  return b.dump();
}

/** Tokens that make the scripted fake model answer `reply`, then end its turn. */
std::vector<int32_t> script_of(const std::string& reply) {
  const Vocab& v = testing::demo_vocab();
  std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  return script;
}

/** A keep-filter for the lines of requests to `path` (text lines: "<level> <METHOD> <path> ..."). */
std::function<bool(const std::string&)> lines_of(const std::string& method, const std::string& path) {
  const std::string needle = " " + method + " " + path + " ";
  return [needle](const std::string& l) { return l.find(needle) != std::string::npos; };
}

/** The integer after `key=` in a text line, or -1. */
int64_t field_int(const std::string& line, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(line, m, std::regex(" " + key + "=(\\d+)"))) return -1;
  return std::stoll(m[1]);
}

TEST(RequestLog, OneLinePerChatCompletionWithTokensTimingAndFinish) {
  LogCapture log;
  {
    TestServer s;
    s.model().script = script_of("Hello there");  // 11 byte tokens and <|im_end|>
    auto c = s.client();
    Reply a = post(c, "/v1/chat/completions", chat_body("hi", 40));
    ASSERT_EQ(a.status, 200) << a.raw;
    Reply b = post(c, "/v1/chat/completions", chat_body("hi", 40));  // the prompt again: from the prefix cache
    ASSERT_EQ(b.status, 200) << b.raw;
    auto lines = log.wait_for(lines_of("POST", "/v1/chat/completions"), 2);
    ASSERT_EQ(lines.size(), 2u);
    const int64_t prompt = a.body["usage"]["prompt_tokens"];
    for (size_t i = 0; i < 2; ++i) {
      const std::string& l = lines[i];
      const json& usage = (i == 0 ? a : b).body["usage"];
      SCOPED_TRACE(l);
      EXPECT_EQ(l.rfind("info POST /v1/chat/completions 200 model=test-model prompt=", 0), 0u);
      EXPECT_EQ(field_int(l, "prompt"), prompt);
      EXPECT_EQ(field_int(l, "cached"), usage["prompt_tokens_details"]["cached_tokens"].get<int64_t>());
      EXPECT_EQ(field_int(l, "gen"), 12);
      EXPECT_EQ(usage["completion_tokens"], 12);
      EXPECT_TRUE(std::regex_search(l, std::regex(R"( ttft=[0-9.]+m?s [0-9]+\.[0-9] tok/s finish=stop [0-9.]+m?s client=127\.0\.0\.1$)")));
    }
    EXPECT_EQ(field_int(lines[0], "cached"), 0);
    EXPECT_GT(field_int(lines[1], "cached"), 0);
  }
  EXPECT_EQ(log.wait_for(lines_of("POST", "/v1/chat/completions"), 3, 50ms).size(), 2u) << "exactly one line each";
}

TEST(RequestLog, AStreamGetsOneLineAfterItsLastByte) {
  LogCapture log;
  TestServer s;
  s.model().script = script_of("Hi");
  auto c = s.client();
  Reply r = post(c, "/v1/chat/completions", chat_body("hi", 40, R"({"stream":true})"));
  ASSERT_EQ(r.status, 200);
  ASSERT_NE(r.raw.find("data: [DONE]"), std::string::npos) << r.raw;
  auto lines = log.wait_for(lines_of("POST", "/v1/chat/completions"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(field_int(lines[0], "gen"), 3) << lines[0];
  EXPECT_GT(field_int(lines[0], "prompt"), 0) << lines[0];
  EXPECT_EQ(field_int(lines[0], "cached"), 0) << lines[0];
  EXPECT_NE(lines[0].find(" finish=stop "), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(" ttft="), std::string::npos) << lines[0];
  EXPECT_EQ(log.wait_for(lines_of("POST", "/v1/chat/completions"), 2, 100ms).size(), 1u) << "exactly one line";
}

TEST(RequestLog, ErrorsGetOneLineWithTheirType) {
  LogCapture log;
  TestServer s;
  auto c = s.client();
  ASSERT_EQ(post(c, "/v1/chat/completions", "{not json").status, 400);
  ASSERT_EQ(post(c, "/v1/chat/completions", R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})").status, 404);
  ASSERT_EQ(post(c, "/v1/chat/completions", chat_body("x", 600)).status, 400);
  ASSERT_EQ(get(c, "/v1/nothing").status, 404);
  auto lines = log.wait_for(lines_of("POST", "/v1/chat/completions"), 3);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_TRUE(std::regex_search(lines[0], std::regex(R"(^info POST /v1/chat/completions 400 [0-9.]+m?s client=127\.0\.0\.1 error=invalid_request_error: .+)")))
      << lines[0];
  EXPECT_EQ(lines[0].find("model="), std::string::npos) << "no generation ran: " << lines[0];
  EXPECT_NE(lines[1].find(" 404 "), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("code=model_not_found: "), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find("gpt-4"), std::string::npos) << lines[1];
  EXPECT_NE(lines[2].find("error=invalid_request_error code=context_length_exceeded: "), std::string::npos) << lines[2];
  // Anthropic's routes: the type their error body carries.
  ASSERT_EQ(post(c, "/v1/messages", R"({"model":"x","max_tokens":3,"messages":[{"role":"user","content":"hi"}]})").status,
            404);
  auto messages = log.wait_for(lines_of("POST", "/v1/messages"));
  ASSERT_EQ(messages.size(), 1u);
  EXPECT_NE(messages[0].find(" 404 "), std::string::npos) << messages[0];
  EXPECT_NE(messages[0].find(" error=not_found_error code=model_not_found: "), std::string::npos) << messages[0];
  auto unknown = log.wait_for(lines_of("GET", "/v1/nothing"));
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0].rfind("info GET /v1/nothing 404 ", 0), 0u) << unknown[0];
}

TEST(RequestLog, AClientThatHangsUpGetsOneCancelledLine) {
  LogCapture log;
  TestServer s;
  // The same prompt once before, so the cancelled request takes part of it from the prefix cache.
  auto c = s.client();
  const Reply warm = post(c, "/v1/chat/completions", chat_body("run long", 1));
  ASSERT_EQ(warm.status, 200);
  const int64_t prompt = warm.body["usage"]["prompt_tokens"].get<int64_t>();
  ASSERT_EQ(log.wait_for(lines_of("POST", "/v1/chat/completions")).size(), 1u);
  const EngineStats st = testing::hang_up_mid_stream(
      s, "/v1/chat/completions", chat_body("run long", 480, R"({"stream":true,"ignore_eos":true})"));
  ASSERT_EQ(st.requests_cancelled, 1);
  auto lines = log.wait_for(lines_of("POST", "/v1/chat/completions"), 2);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_NE(lines[1].find(" 200 model=test-model "), std::string::npos) << lines[1];
  EXPECT_NE(lines[1].find(" finish=cancelled "), std::string::npos) << lines[1];
  const int64_t gen = field_int(lines[1], "gen");
  EXPECT_GT(gen, 0) << "cancelled after its first token: " << lines[1];
  EXPECT_LT(gen, 480) << lines[1];
  // Its prompt was admitted, so its cached tokens are known though the engine never finished it.
  EXPECT_EQ(field_int(lines[1], "prompt"), prompt) << lines[1];
  const int64_t cached = field_int(lines[1], "cached");
  EXPECT_GT(cached, 0) << lines[1];
  EXPECT_LT(cached, prompt) << lines[1];
  EXPECT_EQ(log.wait_for(lines_of("POST", "/v1/chat/completions"), 3, 100ms).size(), 2u) << "exactly one line";
}

TEST(RequestLog, ACancelledStreamsJsonLineHasCachedTokens) {
  LogCapture log(spdlog::level::info, /*json=*/true);
  TestServer s;
  const EngineStats st = testing::hang_up_mid_stream(
      s, "/v1/chat/completions", chat_body("run long", 480, R"({"stream":true,"ignore_eos":true})"));
  ASSERT_EQ(st.requests_cancelled, 1);
  auto lines = log.wait_for([](const std::string& l) { return l.find("\"path\":\"/v1/chat/completions\"") != std::string::npos; });
  ASSERT_EQ(lines.size(), 1u);
  const json j = json::parse(lines[0]);
  EXPECT_EQ(j["finish_reason"], "cancelled") << lines[0];
  ASSERT_TRUE(j.contains("cached_tokens")) << lines[0];
  EXPECT_EQ(j["cached_tokens"], 0) << "a fresh server has nothing cached: " << lines[0];
}

TEST(RequestLog, ANonStreamingClientThatGivesUpGetsOneCancelledLine) {
  LogCapture log;
  TestServer s;
  s.model().delay = 2ms;  // ~1 s for the whole request
  {
    auto c = s.client();
    c.set_read_timeout(0, 200000);  // 200 ms, then the client closes its connection
    EXPECT_FALSE(c.Post("/v1/chat/completions", chat_body("run long", 480, R"({"ignore_eos":true})"), "application/json"));
    c.stop();
  }
  auto lines = log.wait_for(lines_of("POST", "/v1/chat/completions"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find(" finish=cancelled "), std::string::npos) << lines[0];
  EXPECT_GT(field_int(lines[0], "gen"), 0) << lines[0];
  EXPECT_LT(field_int(lines[0], "gen"), 480) << lines[0];
  EXPECT_GE(field_int(lines[0], "cached"), 0) << "the engine finished it: " << lines[0];
}

TEST(RequestLog, PolledRoutesAreAtDebugOthersAtInfo) {
  LogCapture log;
  TestServer s;
  auto c = s.client();
  ASSERT_EQ(get(c, "/health").status, 200);
  ASSERT_EQ(get(c, "/v1/stats").status, 200);
  ASSERT_EQ(get(c, "/metrics").status, 200);
  ASSERT_EQ(get(c, "/").status, 200);
  ASSERT_EQ(get(c, "/v1/models").status, 200);
  auto all = [](const std::string& l) { return l.find(" GET /") != std::string::npos; };
  auto lines = log.wait_for(all, 5);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].rfind("debug GET /health 200 ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("debug GET /v1/stats 200 ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("debug GET /metrics 200 ", 0), 0u) << lines[2];
  EXPECT_EQ(lines[3].rfind("debug GET / 200 ", 0), 0u) << lines[3];
  EXPECT_TRUE(std::regex_match(lines[4], std::regex(R"(info GET /v1/models 200 [0-9.]+m?s client=127\.0\.0\.1)"))) << lines[4];
  EXPECT_EQ(server::request_log_level("GET", "/v1/stats", 401), spdlog::level::info);  // errors are not hidden
  EXPECT_EQ(server::request_log_level("POST", "/v1/chat/completions", 500), spdlog::level::warn);
}

TEST(RequestLog, JsonLinesCarryTheFieldsAsTypedKeys) {
  LogCapture log(spdlog::level::info, /*json=*/true);
  TestServer s;
  s.model().script = script_of("Hey");
  auto c = s.client();
  Reply r = post(c, "/v1/chat/completions", chat_body("hi", 40));
  ASSERT_EQ(r.status, 200);
  ASSERT_EQ(post(c, "/v1/chat/completions", "{\"bad\n").status, 400);
  auto is_request = [](const std::string& l) { return l.find("\"path\":\"/v1/chat/completions\"") != std::string::npos; };
  auto lines = log.wait_for(is_request, 2);
  ASSERT_EQ(lines.size(), 2u);
  const json j = json::parse(lines[0]);
  EXPECT_EQ(j["level"], "info");
  EXPECT_EQ(j["method"], "POST");
  EXPECT_EQ(j["status"], 200);
  EXPECT_EQ(j["model"], "test-model");
  EXPECT_EQ(j["prompt_tokens"], r.body["usage"]["prompt_tokens"]);
  EXPECT_EQ(j["cached_tokens"], 0);
  EXPECT_EQ(j["completion_tokens"], 4);
  EXPECT_TRUE(j["ttft_ms"].is_number());
  EXPECT_TRUE(j["tokens_per_s"].is_number());
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_TRUE(j["duration_ms"].is_number());
  EXPECT_EQ(j["client"], "127.0.0.1");
  EXPECT_EQ(j["msg"].get<std::string>().rfind("POST /v1/chat/completions 200 model=test-model prompt=", 0), 0u) << lines[0];
  const json e = json::parse(lines[1]);
  EXPECT_EQ(e["status"], 400);
  EXPECT_EQ(e["error_type"], "invalid_request_error");
  EXPECT_TRUE(e["error"].is_string());
  EXPECT_FALSE(e.contains("completion_tokens"));
}

TEST(RequestLog, TextRenderingOfARecord) {
  server::RequestRecord r;
  r.method = "POST";
  r.path = "/v1/chat/completions";
  r.status = 200;
  r.model = "qwen3";
  r.prompt_tokens = 812;
  r.cached_tokens = 768;
  r.completion_tokens = 64;
  r.ttft_ms = 35.2;
  r.tokens_per_s = 52.14;
  r.finish_reason = "stop";
  r.duration_ms = 1270;
  EXPECT_EQ(server::request_text(r),
            "POST /v1/chat/completions 200 model=qwen3 prompt=812 cached=768 gen=64 ttft=35ms 52.1 tok/s finish=stop 1.27s");
  r = server::RequestRecord{};
  r.method = "GET";
  r.path = "/v1/models";
  r.status = 401;
  r.duration_ms = 0.42;
  r.client = "::1";
  r.error_type = "authentication_error";
  r.error_message = "bad\nkey";
  EXPECT_EQ(server::request_text(r), "GET /v1/models 401 0.4ms client=::1 error=authentication_error: bad key");
  const auto j = server::request_fields(r);
  EXPECT_EQ(j.dump(), R"({"method":"GET","path":"/v1/models","status":401,"duration_ms":0.42,"client":"::1",)"
                      R"("error_type":"authentication_error","error":"bad\nkey"})");
}

}  // namespace
}  // namespace ft
