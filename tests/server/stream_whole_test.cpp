// Streamed and whole replies have the same text, whitespace included (issue 38): scripted replies with
// leading and trailing whitespace, a think block and tool calls, through /v1/chat/completions,
// /v1/completions, /v1/messages and /v1/responses, with reasoning split or not and tools or not; the streamed deltas
// put together equal the non-streamed reply field by field.
#include <gtest/gtest.h>

#include "server/server_fixture.h"

namespace ft {
namespace {

using json = nlohmann::json;
using testing::Reply;
using testing::TestServerConfig;

std::vector<int32_t> script_of(const std::string& reply) {
  const Vocab& v = testing::demo_vocab();
  std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  return script;
}

/** The streamed reply: a step every millisecond, so the text arrives in small pieces (a token or a few)
 *  rather than in one update. */
Reply streamed_post(const TestServerConfig& cfg, const std::vector<int32_t>& script, const std::string& path,
                    const std::string& body) {
  testing::TestServer s(cfg);
  s.model().script = script;
  s.model().delay = std::chrono::milliseconds(1);
  auto c = s.client();
  return testing::post(c, path, body);
}

const char* const kReplies[] = {
    "  \n<think>\n  Weigh it.  \n</think>\n\n  It is sunny.  \n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Paris\"}}\n</tool_call>\n  Then more.  \n",
    "<think>\n\n</think>\n\n\n  Only text, spaced.\n\n  ",
    "\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>  \n",
    "  plain  \n\n",
    "<think>unterminated  \n",
    "\n<think> Z\u00fcrich? \u2600\ufe0f </think> Sunny \u2600\ufe0f in Z\u00fcrich. \U0001F600\n",  // multi-byte
};

const json kTools = json::parse(R"([{"type": "function", "function": {"name": "get_weather",
  "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");

TestServerConfig config(bool split) {
  TestServerConfig c;
  c.split_reasoning = split;
  c.max_seq_len = 1024, c.n_pages = 128;
  return c;
}

/** A chat reply's text fields: content (null as ""), reasoning, and calls as name + arguments. */
json chat_fields(const Reply& r, bool stream) {
  json out = {{"content", ""}, {"reasoning", ""}, {"calls", json::array()}, {"finish", ""}};
  if (!stream) {
    const json& ch = r.body["choices"][0];
    const json& m = ch["message"];
    if (m["content"].is_string()) out["content"] = m["content"];
    if (m.contains("reasoning_content")) out["reasoning"] = m["reasoning_content"];
    for (const json& c : m.value("tool_calls", json::array())) out["calls"].push_back(c["function"]);
    out["finish"] = ch["finish_reason"];
    return out;
  }
  std::string content, reasoning;
  for (const std::string& data : testing::sse_events(r.raw)) {
    if (data == "[DONE]") break;
    const json j = json::parse(data);
    const json& d = j["choices"][0]["delta"];
    if (d.contains("content") && d["content"].is_string()) content += d["content"].get<std::string>();
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    for (const json& c : d.value("tool_calls", json::array())) out["calls"].push_back(c["function"]);
    if (!j["choices"][0]["finish_reason"].is_null()) out["finish"] = j["choices"][0]["finish_reason"];
  }
  out["content"] = content, out["reasoning"] = reasoning;
  return out;
}

TEST(StreamWhole, ChatCompletionsStreamedEqualsWhole) {
  for (const char* reply : kReplies) {
    for (bool split : {false, true}) {
      for (int variant = 0; variant < 3; ++variant) {  // plain, tools, a stop string
        const bool tools = variant == 1;
        json body = {{"messages", {{{"role", "user"}, {"content", "Weather?"}}}}, {"temperature", 0}, {"max_tokens", 200}};
        if (tools) body["tools"] = kTools;
        if (variant == 2) body["stop"] = {"more", "spaced", "\u00fcrich."};
        const Reply whole = testing::scripted_post(config(split), script_of(reply), "/v1/chat/completions", body.dump());
        body["stream"] = true;
        const Reply streamed = streamed_post(config(split), script_of(reply), "/v1/chat/completions", body.dump());
        ASSERT_EQ(whole.status, 200) << whole.raw;
        ASSERT_EQ(streamed.status, 200) << streamed.raw;
        const json w = chat_fields(whole, false);
        EXPECT_EQ(chat_fields(streamed, true), w) << json(reply).dump() << " split " << split << " variant " << variant;
        if (!split && variant == 0) EXPECT_EQ(w["content"], reply) << "nothing split: the text as written";
      }
    }
  }
}

TEST(StreamWhole, CompletionsStreamedEqualsWhole) {
  for (const char* reply : kReplies) {
   for (bool stop : {false, true}) {
    json body = {{"prompt", "Weather?"}, {"temperature", 0}, {"max_tokens", 200}};
    if (stop) body["stop"] = {"more", "spaced", "\u00fcrich."};
    const Reply whole = testing::scripted_post(config(false), script_of(reply), "/v1/completions", body.dump());
    json sb = body;
    sb["stream"] = true;
    const Reply streamed = streamed_post(config(false), script_of(reply), "/v1/completions", sb.dump());
    ASSERT_EQ(whole.status, 200) << whole.raw;
    std::string text;
    for (const std::string& data : testing::sse_events(streamed.raw)) {
      if (data == "[DONE]") break;
      text += json::parse(data)["choices"][0]["text"].get<std::string>();
    }
    if (!stop) EXPECT_EQ(whole.body["choices"][0]["text"], reply);
    EXPECT_EQ(text, whole.body["choices"][0]["text"]) << json(reply).dump() << " stop " << stop;
   }
  }
}

/** An Anthropic reply's blocks as {type, text} (text, thinking with its signature, tool_use input). */
json anthropic_blocks(const Reply& r, bool stream) {
  json out = json::array();
  if (!stream) {
    for (const json& b : r.body["content"]) {
      if (b["type"] == "text") out.push_back({{"type", "text"}, {"text", b["text"]}});
      if (b["type"] == "thinking") out.push_back({{"type", "thinking"}, {"text", b["thinking"]}, {"signature", b["signature"]}});
      if (b["type"] == "tool_use") out.push_back({{"type", "tool_use"}, {"name", b["name"]}, {"text", b["input"].dump()}});
    }
    out.push_back({{"stop", r.body["stop_reason"]}});
    return out;
  }
  json stop;
  for (const auto& [event, data] : testing::sse_named_events(r.raw)) {
    const json j = json::parse(data);
    if (event == "content_block_start") {
      const json& b = j["content_block"];
      json entry = {{"type", b["type"]}, {"text", ""}};
      if (b["type"] == "tool_use") entry["name"] = b["name"];
      if (b["type"] == "thinking") entry["signature"] = "";
      out.push_back(entry);
    }
    if (event == "content_block_delta") {
      json& e = out.back();
      const json& d = j["delta"];
      std::string t = e["text"];
      if (d["type"] == "text_delta") t += d["text"].get<std::string>();
      if (d["type"] == "thinking_delta") t += d["thinking"].get<std::string>();
      if (d["type"] == "input_json_delta") t += d["partial_json"].get<std::string>();
      if (d["type"] == "signature_delta") e["signature"] = d["signature"];
      e["text"] = t;
    }
    if (event == "message_delta") stop = j["delta"]["stop_reason"];
  }
  for (json& e : out)  // the input as the whole reply writes it
    if (e["type"] == "tool_use") e["text"] = json::parse(e["text"].get<std::string>()).dump();
  out.push_back({{"stop", stop}});
  return out;
}

TEST(StreamWhole, AnthropicMessagesStreamedEqualsWhole) {
  const json tools = json::parse(R"([{"name": "get_weather", "input_schema": {"type": "object",
    "properties": {"city": {"type": "string"}}}}])");
  for (const char* reply : kReplies) {
    for (bool split : {false, true}) {
      for (bool with_tools : {false, true}) {
        json body = {{"model", "test-model"}, {"max_tokens", 200}, {"temperature", 0},
                     {"messages", {{{"role", "user"}, {"content", "Weather?"}}}}};
        if (with_tools) body["tools"] = tools;
        const Reply whole = testing::scripted_post(config(split), script_of(reply), "/v1/messages", body.dump());
        body["stream"] = true;
        const Reply streamed = streamed_post(config(split), script_of(reply), "/v1/messages", body.dump());
        ASSERT_EQ(whole.status, 200) << whole.raw;
        ASSERT_EQ(streamed.status, 200) << streamed.raw;
        EXPECT_EQ(anthropic_blocks(streamed, true), anthropic_blocks(whole, false))
            << json(reply).dump() << " split " << split << " tools " << with_tools << "\n" << whole.raw;
      }
    }
  }
}

