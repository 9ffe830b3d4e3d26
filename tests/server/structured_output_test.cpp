// Structured outputs through the routes (issue 38): response_format json_schema / json_object on chat
// and completions, streamed and not, give replies that parse and hold the schema on the fake model
// (whose logits are pseudo-random, so only the constraint makes them JSON); a schema the compiler
// refuses is a 400 naming the field; the same schema twice reuses one compiled grammar.
#include <gtest/gtest.h>

#include "server/json_body.h"
#include "server_fixture.h"

namespace ft {
namespace {

using nlohmann::json;
using testing::TestServer;

const char* kPersonSchema = R"({"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 10},
    "age": {"type": "integer", "minimum": 0, "maximum": 130},
    "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 2},
    "pet": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/pet"}]}},
  "required": ["name", "age", "pet"],
  "$defs": {"pet": {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer",
    "minimum": 1, "maximum": 9}}, "required": ["kind", "lives"]}}})";

/** Checks `v` against kPersonSchema by hand. */
void expect_person(const json& v, const std::string& text) {
  ASSERT_TRUE(v.is_object()) << text;
  ASSERT_TRUE(v.contains("name") && v["name"].is_string()) << text;
  EXPECT_LE(v["name"].get<std::string>().size(), 40u) << text;  // 10 code points, at most 4 bytes each
  ASSERT_TRUE(v.contains("age") && v["age"].is_number_integer()) << text;
  EXPECT_GE(v["age"].get<int64_t>(), 0) << text;
  EXPECT_LE(v["age"].get<int64_t>(), 130) << text;
  if (v.contains("tags")) {
    ASSERT_TRUE(v["tags"].is_array()) << text;
    EXPECT_LE(v["tags"].size(), 2u) << text;
    for (const json& t : v["tags"]) EXPECT_TRUE(t == "x" || t == "y") << text;
  }
  ASSERT_TRUE(v.contains("pet")) << text;
  if (!v["pet"].is_null()) {
    EXPECT_EQ(v["pet"]["kind"], "cat") << text;
    EXPECT_GE(v["pet"]["lives"].get<int>(), 1) << text;
    EXPECT_LE(v["pet"]["lives"].get<int>(), 9) << text;
  }
  for (const auto& [k, _] : v.items()) EXPECT_TRUE(k == "name" || k == "age" || k == "tags" || k == "pet") << text;
}

json chat_body(int seed, const std::string& format, int max_tokens = 120) {
  json b = json::parse(R"({"messages": [{"role": "user", "content": "a person please"}], "temperature": 1.0})");
  b["seed"] = seed;
  b["max_tokens"] = max_tokens;
  b["response_format"] = json::parse(format);
  return b;
}

std::string schema_format() {
  return std::string(R"({"type": "json_schema", "json_schema": {"name": "person", "strict": true, "schema": )") +
         kPersonSchema + "}}";
}

