// Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) against an in-process server over
// the paged fake model: the message shape, stop reasons, usage (equal to the OpenAI route's for the same
// conversation), the streamed event sequence, tool_use blocks, request turns reaching the template,
// Anthropic's error bodies, auth, CORS and disconnects.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "server/server_fixture.h"
#include "server/sha256.h"

namespace ft {
namespace {

using json = nlohmann::json;
using testing::post;
using testing::Reply;
using testing::reply_of;
using testing::TestServer;
using testing::TestServerConfig;
using namespace std::chrono_literals;

/** A /v1/messages body: one user turn, greedy. `extra` fields are merged in. */
std::string msg_body(const std::string& user, int max_tokens, const json& extra = json::object()) {
  json b = {{"model", "test-model"}, {"max_tokens", max_tokens}, {"messages", {{{"role", "user"}, {"content", user}}}},
            {"temperature", 0}};
  b.update(extra);
  return b.dump();
}

/** The same conversation as a /v1/chat/completions body. */
std::string chat_body(const std::string& user, int max_tokens) {
  return json{{"model", "test-model"}, {"max_tokens", max_tokens}, {"messages", {{{"role", "user"}, {"content", user}}}},
              {"temperature", 0}}
      .dump();
}

/** Tokens that make the scripted fake model answer `reply`, then end its turn. */
std::vector<int32_t> script_of(const std::string& reply) {
  const Vocab& v = testing::demo_vocab();
  std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  return script;
}

/** Status, and Anthropic's error body: {"type": "error", "error": {"type": `type`, "message"}}. */
void expect_error(const Reply& r, int status, const std::string& type) {
  EXPECT_EQ(r.status, status) << r.raw;
  ASSERT_TRUE(r.body.is_object()) << r.raw;
  EXPECT_EQ(r.body["type"], "error") << r.raw;
  ASSERT_TRUE(r.body["error"].is_object()) << r.raw;
  EXPECT_EQ(r.body["error"]["type"], type) << r.raw;
  EXPECT_TRUE(r.body["error"]["message"].is_string() && !r.body["error"]["message"].get<std::string>().empty()) << r.raw;
  EXPECT_EQ(r.body.size(), 2u) << r.raw;
}

std::string error_message(const Reply& r) { return r.body["error"]["message"].get<std::string>(); }

/** What a /v1/messages stream holds: event names in order (pings left out), the message_start
 *  message, each block's content_block_start block and concatenated deltas (text, thinking, or a
 *  tool_use's partial_json), and the message_delta event. Checks every data's "type" equals its
 *  event name and each delta's index is the open block's. */
struct MessageStream {
  std::vector<std::string> names;
  json start, message_delta;
  std::vector<json> blocks;
  std::vector<std::string> deltas;
  int pings = 0;
};

MessageStream read_stream(const std::string& sse) {
  MessageStream out;
  int open = -1;
  for (const auto& [name, data] : testing::sse_named_events(sse)) {
    const json j = json::parse(data);
    EXPECT_EQ(j["type"], name) << data;
    if (name == "ping") {
      ++out.pings;
      continue;
    }
    out.names.push_back(name);
    if (name == "message_start") out.start = j["message"];
    if (name == "message_delta") out.message_delta = j;
    if (name == "content_block_start") {
      EXPECT_EQ(j["index"], out.blocks.size()) << data;
      open = j["index"];
      out.blocks.push_back(j["content_block"]);
      out.deltas.emplace_back();
    }
    if (name == "content_block_delta") {
      EXPECT_EQ(j["index"], open) << data;
      const json& d = j["delta"];
      std::string& acc = out.deltas.at(static_cast<size_t>(open));
      if (d["type"] == "text_delta") acc += d["text"].get<std::string>();
      else if (d["type"] == "thinking_delta") acc += d["thinking"].get<std::string>();
      else if (d["type"] == "input_json_delta") acc += d["partial_json"].get<std::string>();
      else if (d["type"] == "signature_delta") EXPECT_EQ(out.blocks.back()["type"], "thinking") << data;
      else ADD_FAILURE() << "unknown delta " << data;
    }
    if (name == "content_block_stop") {
      EXPECT_EQ(j["index"], open) << data;
      open = -1;
    }
  }
  return out;
}

/** Anthropic's order: message_start, then per block content_block_start, content_block_delta*,
 *  content_block_stop, then message_delta, message_stop. Returns "" or what is wrong. */
std::string order_problem(const std::vector<std::string>& names) {
  if (names.size() < 3 || names.front() != "message_start") return "does not start with message_start";
  if (names[names.size() - 2] != "message_delta" || names.back() != "message_stop")
    return "does not end with message_delta, message_stop";
  bool in_block = false;
  for (size_t i = 1; i + 2 < names.size(); ++i) {
    const std::string& n = names[i];
    if (n == "content_block_start" && !in_block) in_block = true;
    else if (n == "content_block_delta" && in_block) continue;
    else if (n == "content_block_stop" && in_block) in_block = false;
    else return "unexpected " + n + " at " + std::to_string(i);
  }
  return in_block ? "a block is not stopped" : "";
}

TEST(AnthropicRoutes, TextReplyMatchesChatCompletionsAndCountsUsage) {
  TestServer s;
  auto c = s.client();
  const std::string user = "hello there";
  Reply m = post(c, "/v1/messages", msg_body(user, 40));  // first: nothing cached yet
  ASSERT_EQ(m.status, 200) << m.raw;
  Reply oa = post(c, "/v1/chat/completions", chat_body(user, 40));
  ASSERT_EQ(oa.status, 200) << oa.raw;
  const json& b = m.body;
  std::vector<std::string> keys;
  for (auto it = b.begin(); it != b.end(); ++it) keys.push_back(it.key());
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"content", "id", "model", "role", "stop_reason", "stop_sequence", "type", "usage"}));
  EXPECT_EQ(b["id"].get<std::string>().rfind("msg_", 0), 0u) << b["id"];
  EXPECT_EQ(b["type"], "message");
  EXPECT_EQ(b["role"], "assistant");
  EXPECT_EQ(b["model"], "test-model");
  const std::string text = oa.body["choices"][0]["message"]["content"];
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(b["content"], json::array({{{"type", "text"}, {"text", text}}}));
  EXPECT_EQ(b["stop_reason"], oa.body["choices"][0]["finish_reason"] == "stop" ? "end_turn" : "max_tokens");
  EXPECT_TRUE(b["stop_sequence"].is_null());
  const int prompt = oa.body["usage"]["prompt_tokens"];
  EXPECT_EQ(b["usage"]["input_tokens"], prompt);
  EXPECT_EQ(b["usage"]["output_tokens"], oa.body["usage"]["completion_tokens"]);
  EXPECT_EQ(b["usage"]["cache_read_input_tokens"], 0);
  EXPECT_EQ(b["usage"]["cache_creation_input_tokens"], 0);
  // Again: the prompt's whole pages come from the prefix cache, counted as Anthropic does (cache reads
  // apart from input_tokens), the same figure as OpenAI's cached_tokens.
  const int cached = oa.body["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_EQ(cached, (prompt - 1) / 16 * 16);
  Reply again = post(c, "/v1/messages", msg_body(user, 40));
  ASSERT_EQ(again.status, 200) << again.raw;
  EXPECT_EQ(again.body["content"], b["content"]);
  EXPECT_EQ(again.body["usage"]["cache_read_input_tokens"], cached);
  EXPECT_EQ(again.body["usage"]["input_tokens"], prompt - cached);
  EXPECT_NE(again.body["id"], b["id"]);
  // count_tokens: the rendered prompt, the first message's input_tokens; max_tokens not needed.
  Reply ct = post(c, "/v1/messages/count_tokens",
                  json{{"model", "test-model"}, {"messages", {{{"role", "user"}, {"content", user}}}}}.dump());
  ASSERT_EQ(ct.status, 200) << ct.raw;
  EXPECT_EQ(ct.body, json({{"input_tokens", prompt}}));
  EXPECT_EQ(post(c, "/v1/messages/count_tokens/", msg_body(user, 40)).body["input_tokens"], prompt);
}