/** A Responses reply's output items without their ids (the whole body's, or response.completed's). */
json responses_output(const Reply& r, bool stream) {
  json response = r.body;
  if (stream)
    for (const auto& [event, data] : testing::sse_named_events(r.raw))
      if (event == "response.completed" || event == "response.incomplete") response = json::parse(data)["response"];
  json out = response["output"];
  for (json& item : out) item.erase("id"), item.erase("call_id");
  return out;
}

TEST(StreamWhole, ResponsesStreamedEqualsWhole) {
  const json tools = json::parse(R"([{"type": "function", "name": "get_weather", "parameters": {"type": "object",
    "properties": {"city": {"type": "string"}}}}])");
  for (const char* reply : kReplies) {
    for (bool split : {false, true}) {
      for (bool with_tools : {false, true}) {
        json body = {{"model", "test-model"}, {"max_output_tokens", 200}, {"temperature", 0}, {"input", "Weather?"}};
        if (with_tools) body["tools"] = tools;
        const Reply whole = testing::scripted_post(config(split), script_of(reply), "/v1/responses", body.dump());
        body["stream"] = true;
        const Reply streamed = streamed_post(config(split), script_of(reply), "/v1/responses", body.dump());
        ASSERT_EQ(whole.status, 200) << whole.raw;
        ASSERT_EQ(streamed.status, 200) << streamed.raw;
        EXPECT_EQ(responses_output(streamed, true), responses_output(whole, false))
            << json(reply).dump() << " split " << split << " tools " << with_tools;
      }
    }
  }
}

