// OpenAI's `n` on chat and completions (issue 38): choice i of a seeded request is the single request
// with seed + i, whole and streamed replies agree choice by choice, usage counts the prompt once, the
// later choices take the prompt's pages from the prefix cache, and the endpoints without `n` refuse it.
#include <gtest/gtest.h>

#include <map>

#include "server_fixture.h"

namespace ft::testing {
namespace {

using nlohmann::json;

std::string chat(const std::string& extra) {
  return R"({"messages":[{"role":"user","content":"tell me a story about a fox"}],"max_tokens":12,)" + extra + "}";
}

/** Per choice index: the streamed text (content or completions' text) and its finish_reason; the usage
 *  chunks and [DONE] markers counted. */
struct Streamed {
  std::map<int, std::string> text;
  std::map<int, std::string> finish;
  std::map<int, int> roles;
  std::vector<json> usage;
  int done = 0;
};

Streamed streamed(const std::string& raw, bool chat_api) {
  Streamed out;
  for (const std::string& e : sse_events(raw)) {
    if (e == "[DONE]") {
      ++out.done;
      continue;
    }
    const json j = json::parse(e);
    if (j.contains("usage") && !j["usage"].is_null()) out.usage.push_back(j["usage"]);
    for (const json& c : j["choices"]) {
      const int i = c["index"].get<int>();
      if (chat_api) {
        if (c["delta"].contains("role")) ++out.roles[i];
        if (c["delta"].contains("content")) out.text[i] += c["delta"]["content"].get<std::string>();
      } else {
        out.text[i] += c["text"].get<std::string>();
      }
      if (!c["finish_reason"].is_null()) out.finish[i] = c["finish_reason"].get<std::string>();
    }
  }
  return out;
}

TEST(Choices, ChatChoiceIIsTheSeedPlusIRequestWholeAndStreamed) {
  TestServer s;
  auto c = s.client();
  Reply r = post(c, "/v1/chat/completions", chat(R"("n":3,"seed":40,"temperature":1)"));
  ASSERT_EQ(r.status, 200) << r.raw;
  ASSERT_EQ(r.body["choices"].size(), 3u);
  int completion_tokens = 0;
  std::vector<std::string> texts;
  for (int i = 0; i < 3; ++i) {
    const json& ch = r.body["choices"][static_cast<size_t>(i)];
    EXPECT_EQ(ch["index"], i);
    Reply one = post(c, "/v1/chat/completions", chat(R"("seed":)" + std::to_string(40 + i) + R"(,"temperature":1)"));
    ASSERT_EQ(one.status, 200);
    EXPECT_EQ(ch["message"], one.body["choices"][0]["message"]) << "choice " << i;
    EXPECT_EQ(ch["finish_reason"], one.body["choices"][0]["finish_reason"]);
    completion_tokens += one.body["usage"]["completion_tokens"].get<int>();
    if (i == 0) EXPECT_EQ(r.body["usage"]["prompt_tokens"], one.body["usage"]["prompt_tokens"]);
    texts.push_back(ch["message"]["content"].get<std::string>());
  }
  EXPECT_TRUE(texts[0] != texts[1] || texts[1] != texts[2]) << "seeded choices differ";
  EXPECT_EQ(r.body["usage"]["completion_tokens"], completion_tokens);
  EXPECT_EQ(r.body["usage"]["total_tokens"],
            r.body["usage"]["prompt_tokens"].get<int>() + completion_tokens);

  Reply st = post(c, "/v1/chat/completions",
                  chat(R"("n":3,"seed":40,"temperature":1,"stream":true,"stream_options":{"include_usage":true})"));
  ASSERT_EQ(st.status, 200);
  const Streamed got = streamed(st.raw, true);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(got.text.at(i), texts[static_cast<size_t>(i)]) << "choice " << i;
    EXPECT_EQ(got.finish.at(i), r.body["choices"][static_cast<size_t>(i)]["finish_reason"]);
    EXPECT_EQ(got.roles.at(i), 1);
  }
  ASSERT_EQ(got.usage.size(), 1u);
  EXPECT_EQ(got.usage[0]["completion_tokens"], completion_tokens);
  EXPECT_EQ(got.done, 1);
  EXPECT_EQ(s.service().stats().kv_pages_used, 0);
}

TEST(Choices, GreedyChoicesAreEqualAndCompletionsEchoEach) {
  TestServer s;
  auto c = s.client();
  Reply g = post(c, "/v1/chat/completions", chat(R"("n":2,"temperature":0)"));
  ASSERT_EQ(g.status, 200);
  EXPECT_EQ(g.body["choices"][0]["message"], g.body["choices"][1]["message"]);

  const std::string body = R"({"prompt":"once upon a time","max_tokens":8,"n":2,"seed":7,"echo":true)";
  Reply whole = post(c, "/v1/completions", body + "}");
  ASSERT_EQ(whole.status, 200) << whole.raw;
  ASSERT_EQ(whole.body["choices"].size(), 2u);
  Reply st = post(c, "/v1/completions", body + R"(,"stream":true})");
  const Streamed got = streamed(st.raw, false);
  for (int i = 0; i < 2; ++i) {
    const json& ch = whole.body["choices"][static_cast<size_t>(i)];
    EXPECT_EQ(ch["index"], i);
    EXPECT_EQ(ch["text"].get<std::string>().rfind("once upon a time", 0), 0u);
    EXPECT_EQ(got.text.at(i), ch["text"]) << "choice " << i;
    Reply one = post(c, "/v1/completions",
                     R"({"prompt":"once upon a time","max_tokens":8,"echo":true,"seed":)" + std::to_string(7 + i) + "}");
    EXPECT_EQ(one.body["choices"][0]["text"], ch["text"]);
  }
  EXPECT_TRUE(got.usage.empty());  // include_usage not asked for
}

TEST(Choices, LaterChoicesTakeThePromptFromThePrefixCache) {
  TestServerConfig cfg;
  cfg.max_prefill_tokens = 512;
  TestServer s(cfg);
  auto c = s.client();
  const std::string prompt(150, 'a');  // 150 prompt tokens at least (bytes): 9 whole pages of 16
  const int64_t before = s.service().stats().prompt_tokens_computed_total;
  Reply r = post(c, "/v1/completions", R"({"prompt":")" + prompt + R"(","max_tokens":4,"n":4,"seed":1})");
  ASSERT_EQ(r.status, 200) << r.raw;
  const int p = r.body["usage"]["prompt_tokens"].get<int>();
  const int64_t computed = s.service().stats().prompt_tokens_computed_total - before;
  // The first choice computes the prompt, each other one only its partial last page (< 16 tokens).
  EXPECT_GE(computed, p);
  EXPECT_LT(computed, p + 3 * 16);
  EXPECT_EQ(s.service().stats().kv_pages_used, 0);
}

TEST(Choices, RefusedWhereTheApiHasNoN) {
  TestServer s;
  auto c = s.client();
  for (const char* n : {R"("n":0)", R"("n":129)", R"("n":2,"best_of":3)"}) {
    Reply r = post(c, "/v1/chat/completions", chat(n));
    EXPECT_EQ(r.status, 400) << n;
  }
  EXPECT_EQ(post(c, "/v1/completions", R"({"prompt":"x","max_tokens":2,"n":2,"best_of":2})").status, 200);
  Reply a = post(c, "/v1/messages",
                 R"({"model":"m","max_tokens":4,"n":2,"messages":[{"role":"user","content":"hi"}]})");
  EXPECT_EQ(a.status, 400);
  EXPECT_EQ(a.body["error"]["type"], "invalid_request_error");
  Reply l = post(c, "/completion", R"({"prompt":"x","n_predict":2,"n":2})");
  EXPECT_EQ(l.status, 400);
  EXPECT_EQ(l.body["error"]["param"], "n");
}

}  // namespace
}  // namespace ft::testing