TEST(AnthropicRoutes, StopReasonsAndStopSequence) {
  TestServer s;
  s.model().script = script_of("Hello from the script.");
  auto c = s.client();
  // Each request starts differently, so none hits the prefix cache (the script counts from position 0).
  Reply end = post(c, "/v1/messages", msg_body("a: talk", 100));
  ASSERT_EQ(end.status, 200) << end.raw;
  EXPECT_EQ(end.body["content"], json::array({{{"type", "text"}, {"text", "Hello from the script."}}}));
  EXPECT_EQ(end.body["stop_reason"], "end_turn");
  EXPECT_TRUE(end.body["stop_sequence"].is_null());
  EXPECT_EQ(end.body["usage"]["output_tokens"], 23);  // 22 bytes and the end token
  Reply cut = post(c, "/v1/messages", msg_body("b: talk", 5));
  ASSERT_EQ(cut.status, 200) << cut.raw;
  EXPECT_EQ(cut.body["content"][0]["text"], "Hello");
  EXPECT_EQ(cut.body["stop_reason"], "max_tokens");
  EXPECT_EQ(cut.body["usage"]["output_tokens"], 5);
  Reply seq = post(c, "/v1/messages", msg_body("c: talk", 100, {{"stop_sequences", {"never", "from"}}}));
  ASSERT_EQ(seq.status, 200) << seq.raw;
  EXPECT_EQ(seq.body["content"][0]["text"], "Hello ");
  EXPECT_EQ(seq.body["stop_reason"], "stop_sequence");
  EXPECT_EQ(seq.body["stop_sequence"], "from");
  EXPECT_LT(seq.body["usage"]["output_tokens"].get<int>(), 23);
  // Streamed: the stop sequence in message_delta.
  auto r = c.Post("/v1/messages", msg_body("d: talk", 100, {{"stop_sequences", {"script"}}, {"stream", true}}),
                  "application/json");
  ASSERT_TRUE(r);
  const MessageStream st = read_stream(r->body);
  EXPECT_EQ(order_problem(st.names), "") << r->body;
  ASSERT_EQ(st.deltas.size(), 1u) << r->body;
  EXPECT_EQ(st.deltas[0], "Hello from the ");
  EXPECT_EQ(st.message_delta["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(st.message_delta["delta"]["stop_sequence"], "script");
}

TEST(AnthropicRoutes, StreamingEventsInAnthropicOrder) {
  TestServer s;
  auto c = s.client();
  Reply whole = post(c, "/v1/messages", msg_body("stream me", 30));
  ASSERT_EQ(whole.status, 200) << whole.raw;
  const std::string text = whole.body["content"][0]["text"];
  auto r = c.Post("/v1/messages", msg_body("stream me", 30, {{"stream", true}}), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  EXPECT_EQ(r->body.find("[DONE]"), std::string::npos) << r->body;
  const MessageStream st = read_stream(r->body);
  EXPECT_EQ(order_problem(st.names), "") << r->body;
  EXPECT_GE(st.names.size(), 6u);
  EXPECT_LE(st.pings, 1);
  // message_start: the message with no content yet.
  EXPECT_EQ(st.start["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(st.start["type"], "message");
  EXPECT_EQ(st.start["role"], "assistant");
  EXPECT_EQ(st.start["model"], "test-model");
  EXPECT_EQ(st.start["content"], json::array());
  EXPECT_TRUE(st.start["stop_reason"].is_null());
  EXPECT_TRUE(st.start["stop_sequence"].is_null());
  const int prompt = whole.body["usage"]["input_tokens"];
  EXPECT_EQ(st.start["usage"]["input_tokens"], prompt);
  EXPECT_EQ(st.start["usage"]["output_tokens"], 0);
  // One text block whose deltas are the non-streaming text.
  ASSERT_EQ(st.blocks.size(), 1u);
  EXPECT_EQ(st.blocks[0], json({{"type", "text"}, {"text", ""}}));
  EXPECT_EQ(st.deltas[0], text);
  // message_delta: the stop reason and the final usage (this time the prompt's pages were cached).
  EXPECT_EQ(st.message_delta["delta"]["stop_reason"], whole.body["stop_reason"]);
  EXPECT_TRUE(st.message_delta["delta"]["stop_sequence"].is_null());
  const json& u = st.message_delta["usage"];
  EXPECT_EQ(u["output_tokens"], whole.body["usage"]["output_tokens"]);
  EXPECT_EQ(u["input_tokens"].get<int>() + u["cache_read_input_tokens"].get<int>(), prompt);
  EXPECT_EQ(u["cache_read_input_tokens"], (prompt - 1) / 16 * 16);
}

TEST(AnthropicRoutes, ToolUseBlocks) {
  const std::string reply =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  const json tools = json::array({{{"name", "get_weather"},
                                   {"description", "Weather of a city"},
                                   {"input_schema", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}});
  const json paris = {{"city", "Paris"}};
  {
    const Reply r = testing::scripted_post(TestServerConfig{}, script_of(reply), "/v1/messages",
        msg_body("Weather?", 100, {{"tools", tools}}));
    ASSERT_EQ(r.status, 200) << r.raw;
    EXPECT_EQ(r.body["stop_reason"], "tool_use");
    const json& content = r.body["content"];
    ASSERT_EQ(content.size(), 2u) << r.raw;
    EXPECT_EQ(content[0], json({{"type", "text"}, {"text", "Checking."}}));
    EXPECT_EQ(content[1]["type"], "tool_use");
    EXPECT_EQ(content[1]["id"].get<std::string>().rfind("toolu_", 0), 0u);
    EXPECT_EQ(content[1]["name"], "get_weather");
    EXPECT_EQ(content[1]["input"], paris);
  }
  {
    const Reply r = testing::scripted_post(TestServerConfig{}, script_of(reply), "/v1/messages",
        msg_body("Weather?", 100, {{"tools", tools}, {"stream", true}}));
    ASSERT_EQ(r.status, 200) << r.raw;
    const MessageStream st = read_stream(r.raw);
    EXPECT_EQ(order_problem(st.names), "") << r.raw;
    ASSERT_EQ(st.blocks.size(), 2u) << r.raw;
    EXPECT_EQ(st.blocks[0]["type"], "text");
    EXPECT_EQ(st.deltas[0], "Checking.");  // what streamed before the call, trimmed as in the whole reply
    EXPECT_EQ(st.blocks[1]["type"], "tool_use");
    EXPECT_EQ(st.blocks[1]["name"], "get_weather");
    EXPECT_EQ(st.blocks[1]["input"], json::object());
    EXPECT_EQ(st.blocks[1]["id"].get<std::string>().rfind("toolu_", 0), 0u);
    EXPECT_EQ(json::parse(st.deltas[1]), paris);
    EXPECT_EQ(st.message_delta["delta"]["stop_reason"], "tool_use");
  }
  // A reply of only a call: one tool_use block, no empty text block, streamed or not.
  const std::string only = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  for (bool stream : {false, true}) {
    const Reply r = testing::scripted_post(TestServerConfig{}, script_of(only), "/v1/messages",
        msg_body("Weather?", 100, {{"tools", tools}, {"stream", stream}}));
    ASSERT_EQ(r.status, 200) << r.raw;
    if (!stream) {
      const json b = json::parse(r.raw);
      ASSERT_EQ(b["content"].size(), 1u) << r.raw;
      EXPECT_EQ(b["content"][0]["type"], "tool_use");
      EXPECT_EQ(b["content"][0]["input"], paris);
      EXPECT_EQ(b["stop_reason"], "tool_use");
    } else {
      const MessageStream st = read_stream(r.raw);
      ASSERT_EQ(st.blocks.size(), 1u) << r.raw;
      EXPECT_EQ(st.blocks[0]["type"], "tool_use");
      EXPECT_EQ(json::parse(st.deltas[0]), paris);
    }
  }
  // Without tools, or with tool_choice none, the reply stays text; "any" still parses calls.
  for (const json& extra : {json::object(), json{{"tools", tools}, {"tool_choice", {{"type", "none"}}}},
                            json{{"tools", tools}, {"tool_choice", {{"type", "any"}}}},
                            json{{"tools", tools}, {"tool_choice", {{"type", "tool"}, {"name", "get_weather"}}}}}) {
    const Reply r = testing::scripted_post(TestServerConfig{}, script_of(reply), "/v1/messages",
        msg_body("Weather?", 100, extra));
    ASSERT_EQ(r.status, 200) << r.raw;
    const bool calls = extra.contains("tool_choice") && extra["tool_choice"]["type"] != "none";
    EXPECT_EQ(r.body["stop_reason"], calls ? "tool_use" : "end_turn") << extra;
    if (!calls) {
      EXPECT_EQ(r.body["content"], json::array({{{"type", "text"}, {"text", reply}}})) << extra;
    }
  }
  TestServer s;
  auto c = s.client();
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"tools", tools}, {"tool_choice", "auto"}})), 400,
               "invalid_request_error");
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"tools", tools}, {"tool_choice", {{"type", "always"}}}})), 400,
               "invalid_request_error");
  const Reply unknown = post(c, "/v1/messages", msg_body("x", 5, {{"tools", tools}, {"tool_choice", {{"type", "tool"}, {"name", "nope"}}}}));
  expect_error(unknown, 400, "invalid_request_error");
  EXPECT_NE(error_message(unknown).find("nope"), std::string::npos);
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"tool_choice", {{"type", "any"}}}})), 400, "invalid_request_error");
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"tools", {{{"name", "f"}}}}})), 400, "invalid_request_error");
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"tools", {{{"type", "web_search_20250305"}, {"name", "web_search"}}}}})),
               400, "invalid_request_error");
  // llama.cpp's n_predict is an OpenAI-route extension; the Messages API keeps its required max_tokens
  const Reply np = post(c, "/v1/messages", msg_body("x", 5, {{"n_predict", -1}}));
  expect_error(np, 400, "invalid_request_error");
  EXPECT_NE(error_message(np).find("use 'max_tokens'"), std::string::npos) << np.raw;
}

