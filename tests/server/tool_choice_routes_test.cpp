// Forced tool calls through the routes (issue 38, server/tool_call_grammar): on the fake model (whose
// logits are pseudo-random, so only the constraint makes a call) with the demo vocabulary and a ChatML
// template (Hermes format), tool_choice naming a function returns exactly one call to it, and
// "required" one call to one of the tools, with arguments valid against the tool's schema, streamed or
// not (the same text for the same seed); Anthropic's tool_choice {type: tool} / {type: any} and the
// Responses API's {type: function, name} alike; response_format beside a forced call is a 400.
#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "json_schema_testing.h"
#include "server_fixture.h"
#include "test_util.h"

namespace ft {
namespace {

using nlohmann::json;
using server::schema_testing::validate;
using testing::TestServer;
using testing::TestServerConfig;
using Ojson = nlohmann::ordered_json;

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"]}}},
  {"type": "function", "function": {"name": "search", "parameters": {"type": "object", "properties": {
    "query": {"type": "string", "maxLength": 16}, "exact": {"type": "boolean"}}, "required": ["query"]}}}])";

const Ojson& schema_of(const std::string& name) {
  static const Ojson tools = Ojson::parse(kTools);
  for (const Ojson& t : tools)
    if (t["function"]["name"] == name) return t["function"]["parameters"];
  static const Ojson none;
  ADD_FAILURE() << "no tool " << name;
  return none;
}

TestServerConfig roomy() {
  TestServerConfig c;
  c.max_seq_len = 2048;
  c.n_pages = 256;
  return c;
}

json chat_body(int seed, const json& tool_choice) {
  json b = json::parse(R"({"messages": [{"role": "user", "content": "weather in Oslo?"}], "temperature": 1.0,
                          "max_tokens": 160})");
  b["tools"] = json::parse(kTools);
  b["tool_choice"] = tool_choice;
  b["seed"] = seed;
  return b;
}

/** The one call of a chat reply's message, checked: a known function whose arguments hold its schema. */
std::string expect_one_valid_call(const json& message, const std::string& raw) {
  EXPECT_TRUE(message["content"].is_null() || message["content"] == "") << raw;
  if (!message.contains("tool_calls") || message["tool_calls"].size() != 1) {
    ADD_FAILURE() << "not one call: " << raw;
    return "";
  }
  const json& fn = message["tool_calls"][0]["function"];
  const std::string name = fn["name"];
  const Ojson args = Ojson::parse(fn["arguments"].get<std::string>(), nullptr, false);
  const Ojson& schema = schema_of(name);
  EXPECT_EQ(validate(args, schema, schema), "") << raw;
  return name;
}

/** Streams `b` and gathers the tool calls' deltas into a message. */
json streamed_message(httplib::Client& cli, json b) {
  b["stream"] = true;
  auto r = cli.Post("/v1/chat/completions", b.dump(), "application/json");
  json message = {{"content", nullptr}};
  if (!r) return message;
  std::string content;
  for (const auto& [name, data] : testing::sse_named_events(r->body)) {
    if (data == "[DONE]") continue;
    const json c = json::parse(data);
    if (c["choices"].empty()) continue;
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& tc : d["tool_calls"]) message["tool_calls"].push_back(tc);
  }
  if (!content.empty()) message["content"] = content;
  return message;
}

