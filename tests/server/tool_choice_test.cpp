// tool_choice's reply semantics (issue 38): a named function returns only that function's calls with
// finish_reason "stop" (OpenAI's report of a forced call; Anthropic's stop_reason stays "tool_use"),
// auto and required finish with "tool_calls" (the forced call itself is tool_call_grammar's, tested in
// tool_choice_routes_test.cpp); and a request with tools whose served template does
// not render tools is refused (400, param "tools") unless tool_choice is "none".
#include <gtest/gtest.h>

#include "server/server_fixture.h"

namespace ft {
namespace {

using json = nlohmann::json;
using testing::post;
using testing::Reply;
using testing::TestServer;
using testing::TestServerConfig;

std::vector<int32_t> script_of(const std::string& reply) {
  const Vocab& v = testing::demo_vocab();
  std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  return script;
}

// Two calls, of two functions, in Hermes' form (the fixture template's).
const std::string kTwoCalls =
    "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"zone\": \"CET\"}}\n</tool_call>";

// Bounded arguments, so a forced call on the fake model's logits ends well within max_tokens.
const json kTools = json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "maxLength": 8}}, "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object",
    "properties": {"zone": {"enum": ["CET", "UTC"]}}, "required": ["zone"]}}}])");

std::string chat_body(const json& tool_choice, bool stream) {
  json b = {{"messages", {{{"role", "user"}, {"content", "Go"}}}}, {"temperature", 0},
            {"tools", kTools}, {"stream", stream}};
  if (!tool_choice.is_null()) b["tool_choice"] = tool_choice;
  return b.dump();
}

/** The names of a reply's calls and its finish_reason, whole or streamed. */
struct Calls {
  std::vector<std::string> names;
  std::string finish;
};

Calls chat_calls(const Reply& r, bool stream) {
  Calls out;
  if (!stream) {
    const json& ch = r.body["choices"][0];
    for (const json& c : ch["message"].value("tool_calls", json::array())) out.names.push_back(c["function"]["name"]);
    out.finish = ch["finish_reason"];
    return out;
  }
  for (const std::string& data : testing::sse_events(r.raw)) {
    if (data == "[DONE]") break;
    const json j = json::parse(data);
    const json& d = j["choices"][0]["delta"];
    if (d.contains("tool_calls"))
      for (const json& c : d["tool_calls"]) out.names.push_back(c["function"]["name"]);
    if (!j["choices"][0]["finish_reason"].is_null()) out.finish = j["choices"][0]["finish_reason"];
  }
  return out;
}

TEST(ToolChoice, NamedFunctionFinishesWithStopAutoAndRequiredWithToolCalls) {
  TestServerConfig roomy;
  roomy.max_seq_len = 2048, roomy.n_pages = 256;
  // auto (given or not): the scripted reply's two calls, "tool_calls".
  for (const json& choice : {json(nullptr), json("auto")}) {
    for (bool stream : {false, true}) {
      const Reply r = testing::scripted_post(roomy, script_of(kTwoCalls), "/v1/chat/completions",
                                             chat_body(choice, stream));
      ASSERT_EQ(r.status, 200) << r.raw;
      const Calls c = chat_calls(r, stream);
      EXPECT_EQ(c.names, (std::vector<std::string>{"get_weather", "get_time"})) << choice.dump() << ": " << r.raw;
      EXPECT_EQ(c.finish, "tool_calls") << choice.dump() << " stream " << stream;
    }
  }
  // required and a named function make the call by constrained decoding (tool_call_grammar.h): on the
  // fake model's own logits, one call; "tool_calls" for required, "stop" for the named function.
  TestServer s(roomy);
  auto c = s.client();
  struct Case {
    json choice;
    const char* name;  // "" any
    const char* finish;
  };
  for (const Case& k : {Case{"required", "", "tool_calls"},
                        Case{{{"type", "function"}, {"function", {{"name", "get_time"}}}}, "get_time", "stop"}}) {
    for (bool stream : {false, true}) {
      json b = json::parse(chat_body(k.choice, stream));
      b["max_tokens"] = 200;
      const Reply r = post(c, "/v1/chat/completions", b.dump());
      ASSERT_EQ(r.status, 200) << r.raw;
      const Calls got = chat_calls(r, stream);
      ASSERT_EQ(got.names.size(), 1u) << k.choice.dump() << ": " << r.raw;
      if (*k.name) EXPECT_EQ(got.names[0], k.name);
      EXPECT_EQ(got.finish, k.finish) << k.choice.dump() << " stream " << stream;
    }
  }
}

TEST(ToolChoice, NamedFunctionDropsOtherFunctionsCalls) {
  // The split a named tool_choice asks for (reply_format's only_function): other functions' calls are
  // dropped, whole or streamed at every byte.
  server::ReplyFormat f;
  f.tool_calls = true;
  f.only_function = "get_time";
  const server::ChatReply whole = server::split_chat_reply(kTwoCalls, f);
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_EQ(whole.calls[0].name, "get_time");
  EXPECT_EQ(whole.calls[0].arguments, R"({"zone":"CET"})");
  EXPECT_EQ(whole.content, "Checking.");
  server::ChatReplyStream st(f);
  std::vector<std::string> names;
  for (char ch : kTwoCalls)
    for (const server::ToolCall& call : st.push(std::string(1, ch)).calls) names.push_back(call.name);
  for (const server::ToolCall& call : st.finish().calls) names.push_back(call.name);
  EXPECT_EQ(names, std::vector<std::string>{"get_time"});
  f.only_function.clear();
  EXPECT_EQ(server::split_chat_reply(kTwoCalls, f).calls.size(), 2u);
}