TEST(AnthropicRoutes, ReasoningFormatDeepseekGivesAThinkingBlock) {
  // --reasoning-format deepseek: the leading <think> block becomes a thinking block; the call after the
  // text is still found. Without the flag the reply is text as written.
  const std::string reply = "<think>\nUse the tool.\n</think>\n\nOn it. <tool_call>{\"name\": \"f\"}</tool_call>";
  const json tools = json::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}}});
  TestServerConfig cfg;
  cfg.split_reasoning = true;
  {
    const Reply r = testing::scripted_post(cfg, script_of(reply), "/v1/messages",
        msg_body("Go", 100, {{"tools", tools}}));
    ASSERT_EQ(r.status, 200) << r.raw;
    const json& content = r.body["content"];
    ASSERT_EQ(content.size(), 3u) << r.raw;
    EXPECT_EQ(content[0], json({{"type", "thinking"}, {"thinking", "Use the tool."},
                                {"signature", server::base64(server::sha256("Use the tool."))}}));
    EXPECT_EQ(content[1], json({{"type", "text"}, {"text", "On it."}}));
    EXPECT_EQ(content[2]["type"], "tool_use");
    EXPECT_EQ(content[2]["name"], "f");
    EXPECT_EQ(content[2]["input"], json::object());
    EXPECT_EQ(r.body["stop_reason"], "tool_use");
  }
  {
    const Reply r = testing::scripted_post(cfg, script_of(reply), "/v1/messages",
        msg_body("Go", 100, {{"tools", tools}, {"stream", true}}));
    ASSERT_EQ(r.status, 200) << r.raw;
    const MessageStream st = read_stream(r.raw);
    EXPECT_EQ(order_problem(st.names), "") << r.raw;
    ASSERT_EQ(st.blocks.size(), 3u) << r.raw;
    EXPECT_EQ(st.blocks[0]["type"], "thinking");
    EXPECT_EQ(st.deltas[0], "Use the tool.");  // trimmed, as in the whole reply
    EXPECT_EQ(st.blocks[1]["type"], "text");
    EXPECT_EQ(st.deltas[1], "On it.");
    EXPECT_EQ(st.blocks[2]["type"], "tool_use");
    EXPECT_EQ(json::parse(st.deltas[2]), json::object());
    EXPECT_EQ(st.message_delta["delta"]["stop_reason"], "tool_use");
  }
  TestServer s;  // default: none
  s.model().script = script_of(reply);
  auto c = s.client();
  const Reply r = post(c, "/v1/messages", msg_body("Go", 100));
  EXPECT_EQ(r.body["content"], json::array({{{"type", "text"}, {"text", reply}}})) << r.raw;
}