TEST(StructuredOutput, ChatRepliesHoldTheSchemaStreamedOrNot) {
  TestServer s;
  auto cli = s.client();
  for (int seed = 1; seed <= 6; ++seed) {
    json b = chat_body(seed, schema_format());
    auto r = cli.Post("/v1/chat/completions", b.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json reply = json::parse(r->body);
    const std::string text = reply["choices"][0]["message"]["content"];
    EXPECT_EQ(reply["choices"][0]["finish_reason"], "stop") << text;
    expect_person(json::parse(text), text);
    // Streamed: the same seed gives the same text.
    b["stream"] = true;
    auto st = cli.Post("/v1/chat/completions", b.dump(), "application/json");
    ASSERT_TRUE(st);
    std::string streamed;
    for (const auto& [name, data] : testing::sse_named_events(st->body)) {
      if (data == "[DONE]") continue;
      const json c = json::parse(data);
      if (!c["choices"].empty() && c["choices"][0]["delta"].contains("content"))
        streamed += c["choices"][0]["delta"]["content"].get<std::string>();
    }
    EXPECT_EQ(streamed, text);
  }
  EXPECT_EQ(s.service().stats().kv_pages_used, 0);
}

TEST(StructuredOutput, APromptThatOpenedThinkingGetsTheValueAsContent) {
  // A template whose generation prompt opens <think> (Qwen3-Thinking, DeepSeek-R1), reasoning split: the
  // server closes the block first, so the value is the content and the reasoning is empty. Before, the
  // value went to reasoning_content and content was "".
  testing::TestServerConfig c;
  std::string thinking = kChatMLTemplate;
  const std::string prompt = "'<|im_start|>assistant\\n'";
  ASSERT_NE(thinking.find(prompt), std::string::npos);
  thinking.replace(thinking.find(prompt), prompt.size(), "'<|im_start|>assistant\\n<think>\\n'");
  c.chat_template = thinking;
  c.split_reasoning = true;
  TestServer s(c);
  auto cli = s.client();
  for (int seed = 1; seed <= 3; ++seed) {
    json b = chat_body(seed, schema_format());
    auto r = cli.Post("/v1/chat/completions", b.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json message = json::parse(r->body)["choices"][0]["message"];
    EXPECT_EQ(message.value("reasoning_content", ""), "") << r->body;
    const std::string text = message["content"];
    expect_person(json::parse(text), text);
    b["stream"] = true;
    auto st = cli.Post("/v1/chat/completions", b.dump(), "application/json");
    ASSERT_TRUE(st);
    std::string streamed, reasoning;
    for (const auto& [name, data] : testing::sse_named_events(st->body)) {
      if (data == "[DONE]") continue;
      const json d = json::parse(data)["choices"][0]["delta"];
      if (d.contains("content")) streamed += d["content"].get<std::string>();
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    }
    EXPECT_EQ(streamed, text);
    EXPECT_EQ(reasoning, "");
  }
}

TEST(StructuredOutput, MaxTokensStillEndsWithAWholeValue) {
  TestServer s;
  auto cli = s.client();
  // The shortest person is {"name":"","age":0,"pet":null} (31 bytes, one token a byte here): a budget
  // of 40 forces the value closed early.
  for (int seed = 1; seed <= 5; ++seed) {
    auto r = cli.Post("/v1/chat/completions", chat_body(seed, schema_format(), 40).dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string text = json::parse(r->body)["choices"][0]["message"]["content"];
    expect_person(json::parse(text), text);
  }
}

TEST(StructuredOutput, JsonObjectAndCompletions) {
  TestServer s;
  auto cli = s.client();
  for (int seed = 1; seed <= 4; ++seed) {
    auto r = cli.Post("/v1/chat/completions", chat_body(seed, R"({"type": "json_object"})", 60).dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const std::string text = json::parse(r->body)["choices"][0]["message"]["content"];
    EXPECT_TRUE(json::parse(text).is_object()) << text;
  }
  json c = json::parse(R"({"prompt": "numbers:", "max_tokens": 30, "temperature": 1.0, "seed": 9})");
  c["response_format"] = json::parse(R"({"type": "json_schema", "json_schema": {"name": "n", "schema":
      {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9}, "minItems": 2, "maxItems": 4}}})");
  auto r = cli.Post("/v1/completions", c.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const std::string text = json::parse(r->body)["choices"][0]["text"];
  const json v = json::parse(text);
  ASSERT_TRUE(v.is_array()) << text;
  EXPECT_GE(v.size(), 2u);
  EXPECT_LE(v.size(), 4u);
  for (const json& x : v) EXPECT_TRUE(x.is_number_integer() && x.get<int>() >= 0 && x.get<int>() <= 9) << text;
}

TEST(StructuredOutput, UnsupportedSchemasAre400NamingTheField) {
  TestServer s;
  auto cli = s.client();
  auto r = cli.Post("/v1/chat/completions",
                    chat_body(1, R"({"type": "json_schema", "json_schema": {"name": "x", "schema":
                        {"type": "string", "pattern": "^a+$"}}})").dump(),
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  const json e = json::parse(r->body)["error"];
  EXPECT_EQ(e["param"], "response_format.json_schema.schema");
  EXPECT_NE(e["message"].get<std::string>().find("pattern"), std::string::npos) << e.dump();
  // vLLM's spelling names its own field.
  json g = json::parse(R"({"messages": [{"role": "user", "content": "x"}], "guided_json": {"not": {}}})");
  r = cli.Post("/v1/chat/completions", g.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "guided_json");
  EXPECT_EQ(s.service().stats().requests_total, 0);
}

}  // namespace
}  // namespace ft
