// HTTP routes against an in-process server over the paged fake model: response shapes (OpenAI's chat,
// chunk, completion, model, error bodies), SSE streaming, logprobs, stop strings, usage, every error
// status, auth, overload, client disconnects, and random bodies that must never take the server down.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <random>

#include "server/chat_reply.h"
#include "server/server_fixture.h"

namespace ft {
namespace {

using json = nlohmann::json;
using testing::get;
using testing::post;
using testing::Reply;
using testing::reply_of;
using testing::sse_events;
using testing::TestServer;
using testing::TestServerConfig;
using namespace std::chrono_literals;

void expect_error(const Reply& r, int status, const std::string& code = "") {
  EXPECT_EQ(r.status, status) << r.raw;
  ASSERT_TRUE(r.body.is_object()) << r.raw;
  ASSERT_TRUE(r.body.contains("error")) << r.raw;
  const json& e = r.body["error"];
  EXPECT_TRUE(e["message"].is_string() && !e["message"].get<std::string>().empty()) << r.raw;
  EXPECT_TRUE(e["type"].is_string()) << r.raw;
  EXPECT_TRUE(e.contains("param") && e.contains("code")) << r.raw;
  if (!code.empty()) {
    EXPECT_EQ(e["code"], code) << r.raw;
  }
}

/** Expected greedy text of the fake model for a chat prompt: its tokens up to the first end token. */
struct Expected {
  std::vector<int32_t> prompt;
  std::vector<int32_t> tokens;  // including a final end token if one came
  std::string text;
  bool stopped = false;
};

Expected expected_chat(TestServer& s, const std::string& user, int max_tokens) {
  ChatTemplate t(kChatMLTemplate, "", "<|im_end|>");
  nlohmann::ordered_json msgs = nlohmann::ordered_json::array({{{"role", "user"}, {"content", user}}});
  const Vocab& v = testing::demo_vocab();
  Expected e;
  e.prompt = v.encode(t.render(msgs, nullptr, true), EncodeOptions{false, true});
  for (int32_t tok : s.model().solo_greedy(e.prompt, max_tokens)) {
    e.tokens.push_back(tok);
    if (v.is_eog(tok)) {
      e.stopped = true;
      break;
    }
  }
  e.text = v.decode(e.tokens, true);
  return e;
}

std::string chat_body(const std::string& user, int max_tokens, const std::string& extra = "") {
  json b = {{"model", "test-model"}, {"messages", {{{"role", "user"}, {"content", user}}}}, {"max_tokens", max_tokens},
            {"temperature", 0}};
  std::string s = b.dump();
  if (!extra.empty()) s = s.substr(0, s.size() - 1) + "," + extra + "}";
  return s;
}

TEST(Routes, ASecondServerCannotTakeAPortInUse) {
  // Two servers on one port would split the requests between two models (httplib's default socket
  // options include SO_REUSEPORT): the second must fail to bind instead.
  TestServer a;
  TestServerConfig c;
  c.port = a.port();
  try {
    TestServer b(c);
    ADD_FAILURE() << "a second server bound port " << c.port;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_NE(std::string(e.what()).find(std::to_string(c.port)), std::string::npos) << e.what();
  }
  auto r = a.client().Get("/health");  // the first still serves
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(Routes, AStopBeforeTheListenerRunsStillEndsServe) {
  // A signal right after start-up reached stop() before serve() had started listening; httplib's
  // stop() alone does nothing then, so serve() listened forever and `ft serve` never exited (from
  // a fresh user's trial).
  TestServerConfig c;
  c.serve = false;
  TestServer s(c);
  s.http().stop();
  auto served = std::async(std::launch::async, [&] { s.http().serve(); });
  const bool returned = served.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!returned) s.http().stop();  // listening by now: this stop ends it, so the test cannot hang
  EXPECT_TRUE(returned);
}

TEST(Routes, HealthModelsAndUnknownRoutes) {
  TestServer s;
  auto c = s.client();
  Reply h = get(c, "/health");
  EXPECT_EQ(h.status, 200);
  EXPECT_EQ(h.body["status"], "ok");
  for (const char* path : {"/v1/models", "/v1/models/", "/models"}) {  // llama.cpp serves it without /v1 too
    Reply m = get(c, path);
    ASSERT_EQ(m.status, 200) << path;
    EXPECT_EQ(m.body["object"], "list");
    ASSERT_EQ(m.body["data"].size(), 1u);
    EXPECT_EQ(m.body["data"][0]["id"], "test-model");
    EXPECT_EQ(m.body["data"][0]["object"], "model");
    EXPECT_EQ(m.body["data"][0]["max_model_len"], 512);
    // Anthropic's fields too (its clients' models.list / retrieve read these)
    EXPECT_EQ(m.body["has_more"], false);
    EXPECT_EQ(m.body["first_id"], "test-model");
    EXPECT_EQ(m.body["last_id"], "test-model");
    EXPECT_EQ(m.body["data"][0]["type"], "model");
    EXPECT_EQ(m.body["data"][0]["display_name"], "test-model");
    const std::string at = m.body["data"][0]["created_at"];
    EXPECT_EQ(at.size(), 20u) << at;  // 2026-12-01T13:05:00Z
    EXPECT_EQ(at.substr(10, 1) + at.substr(19), "TZ") << at;
  }
  EXPECT_EQ(get(c, "/v1/models/test-model").body["id"], "test-model");
  EXPECT_EQ(get(c, "/v1/models/test-model").body["type"], "model");
  EXPECT_EQ(get(c, "/v1/models/test-model/").status, 200);
  expect_error(get(c, "/v1/models/other"), 404, "model_not_found");
  EXPECT_EQ(get(c, "/models/test-model").body["id"], "test-model");
  expect_error(get(c, "/v1/nothing"), 404);
  expect_error(post(c, "/v1/embeddings", "{}"), 404);
  // the OpenAI routes without /v1, as llama.cpp serves them (clients given a base URL without /v1)
  Reply chat = post(c, "/chat/completions", chat_body("hi", 3, R"("temperature":0)"));
  ASSERT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(chat.body["object"], "chat.completion");
  Reply cmpl = post(c, "/completions", R"({"prompt":"once","max_tokens":2,"temperature":0})");
  ASSERT_EQ(cmpl.status, 200) << cmpl.raw;
  EXPECT_EQ(cmpl.body["object"], "text_completion");
  expect_error(post(c, "/v2/completions", "{}"), 404);

  // llama.cpp's n_predict past the context's end stops there (llama.cpp does not refuse it), where
  // the same max_tokens is a 400 (OpenAI's context_length_exceeded)
  json past = {{"prompt", std::vector<int32_t>(505, 100)}, {"temperature", 0}, {"ignore_eos", true}};
  past["n_predict"] = 1000;
  Reply cut = post(c, "/v1/completions", past.dump());
  ASSERT_EQ(cut.status, 200) << cut.raw;
  EXPECT_EQ(cut.body["usage"]["completion_tokens"], 512 - 505);
  EXPECT_EQ(cut.body["choices"][0]["finish_reason"], "length");
  past.erase("n_predict");
  past["max_tokens"] = 1000;
  expect_error(post(c, "/v1/completions", past.dump()), 400, "context_length_exceeded");
}

TEST(Routes, PropsAsLlamaCppServesThem) {
  // GET /props: what llama.cpp's clients (its web UI among them) read for the context size, the chat
  // template, the special tokens and the default sampling settings.
  TestServerConfig cfg;
  cfg.api_key = "k";
  TestServer s(cfg);
  auto c = s.client();
  expect_error(get(c, "/props"), 401);  // behind the API key, as in llama.cpp
  const httplib::Headers key = {{"Authorization", "Bearer k"}};
  for (const char* path : {"/props", "/props/"}) {
    Reply p = get(c, path, key);
    ASSERT_EQ(p.status, 200) << path;
    EXPECT_EQ(p.body["default_generation_settings"]["n_ctx"], 512);
    const auto& params = p.body["default_generation_settings"]["params"];
    EXPECT_EQ(params["n_predict"], -1);  // as POST /completion without n_predict
    EXPECT_EQ(params["temperature"], 1.0);
    EXPECT_EQ(params["top_p"], 1.0);
    EXPECT_EQ(params["seed"], -1);  // no --seed
    EXPECT_EQ(params["stop"], nlohmann::json::array());
    EXPECT_EQ(p.body["total_slots"], 4);
    EXPECT_EQ(p.body["model_alias"], "test-model");
    EXPECT_EQ(p.body["chat_template"], testing::chatml_with_tools());
    EXPECT_EQ(p.body["eos_token"], ft::testing::demo_vocab().piece(ft::testing::demo_vocab().eos()));
    EXPECT_EQ(p.body["modalities"]["vision"], false);
    EXPECT_NE(p.body["build_info"].get<std::string>().find("freetoken"), std::string::npos);
  }
  auto r = c.Post("/props", key, "{}", "application/json");  // llama.cpp's run-time settings: not served
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
}

TEST(Routes, WrongMethodOnAKnownRouteIs405WithAllow) {
  TestServer s;
  auto c = s.client();
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/v1/completions/"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    const Reply rep = reply_of(r);
    expect_error(rep, 405, "method_not_allowed");
    EXPECT_EQ(r->get_header_value("Allow"), "POST") << path;
    EXPECT_NE(rep.body["error"]["message"].get<std::string>().find("GET"), std::string::npos) << r->body;
    auto d = c.Delete(path);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->status, 405) << path;
  }
  for (const char* path : {"/v1/models", "/v1/models/test-model", "/health", "/v1/stats", "/metrics"}) {
    auto r = c.Post(path, "{}", "application/json");
    ASSERT_TRUE(r) << path;
    const Reply rep = reply_of(r);
    expect_error(rep, 405, "method_not_allowed");
    EXPECT_EQ(r->get_header_value("Allow"), "GET, HEAD") << path;
  }
  expect_error(get(c, "/v1/chat/completion"), 404);  // unknown paths stay 404
  expect_error(post(c, "/v1/embeddings", "{}"), 404);
}