TEST(StreamWhole, ResponsesSplitRepliesAsTheChatRoutesDo) {
  // A template whose generation prompt opens the think block (as Qwen3.5's, DeepSeek-R1's): the reply
  // starts in the reasoning, for /v1/responses as for /v1/chat/completions.
  TestServerConfig cfg = config(true);
  cfg.chat_template =
      "{%- for m in messages -%}{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' -}}{%- endfor -%}"
      "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n<think>\\n' -}}{%- endif -%}";
  const std::string reply = "Plan it.\n</think>\n\nThe answer.";
  const Reply chat = testing::scripted_post(cfg, script_of(reply), "/v1/chat/completions",
                                            R"({"messages": [{"role": "user", "content": "Q?"}], "temperature": 0})");
  ASSERT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(chat.body["choices"][0]["message"]["reasoning_content"], "Plan it.");
  EXPECT_EQ(chat.body["choices"][0]["message"]["content"], "The answer.");
  for (bool stream : {false, true}) {
    const std::string body = json{{"model", "test-model"}, {"input", "Q?"}, {"temperature", 0}, {"stream", stream}}.dump();
    const Reply r = stream ? streamed_post(cfg, script_of(reply), "/v1/responses", body)
                           : testing::scripted_post(cfg, script_of(reply), "/v1/responses", body);
    ASSERT_EQ(r.status, 200) << r.raw;
    const json out = responses_output(r, stream);
    ASSERT_EQ(out.size(), 2u) << r.raw;
    EXPECT_EQ(out[0]["type"], "reasoning");
    EXPECT_EQ(out[0]["content"][0]["text"], "Plan it.") << r.raw;
    EXPECT_EQ(out[1]["type"], "message");
    EXPECT_EQ(out[1]["content"][0]["text"], "The answer.") << r.raw;
  }
}

}  // namespace
}  // namespace ft