// A template that writes out what the ChatML one leaves aside: tools, tool_calls, tool_call_id.
const char* const kToolTemplate =
    "{%- if tools -%}{{- '<|im_start|>system\\nTOOLS ' + (tools | tojson) + '<|im_end|>\\n' -}}{%- endif -%}\n"
    "{%- for m in messages -%}\n"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] -}}\n"
    "{%- if m['tool_calls'] -%}{%- for t in m['tool_calls'] -%}\n"
    "{{- '\\nCALL ' + t['id'] + ' ' + t['function']['name'] + ' ' + t['function']['arguments'] -}}\n"
    "{%- endfor -%}{%- endif -%}\n"
    "{%- if m['tool_call_id'] -%}{{- '\\nRESULT OF ' + m['tool_call_id'] -}}{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n";

TEST(AnthropicRoutes, ToolTurnsAndSystemReachTheTemplate) {
  // The fake model's reply is a hash of every prompt token, so equal replies mean equal prompts.
  TestServerConfig cfg;
  cfg.chat_template = kToolTemplate;
  TestServer s(cfg);
  auto c = s.client();
  const json anthropic = {
      {"model", "test-model"},
      {"max_tokens", 12},
      {"temperature", 0},
      {"system", {{{"type", "text"}, {"text", "Be brief."}}, {{"type", "text"}, {"text", "Use tools."}}}},
      {"tools", {{{"name", "get_weather"}, {"description", "Weather"}, {"input_schema", {{"type", "object"}}}}}},
      {"messages",
       {{{"role", "user"}, {"content", "Weather in Paris?"}},
        {{"role", "assistant"},
         {"content",
          {{{"type", "thinking"}, {"thinking", "I should call it."}, {"signature", "x"}},
           {{"type", "text"}, {"text", "Let me check."}},
           {{"type", "tool_use"}, {"id", "toolu_01"}, {"name", "get_weather"}, {"input", {{"city", "Paris"}}}}}}},
        {{"role", "user"},
         {"content",
          {{{"type", "tool_result"}, {"tool_use_id", "toolu_01"}, {"content", {{{"type", "text"}, {"text", "Sunny, 21C"}}}}},
           {{"type", "text"}, {"text", "And tomorrow?"}}}}}}}};
  const nlohmann::ordered_json openai_msgs = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief.\nUse tools."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "Let me check.", "tool_calls": [{"id": "toolu_01", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
    {"role": "tool", "tool_call_id": "toolu_01", "content": "Sunny, 21C"},
    {"role": "user", "content": "And tomorrow?"}])");
  const nlohmann::ordered_json openai_tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather", "parameters": {"type": "object"}}}])");
  const ChatTemplate t(kToolTemplate, "", "<|im_end|>");
  const std::string rendered = t.render(openai_msgs, openai_tools, true);
  ASSERT_NE(rendered.find("CALL toolu_01 get_weather {\"city\":\"Paris\"}"), std::string::npos) << rendered;
  ASSERT_NE(rendered.find("RESULT OF toolu_01"), std::string::npos) << rendered;
  const Vocab& v = testing::demo_vocab();
  const std::vector<int32_t> prompt = v.encode(rendered, EncodeOptions{false, true});
  std::vector<int32_t> toks;
  for (int32_t tok : s.model().solo_greedy(prompt, 12)) {
    toks.push_back(tok);
    if (v.is_eog(tok)) break;
  }
  const std::string expected = v.decode(toks, true);

  Reply ct = post(c, "/v1/messages/count_tokens", anthropic.dump());
  ASSERT_EQ(ct.status, 200) << ct.raw;
  EXPECT_EQ(ct.body["input_tokens"], prompt.size());
  Reply m = post(c, "/v1/messages", anthropic.dump());
  ASSERT_EQ(m.status, 200) << m.raw;
  EXPECT_EQ(m.body["content"][0]["text"], expected);
  EXPECT_EQ(m.body["usage"]["input_tokens"], prompt.size());
  // The OpenAI route with the same conversation: the same prompt, the same reply.
  const nlohmann::ordered_json oa = {{"model", "test-model"}, {"max_tokens", 12}, {"temperature", 0},
                                     {"messages", openai_msgs}, {"tools", openai_tools}};  // key order reaches tojson
  Reply o = post(c, "/v1/chat/completions", oa.dump());
  ASSERT_EQ(o.status, 200) << o.raw;
  EXPECT_EQ(o.body["usage"]["prompt_tokens"], prompt.size());
  EXPECT_EQ(o.body["choices"][0]["message"]["content"], expected);
  // system as a string is the same as one text block.
  json as_string = anthropic, as_block = anthropic;
  as_string["system"] = "Be brief.";
  as_block["system"] = {{{"type", "text"}, {"text", "Be brief."}}};
  const Reply a = post(c, "/v1/messages", as_string.dump()), b = post(c, "/v1/messages", as_block.dump());
  ASSERT_EQ(a.status, 200) << a.raw;
  EXPECT_EQ(a.body["content"], b.body["content"]);
  EXPECT_EQ(a.body["usage"]["input_tokens"].get<int>() + a.body["usage"]["cache_read_input_tokens"].get<int>(),
            prompt.size() - std::string("\nUse tools.").size());
}