/** Sends `request` verbatim on a fresh connection; returns what arrives within `seconds` (or until close). */
std::string raw_exchange(int port, const std::string& request, int seconds) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return "connect failed";
  timeval tv{seconds, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::send(fd, request.data(), request.size(), 0);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<size_t>(n));
    if (got.find("\r\n\r\n") != std::string::npos && got.find("}") != std::string::npos) break;
  }
  ::close(fd);
  return got;
}

TEST(Routes, PostWithoutBodyIsAnsweredAtOnce) {
  // No Content-Length and no Transfer-Encoding means no body (RFC 9112); the server once waited 30 s.
  TestServer s;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string chat = raw_exchange(s.port(), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", 5);
  EXPECT_EQ(chat.rfind("HTTP/1.1 400", 0), 0u) << chat;
  const std::string models = raw_exchange(s.port(), "POST /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", 5);
  EXPECT_EQ(models.rfind("HTTP/1.1 405", 0), 0u) << models;
  EXPECT_NE(models.find("Allow: GET, HEAD"), std::string::npos) << models;
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 4.0);
}

TEST(Routes, ChatNonStreamingMatchesTheModelAndCountsUsage) {
  TestServer s;
  auto c = s.client();
  const Expected e = expected_chat(s, "hello there", 40);
  Reply r = post(c, "/v1/chat/completions", chat_body("hello there", 40));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_TRUE(r.body["id"].get<std::string>().rfind("chatcmpl-", 0) == 0);
  EXPECT_EQ(r.body["object"], "chat.completion");
  EXPECT_TRUE(r.body["created"].is_number_integer());
  EXPECT_EQ(r.body["model"], "test-model");
  ASSERT_EQ(r.body["choices"].size(), 1u);
  const json& ch = r.body["choices"][0];
  EXPECT_EQ(ch["index"], 0);
  EXPECT_EQ(ch["message"]["role"], "assistant");
  EXPECT_EQ(ch["message"]["content"], e.text);
  EXPECT_EQ(ch["finish_reason"], e.stopped ? "stop" : "length");
  EXPECT_TRUE(ch["logprobs"].is_null());
  const json& u = r.body["usage"];
  EXPECT_EQ(u["prompt_tokens"], e.prompt.size());
  EXPECT_EQ(u["completion_tokens"], e.tokens.size());
  EXPECT_EQ(u["total_tokens"], e.prompt.size() + e.tokens.size());
  EXPECT_EQ(u["prompt_tokens_details"]["cached_tokens"], 0);
  // The same request again: the prompt's whole pages come from the prefix cache, output unchanged.
  Reply again = post(c, "/v1/chat/completions", chat_body("hello there", 40));
  EXPECT_EQ(again.body["choices"][0]["message"]["content"], e.text);
  EXPECT_EQ(again.body["usage"]["prompt_tokens_details"]["cached_tokens"], (e.prompt.size() - 1) / 16 * 16);
}

TEST(Routes, ChatStreamingChunksInOpenAIShape) {
  TestServer s;
  auto c = s.client();
  const Expected e = expected_chat(s, "stream me", 30);
  auto r = c.Post("/v1/chat/completions", chat_body("stream me", 30, R"("stream":true,"stream_options":{"include_usage":true})"),
                  "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  std::vector<std::string> ev = sse_events(r->body);
  ASSERT_GE(ev.size(), 4u) << r->body;
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string text, id;
  int finishes = 0;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    json j = json::parse(ev[i]);
    EXPECT_EQ(j["object"], "chat.completion.chunk");
    EXPECT_EQ(j["model"], "test-model");
    if (id.empty()) id = j["id"];
    EXPECT_EQ(j["id"], id);
    if (i == 0) {
      EXPECT_EQ(j["choices"][0]["delta"]["role"], "assistant");
      EXPECT_TRUE(j["usage"].is_null());
    }
    if (i + 2 == ev.size()) {  // the usage chunk
      EXPECT_TRUE(j["choices"].empty());
      EXPECT_EQ(j["usage"]["completion_tokens"], e.tokens.size());
      EXPECT_EQ(j["usage"]["prompt_tokens"], e.prompt.size());
      continue;
    }
    const json& choice = j["choices"][0];
    if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    if (!choice["finish_reason"].is_null()) {
      ++finishes;
      EXPECT_EQ(choice["finish_reason"], e.stopped ? "stop" : "length");
      EXPECT_TRUE(choice["delta"].empty());
    }
  }
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(text, e.text);
  // Without include_usage no chunk carries a usage key.
  auto r2 = c.Post("/v1/chat/completions", chat_body("stream me", 5, R"("stream":true)"), "application/json");
  ASSERT_TRUE(r2);
  for (const std::string& x : sse_events(r2->body))
    if (x != "[DONE]") {
      EXPECT_FALSE(json::parse(x).contains("usage")) << x;
    }
}

/** The demo model's prompt "once upon" (BOS first, as /v1/completions encodes it) and its first `n`
 *  greedy tokens on `s`'s model. */
std::pair<std::vector<int32_t>, std::vector<int32_t>> once_upon(TestServer& s, int32_t n) {
  std::vector<int32_t> ids = testing::demo_vocab().encode("once upon", EncodeOptions{true, true});
  std::vector<int32_t> toks = s.model().solo_greedy(ids, n);
  return {std::move(ids), std::move(toks)};
}

/** Two printable ASCII characters from the second half of `text` (a stop string that occurs in it),
 *  or "" when it has none. */
std::string stop_string_in(const std::string& text) {
  auto ascii = [&](size_t i) { return i < text.size() && text[i] >= 32 && text[i] < 127; };
  for (size_t at = text.size() / 2; at + 1 < text.size(); ++at)
    if (ascii(at) && ascii(at + 1)) return text.substr(at, 2);
  return "";
}