TEST(ToolChoice, AnthropicForcedToolStopsWithToolUse) {
  // Anthropic reports a forced call (tool_choice {type: "tool"} or "any") as any other: "tool_use".
  TestServerConfig roomy;
  roomy.max_seq_len = 2048, roomy.n_pages = 256;
  TestServer s(roomy);
  auto c = s.client();
  json tools = json::array();
  for (const json& t : kTools)
    tools.push_back({{"name", t["function"]["name"]}, {"input_schema", t["function"]["parameters"]}});
  for (const json& choice : {json{{"type", "tool"}, {"name", "get_time"}}, json{{"type", "any"}}}) {
    for (bool stream : {false, true}) {
      const json body = {{"model", "test-model"}, {"max_tokens", 200}, {"temperature", 0}, {"tools", tools},
                         {"tool_choice", choice}, {"stream", stream}, {"messages", {{{"role", "user"}, {"content", "Go"}}}}};
      const Reply r = post(c, "/v1/messages", body.dump());
      ASSERT_EQ(r.status, 200) << r.raw;
      std::vector<std::string> names;
      std::string stop;
      if (!stream) {
        for (const json& b : r.body["content"])
          if (b["type"] == "tool_use") names.push_back(b["name"]);
        stop = r.body["stop_reason"];
      } else {
        for (const auto& [event, data] : testing::sse_named_events(r.raw)) {
          const json j = json::parse(data);
          if (event == "content_block_start" && j["content_block"]["type"] == "tool_use")
            names.push_back(j["content_block"]["name"]);
          if (event == "message_delta") stop = j["delta"]["stop_reason"];
        }
      }
      ASSERT_EQ(names.size(), 1u) << choice.dump() << " stream " << stream << ": " << r.raw;
      if (choice["type"] == "tool") EXPECT_EQ(names[0], "get_time");
      EXPECT_EQ(stop, "tool_use") << choice.dump() << " stream " << stream;
    }
  }
}

TEST(ToolChoice, ToolsOnATemplateThatDropsThemAre400) {
  TestServerConfig cfg;
  cfg.chat_template = kChatMLTemplate;  // no tools section
  TestServer s(cfg);
  s.model().script = script_of("Plain text.");
  auto c = s.client();
  for (const json& choice : {json(nullptr), json("auto"), json("required"),
                             json{{"type", "function"}, {"function", {{"name", "get_time"}}}}}) {
    for (bool stream : {false, true}) {
      const Reply r = post(c, "/v1/chat/completions", chat_body(choice, stream));
      EXPECT_EQ(r.status, 400) << choice.dump() << ": " << r.raw;
      EXPECT_EQ(r.body["error"]["param"], "tools") << r.raw;
      EXPECT_NE(r.body["error"]["message"].get<std::string>().find("does not render tools"), std::string::npos) << r.raw;
    }
  }
  // tool_choice "none": the tools are not to be used, so the request is served as plain text.
  const Reply none = post(c, "/v1/chat/completions", chat_body("none", false));
  ASSERT_EQ(none.status, 200) << none.raw;
  EXPECT_EQ(none.body["choices"][0]["message"]["content"], "Plain text.");
  // Anthropic's route, the Responses API and /apply-template refuse the same way.
  const json anthropic = {{"model", "test-model"}, {"max_tokens", 20}, {"messages", {{{"role", "user"}, {"content", "Go"}}}},
                          {"tools", {{{"name", "f"}, {"input_schema", {{"type", "object"}}}}}}};
  const Reply a = post(c, "/v1/messages", anthropic.dump());
  EXPECT_EQ(a.status, 400) << a.raw;
  EXPECT_EQ(a.body["error"]["type"], "invalid_request_error") << a.raw;
  EXPECT_EQ(post(c, "/v1/messages/count_tokens", anthropic.dump()).status, 400);
  const json responses = {{"model", "test-model"}, {"input", "Go"}, {"max_output_tokens", 20},
                          {"tools", {{{"type", "function"}, {"name", "f"}, {"parameters", {{"type", "object"}}}}}}};
  const Reply rr = post(c, "/v1/responses", responses.dump());
  EXPECT_EQ(rr.status, 400) << rr.raw;
  EXPECT_EQ(rr.body["error"]["param"], "tools") << rr.raw;
  EXPECT_EQ(post(c, "/apply-template", chat_body(nullptr, false)).status, 400);
  // Without tools the template serves as before.
  const json plain = {{"messages", {{{"role", "user"}, {"content", "Go"}}}}, {"max_tokens", 20}};
  EXPECT_EQ(post(c, "/v1/chat/completions", plain.dump()).status, 200);
}

}  // namespace
}  // namespace ft