/** The reply the fake model gives (greedy, up to n tokens or its end of turn) to the prompt `text`. */
std::pair<std::string, size_t> fake_reply(TestServer& s, const std::string& text, int n) {
  const Vocab& v = testing::demo_vocab();
  const std::vector<int32_t> prompt = v.encode(text, EncodeOptions{false, true});
  std::vector<int32_t> toks;
  for (int32_t tok : s.model().solo_greedy(prompt, n)) {
    toks.push_back(tok);
    if (v.is_eog(tok)) break;
  }
  return {v.decode(toks, true), prompt.size()};
}

TEST(AnthropicRoutes, AFinalAssistantTurnIsAPrefillTheReplyContinues) {
  TestServer s;
  auto c = s.client();
  const json msgs = {{{"role", "user"}, {"content", "Say JSON"}}, {{"role", "assistant"}, {"content", "{\"a\":"}}};
  const ChatTemplate t(kChatMLTemplate, "", "<|im_end|>");
  const nlohmann::ordered_json user_only = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Say JSON"}])");
  // The prompt: the conversation before the prefill, the generation prompt, then the prefill itself
  // (not closed as a finished turn).
  const auto [expected, n_prompt] = fake_reply(s, t.render(user_only, nullptr, true) + "{\"a\":", 12);
  const Reply r = post(c, "/v1/messages", msg_body("", 12, {{"messages", msgs}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  EXPECT_EQ(r.body["content"][0]["text"], expected) << r.raw;  // only what follows the prefill
  EXPECT_EQ(r.body["usage"]["input_tokens"], n_prompt);
  const Reply ct = post(c, "/v1/messages/count_tokens", json{{"model", "test-model"}, {"messages", msgs}}.dump());
  EXPECT_EQ(ct.body["input_tokens"], n_prompt) << ct.raw;
  // As in Anthropic's API: a prefill may not end in whitespace, and only it may be empty.
  json trailing = msgs;
  trailing[1]["content"] = "{\"a\": ";
  expect_error(post(c, "/v1/messages", msg_body("", 12, {{"messages", trailing}})), 400, "invalid_request_error");
  json empty_prefill = msgs;
  empty_prefill[1]["content"] = "";
  EXPECT_EQ(post(c, "/v1/messages", msg_body("", 12, {{"messages", empty_prefill}})).status, 200);
  // Nothing before the prefill, or an empty text block, are refused as Anthropic refuses them.
  expect_error(post(c, "/v1/messages", msg_body("", 12, {{"messages", {{{"role", "assistant"}, {"content", "Hi"}}}}})),
               400, "invalid_request_error");
  const json empty_block = {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", ""}}}}}};
  expect_error(post(c, "/v1/messages", msg_body("", 12, {{"messages", empty_block}})), 400, "invalid_request_error");
  for (const json& empty : {json(""), json::array()}) {
    const Reply e = post(c, "/v1/messages", msg_body("", 12, {{"messages", {{{"role", "user"}, {"content", empty}}}}}));
    expect_error(e, 400, "invalid_request_error");
    EXPECT_NE(error_message(e).find("messages[0].content"), std::string::npos) << e.raw;
  }
}

// ChatML that honours Qwen3's enable_thinking = false (an empty think block opens the reply).
const char* const kThinkingTemplate =
    "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}\n"
    "{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}\n"
    "{%- endif -%}\n";

TEST(AnthropicRoutes, EmptyReasoningGivesNoThinkingBlockWholeOrStreamed) {
  TestServerConfig cfg;
  cfg.split_reasoning = true;
  for (const char* reply : {"<think></think>Hi", "<think> \n</think>Hi"}) {
    const Reply whole = testing::scripted_post(cfg, script_of(reply), "/v1/messages", msg_body("Go", 50));
    ASSERT_EQ(whole.status, 200) << whole.raw;
    EXPECT_EQ(whole.body["content"], json::parse(R"([{"type":"text","text":"Hi"}])")) << reply << ": " << whole.raw;
    const Reply streamed =
        testing::scripted_post(cfg, script_of(reply), "/v1/messages", msg_body("Go", 50, {{"stream", true}}));
    const MessageStream st = read_stream(streamed.raw);
    ASSERT_EQ(st.blocks.size(), 1u) << reply << ": " << streamed.raw;
    EXPECT_EQ(st.blocks[0]["type"], "text");
  }
}

TEST(AnthropicRoutes, ThinkingRequestField) {
  TestServerConfig cfg;
  cfg.chat_template = kThinkingTemplate;
  cfg.max_seq_len = 4096, cfg.n_pages = 256;  // room for max_tokens above the 1024 budget
  TestServer s(cfg);
  auto c = s.client();
  const std::string count = json{{"model", "test-model"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}}.dump();
  const int plain = post(c, "/v1/messages/count_tokens", count).body["input_tokens"];
  json off = json::parse(count);
  off["thinking"] = {{"type", "disabled"}};
  const Reply r_off = post(c, "/v1/messages/count_tokens", off.dump());
  ASSERT_EQ(r_off.status, 200) << r_off.raw;
  EXPECT_GT(r_off.body["input_tokens"].get<int>(), plain) << "enable_thinking = false reaches the template";
  // Enabled: the reply's <think> block is a thinking block, without --reasoning-format.
  s.model().script = script_of("<think>\nPlan.\n</think>\n\nDone.");
  const Reply on = post(c, "/v1/messages", msg_body("Go", 2000, {{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}}));
  ASSERT_EQ(on.status, 200) << on.raw;
  EXPECT_EQ(on.body["content"], json::parse(R"([{"type":"thinking","thinking":"Plan.","signature":")" +
                                            server::base64(server::sha256("Plan.")) + R"("},
                                                {"type":"text","text":"Done."}])")) << on.raw;
  const std::string bad = "invalid_request_error";
  expect_error(post(c, "/v1/messages", msg_body("Go", 1024, {{"thinking", {{"type", "enabled"}, {"budget_tokens", 1024}}}})),
               400, bad);  // the budget must be below max_tokens
  expect_error(post(c, "/v1/messages", msg_body("Go", 2000, {{"thinking", {{"type", "enabled"}, {"budget_tokens", 512}}}})),
               400, bad);
  expect_error(post(c, "/v1/messages", msg_body("Go", 2000, {{"thinking", {{"type", "enabled"}}}})), 400, bad);
  expect_error(post(c, "/v1/messages", msg_body("Go", 2000, {{"thinking", {{"type", "auto"}}}})), 400, bad);
  expect_error(post(c, "/v1/messages", msg_body("Go", 2000, {{"thinking", true}})), 400, bad);
}

TEST(AnthropicRoutes, ErrorsUseAnthropicBodies) {
  TestServerConfig cfg;
  cfg.max_body_mb = 1;
  TestServer s(cfg);
  auto c = s.client();
  const std::string bad = "invalid_request_error";
  expect_error(post(c, "/v1/messages", "{not json"), 400, bad);
  expect_error(post(c, "/v1/messages", R"({"max_tokens":5,"messages":[{"role":"user","content":"x"}]})"), 400, bad);
  const Reply no_max = post(c, "/v1/messages", R"({"model":"test-model","messages":[{"role":"user","content":"x"}]})");
  expect_error(no_max, 400, bad);
  EXPECT_NE(error_message(no_max).find("max_tokens"), std::string::npos);
  expect_error(post(c, "/v1/messages", msg_body("x", 0)), 400, bad);
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"messages", "x"}})), 400, bad);
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"messages", json::array()}})), 400, bad);
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"messages", {{{"role", "system"}, {"content", "x"}}}}})), 400, bad);
  for (double temp : {1.5, -1.0}) {  // Anthropic's range, named as such at either end
    const Reply t = post(c, "/v1/messages", msg_body("x", 5, {{"temperature", temp}}));
    expect_error(t, 400, bad);
    EXPECT_NE(error_message(t).find("[0, 1]"), std::string::npos) << t.raw;
  }
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"stop_sequences", "x"}})), 400, bad);
  {  // as many stop strings as OpenAI's `stop` takes, no more: each one is matched every step
    json seqs = json::array();
    for (int i = 0; i < 16; ++i) seqs.push_back("never" + std::to_string(i));
    const Reply ok = post(c, "/v1/messages", msg_body("x", 5, {{"stop_sequences", seqs}}));
    EXPECT_EQ(ok.status, 200) << ok.raw;
    seqs.push_back("one more");
    const Reply many = post(c, "/v1/messages", msg_body("x", 5, {{"stop_sequences", seqs}}));
    expect_error(many, 400, bad);
    EXPECT_NE(error_message(many).find("'stop_sequences' holds 17 strings; at most 16"), std::string::npos) << many.raw;
  }
  expect_error(post(c, "/v1/messages", msg_body("x", 5, {{"system", {{{"type", "image"}}}}})), 400, bad);
  for (const char* type : {"image", "document"}) {
    const json msgs = {{{"role", "user"},
                        {"content", {{{"type", type}, {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "AAAA"}}}}}}}};
    const Reply r = post(c, "/v1/messages", msg_body("x", 5, {{"messages", msgs}}));
    expect_error(r, 400, bad);
    EXPECT_NE(error_message(r).find("text-only"), std::string::npos) << r.raw;
    EXPECT_NE(error_message(r).find(std::string(type == std::string("image") ? "an image" : "a document")), std::string::npos)
        << r.raw;
  }
  const Reply unknown = post(c, "/v1/messages", msg_body("x", 5, {{"messages", {{{"role", "user"}, {"content", {{{"type", "video"}}}}}}}}));
  expect_error(unknown, 400, bad);
  EXPECT_NE(error_message(unknown).find("messages[0].content[0].type"), std::string::npos) << unknown.raw;
  expect_error(post(c, "/v1/messages",
                    msg_body("x", 5, {{"messages", {{{"role", "assistant"}, {"content", {{{"type", "tool_result"}, {"tool_use_id", "a"}}}}}}}})),
               400, bad);
  expect_error(post(c, "/v1/messages",
                    msg_body("x", 5, {{"messages", {{{"role", "user"}, {"content", {{{"type", "tool_use"}, {"id", "a"}, {"name", "f"}}}}}}}})),
               400, bad);
  const Reply ctx = post(c, "/v1/messages", msg_body("x", 600));
  expect_error(ctx, 400, bad);
  EXPECT_NE(error_message(ctx).find("512"), std::string::npos) << ctx.raw;
  EXPECT_NE(error_message(ctx).find("600"), std::string::npos) << ctx.raw;
  const Reply model = post(c, "/v1/messages", msg_body("x", 5, {{"model", "claude-sonnet-4-5"}}));
  expect_error(model, 404, "not_found_error");
  EXPECT_NE(error_message(model).find("claude-sonnet-4-5"), std::string::npos);
  expect_error(post(c, "/v1/messages/count_tokens", R"({"model":"other","messages":[{"role":"user","content":"x"}]})"), 404,
               "not_found_error");
  expect_error(post(c, "/v1/messages/count_tokens", R"({"model":"test-model"})"), 400, bad);
  expect_error(post(c, "/v1/messages", std::string(2 * 1024 * 1024, ' ')), 413, "request_too_large");
  expect_error(reply_of(c.Get("/v1/messages")), 405, bad);
  expect_error(post(c, "/v1/messages/nothing", "{}"), 404, "not_found_error");
  // The OpenAI routes keep OpenAI's body.
  const Reply oa = post(c, "/v1/chat/completions", "{not json");
  EXPECT_EQ(oa.status, 400);
  EXPECT_FALSE(oa.body.contains("type")) << oa.raw;
  EXPECT_EQ(oa.body["error"]["type"], bad);
  EXPECT_EQ(s.service().stats().kv_pages_used, 0);
}