TEST(Routes, LogprobsAndStopStrings) {
  TestServer s;
  auto c = s.client();
  Reply r = post(c, "/v1/chat/completions", chat_body("numbers", 30, R"("logprobs":true,"top_logprobs":3,"ignore_eos":true)"));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& lp = r.body["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(lp.size(), 30u);
  std::string joined;
  for (const json& t : lp) {
    EXPECT_LE(t["logprob"].get<double>(), 0.0);
    ASSERT_EQ(t["top_logprobs"].size(), 3u);
    EXPECT_GE(t["logprob"].get<double>(), t["top_logprobs"][2]["logprob"].get<double>());
    EXPECT_TRUE(t["bytes"].is_array());
    for (const json& b : t["bytes"]) joined += static_cast<char>(b.get<int>());
  }
  const std::string text = r.body["choices"][0]["message"]["content"];
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 30);
  // Stop at a piece of the middle of that text: the output ends right before its first occurrence.
  const std::string stop = stop_string_in(text);
  ASSERT_EQ(stop.size(), 2u) << text;
  json body = json::parse(chat_body("numbers", 30, R"("ignore_eos":true)"));
  body["stop"] = {stop};
  Reply st = post(c, "/v1/chat/completions", body.dump());
  ASSERT_EQ(st.status, 200) << st.raw;
  EXPECT_EQ(st.body["choices"][0]["message"]["content"], text.substr(0, text.find(stop)));
  EXPECT_EQ(st.body["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(st.body["usage"]["completion_tokens"].get<int>(), 30);
  // The text of the first min_tokens tokens is not searched for stop strings (vLLM's detokenizer):
  // all 30 tokens come back (a fresh-user trial found the stop string ending the reply early).
  // (min_tokens also masks the end-of-generation ids, so the reply may differ from `text`: its own
  // text without stop strings is the reference.)
  json held = json::parse(chat_body("numbers", 30, R"("ignore_eos":true,"min_tokens":30)"));
  Reply ref = post(c, "/v1/chat/completions", held.dump());
  ASSERT_EQ(ref.status, 200) << ref.raw;
  const std::string held_text = ref.body["choices"][0]["message"]["content"];
  const std::string held_stop = stop_string_in(held_text);
  ASSERT_EQ(held_stop.size(), 2u) << held_text;
  held["stop"] = {held_stop};
  Reply mt = post(c, "/v1/chat/completions", held.dump());
  ASSERT_EQ(mt.status, 200) << mt.raw;
  EXPECT_EQ(mt.body["choices"][0]["message"]["content"], held_text);
  EXPECT_EQ(mt.body["usage"]["completion_tokens"], 30);
  (void)joined;
}

TEST(Routes, StopTokenIdsAndIncludeStopStrInOutput) {
  // vLLM's stop fields: a stop token id ends the reply ("stop"), even with ignore_eos; its text is left
  // out unless include_stop_str_in_output asks for it, which also keeps a stop string that ended it.
  TestServer s;
  auto c = s.client();
  const Vocab& v = testing::demo_vocab();
  const auto [ids, toks] = once_upon(s, 12);
  size_t first = 0;
  while (toks[first] != toks[3]) ++first;  // the id may occur earlier
  json body = {{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 0}};
  body["stop_token_ids"] = {toks[3]};
  Reply r = post(c, "/v1/completions", body.dump());
  ASSERT_EQ(r.status, 200) << r.raw;
  const std::vector<int32_t> before(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(first));
  const std::vector<int32_t> through(toks.begin(), toks.begin() + static_cast<std::ptrdiff_t>(first) + 1);
  EXPECT_EQ(r.body["choices"][0]["text"], v.decode(before, true));
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r.body["usage"]["completion_tokens"], static_cast<int>(first) + 1);
  EXPECT_EQ(r.body["choices"][0]["logprobs"]["tokens"].size(), first + 1);  // the stop token's is reported
  body["include_stop_str_in_output"] = true;
  Reply ri = post(c, "/v1/completions", body.dump());
  ASSERT_EQ(ri.status, 200) << ri.raw;
  EXPECT_EQ(ri.body["choices"][0]["text"], v.decode(through, true));
  body.erase("include_stop_str_in_output");
  body["stop_token_ids"] = {v.n_tokens()};
  expect_error(post(c, "/v1/completions", body.dump()), 400);

  json plain = {{"prompt", ids}, {"max_tokens", 30}, {"temperature", 0}, {"ignore_eos", true}};
  const std::string text = post(c, "/v1/completions", plain.dump()).body["choices"][0]["text"];
  const std::string stop = stop_string_in(text);
  ASSERT_EQ(stop.size(), 2u) << text;
  plain["stop"] = {stop};
  EXPECT_EQ(post(c, "/v1/completions", plain.dump()).body["choices"][0]["text"], text.substr(0, text.find(stop)));
  plain["include_stop_str_in_output"] = true;
  Reply inc = post(c, "/v1/completions", plain.dump());
  EXPECT_EQ(inc.body["choices"][0]["text"], text.substr(0, text.find(stop) + 2)) << inc.raw;
  EXPECT_EQ(inc.body["choices"][0]["finish_reason"], "stop");
  plain["stream"] = true;  // streamed, the same text
  auto sr = c.Post("/v1/completions", plain.dump(), "application/json");
  ASSERT_TRUE(sr);
  std::string streamed;
  for (const std::string& e : sse_events(sr->body))
    if (e != "[DONE]") streamed += json::parse(e)["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(streamed, text.substr(0, text.find(stop) + 2));
}

TEST(Routes, LlamaCppNativeCompletion) {
  // llama.cpp's POST /completion: its request fields, its reply shape, its stream (no [DONE]).
  TestServer s;
  auto c = s.client();
  const Vocab& v = testing::demo_vocab();
  const auto [ids, toks] = once_upon(s, 12);
  const std::string want = v.decode(toks, true);
  Reply r = post(c, "/completion", R"({"prompt":"once upon","n_predict":12,"temperature":0,"ignore_eos":true})");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["content"], want);
  EXPECT_EQ(r.body["stop"], true);
  EXPECT_EQ(r.body["stop_type"], "limit");
  EXPECT_EQ(r.body["stopping_word"], "");
  EXPECT_EQ(r.body["tokens_predicted"], 12);
  EXPECT_EQ(r.body["tokens_evaluated"], ids.size());
  EXPECT_EQ(r.body["model"], "test-model");
  EXPECT_EQ(r.body["prompt"], "once upon");
  EXPECT_EQ(r.body["generation_settings"]["n_predict"], 12);
  EXPECT_EQ(r.body["generation_settings"]["temperature"], 0.0);

  // a stop string: "word", the text before it
  const std::string want30 = v.decode(s.model().solo_greedy(ids, 30), true);
  const std::string stop = stop_string_in(want30);
  ASSERT_EQ(stop.size(), 2u) << want30;
  json sb = {{"prompt", "once upon"}, {"n_predict", 30}, {"temperature", 0}, {"ignore_eos", true}, {"stop", {stop}}};
  Reply st = post(c, "/completion", sb.dump());
  ASSERT_EQ(st.status, 200) << st.raw;
  EXPECT_EQ(st.body["content"], want30.substr(0, want30.find(stop)));
  EXPECT_EQ(st.body["stop_type"], "word");
  EXPECT_EQ(st.body["stopping_word"], stop);

  // streamed: "data: {content, stop: false}" events, then one with stop: true and the totals
  auto sr = c.Post("/completion", R"({"prompt":"once upon","n_predict":12,"temperature":0,"ignore_eos":true,"stream":true})",
                   "application/json");
  ASSERT_TRUE(sr);
  const auto ev = sse_events(sr->body);
  ASSERT_GE(ev.size(), 2u);
  std::string text;
  for (size_t i = 0; i + 1 < ev.size(); ++i) {
    ASSERT_NE(ev[i], "[DONE]");
    json j = json::parse(ev[i]);
    EXPECT_EQ(j["stop"], false);
    text += j["content"].get<std::string>();
  }
  const json end = json::parse(ev.back());
  EXPECT_EQ(end["stop"], true);
  EXPECT_EQ(end["tokens_predicted"], 12);
  EXPECT_EQ(end["stop_type"], "limit");
  EXPECT_EQ(text, want);

  // without n_predict it runs to the context's end (llama.cpp's -1), not the OpenAI route's 16 tokens
  json longp = {{"prompt", std::vector<int32_t>(500, 100)}, {"temperature", 0}, {"ignore_eos", true}};
  Reply lr = post(c, "/completion", longp.dump());
  ASSERT_EQ(lr.status, 200) << lr.raw;
  EXPECT_EQ(lr.body["tokens_predicted"], 512 - 500);
  // llama.cpp's temperatures: a negative one samples greedily, above OpenAI's 2 is taken (up to 100)
  Reply neg = post(c, "/completion", R"({"prompt":"once upon","n_predict":12,"temperature":-1,"ignore_eos":true})");
  ASSERT_EQ(neg.status, 200) << neg.raw;
  EXPECT_EQ(neg.body["content"], want);
  EXPECT_EQ(neg.body["generation_settings"]["temperature"], 0.0);
  Reply hot = post(c, "/completion", R"({"prompt":"once upon","n_predict":4,"temperature":5,"seed":1})");
  ASSERT_EQ(hot.status, 200) << hot.raw;
  EXPECT_EQ(hot.body["generation_settings"]["temperature"], 5.0);
  expect_error(post(c, "/completion", R"({"prompt":"x","temperature":101})"), 400);
  expect_error(post(c, "/v1/completions", R"({"prompt":"x","temperature":5})"), 400);  // OpenAI's range there
  // what the route does not do is refused, not ignored
  expect_error(post(c, "/completion", R"({"prompt":"x","n_probs":3})"), 400);
  const Reply sx = post(c, "/completion", R"({"prompt":"x","suffix":"y"})");  // refused on both routes
  expect_error(sx, 400);
  EXPECT_EQ(sx.raw.find("/v1/completions takes it"), std::string::npos) << sx.raw;
  expect_error(post(c, "/completion", R"({"prompt":"x","logprobs":1})"), 400);
}

TEST(Routes, CompletionsEchoIdsStreamingAndLogprobs) {
  TestServer s;
  auto c = s.client();
  const Vocab& v = testing::demo_vocab();
  const auto [ids, toks] = once_upon(s, 12);
  Reply r = post(c, "/v1/completions", R"({"prompt":"once upon","max_tokens":12,"temperature":0,"ignore_eos":true,"echo":true})");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["object"], "text_completion");
  EXPECT_TRUE(r.body["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  EXPECT_EQ(r.body["choices"][0]["text"], "once upon" + v.decode(toks, true));
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r.body["usage"]["prompt_tokens"], ids.size());
  EXPECT_EQ(r.body["usage"]["completion_tokens"], 12);

  json idb = {{"prompt", ids}, {"max_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2}};
  Reply ri = post(c, "/v1/completions", idb.dump());
  ASSERT_EQ(ri.status, 200) << ri.raw;
  EXPECT_EQ(ri.body["choices"][0]["text"], v.decode(toks, true));
  const json& lp = ri.body["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 12u);
  ASSERT_EQ(lp["token_logprobs"].size(), 12u);
  ASSERT_EQ(lp["top_logprobs"].size(), 12u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][0], 0);

  // echo of a token-id prompt that starts with BOS: the text leaves the control token out
  ASSERT_GE(v.bos(), 0);
  std::vector<int32_t> with_bos = ids;
  if (with_bos.front() != v.bos()) with_bos.insert(with_bos.begin(), v.bos());
  json eb = {{"prompt", with_bos}, {"max_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}, {"echo", true}};
  Reply re = post(c, "/v1/completions", eb.dump());
  ASSERT_EQ(re.status, 200) << re.raw;
  EXPECT_EQ(re.body["choices"][0]["text"].get<std::string>().rfind("once upon", 0), 0u) << re.raw;

  // A token forced by logit_bias (its log-probability is of the unbiased distribution, so it is not
  // among the top 1): each top_logprobs entry still holds the sampled token, as OpenAI documents.
  int32_t forced = 0;
  while (v.piece(forced) == v.piece(toks[0]) || v.piece(forced).empty()) ++forced;
  json fb = {{"prompt", ids}, {"max_tokens", 1}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 1},
             {"logit_bias", {{std::to_string(forced), 100}}}};
  Reply rf = post(c, "/v1/completions", fb.dump());
  ASSERT_EQ(rf.status, 200) << rf.raw;
  const json& flp = rf.body["choices"][0]["logprobs"];
  ASSERT_EQ(flp["tokens"][0], v.piece(forced));
  const json& alt = flp["top_logprobs"][0];
  ASSERT_EQ(alt.size(), 2u) << alt.dump();
  ASSERT_TRUE(alt.contains(v.piece(forced))) << alt.dump();
  EXPECT_EQ(alt[v.piece(forced)], flp["token_logprobs"][0]);

  auto sr = c.Post("/v1/completions", R"({"prompt":"once upon","max_tokens":12,"temperature":0,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}})",
                   "application/json");
  ASSERT_TRUE(sr);
  auto ev = sse_events(sr->body);
  ASSERT_GE(ev.size(), 3u);
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 2 < ev.size(); ++i) {
    json j = json::parse(ev[i]);
    EXPECT_EQ(j["object"], "text_completion");
    text += j["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, v.decode(toks, true));
  EXPECT_EQ(json::parse(ev[ev.size() - 2])["usage"]["completion_tokens"], 12);
  expect_error(post(c, "/v1/completions", R"({"prompt":[1,2,100000]})"), 400);
}

TEST(Routes, LogitBiasSteersGreedyOutputAndIsValidated) {
  TestServer s;
  auto c = s.client();
  const Vocab& v = testing::demo_vocab();
  const int32_t z = v.encode("z", EncodeOptions{false, false}).at(0);
  // Greedy with +100 on one token: every generated token is that one (the fake model's logits are in [0, 10)).
  Reply r = post(c, "/v1/chat/completions", chat_body("hello", 6, R"("logit_bias":{")" + std::to_string(z) + R"(":100})"));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], "zzzzzz");
  Reply rc = post(c, "/v1/completions",
                  R"({"prompt":"ab","max_tokens":4,"temperature":0.8,"seed":1,"logit_bias":{")" + std::to_string(z) + R"(":100}})");
  ASSERT_EQ(rc.status, 200) << rc.raw;
  EXPECT_EQ(rc.body["choices"][0]["text"], "zzzz");
  // -100 on the token greedy would pick first: the output starts differently.
  const Expected e = expected_chat(s, "hello", 1);
  ASSERT_EQ(e.tokens.size(), 1u);
  Reply banned = post(c, "/v1/chat/completions",
                      chat_body("hello", 1, R"("logit_bias":{")" + std::to_string(e.tokens[0]) + R"(":-100})"));
  ASSERT_EQ(banned.status, 200) << banned.raw;
  EXPECT_NE(banned.body["choices"][0]["message"]["content"], e.text);
  // Ids outside the vocabulary and bad values: 400 naming logit_bias.
  Reply out = post(c, "/v1/chat/completions", chat_body("hello", 1, R"("logit_bias":{"100000":5})"));
  expect_error(out, 400);
  EXPECT_EQ(out.body["error"]["param"], "logit_bias");
  Reply val = post(c, "/v1/completions", R"({"prompt":"x","logit_bias":{"5":500}})");
  expect_error(val, 400);
  EXPECT_EQ(val.body["error"]["param"], "logit_bias");
}

TEST(Routes, ErrorStatusesAndBodies) {
  TestServerConfig cfg;
  cfg.max_body_mb = 1;
  TestServer s(cfg);
  auto c = s.client();
  expect_error(post(c, "/v1/chat/completions", "{not json"), 400);
  expect_error(post(c, "/v1/chat/completions", R"({"messages":"x"})"), 400);
  expect_error(post(c, "/v1/chat/completions", chat_body("x", 5, R"("n":0)")), 400);
  Reply img = post(c, "/v1/chat/completions",
                   R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:,"}}]}]})");
  expect_error(img, 400);
  EXPECT_NE(img.body["error"]["message"].get<std::string>().find("text-only"), std::string::npos);
  Reply ctx = post(c, "/v1/chat/completions", chat_body("x", 600));
  expect_error(ctx, 400, "context_length_exceeded");
  EXPECT_NE(ctx.body["error"]["message"].get<std::string>().find("512"), std::string::npos);
  EXPECT_NE(ctx.body["error"]["message"].get<std::string>().find("600"), std::string::npos);
  expect_error(post(c, "/v1/completions", R"({"prompt":")" + std::string(600, 'a') + R"("})"), 400, "context_length_exceeded");
  Reply wrong = post(c, "/v1/chat/completions", R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})");
  expect_error(wrong, 404, "model_not_found");
  Reply big = post(c, "/v1/chat/completions", std::string(2 * 1024 * 1024, ' '));
  expect_error(big, 413, "request_too_large");
  EXPECT_EQ(get(c, "/health").status, 200);  // still up
}

TEST(Routes, BodiesAreJsonWhateverTheContentType) {
  TestServerConfig cfg;
  cfg.max_body_mb = 1;
  TestServer s(cfg);
  auto c = s.client();
  const Expected e = expected_chat(s, "form", 5);
  // curl -d sends application/x-www-form-urlencoded; httplib used to cap such bodies at 8 KiB (413).
  const std::string body = std::string(9000, ' ') + chat_body("form", 5);
  for (const char* type : {"application/x-www-form-urlencoded", "text/plain", "application/json"}) {
    auto r = c.Post("/v1/chat/completions", body, type);
    ASSERT_TRUE(r) << type;
    ASSERT_EQ(r->status, 200) << type << ": " << r->body;
    EXPECT_EQ(json::parse(r->body)["choices"][0]["message"]["content"], e.text) << type;
  }
  auto rc = c.Post("/v1/completions", std::string(9000, '\n') + R"({"prompt":"x","max_tokens":2})",
                   "application/x-www-form-urlencoded");
  ASSERT_TRUE(rc);
  EXPECT_EQ(rc->status, 200) << rc->body;
  // The body limit still holds, and a multipart form is refused with a hint.
  auto big = c.Post("/v1/chat/completions", std::string(2 * 1024 * 1024, ' '), "application/x-www-form-urlencoded");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  httplib::MultipartFormDataItems items = {{"messages", "[]", "", ""}};
  auto mp = c.Post("/v1/chat/completions", items);
  ASSERT_TRUE(mp);
  Reply m{mp->status, json::parse(mp->body, nullptr, false), mp->body};
  expect_error(m, 415, "unsupported_media_type");
  EXPECT_NE(m.body["error"]["message"].get<std::string>().find("application/json"), std::string::npos);
  EXPECT_EQ(get(c, "/health").status, 200);
}

/** What a chat SSE stream's deltas add up to: content, reasoning_content, the tool_calls entries in
 *  order, and the finish_reason. */
struct ChatStream {
  std::string content, reasoning, finish;
  json calls = json::array();
};
ChatStream read_chat_stream(const std::string& sse) {
  ChatStream out;
  for (const std::string& data : sse_events(sse)) {
    if (data == "[DONE]") break;
    const json j = json::parse(data);
    const json& d = j["choices"][0]["delta"];
    if (d.contains("content")) out.content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) out.reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& t : d["tool_calls"]) out.calls.push_back(t);
    if (!j["choices"][0]["finish_reason"].is_null()) out.finish = j["choices"][0]["finish_reason"];
  }
  return out;
}