TEST(ToolChoiceRoutes, NamedFunctionGivesOneValidCallToIt) {
  TestServer s(roomy());
  auto cli = s.client();
  for (int seed = 1; seed <= 5; ++seed) {
    const json b = chat_body(seed, json::parse(R"({"type": "function", "function": {"name": "search"}})"));
    auto r = cli.Post("/v1/chat/completions", b.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json reply = json::parse(r->body);
    const json& message = reply["choices"][0]["message"];
    EXPECT_EQ(expect_one_valid_call(message, r->body), "search");
    const json streamed = streamed_message(cli, b);
    EXPECT_EQ(expect_one_valid_call(streamed, streamed.dump()), "search");
    ASSERT_TRUE(streamed.contains("tool_calls"));
    EXPECT_EQ(streamed["tool_calls"][0]["function"], message["tool_calls"][0]["function"]) << "seed " << seed;
  }
}

TEST(ToolChoiceRoutes, RequiredGivesOneValidCallToAnyTool) {
  TestServer s(roomy());
  auto cli = s.client();
  std::set<std::string> names;
  for (int seed = 1; seed <= 8; ++seed) {
    json b = chat_body(seed, "required");
    b["messages"][0]["content"] = "weather" + std::string(static_cast<size_t>(seed), '?');  // the fake model's
    // logits follow the position more than the seed: prompts of other lengths meet other choices
    auto r = cli.Post("/v1/chat/completions", b.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json reply = json::parse(r->body);
    names.insert(expect_one_valid_call(reply["choices"][0]["message"], r->body));
  }
  EXPECT_EQ(names, (std::set<std::string>{"get_weather", "search"})) << "the model chooses the tool";
}

TEST(ToolChoiceRoutes, AForcedCallClosesAReasoningBlockThePromptOpened) {
  // A template whose generation prompt opens <think> (Qwen3-Thinking, DeepSeek-R1): the server closes
  // the block before the call's opening, so the reply is an empty reasoning and the call.
  TestServerConfig c = roomy();
  std::string thinking = kChatMLTemplate;
  const std::string prompt = "'<|im_start|>assistant\\n'";
  ASSERT_NE(thinking.find(prompt), std::string::npos);
  thinking.replace(thinking.find(prompt), prompt.size(), "'<|im_start|>assistant\\n<think>\\n'");
  c.chat_template = testing::chatml_with_tools(thinking);
  c.split_reasoning = true;
  TestServer s(c);
  auto cli = s.client();
  for (bool stream : {false, true}) {
    json b = chat_body(3, json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"));
    json message;
    std::string raw;
    if (!stream) {
      auto r = cli.Post("/v1/chat/completions", b.dump(), "application/json");
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << r->body;
      raw = r->body;
      message = json::parse(r->body)["choices"][0]["message"];
      EXPECT_EQ(message.value("reasoning_content", ""), "") << raw;
    } else {
      message = streamed_message(cli, b);
      raw = message.dump();
    }
    EXPECT_EQ(expect_one_valid_call(message, raw), "get_weather") << "stream " << stream;
  }
}

TEST(ToolChoiceRoutes, MistralCallIdsAreNineAlphanumericsAndComeBack) {
  // Mistral's templates refuse a tool call id that is not 9 letters or digits; the server's ids were
  // "call_" + 24 hex digits, so no tools loop could send its history back.
  std::ifstream f(testing::shared_dir() + "/data/chat-templates/Mistral-Small-3.2-24B-Instruct-2506.jinja");
  ASSERT_TRUE(f) << "missing the Mistral template in FT_SHARED_DIR";
  std::stringstream src;
  src << f.rdbuf();
  TestServerConfig c = roomy();
  c.max_seq_len = 8192, c.n_pages = 1024;  // the template's system prompt is ~2,800 byte tokens
  c.chat_template = src.str();
  TestServer s(c);
  auto cli = s.client();
  json b = chat_body(1, json::parse(R"({"type": "function", "function": {"name": "get_weather"}})"));
  auto r = cli.Post("/v1/chat/completions", b.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  const json message = json::parse(r->body)["choices"][0]["message"];
  expect_one_valid_call(message, r->body);
  const std::string id = message["tool_calls"][0]["id"];
  EXPECT_TRUE(std::regex_match(id, std::regex("[A-Za-z0-9]{9}"))) << id;
  b["messages"].push_back(message);
  b["messages"].push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", "sunny"}});
  b["tool_choice"] = "auto";
  auto again = cli.Post("/v1/chat/completions", b.dump(), "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

TEST(ToolChoiceRoutes, ResponseFormatBesideAForcedCallIsA400) {
  TestServer s(roomy());
  auto cli = s.client();
  json b = chat_body(1, "required");
  b["response_format"] = {{"type", "json_object"}};
  const testing::Reply r = testing::post(cli, "/v1/chat/completions", b.dump());
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["param"], "response_format") << r.raw;
  // "auto" with a response_format stays allowed: nothing is forced.
  b["tool_choice"] = "auto";
  EXPECT_EQ(testing::post(cli, "/v1/chat/completions", b.dump()).status, 200);
}

TEST(ToolChoiceRoutes, AnthropicToolAndAnyForceAToolUse) {
  TestServer s(roomy());
  auto cli = s.client();
  json tools = json::array();
  for (const json& t : json::parse(kTools))
    tools.push_back({{"name", t["function"]["name"]}, {"input_schema", t["function"]["parameters"]}});
  for (const char* choice : {R"({"type": "tool", "name": "get_weather"})", R"({"type": "any"})"}) {
    json b = json::parse(R"({"model": "test-model", "max_tokens": 160, "messages": [{"role": "user", "content": "hi"}]})");
    b["tools"] = tools;
    b["tool_choice"] = json::parse(choice);
    const testing::Reply r = testing::post(cli, "/v1/messages", b.dump());
    ASSERT_EQ(r.status, 200) << r.raw;
    int uses = 0;
    for (const json& block : r.body["content"]) {
      if (block["type"] != "tool_use") continue;
      ++uses;
      const std::string name = block["name"];
      if (json::parse(choice)["type"] == "tool") EXPECT_EQ(name, "get_weather") << r.raw;
      const Ojson input = Ojson::parse(block["input"].dump());
      EXPECT_EQ(validate(input, schema_of(name), schema_of(name)), "") << r.raw;
    }
    EXPECT_EQ(uses, 1) << r.raw;
  }
}

TEST(ToolChoiceRoutes, ResponsesNamedFunctionGivesAFunctionCall) {
  TestServer s(roomy());
  auto cli = s.client();
  json tools = json::array();
  for (const json& t : json::parse(kTools))
    tools.push_back({{"type", "function"}, {"name", t["function"]["name"]}, {"parameters", t["function"]["parameters"]}});
  json b = json::parse(R"({"model": "test-model", "input": "weather?", "max_output_tokens": 160,
                          "tool_choice": {"type": "function", "name": "get_weather"}})");
  b["tools"] = tools;
  const testing::Reply r = testing::post(cli, "/v1/responses", b.dump());
  ASSERT_EQ(r.status, 200) << r.raw;
  int calls = 0;
  for (const json& item : r.body["output"]) {
    if (item["type"] != "function_call") continue;
    ++calls;
    EXPECT_EQ(item["name"], "get_weather") << r.raw;
    const Ojson args = Ojson::parse(item["arguments"].get<std::string>());
    EXPECT_EQ(validate(args, schema_of("get_weather"), schema_of("get_weather")), "") << r.raw;
  }
  EXPECT_EQ(calls, 1) << r.raw;
}

}  // namespace
}  // namespace ft