TEST(AnthropicRoutes, RandomBodiesGetAnthropicErrorsAndNeverTakeTheServerDown) {
  TestServerConfig cfg;
  cfg.max_seq_len = 4096, cfg.n_pages = 256;
  TestServer s(cfg);
  auto c = s.client();
  std::mt19937 rng(11);
  const std::string seed_body = json::parse(R"({"model":"test-model","max_tokens":3,"temperature":0.5,"top_k":4,
    "system":[{"type":"text","text":"Be brief."}],"stop_sequences":["a"],
    "tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"auto"},
    "messages":[{"role":"user","content":"hi"},
                {"role":"assistant","content":[{"type":"text","text":"ok"},{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}]},
                {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"done"}]}],
    "thinking":{"type":"disabled"},"metadata":{"user_id":"u"}})").dump();
  for (int i = 0; i < 300; ++i) {
    const std::string b = testing::mutate_body(seed_body, rng);
    const char* path = rng() % 4 ? "/v1/messages" : "/v1/messages/count_tokens";
    const Reply r = post(c, path, b);
    ASSERT_TRUE(r.status == 200 || r.status == 400 || r.status == 404) << r.status << " for " << b;
    if (r.status != 200) expect_error(r, r.status, r.status == 404 ? "not_found_error" : "invalid_request_error");
  }
  EXPECT_EQ(testing::get(c, "/health").status, 200);
  EXPECT_EQ(s.service().stats().kv_pages_used, 0);
}