TEST(Routes, ToolCallsInRepliesWithTools) {
  // The model answers with a Hermes-format tool call (as Qwen3 does); with `tools` the reply becomes
  // message.tool_calls and finish_reason "tool_calls", streamed as a tool_calls delta; without tools,
  // or with tool_choice "none", it stays text.
  const std::string reply =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const Vocab& v = testing::demo_vocab();
  std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
      R"("properties":{"city":{"type":"string"}}}}}])";
  const std::string body = R"({"messages":[{"role":"user","content":"Weather?"}],"temperature":0,"max_tokens":100)";
  {
    const Reply r = testing::scripted_post(TestServerConfig{}, script, "/v1/chat/completions",
        body + "," + tools + "}");
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const auto& ch = r.body["choices"][0];
    EXPECT_EQ(ch["finish_reason"], "tool_calls");
    EXPECT_EQ(ch["message"]["content"], "Checking.");
    ASSERT_EQ(ch["message"]["tool_calls"].size(), 1u) << r.body.dump();
    const auto& call = ch["message"]["tool_calls"][0];
    EXPECT_EQ(call["type"], "function");
    EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
    EXPECT_EQ(call["function"]["name"], "get_weather");
    EXPECT_EQ(call["function"]["arguments"], R"({"city":"Paris"})");
  }
  {
    const Reply r = testing::scripted_post(TestServerConfig{}, script, "/v1/chat/completions",
        body + "," + tools + R"(,"stream":true})");
    ASSERT_EQ(r.status, 200) << r.raw;
    const ChatStream st = read_chat_stream(r.raw);
    EXPECT_EQ(st.content, "Checking.");  // what streamed before the call, trimmed as in the whole reply
    ASSERT_EQ(st.calls.size(), 1u) << r.raw;
    EXPECT_EQ(st.calls[0]["index"], 0);
    EXPECT_EQ(st.calls[0]["function"]["name"], "get_weather");
    EXPECT_EQ(st.calls[0]["function"]["arguments"], R"({"city":"Paris"})");
    EXPECT_EQ(st.finish, "tool_calls");
  }
  for (const std::string& extra : {std::string(), "," + tools + R"(,"tool_choice":"none")"}) {
    const Reply r = testing::scripted_post(TestServerConfig{}, script, "/v1/chat/completions", body + extra + "}");
    ASSERT_EQ(r.status, 200) << r.body.dump();
    EXPECT_EQ(r.body["choices"][0]["message"]["content"], reply) << extra;
    EXPECT_FALSE(r.body["choices"][0]["message"].contains("tool_calls"));
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
  }
  TestServer s;
  auto c = s.client();
  expect_error(post(c, "/v1/chat/completions", body + R"(,"tool_choice":"always"})"), 400);
}

TEST(Routes, RepliesKeepControlTokensOnlyForFormatsWhoseMarkersAreControlTokens) {
  // Real Llama 3 / Mistral / gpt-oss vocabularies make their markers control tokens, which reply text
  // drops. With tools and such a format the reply keeps control tokens, so the parser sees the markers;
  // Hermes' <tool_call> is text, and its replies drop them as any reply does. The demo vocabulary's
  // control token <|im_start|> stands in for a marker here.
  const Vocab& v = testing::demo_vocab();
  std::vector<int32_t> script = v.encode("<|im_start|>Hi", EncodeOptions{false, true});
  ASSERT_TRUE(v.is_special(script.at(0)));
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  const std::string tools = R"(,"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  struct Case {
    const char* marker;
    bool with_tools;
    const char* content;
  };
  for (const Case& k : {Case{"<|python_tag|>", true, "<|im_start|>Hi"}, Case{"<|python_tag|>", false, "Hi"},
                        Case{"<tool_call>", true, "Hi"}}) {
    TestServerConfig cfg;
    cfg.chat_template = "{#- " + std::string(k.marker) + " -#}" + testing::chatml_with_tools();
    TestServer s(cfg);
    s.model().script = script;
    auto c = s.client();
    const std::string body = R"({"messages":[{"role":"user","content":"x"}],"temperature":0,"max_tokens":20)" +
                             std::string(k.with_tools ? tools : "") + "}";
    const Reply r = post(c, "/v1/chat/completions", body);
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["message"]["content"], k.content) << k.marker << " tools " << k.with_tools;
  }
}

TEST(Routes, GptOssRepliesAreSplitByChannelWithoutTools) {
  // Harmony's channels are the reply's structure, not only its calls: analysis is reasoning, final
  // is content, whether or not the request has tools.
  const Vocab& v = testing::demo_vocab();
  TestServerConfig cfg;
  cfg.chat_template = "{#- <|channel|> -#}" + std::string(kChatMLTemplate);
  const std::string body = R"({"messages":[{"role":"user","content":"Q?"}],"temperature":0)";
  for (const char* analysis : {"Think first.", ""}) {  // with an analysis channel, and only a final one
    const std::string reply = (*analysis ? "<|channel|>analysis<|message|>" + std::string(analysis) +
                                               "<|end|><|start|>assistant"
                                         : std::string()) +
                              "<|channel|>final<|message|>The answer.";
    std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
    script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
    const Reply r = testing::scripted_post(cfg, script, "/v1/chat/completions", body + "}");
    ASSERT_EQ(r.status, 200) << r.raw;
    const auto& m = r.body["choices"][0]["message"];
    EXPECT_EQ(m["content"], "The answer.") << r.raw;
    if (*analysis) EXPECT_EQ(m["reasoning_content"], analysis) << r.raw;
    else EXPECT_FALSE(m.contains("reasoning_content")) << r.raw;
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "stop");
    const Reply st = testing::scripted_post(cfg, script, "/v1/chat/completions", body + R"(,"stream":true})");
    const ChatStream cs = read_chat_stream(st.raw);
    EXPECT_EQ(cs.content, "The answer.") << st.raw;
    EXPECT_EQ(cs.reasoning, analysis) << st.raw;
  }
}

TEST(Routes, TemplatesThatDropToolsAreTold) {
  // ft serve's banner says when the served template ignores tools (ChatML has no tools section).
  EXPECT_FALSE(server::template_renders_tools(ChatTemplate(kChatMLTemplate, "", "<|im_end|>")));
  const std::string with_tools = "{%- if tools -%}TOOLS {{ tools | tojson }}\n{%- endif -%}" + std::string(kChatMLTemplate);
  EXPECT_TRUE(server::template_renders_tools(ChatTemplate(with_tools, "", "<|im_end|>")));
}