TEST(AnthropicRoutes, OverloadKeepsItsStatusWithAnOverloadedError) {
  TestServerConfig cfg;
  cfg.max_running = 1;
  cfg.max_waiting = 0;
  TestServer s(cfg);
  expect_error(overloaded_reply(s, "/v1/messages", msg_body("first", 3), msg_body("second", 3), msg_body("third", 3)),
               503, "overloaded_error");
}

TEST(AnthropicRoutes, AuthHeadersAndCorsPreflight) {
  TestServerConfig cfg;
  cfg.api_key = "sekret";
  cfg.cors_origin = "*";  // the preflights below
  TestServer s(cfg);
  auto c = s.client();
  const httplib::Headers version = {{"anthropic-version", "2023-06-01"}, {"anthropic-beta", "tools-2024-04-04"}};
  for (const char* path : {"/v1/messages", "/v1/messages/count_tokens"}) {
    expect_error(post(c, path, msg_body("x", 3), version), 401, "authentication_error");
    expect_error(post(c, path, msg_body("x", 3), {{"x-api-key", "nope"}, {"anthropic-version", "2023-06-01"}}), 401,
                 "authentication_error");
    expect_error(post(c, path, msg_body("x", 3), {{"Authorization", "Bearer nope"}}), 401, "authentication_error");
    EXPECT_EQ(post(c, path, msg_body("x", 3), {{"x-api-key", "sekret"}, {"anthropic-version", "2023-06-01"},
                                              {"anthropic-beta", "tools-2024-04-04"}})
                  .status,
              200)
        << path;
    EXPECT_EQ(post(c, path, msg_body("x", 3), {{"Authorization", "Bearer sekret"}}).status, 200) << path;
  }
  // Preflights: no key needed; the headers asked for are allowed, and without a list the Anthropic
  // client's headers are named.
  auto pre = c.Options("/v1/messages", {{"Origin", "http://example.com"}, {"Access-Control-Request-Method", "POST"},
                                        {"Access-Control-Request-Headers", "x-api-key, anthropic-version, content-type"}});
  ASSERT_TRUE(pre);
  EXPECT_EQ(pre->status, 204);
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Methods"), "POST, OPTIONS");
  EXPECT_EQ(pre->get_header_value("Access-Control-Allow-Headers"), "x-api-key, anthropic-version, content-type");
  auto plain = c.Options("/v1/messages/count_tokens", {{"Origin", "http://example.com"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(plain);
  EXPECT_EQ(plain->status, 204);
  const std::string allowed = plain->get_header_value("Access-Control-Allow-Headers");
  for (const char* h : {"X-Api-Key", "Anthropic-Version", "Anthropic-Beta", "Authorization", "Content-Type"})
    EXPECT_NE(allowed.find(h), std::string::npos) << h << " not in " << allowed;
}

TEST(AnthropicRoutes, ClientDisconnectCancelsTheStream) {
  TestServer s;
  const EngineStats st =
      hang_up_mid_stream(s, "/v1/messages", msg_body("run long", 480, {{"stream", true}, {"ignore_eos", true}}));
  EXPECT_EQ(st.running, 0);
  EXPECT_EQ(st.kv_pages_used, 0);
  EXPECT_EQ(st.requests_cancelled, 1);
  EXPECT_LT(st.generation_tokens_total, 480);
}

}  // namespace
}  // namespace ft