TEST(Routes, ToolCallsInEachTemplateFormat) {
  // The served template decides the format (detect_tool_call_format): a minimal template holding each
  // family's marker, a scripted reply in that format, whole and streamed.
  struct Case {
    const char* marker;  // what the template holds
    std::string reply;
    const char* content;  // message.content (null when "")
    const char* reasoning;
  };
  const std::string chatml = testing::chatml_with_tools();
  const Case cases[] = {
      {"<|python_tag|>", "<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "", ""},
      {"[TOOL_CALLS]", "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "Checking.", ""},
      {"<|channel|>",
       "<|channel|>analysis<|message|>Weather tool.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather "
       "<|constrain|>json<|message|>{\"city\": \"Paris\"}",
       "", "Weather tool."},
  };
  const Vocab& v = testing::demo_vocab();
  const std::string body =
      R"({"messages":[{"role":"user","content":"Weather?"}],"temperature":0,"max_tokens":200,)"
      R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}])";
  for (const Case& k : cases) {
    std::vector<int32_t> script = v.encode(k.reply, EncodeOptions{false, true});
    ASSERT_EQ(v.decode(script), k.reply) << "the demo vocab must spell the reply";
    script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
    TestServerConfig cfg;
    cfg.chat_template = "{#- " + std::string(k.marker) + " -#}" + chatml;
    {
      const Reply r = testing::scripted_post(cfg, script, "/v1/chat/completions", body + "}");
      ASSERT_EQ(r.status, 200) << r.body.dump();
      const auto& ch = r.body["choices"][0];
      EXPECT_EQ(ch["finish_reason"], "tool_calls") << k.marker;
      if (std::string(k.content).empty()) EXPECT_TRUE(ch["message"]["content"].is_null()) << r.body.dump();
      else EXPECT_EQ(ch["message"]["content"], k.content);
      if (std::string(k.reasoning).empty()) EXPECT_FALSE(ch["message"].contains("reasoning_content"));
      else EXPECT_EQ(ch["message"]["reasoning_content"], k.reasoning);
      ASSERT_EQ(ch["message"]["tool_calls"].size(), 1u) << r.body.dump();
      EXPECT_EQ(ch["message"]["tool_calls"][0]["function"]["name"], "get_weather");
      EXPECT_EQ(ch["message"]["tool_calls"][0]["function"]["arguments"], R"({"city":"Paris"})");
    }
    {
      const Reply r = testing::scripted_post(cfg, script, "/v1/chat/completions", body + R"(,"stream":true})");
      ASSERT_EQ(r.status, 200) << r.raw;
      const ChatStream st = read_chat_stream(r.raw);
      EXPECT_EQ(st.content, k.content) << k.marker;
      EXPECT_EQ(st.reasoning, k.reasoning) << k.marker;
      ASSERT_EQ(st.calls.size(), 1u) << r.raw;
      EXPECT_EQ(st.calls[0]["function"]["name"], "get_weather");
      EXPECT_EQ(st.calls[0]["function"]["arguments"], R"({"city":"Paris"})");
      EXPECT_EQ(st.finish, "tool_calls");
    }
  }
}

TEST(Routes, ReasoningFormatDeepseekSplitsTheThinkBlock) {
  // --reasoning-format deepseek: the leading <think> block is reasoning_content; the tool call after it
  // is still found. Without the flag the reply is content as written.
  const std::string reply = "<think>\nUse the tool.\n</think>\n\nOn it. <tool_call>{\"name\": \"f\"}</tool_call>";
  const Vocab& v = testing::demo_vocab();
  std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  const std::string body =
      R"({"messages":[{"role":"user","content":"Go"}],"temperature":0,"max_tokens":100,)"
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}])";
  TestServerConfig cfg;
  cfg.split_reasoning = true;
  {
    const Reply r = testing::scripted_post(cfg, script, "/v1/chat/completions", body + "}");
    ASSERT_EQ(r.status, 200) << r.body.dump();
    const auto& m = r.body["choices"][0]["message"];
    EXPECT_EQ(m["reasoning_content"], "Use the tool.");
    EXPECT_EQ(m["content"], "On it.");
    ASSERT_EQ(m["tool_calls"].size(), 1u);
    EXPECT_EQ(m["tool_calls"][0]["function"]["name"], "f");
    EXPECT_EQ(r.body["choices"][0]["finish_reason"], "tool_calls");
  }
  {
    const Reply r = testing::scripted_post(cfg, script, "/v1/chat/completions", body + R"(,"stream":true})");
    ASSERT_EQ(r.status, 200) << r.raw;
    const ChatStream st = read_chat_stream(r.raw);
    EXPECT_EQ(st.reasoning, "Use the tool.");  // trimmed, as in the whole reply
    EXPECT_EQ(st.content, "On it.");
    EXPECT_EQ(st.calls.size(), 1u);
    EXPECT_EQ(st.finish, "tool_calls");
  }
  TestServer s;  // default: none
  s.model().script = script;
  auto c = s.client();
  const Reply r = post(c, "/v1/chat/completions", R"({"messages":[{"role":"user","content":"Go"}],"temperature":0})");
  EXPECT_EQ(r.body["choices"][0]["message"]["content"], reply);
  EXPECT_FALSE(r.body["choices"][0]["message"].contains("reasoning_content"));
}

TEST(Routes, CorsPreflightAndHeaders) {
  // Browser clients: a preflight needs no API key and names the route's methods; every response,
  // errors included, carries Access-Control-Allow-Origin.
  TestServerConfig cfg;
  cfg.cors_origin = "*";  // --cors-origin '*'
  cfg.api_key = "sekret";
  TestServer s(cfg);
  auto c = s.client();
  const httplib::Headers ask = {{"Origin", "http://example.com"}, {"Access-Control-Request-Method", "POST"},
                                {"Access-Control-Request-Headers", "authorization, content-type"}};
  auto pre = c.Options("/v1/chat/completions", ask);
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Origin"), "*");
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Methods"), "POST, OPTIONS");
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "authorization, content-type");
  auto models = c.Options("/v1/models", ask);
  ASSERT_TRUE(models);
  EXPECT_EQ(models->get_header_value("Access-Control-Allow-Methods"), "GET, HEAD, OPTIONS");
  auto unknown = c.Options("/v1/nothing", ask);
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);
  auto denied = c.Get("/v1/models");  // no key: 401, still readable by the page
  ASSERT_TRUE(denied);
  EXPECT_EQ(denied->status, 401);
  EXPECT_EQ(denied->get_header_value("Access-Control-Allow-Origin"), "*");
  for (const char* alias : {"/chat/completions", "/completions"}) {  // the aliases too
    auto denied_alias = c.Post(alias, chat_body("hi", 2), "application/json");
    ASSERT_TRUE(denied_alias) << alias;
    EXPECT_EQ(denied_alias->status, 401) << alias;
  }
  for (const char* alias : {"/models", "/models/test-model"}) {
    auto denied_alias = c.Get(alias);
    ASSERT_TRUE(denied_alias) << alias;
    EXPECT_EQ(denied_alias->status, 401) << alias;
  }
  auto ok = c.Get("/v1/models", {{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->get_header_value("Access-Control-Allow-Origin"), "*");

  TestServerConfig off;  // CORS off (the default)
  TestServer s2(off);
  auto c2 = s2.client();
  auto pre2 = c2.Options("/v1/chat/completions", ask);
  ASSERT_TRUE(pre2);
  EXPECT_EQ(pre2->status, 405);
  EXPECT_FALSE(pre2->has_header("Access-Control-Allow-Origin"));
  EXPECT_FALSE(c2.Get("/health")->has_header("Access-Control-Allow-Origin"));
}

TEST(Routes, CorsRefusesBodiesAPageCanSendWithoutAPreflight) {
  // With CORS on, a page on another origin could POST text/plain or a form without a preflight
  // (issue 40): such bodies get 415; application/json works; with CORS off (the default) the
  // content type is not checked.
  TestServerConfig cfg;
  cfg.cors_origin = "*";
  TestServer s(cfg);
  auto c = s.client();
  for (const char* type : {"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
                           "Multipart/Form-Data; boundary=x"}) {
    auto r = c.Post("/v1/chat/completions", chat_body("x", 2), type);
    ASSERT_TRUE(r) << type;
    EXPECT_EQ(r->status, 415) << type;
    EXPECT_NE(r->body.find("unsupported_media_type"), std::string::npos) << r->body;
  }
  EXPECT_EQ(post(c, "/v1/chat/completions", chat_body("x", 2)).status, 200);
  TestServerConfig off;
  off.cors_origin = "";
  TestServer s2(off);
  auto c2 = s2.client();
  auto r = c2.Post("/v1/chat/completions", chat_body("x", 2), "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST(Routes, ApiKeyGuardsEverythingButHealth) {
  TestServerConfig cfg;
  cfg.api_key = "sekret";
  TestServer s(cfg);
  auto c = s.client();
  EXPECT_EQ(get(c, "/health").status, 200);
  for (const char* path : {"/v1/models", "/v1/stats", "/metrics", "/v1/models/test-model"}) {
    expect_error(get(c, path), 401, "invalid_api_key");
    expect_error(get(c, path, {{"Authorization", "Bearer nope"}}), 401, "invalid_api_key");
    EXPECT_EQ(get(c, path, {{"Authorization", "Bearer sekret"}}).status, 200) << path;
    EXPECT_EQ(get(c, path, {{"x-api-key", "sekret"}}).status, 200) << path;
  }
  expect_error(post(c, "/v1/chat/completions", chat_body("x", 3)), 401);
  expect_error(post(c, "/v1/completions", R"({"prompt":"x"})", {{"Authorization", "Bearer sekre"}}), 401);
  EXPECT_EQ(post(c, "/v1/chat/completions", chat_body("x", 3), {{"Authorization", "Bearer sekret"}}).status, 200);
}

TEST(Routes, StatsAndMetricsReportTheSameFigures) {
  TestServer s;
  auto c = s.client();
  ASSERT_EQ(post(c, "/v1/chat/completions", chat_body("stats please", 10, R"("ignore_eos":true)")).status, 200);
  Reply st = get(c, "/v1/stats");
  ASSERT_EQ(st.status, 200);
  EXPECT_EQ(st.body["model"], "test-model");
  EXPECT_EQ(st.body["context_limit"], 512);
  EXPECT_EQ(st.body["kv"]["pages_total"], 64);
  EXPECT_EQ(st.body["kv"]["pages_used"], 0);
  EXPECT_EQ(st.body["kv"]["bytes_per_token"], 480);
  EXPECT_EQ(st.body["kv"]["bytes_total"], 480 * st.body["kv"]["tokens_total"].get<int64_t>());
  EXPECT_EQ(st.body["requests"]["running"], 0);
  EXPECT_EQ(st.body["requests"]["waiting"], 0);
  EXPECT_EQ(st.body["requests"]["total"], 1);
  EXPECT_EQ(st.body["totals"]["generation_tokens"], 10);
  EXPECT_GT(st.body["throughput"]["generation_tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(st.body["mean_ttft_s"].get<double>(), 0.0);
  EXPECT_TRUE(st.body.contains("moe") && st.body["moe"].is_null());  // no MoE runtime behind the fake model
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->body.find("freetoken_requests_total 1\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("freetoken_generation_tokens_total 10\n"), std::string::npos);
  EXPECT_NE(m->body.find("freetoken_kv_pages_total 64\n"), std::string::npos);
  EXPECT_NE(m->body.find("freetoken_kv_bytes_per_token 480\n"), std::string::npos) << m->body;
  EXPECT_NE(m->body.find("# TYPE freetoken_requests_running gauge"), std::string::npos);
  EXPECT_NE(m->body.find("freetoken_info{model=\"test-model\"} 1"), std::string::npos);
}

TEST(Routes, EveryErrorResponseCountsAsRejected) {
  TestServerConfig cfg;
  cfg.max_body_mb = 1;
  TestServer s(cfg);
  auto c = s.client();
  expect_error(post(c, "/v1/chat/completions", "{not json"), 400);
  expect_error(post(c, "/v1/chat/completions", chat_body("x", 5, R"("top_p":7)")), 400);
  expect_error(post(c, "/v1/completions", R"({"prompt":"x","logit_bias":{"1":500}})"), 400);
  expect_error(post(c, "/v1/chat/completions", chat_body("x", 600)), 400, "context_length_exceeded");
  expect_error(post(c, "/v1/chat/completions", R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})"), 404);
  expect_error(get(c, "/v1/nothing"), 404);
  expect_error(get(c, "/v1/chat/completions"), 405);
  expect_error(post(c, "/v1/chat/completions", std::string(2 * 1024 * 1024, ' ')), 413);
  ASSERT_EQ(post(c, "/v1/chat/completions", chat_body("fine", 2)).status, 200);  // not counted
  Reply st = get(c, "/v1/stats");
  ASSERT_EQ(st.status, 200);
  EXPECT_EQ(st.body["requests"]["rejected"], 8) << st.raw;
  EXPECT_EQ(st.body["requests"]["total"], 1);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_NE(m->body.find("freetoken_requests_rejected_total 8\n"), std::string::npos) << m->body;
}

TEST(Routes, OverloadGives503) {
  TestServerConfig cfg;
  cfg.max_running = 1;
  cfg.max_waiting = 0;
  TestServer s(cfg);
  const Reply r = overloaded_reply(s, "/v1/chat/completions", chat_body("first", 3), chat_body("second", 3),
                                   chat_body("third", 3));
  expect_error(r, 503, "overloaded");
  auto retry = r.headers.find("Retry-After");  // when to come back (issue 40)
  ASSERT_NE(retry, r.headers.end());
  EXPECT_EQ(retry->second, "1");
  auto c = s.client();
  EXPECT_EQ(get(c, "/v1/stats").body["requests"]["rejected"], 1);  // the 503
}

TEST(Routes, ClientDisconnectCancelsTheStreamAndFreesPages) {
  TestServer s;
  const EngineStats st =
      hang_up_mid_stream(s, "/v1/chat/completions", chat_body("run long", 480, R"("stream":true,"ignore_eos":true)"));
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_pages_used, 0);
  EXPECT_EQ(st.requests_cancelled, 1);
  EXPECT_LT(st.generation_tokens_total, 480);
}

TEST(Routes, ClientDisconnectCancelsANonStreamingRequest) {
  // A non-streaming client that gives up (a read timeout, a killed script) cancels its request like a
  // streaming one: it used to run to the end of max_tokens, holding its pages (issue 40).
  for (const char* path : {"/v1/chat/completions", "/v1/completions", "/v1/messages"}) {
    TestServer s;
    s.model().delay = std::chrono::milliseconds(2);  // ~1 s for the whole request
    const std::string body =
        std::string(path) == "/v1/completions" ? R"({"prompt":"run long","max_tokens":480,"ignore_eos":true})"
        : std::string(path) == "/v1/messages"
            ? R"({"model":"test-model","max_tokens":480,"messages":[{"role":"user","content":"run long"}],"ignore_eos":true})"
            : chat_body("run long", 480, R"("ignore_eos":true)");
    {
      auto c = s.client();
      c.set_read_timeout(0, 300000);  // 300 ms, then the client closes its connection
      auto r = c.Post(path, body, "application/json");
      EXPECT_FALSE(r) << path << ": " << (r ? r->body : "");
      c.stop();
    }
    for (int i = 0; i < 500 && (s.service().stats().running > 0 || s.service().stats().kv_pages_used > 0); ++i)
      std::this_thread::sleep_for(10ms);
    const EngineStats st = s.service().stats();
    EXPECT_EQ(st.running, 0) << path;
    EXPECT_EQ(st.kv_pages_used, 0) << path;
    EXPECT_EQ(st.requests_cancelled, 1) << path;
    EXPECT_LT(st.generation_tokens_total, 480) << path;
  }
}

namespace {
int64_t rss_kib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}
}  // namespace

TEST(Routes, LargeRequestsGiveTheirMemoryBack) {
  // /tokenize of a large body builds millions of small JSON nodes; freed, they stayed in malloc's
  // arenas (issue 40: RSS never came back). After such a request the server trims the heap.
  TestServerConfig cfg;
  cfg.max_body_mb = 16;
  TestServer s(cfg);
  auto c = s.client();
  std::string text;
  for (int i = 0; text.size() < 2u << 20; ++i) text += "word" + std::to_string(i % 1000) + " ";
  const std::string body = json({{"content", text}, {"with_pieces", true}}).dump();
  text.clear();
  text.shrink_to_fit();
  ASSERT_EQ(post(c, "/tokenize", R"({"content":"warm up"})").status, 200);
  const int64_t before = rss_kib();
  {
    auto r = c.Post("/tokenize", body, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
  }
  int64_t after = rss_kib();
  for (int i = 0; i < 50 && after - before >= 64 * 1024; ++i) {  // the trim runs once the reply is written
    std::this_thread::sleep_for(20ms);
    after = rss_kib();
  }
  EXPECT_LT(after - before, 64 * 1024) << "KiB: " << before << " -> " << after;
}

TEST(Routes, ADivergedSequenceEndsOnlyItsOwnRequest) {
  // NaN logits from position 60 on: the request that gets there ends with an error, the server and
  // the next request are fine, and nothing is left held (issue 40).
  TestServer s;
  s.model().nan_from_position = 60;
  auto c = s.client();
  Reply bad = post(c, "/v1/chat/completions", chat_body("run long", 100, R"("ignore_eos":true)"));
  EXPECT_EQ(bad.status, 500) << bad.raw;
  EXPECT_NE(bad.raw.find("no finite value to sample"), std::string::npos) << bad.raw;
  Reply ok = post(c, "/v1/chat/completions", chat_body("short", 3));
  EXPECT_EQ(ok.status, 200) << ok.raw;
  const EngineStats st = s.service().stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_pages_used, 0);
  EXPECT_EQ(get(c, "/health").status, 200);
}

TEST(Routes, RequestsPastTheirDeadlineEndWithLength) {
  // --request-timeout and a request's `timeout`: past it a request ends with finish_reason "length"
  // and what it generated so far (issue 40); the shorter of the two applies.
  TestServerConfig cfg;
  cfg.request_timeout_s = 0.3;
  TestServer s(cfg);
  s.model().delay = std::chrono::milliseconds(5);  // 480 tokens: ~2.4 s
  auto c = s.client();
  auto t0 = std::chrono::steady_clock::now();
  Reply r = post(c, "/v1/chat/completions", chat_body("run long", 480, R"("ignore_eos":true)"));
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_LT(r.body["usage"]["completion_tokens"].get<int>(), 480);
  EXPECT_LT(took, 2.0);
  // The request's own, shorter timeout; a longer one does not extend the server's.
  t0 = std::chrono::steady_clock::now();
  r = post(c, "/v1/completions", R"({"prompt":"run long","max_tokens":480,"ignore_eos":true,"timeout":0.05})");
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["choices"][0]["finish_reason"], "length");
  EXPECT_LT(r.body["usage"]["completion_tokens"].get<int>(), 60);
  r = post(c, "/v1/completions", R"({"prompt":"run long","max_tokens":480,"ignore_eos":true,"timeout":100})");
  EXPECT_LT(r.body["usage"]["completion_tokens"].get<int>(), 480);
  // A streamed one ends the same way.
  auto sr = c.Post("/v1/chat/completions", chat_body("run long", 480, R"("ignore_eos":true,"stream":true)"),
                   "application/json");
  ASSERT_TRUE(sr);
  const std::vector<std::string> ev = sse_events(sr->body);
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(json::parse(ev[ev.size() - 2])["choices"][0]["finish_reason"], "length");
  expect_error(post(c, "/v1/completions", R"({"prompt":"x","timeout":0})"), 400);
  const EngineStats st = s.service().stats();
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_pages_used, 0);
}

TEST(Routes, RangeHeadersAreIgnored) {
  // Nothing here is a byte range of a file: a Range header with thousands of ranges turned a 15 KB
  // request into an ~19 MB multipart reply, even on a 404 (issue 40). It is ignored now.
  TestServer s;
  auto c = s.client();
  std::string ranges = "bytes=0-";
  for (int i = 0; i < 2600; ++i) ranges += ",0-";
  for (const char* path : {"/v1/models", "/v1/models/nope", "/health"}) {
    auto r = c.Get(path, {{"Range", ranges}});
    ASSERT_TRUE(r) << path;
    EXPECT_NE(r->status, 206) << path;
    EXPECT_LT(r->body.size(), 4096u) << path;
    EXPECT_EQ(r->get_header_value("Content-Type").rfind("multipart", 0), std::string::npos) << path;
  }
}

TEST(Routes, TooManyHeaderFieldsAreRefused) {
  // 20,000 header fields were accepted (issue 40); past 128 the request gets 431 and the server goes on.
  TestServer s;
  auto c = s.client();
  httplib::Headers many;
  for (int i = 0; i < 300; ++i) many.emplace("X-Filler-" + std::to_string(i), "x");
  Reply r = get(c, "/v1/models", many);
  EXPECT_EQ(r.status, 431) << r.raw;
  EXPECT_NE(r.raw.find("request_header_fields_too_large"), std::string::npos) << r.raw;
  httplib::Headers some;
  for (int i = 0; i < 40; ++i) some.emplace("X-Filler-" + std::to_string(i), "x");
  EXPECT_EQ(get(c, "/v1/models", some).status, 200);
}

TEST(Routes, RequestsCutShortByShutdownFinishWithAnOpenAIReason) {
  TestServer s;
  s.model().delay = 5ms;  // seconds for each request: the shutdown comes in the middle
  Reply plain;
  std::string streamed;
  std::thread a([&] {
    auto c = s.client();
    plain = post(c, "/v1/chat/completions", chat_body("long one", 480, R"("ignore_eos":true)"));
  });
  std::thread b([&] {
    auto c = s.client();
    auto r = c.Post("/v1/chat/completions", chat_body("long two", 480, R"("ignore_eos":true,"stream":true)"), "application/json");
    if (r) streamed = r->body;
  });
  for (int i = 0; i < 500 && (s.service().stats().running < 2 || s.service().stats().generation_tokens_total < 10); ++i)
    std::this_thread::sleep_for(10ms);
  ASSERT_EQ(s.service().stats().running, 2);
  s.service().shutdown(0ms);  // what `ft serve` does once the grace period is over
  a.join();
  b.join();
  ASSERT_EQ(plain.status, 200) << plain.raw;
  EXPECT_EQ(plain.body["choices"][0]["finish_reason"], "length");
  EXPECT_LT(plain.body["usage"]["completion_tokens"].get<int>(), 480);
  std::vector<std::string> ev = sse_events(streamed);
  ASSERT_GE(ev.size(), 3u) << streamed;
  EXPECT_EQ(ev.back(), "[DONE]");
  EXPECT_EQ(json::parse(ev[ev.size() - 2])["choices"][0]["finish_reason"], "length") << ev[ev.size() - 2];
  EXPECT_EQ(s.service().stats().requests_cancelled, 2);
}

TEST(Routes, HealthSays503WhileTheServerDrains) {
  // A load balancer's health check must see the shutdown's grace period: /health turns 503 as soon
  // as the service stops accepting, while the running request still finishes normally.
  TestServer s;
  s.model().delay = 5ms;
  auto c = s.client();
  EXPECT_EQ(get(c, "/health").status, 200);
  Reply running;
  std::thread a([&] {
    auto ca = s.client();
    running = post(ca, "/v1/chat/completions", chat_body("drain me", 40, R"("ignore_eos":true)"));
  });
  for (int i = 0; i < 500 && s.service().stats().running < 1; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_EQ(s.service().stats().running, 1);
  std::thread stopper([&] { s.service().shutdown(10s); });  // the grace period: the request drains
  for (int i = 0; i < 500 && s.service().accepting(); ++i) std::this_thread::sleep_for(1ms);
  const Reply h = get(c, "/health");
  EXPECT_EQ(h.status, 503) << h.raw;
  EXPECT_EQ(h.body["status"], "shutting down") << h.raw;
  a.join();
  stopper.join();
  ASSERT_EQ(running.status, 200) << running.raw;
  EXPECT_EQ(running.body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(running.body["usage"]["completion_tokens"], 40);  // drained in full, not cut short
}

TEST(Routes, RandomBodiesNeverTakeTheServerDown) {
  TestServer s;
  auto c = s.client();
  std::mt19937 rng(7);
  const std::string seed_body =
      R"({"model":"test-model","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":3,"temperature":0.7,"top_p":0.9,"stop":["a"],"logprobs":true,"top_logprobs":2,"stream":false,"seed":5})";
  for (int i = 0; i < 300; ++i) {
    const std::string b = testing::mutate_body(seed_body, rng);
    const char* path = rng() % 2 ? "/v1/chat/completions" : "/v1/completions";
    Reply r = post(c, path, b);
    ASSERT_TRUE(r.status == 200 || r.status == 400 || r.status == 404) << r.status << " for " << b;
    if (r.status != 200) expect_error(r, r.status);
  }
  EXPECT_EQ(get(c, "/health").status, 200);
  EXPECT_EQ(s.service().stats().kv_pages_used, 0);
}

}  // namespace
}  // namespace ft
