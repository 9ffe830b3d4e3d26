// OpenAI's Responses API: request bodies -> chat messages (items, instructions, tools, reasoning),
// refusals naming the Responses field, the bounded response store, and the routes (/v1/responses
// create, streamed event sequence, GET / DELETE, previous_response_id) against an in-process server
// over the scripted fake model.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <optional>
#include <set>

#include "server/request_parse.h"
#include "server/response_store.h"
#include "server/responses.h"
#include "server/server_fixture.h"

namespace ft {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;
using server::ApiError;
using server::ApiException;
using server::ResponseStore;
using server::StoredResponse;
using testing::post;
using testing::Reply;
using testing::TestServer;
using testing::TestServerConfig;

server::ResponsesRequest parse(const std::string& body, ResponseStore& store) {
  return server::parse_responses_request(server::parse_json_body(body), store);
}

server::ResponsesRequest parse(const std::string& body) {
  ResponseStore store;
  return parse(body, store);
}

ApiError refusal(const std::string& body, ResponseStore* store = nullptr) {
  ResponseStore own;
  try {
    parse(body, store ? *store : own);
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "accepted: " << body;
  return {};
}

/** `j` as unordered JSON (key order aside, the same value). */
json plain(const ojson& j) { return json::parse(j.dump()); }

// ---- request parsing ----

TEST(ResponsesParse, StringInputInstructionsAndSampling) {
  const auto r = parse(R"({"model": "m", "input": "Hi there", "instructions": "Be brief.", "max_output_tokens": 20,
                           "temperature": 0.5, "top_p": 0.9, "top_k": 7, "seed": 3, "stream": true})");
  EXPECT_EQ(plain(r.chat.messages), json::parse(R"([{"role": "system", "content": "Be brief."},
                                              {"role": "user", "content": "Hi there"}])"));
  EXPECT_EQ(r.chat.gen.max_tokens, 20);
  EXPECT_FLOAT_EQ(r.chat.gen.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.chat.gen.sampling.top_p, 0.9f);
  EXPECT_EQ(r.chat.gen.sampling.top_k, 7);  // chat's extensions are read as chat reads them
  EXPECT_EQ(r.chat.gen.sampling.seed, 3u);
  EXPECT_TRUE(r.chat.gen.stream);
  EXPECT_EQ(r.chat.gen.model, "m");
  EXPECT_TRUE(r.store);
  EXPECT_EQ(r.input_items, ojson::parse(R"([{"type": "message", "role": "user", "content": "Hi there"}])"));
  EXPECT_EQ(r.echo["instructions"], "Be brief.");
  EXPECT_EQ(r.echo["max_output_tokens"], 20);
  EXPECT_EQ(r.echo["temperature"], 0.5);
  EXPECT_EQ(r.echo["top_p"], 0.9);
  EXPECT_EQ(r.echo["tool_choice"], "auto");
  EXPECT_EQ(r.echo["tools"], ojson::array());
  EXPECT_EQ(r.echo["text"], ojson::parse(R"({"format": {"type": "text"}})"));
  EXPECT_EQ(r.echo["truncation"], "disabled");
  EXPECT_EQ(r.echo["metadata"], ojson::object());
  EXPECT_EQ(r.echo["reasoning"], ojson::parse(R"({"effort": null, "summary": null})"));
}

TEST(ResponsesParse, ItemsBecomeChatMessages) {
  // An agent loop's history: developer text, user parts, the model's reasoning + text + two parallel
  // calls, both outputs, then an output message replayed as the assistant's.
  const auto r = parse(R"({"input": [
      {"role": "developer", "content": "Use tools."},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather"},
                                                      {"type": "input_text", "text": "in Paris?"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Call it."}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
      {"type": "function_call", "call_id": "call_a", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call", "call_id": "call_b", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_a", "output": "18C"},
      {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "noon"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "18C at noon."}]},
      {"type": "function_call", "call_id": "call_c", "name": "get_time", "arguments": "{}"}
    ]})");
  EXPECT_EQ(plain(r.chat.messages), json::parse(R"([
      {"role": "developer", "content": "Use tools."},
      {"role": "user", "content": "Weather\nin Paris?"},
      {"role": "assistant", "content": "Checking.", "reasoning_content": "Call it.", "thinking": "Call it.",
       "tool_calls": [{"id": "call_a", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
                      {"id": "call_b", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_a", "content": "18C", "name": "get_weather"},
      {"role": "tool", "tool_call_id": "call_b", "content": "noon", "name": "get_time"},
      {"role": "assistant", "content": "18C at noon.",
       "tool_calls": [{"id": "call_c", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]}
    ])")) << r.chat.messages.dump(1);
  EXPECT_EQ(r.input_items.size(), 10u);
}

TEST(ResponsesParse, ReasoningWithoutAFollowingTurnIsATurnOfItsOwn) {
  const auto r = parse(R"({"input": [{"role": "user", "content": "a"},
      {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "t"}]},
      {"type": "reasoning", "summary": [{"type": "summary_text", "text": "only a summary"}], "encrypted_content": "x"},
      {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
      {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "u"}]},
      {"role": "user", "content": "b"}]})");
  EXPECT_EQ(plain(r.chat.messages), json::parse(R"([
      {"role": "user", "content": "a"},
      {"role": "assistant", "content": "", "reasoning_content": "t", "thinking": "t",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "assistant", "content": "", "reasoning_content": "u", "thinking": "u"},
      {"role": "user", "content": "b"}])")) << r.chat.messages.dump(1);
}

TEST(ResponsesParse, ToolsToolChoiceReasoningEffortAndFormat) {
  const auto r = parse(R"({"input": "x", "tools": [{"type": "function", "name": "get_weather", "description": "d",
      "parameters": {"type": "object"}, "strict": true}], "tool_choice": {"type": "function", "name": "get_weather"},
      "parallel_tool_calls": false, "reasoning": {"effort": "high", "summary": "auto"}, "text": {"format": {"type": "text"}},
      "store": false, "metadata": {"k": "v"}, "user": "u1", "truncation": "auto", "include": ["reasoning.encrypted_content"],
      "stream_options": {"include_obfuscation": false}, "service_tier": "auto", "prompt_cache_key": "p"})");
  EXPECT_EQ(plain(r.chat.tools), json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "d",
      "parameters": {"type": "object"}, "strict": true}}])"));
  EXPECT_TRUE(r.chat.parse_tool_calls);
  EXPECT_FALSE(r.parallel_tool_calls);
  EXPECT_FALSE(r.store);
  EXPECT_EQ(r.chat.template_kwargs["reasoning_effort"], "high");  // reaches the template as chat's does
  EXPECT_EQ(r.echo["reasoning"], ojson::parse(R"({"effort": "high", "summary": "auto"})"));
  EXPECT_EQ(r.echo["tools"][0]["name"], "get_weather");  // echoed as sent
  EXPECT_EQ(r.echo["tool_choice"], ojson::parse(R"({"type": "function", "name": "get_weather"})"));
  EXPECT_EQ(r.echo["metadata"], ojson::parse(R"({"k": "v"})"));
  EXPECT_EQ(r.echo["user"], "u1");
  EXPECT_EQ(r.echo["truncation"], "disabled");
  EXPECT_FALSE(parse(R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": "none"})")
                   .chat.parse_tool_calls);
}

TEST(ResponsesParse, RefusalsNameTheResponsesField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({})", "input"},
      {R"({"input": 3})", "input"},
      {R"({"input": [{"role": "user", "content": "a"}, {"type": "function_call", "name": "f", "arguments": "{}"}]})",
       "input[1].call_id"},
      {R"({"input": [{"type": "function_call_output", "call_id": "c"}]})", "input[0].output"},
      {R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "http://x"}]}]})", "input[0].content[0]"},
      {R"({"input": [{"role": "tool", "content": "a"}]})", "input[0].role"},
      {R"({"input": [{"type": "web_search_call", "id": "w"}]})", "input[0].type"},
      {R"({"input": [{"type": "item_reference", "id": "msg_1"}]})", "input[0].type"},
      {R"({"input": [{"type": "reasoning", "content": [{"type": "summary_text", "text": "x"}]}]})", "input[0].content[0]"},
      {R"({"input": "x", "tools": [{"type": "web_search"}]})", "tools[0].type"},
      {R"({"input": "x", "tools": [{"type": "function"}]})", "tools[0].name"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 1}]})", "tools[0].parameters"},
      {R"({"input": "x", "tool_choice": {"type": "file_search"}})", "tool_choice.type"},
      {R"({"input": "x", "tool_choice": "required"})", "tool_choice"},
      {R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}})",
       "tool_choice"},
      {R"({"input": "x", "max_output_tokens": 0})", "max_output_tokens"},
      {R"({"input": "x", "temperature": 3})", "temperature"},
      {R"({"input": "x", "reasoning": {"effort": "lots"}})", "reasoning.effort"},
      {R"({"input": "x", "reasoning": {"summary": "long"}})", "reasoning.summary"},
      {R"({"input": "x", "text": {"format": {"type": "xml"}}})", "text.format*"},  // or a field under it
      {R"({"input": "x", "text": {"format": "json"}})", "text.format"},
      {R"({"input": "x", "text": {"verbosity": "low"}})", "text.verbosity"},
      {R"({"input": "x", "messages": []})", "messages"},
      {R"({"input": "x", "max_tokens": 5})", "max_tokens"},
      {R"({"input": "x", "n": 2})", "n"},
      {R"({"input": "x", "response_format": {"type": "text"}})", "response_format"},
      {R"({"input": "x", "background": true})", "background"},
      {R"({"input": "x", "conversation": "conv_1"})", "conversation"},
      {R"({"input": "x", "prompt": {"id": "p"}})", "prompt"},
      {R"({"input": "x", "top_logprobs": 2})", "top_logprobs"},
      {R"({"input": "x", "include": ["message.output_text.logprobs"]})", "include"},
      {R"({"input": "x", "include": ["everything"]})", "include"},
      {R"({"input": "x", "truncation": "middle"})", "truncation"},
      {R"({"input": "x", "metadata": {"k": 1}})", "metadata"},
      {R"({"input": "x", "store": "yes"})", "store"},
      {R"({"input": "x", "instructions": 5})", "instructions"},
      {R"({"input": "x", "previous_response_id": "resp_nope"})", "previous_response_id"},
      {R"({"input": "x", "grammar": "root ::= x"})", "grammar"},
  };
  for (const auto& [body, param] : cases) {
    const ApiError e = refusal(body);
    EXPECT_EQ(e.status, 400) << body;
    if (param.back() == '*')
      EXPECT_EQ(e.param.rfind(param.substr(0, param.size() - 1), 0), 0u) << body << ": " << e.param;
    else
      EXPECT_EQ(e.param, param) << body << ": " << e.message;
    EXPECT_FALSE(e.message.empty()) << body;
  }
  EXPECT_EQ(refusal(R"({"input": "x", "previous_response_id": "resp_nope"})").code, "previous_response_not_found");
  // chat's own wording is renamed too
  EXPECT_NE(refusal(R"({"input": "x", "max_output_tokens": 0})").message.find("'max_output_tokens'"), std::string::npos);
}

TEST(ResponsesParse, TextFormatIsChatsResponseFormat) {
  // Each text.format is accepted exactly when chat accepts the equivalent response_format, and a
  // refusal names the Responses field.
  const std::vector<std::pair<std::string, std::string>> formats = {
      {R"({"type": "text"})", R"({"type": "text"})"},
      {R"({"type": "json_object"})", R"({"type": "json_object"})"},
      {R"({"type": "json_schema", "name": "p", "strict": true, "schema": {"type": "object",
          "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}})",
       R"({"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object",
          "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}, "strict": true}})"},
  };
  for (const auto& [text_format, response_format] : formats) {
    std::optional<ApiError> chat_error;
    try {
      server::parse_chat_request(server::parse_json_body(
          R"({"messages": [{"role": "user", "content": "x"}], "response_format": )" + response_format + "}"));
    } catch (const ApiException& e) {
      chat_error = e.error;
    }
    const std::string body = R"({"input": "x", "text": {"format": )" + text_format + "}}";
    if (!chat_error) {
      const auto r = parse(body);
      EXPECT_EQ(r.echo["text"]["format"], ojson::parse(text_format)) << text_format;
      continue;
    }
    const ApiError e = refusal(body);
    EXPECT_EQ(e.param.rfind("text.format", 0), 0u) << text_format << ": " << e.param;
    EXPECT_EQ(e.message, server::with_responses_names(*chat_error).message) << text_format;
  }
}

TEST(ResponsesParse, ChatNamesAreRenamedInParamAndMessage) {
  const ApiError e = server::with_responses_names(
      ApiError{400, "'response_format' of type \"x\"; see messages[2] and max_completion_tokens", "invalid_request_error",
               "messages[2].content", ""});
  EXPECT_EQ(e.param, "input[2].content");
  EXPECT_EQ(e.message, "'text.format' of type \"x\"; see input[2] and max_output_tokens");
  EXPECT_EQ(server::with_responses_names(ApiError{400, "m", "t", "response_format_x", ""}).param, "response_format_x");
}

TEST(ResponsesParse, PreviousResponseItemsComeFirst) {
  ResponseStore store;
  StoredResponse prev;
  prev.input_items = ojson::parse(R"([{"type": "message", "role": "user", "content": "Hi"}])");
  prev.response = ojson::parse(R"({"id": "resp_1", "output": [
      {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
       "content": [{"type": "output_text", "text": "Hello!", "annotations": []}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f", "arguments": "{}", "status": "completed"}]})");
  store.put("resp_1", prev);
  const auto r = parse(R"({"previous_response_id": "resp_1", "instructions": "New rules.", "input": [
      {"type": "function_call_output", "call_id": "call_1", "output": "done"}]})", store);
  EXPECT_EQ(plain(r.chat.messages), json::parse(R"([{"role": "system", "content": "New rules."},
      {"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Hello!",
       "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "done", "name": "f"}])")) << r.chat.messages.dump(1);
  EXPECT_EQ(r.input_items.size(), 4u);  // the history a continuation of this one starts from
  EXPECT_EQ(r.echo["previous_response_id"], "resp_1");
}

// ---- the store ----

StoredResponse sized(size_t n) {
  StoredResponse s;
  s.response = {{"text", std::string(n, 'x')}};
  return s;
}

TEST(ResponseStore, EvictsLeastRecentlyUsedByCountAndBytes) {
  ResponseStore by_count(3, 1 << 20);
  for (const char* id : {"a", "b", "c"}) EXPECT_TRUE(by_count.put(id, sized(10)));
  ASSERT_TRUE(by_count.get("a"));  // a is now the most recently used: b goes first
  by_count.put("d", sized(10));
  EXPECT_EQ(by_count.size(), 3u);
  EXPECT_FALSE(by_count.get("b"));
  EXPECT_TRUE(by_count.get("a") && by_count.get("c") && by_count.get("d"));

  const size_t one = [] {
    ResponseStore s;
    s.put("a", sized(1000));
    return s.bytes();
  }();
  EXPECT_GT(one, 1000u);
  ResponseStore by_bytes(100, 2 * one + one / 2);
  by_bytes.put("a", sized(1000));
  by_bytes.put("b", sized(1000));
  EXPECT_EQ(by_bytes.bytes(), 2 * one);
  by_bytes.put("c", sized(1000));
  EXPECT_EQ(by_bytes.size(), 2u);
  EXPECT_FALSE(by_bytes.get("a"));
  EXPECT_EQ(by_bytes.bytes(), 2 * one);
  EXPECT_FALSE(by_bytes.put("huge", sized(3 * one)));  // larger than the whole budget: not kept
  EXPECT_FALSE(by_bytes.get("huge"));
  EXPECT_EQ(by_bytes.size(), 2u);

  EXPECT_TRUE(by_bytes.erase("b"));
  EXPECT_FALSE(by_bytes.erase("b"));
  EXPECT_EQ(by_bytes.size(), 1u);
  EXPECT_EQ(by_bytes.bytes(), one);
  by_bytes.put("c", sized(10));  // replacing an id: one entry, its new size
  EXPECT_EQ(by_bytes.size(), 1u);
  EXPECT_LT(by_bytes.bytes(), one);
}

// ---- routes ----

/** Tokens that make the scripted fake model answer `reply`, then end its turn. */
std::vector<int32_t> script_of(const std::string& reply) {
  const Vocab& v = testing::demo_vocab();
  std::vector<int32_t> script = v.encode(reply, EncodeOptions{false, true});
  script.push_back(v.encode("<|im_end|>", EncodeOptions{false, true}).at(0));
  return script;
}

std::string body_of(const json& input, const json& extra = json::object()) {
  json b = {{"model", "test-model"}, {"input", input}, {"temperature", 0}, {"max_output_tokens", 60}};
  b.update(extra);
  return b.dump();
}

/** A Responses stream: event names in order, checked to be the data's "type" with sequence numbers
 *  0, 1, 2, ...; the final response object; text deltas joined per output index. */
struct ResponseStream {
  std::vector<std::string> names;
  json final_response;
  std::map<int, std::string> text, reasoning, arguments;
  std::vector<json> added, done;  // output_item.added / .done items
};

ResponseStream read_stream(const std::string& sse) {
  ResponseStream out;
  int seq = 0;
  for (const auto& [name, data] : testing::sse_named_events(sse)) {
    const json j = json::parse(data);
    EXPECT_EQ(j["type"], name) << data;
    EXPECT_EQ(j["sequence_number"], seq++) << data;
    out.names.push_back(name);
    if (name == "response.completed" || name == "response.incomplete" || name == "response.failed")
      out.final_response = j["response"];
    if (name == "response.output_text.delta") out.text[j["output_index"]] += j["delta"].get<std::string>();
    if (name == "response.reasoning_text.delta") out.reasoning[j["output_index"]] += j["delta"].get<std::string>();
    if (name == "response.function_call_arguments.delta") out.arguments[j["output_index"]] += j["delta"].get<std::string>();
    if (name == "response.output_item.added") out.added.push_back(j["item"]);
    if (name == "response.output_item.done") out.done.push_back(j["item"]);
    if (name == "response.output_text.done") {
      EXPECT_EQ(j["text"], out.text[j["output_index"]]) << data;
    }
    if (name == "response.reasoning_text.done") {
      EXPECT_EQ(j["text"], out.reasoning[j["output_index"]]) << data;
    }
    if (name == "response.function_call_arguments.done") {
      EXPECT_EQ(j["arguments"], out.arguments[j["output_index"]]) << data;
    }
  }
  EXPECT_EQ(sse.find("[DONE]"), std::string::npos);
  return out;
}

/** `names` with each run of one delta event as one (how many deltas come depends on timing). */
std::vector<std::string> collapsed(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (const std::string& n : names)
    if (out.empty() || out.back() != n || n.size() < 6 || n.substr(n.size() - 6) != ".delta") out.push_back(n);
  return out;
}

/** The fields an output item has whether streamed or not (ids differ). */
json without_ids(json items) {
  for (json& it : items) {
    it.erase("id");
    it.erase("call_id");
  }
  return items;
}

TEST(ResponsesRoutes, TextReplyWholeAndStreamed) {
  const std::string reply = "Hello there, friend.";
  const Reply r = testing::scripted_post(TestServerConfig{}, script_of(reply), "/v1/responses", body_of("Hi"));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& b = r.body;
  EXPECT_EQ(b["id"].get<std::string>().rfind("resp_", 0), 0u);
  EXPECT_EQ(b["object"], "response");
  EXPECT_EQ(b["status"], "completed");
  EXPECT_EQ(b["model"], "test-model");
  EXPECT_TRUE(b["error"].is_null());
  EXPECT_TRUE(b["incomplete_details"].is_null());
  EXPECT_FALSE(b.contains("output_text"));  // the SDKs compute it
  ASSERT_EQ(b["output"].size(), 1u) << r.raw;
  const json& msg = b["output"][0];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["status"], "completed");
  EXPECT_EQ(msg["id"].get<std::string>().rfind("msg_", 0), 0u);
  EXPECT_EQ(msg["content"], json::parse(R"([{"type": "output_text", "text": "Hello there, friend.", "annotations": [],
                                              "logprobs": []}])"));
  const json& u = b["usage"];
  EXPECT_EQ(u["output_tokens"], static_cast<int>(reply.size()) + 1);  // byte tokens + <|im_end|>
  EXPECT_GT(u["input_tokens"].get<int>(), 5);
  EXPECT_EQ(u["total_tokens"], u["input_tokens"].get<int>() + u["output_tokens"].get<int>());
  EXPECT_EQ(u["input_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(u["output_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_EQ(b["max_output_tokens"], 60);
  EXPECT_EQ(b["temperature"], 0);
  EXPECT_EQ(b["store"], true);

  const Reply s = testing::scripted_post(TestServerConfig{}, script_of(reply), "/v1/responses",
                                         body_of("Hi", {{"stream", true}}));
  ASSERT_EQ(s.status, 200) << s.raw;
  const ResponseStream st = read_stream(s.raw);
  EXPECT_EQ(collapsed(st.names),
            (std::vector<std::string>{"response.created", "response.in_progress", "response.output_item.added",
                                      "response.content_part.added", "response.output_text.delta",
                                      "response.output_text.done", "response.content_part.done",
                                      "response.output_item.done", "response.completed"}))
      << s.raw;
  EXPECT_EQ(st.text.at(0), reply);
  EXPECT_EQ(st.final_response["status"], "completed");
  EXPECT_EQ(without_ids(st.final_response["output"]), without_ids(b["output"]));
  EXPECT_EQ(st.final_response["usage"], b["usage"]);
  EXPECT_EQ(st.added.at(0)["status"], "in_progress");
  EXPECT_EQ(st.done.at(0), st.final_response["output"][0]);
}

TEST(ResponsesRoutes, MaxOutputTokensMakesItIncomplete) {
  for (bool stream : {false, true}) {
    const Reply r = testing::scripted_post(TestServerConfig{}, script_of("A long answer that goes on"), "/v1/responses",
                                           body_of("Hi", {{"max_output_tokens", 4}, {"stream", stream}}));
    ASSERT_EQ(r.status, 200) << r.raw;
    const json b = stream ? read_stream(r.raw).final_response : r.body;
    EXPECT_EQ(b["status"], "incomplete") << r.raw;
    EXPECT_EQ(b["incomplete_details"], json::parse(R"({"reason": "max_output_tokens"})"));
    EXPECT_EQ(b["output"][0]["status"], "incomplete");
    EXPECT_EQ(b["output"][0]["content"][0]["text"], "A lo");
    EXPECT_EQ(b["usage"]["output_tokens"], 4);
    if (stream) {
      EXPECT_EQ(read_stream(r.raw).names.back(), "response.incomplete");
    }
  }
}

TEST(ResponsesRoutes, FunctionCallsWholeAndStreamed) {
  const std::string reply =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  const json tools = json::parse(R"([{"type": "function", "name": "get_weather", "parameters": {"type": "object"}},
                                     {"type": "function", "name": "get_time", "parameters": {"type": "object"}}])");
  const Reply r = testing::scripted_post(TestServerConfig{}, script_of(reply), "/v1/responses",
                                         body_of("Weather?", {{"tools", tools}, {"max_output_tokens", 200}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& out = r.body["output"];
  ASSERT_EQ(out.size(), 3u) << r.raw;
  EXPECT_EQ(out[0]["content"][0]["text"], "Checking.");
  EXPECT_EQ(out[1]["type"], "function_call");
  EXPECT_EQ(out[1]["name"], "get_weather");
  EXPECT_EQ(json::parse(out[1]["arguments"].get<std::string>()), json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(out[1]["status"], "completed");
  EXPECT_EQ(out[1]["id"].get<std::string>().rfind("fc_", 0), 0u);
  EXPECT_EQ(out[1]["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_NE(out[1]["call_id"], out[2]["call_id"]);
  EXPECT_EQ(out[2]["name"], "get_time");
  EXPECT_EQ(r.body["status"], "completed");
  EXPECT_EQ(r.body["tools"], tools);

  const Reply s = testing::scripted_post(TestServerConfig{}, script_of(reply), "/v1/responses",
                                         body_of("Weather?", {{"tools", tools}, {"stream", true}, {"max_output_tokens", 200}}));
  const ResponseStream st = read_stream(s.raw);
  EXPECT_EQ(without_ids(st.final_response["output"]), without_ids(out)) << s.raw;
  EXPECT_EQ(st.text.at(0), "Checking.");
  EXPECT_EQ(st.arguments.at(1), out[1]["arguments"]);
  EXPECT_EQ(st.added.at(1)["type"], "function_call");
  EXPECT_EQ(st.added.at(1)["arguments"], "");
  EXPECT_EQ(st.added.at(1)["status"], "in_progress");
  EXPECT_EQ(collapsed(st.names),
            (std::vector<std::string>{
                "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
                "response.output_text.delta", "response.output_text.done", "response.content_part.done",
                "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
                "response.function_call_arguments.done", "response.output_item.done", "response.output_item.added",
                "response.function_call_arguments.delta", "response.function_call_arguments.done",
                "response.output_item.done", "response.completed"}))
      << s.raw;

  // parallel_tool_calls false: the first call only, streamed or not
  for (bool stream : {false, true}) {
    const Reply one = testing::scripted_post(TestServerConfig{}, script_of(reply), "/v1/responses",
        body_of("Weather?", {{"tools", tools}, {"parallel_tool_calls", false}, {"stream", stream}, {"max_output_tokens", 200}}));
    const json o = stream ? read_stream(one.raw).final_response["output"] : one.body["output"];
    ASSERT_EQ(o.size(), 2u) << one.raw;
    EXPECT_EQ(o[1]["name"], "get_weather");
  }
}

TEST(ResponsesRoutes, ReasoningItemWholeAndStreamed) {
  TestServerConfig cfg;
  cfg.split_reasoning = true;
  const std::string reply = "<think>\nFirst, think.\n</think>\n\nThe answer.";
  const Reply r = testing::scripted_post(cfg, script_of(reply), "/v1/responses", body_of("Q"));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json& out = r.body["output"];
  ASSERT_EQ(out.size(), 2u) << r.raw;
  EXPECT_EQ(out[0]["type"], "reasoning");
  EXPECT_EQ(out[0]["id"].get<std::string>().rfind("rs_", 0), 0u);
  EXPECT_EQ(out[0]["summary"], json::array());
  EXPECT_EQ(out[0]["content"], json::parse(R"([{"type": "reasoning_text", "text": "First, think."}])"));
  EXPECT_EQ(out[1]["content"][0]["text"], "The answer.");
  EXPECT_EQ(r.body["usage"]["output_tokens_details"]["reasoning_tokens"], 13);  // "First, think." in byte tokens

  const Reply s = testing::scripted_post(cfg, script_of(reply), "/v1/responses", body_of("Q", {{"stream", true}}));
  const ResponseStream st = read_stream(s.raw);
  EXPECT_EQ(without_ids(st.final_response["output"]), without_ids(out)) << s.raw;
  EXPECT_EQ(st.reasoning.at(0), "First, think.");
  EXPECT_EQ(st.text.at(1), "The answer.");
  EXPECT_EQ(st.final_response["usage"], r.body["usage"]);
  const std::set<std::string> names(st.names.begin(), st.names.end());
  for (const char* n : {"response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.added",
                        "response.content_part.done"})
    EXPECT_TRUE(names.count(n)) << n;
}

TEST(ResponsesRoutes, RetrieveDeleteAndStoreFalse) {
  TestServer s;
  s.model().script = script_of("Stored reply.");
  auto c = s.client();
  const Reply created = post(c, "/v1/responses", body_of("Hi", {{"metadata", {{"k", "v"}}}}));
  ASSERT_EQ(created.status, 200) << created.raw;
  const std::string id = created.body["id"];
  const Reply got = testing::get(c, "/v1/responses/" + id);
  EXPECT_EQ(got.status, 200);
  EXPECT_EQ(got.body, created.body);
  EXPECT_EQ(got.body["metadata"], json::parse(R"({"k": "v"})"));

  const Reply del = testing::reply_of(c.Delete(("/v1/responses/" + id).c_str()));
  EXPECT_EQ(del.status, 200) << del.raw;
  EXPECT_EQ(del.body, json({{"id", id}, {"object", "response"}, {"deleted", true}}));
  for (const Reply& gone : {testing::get(c, "/v1/responses/" + id), testing::reply_of(c.Delete(("/v1/responses/" + id).c_str()))}) {
    EXPECT_EQ(gone.status, 404) << gone.raw;
    EXPECT_EQ(gone.body["error"]["type"], "invalid_request_error");
    EXPECT_NE(gone.body["error"]["message"].get<std::string>().find(id), std::string::npos);
  }

  const Reply unstored = post(c, "/v1/responses", body_of("Hi", {{"store", false}}));
  ASSERT_EQ(unstored.status, 200);
  EXPECT_EQ(unstored.body["store"], false);
  EXPECT_EQ(testing::get(c, "/v1/responses/" + unstored.body["id"].get<std::string>()).status, 404);
  // A streamed response is stored once it completes, as its response.completed object.
  const Reply streamed = post(c, "/v1/responses", body_of("Hi", {{"stream", true}}));
  const json fin = read_stream(streamed.raw).final_response;
  EXPECT_EQ(testing::get(c, "/v1/responses/" + fin["id"].get<std::string>()).body, fin);
  // Other methods: 405 with the allowed ones.
  const Reply put = testing::reply_of(c.Put(("/v1/responses/" + id).c_str(), "{}", "application/json"));
  EXPECT_EQ(put.status, 405);
}

TEST(ResponsesRoutes, PreviousResponseIdChainsTheConversation) {
  TestServerConfig cfg;
  cfg.max_prefill_tokens = 256;  // the chained prompt in one chunk (scripted replies)
  TestServer s(cfg);
  s.model().script = script_of("Hello!");
  auto c = s.client();
  const Reply first = post(c, "/v1/responses", body_of("Hi", {{"instructions", "Be kind."}}));
  ASSERT_EQ(first.status, 200) << first.raw;
  const Reply second = post(c, "/v1/responses",
                            body_of("Again?", {{"previous_response_id", first.body["id"]}, {"instructions", "Be brief."}}));
  ASSERT_EQ(second.status, 200) << second.raw;
  EXPECT_EQ(second.body["previous_response_id"], first.body["id"]);
  // The prompt is the chat conversation: the new instructions, the first turn and its answer, the new input.
  const Reply chat = post(c, "/v1/chat/completions", json{{"model", "test-model"}, {"max_tokens", 1}, {"messages", {
      {{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}},
      {{"role", "assistant"}, {"content", "Hello!"}}, {{"role", "user"}, {"content", "Again?"}}}}}.dump());
  ASSERT_EQ(chat.status, 200) << chat.raw;
  EXPECT_EQ(second.body["usage"]["input_tokens"], chat.body["usage"]["prompt_tokens"]);
  // A third continues the second (whose history holds the first).
  const Reply third = post(c, "/v1/responses", body_of("More", {{"previous_response_id", second.body["id"]}}));
  ASSERT_EQ(third.status, 200) << third.raw;
  EXPECT_GT(third.body["usage"]["input_tokens"].get<int>(), second.body["usage"]["input_tokens"].get<int>());
  // An unknown or deleted id: 400 naming previous_response_id.
  c.Delete(("/v1/responses/" + first.body["id"].get<std::string>()).c_str());
  const Reply gone = post(c, "/v1/responses", body_of("x", {{"previous_response_id", first.body["id"]}}));
  EXPECT_EQ(gone.status, 400);
  EXPECT_EQ(gone.body["error"]["param"], "previous_response_id");
  EXPECT_EQ(gone.body["error"]["code"], "previous_response_not_found");
}

/** A template that writes every part of a turn (reasoning, text, calls, tool results), so prompts of
 *  equal length hold the same conversation. */
constexpr const char* kFullTemplate =
    "{%- for m in messages -%}<|im_start|>{{ m.role }}\n"
    "{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif -%}"
    "{{ m.content }}"
    "{%- if m.tool_calls %}{% for c in m.tool_calls %}<tool_call>{{ c.id }} {{ c.function.name }} "
    "{{ c.function.arguments }}</tool_call>{% endfor %}{% endif -%}"
    "{%- if m.role == 'tool' %} [{{ m.tool_call_id }}]{% endif -%}<|im_end|>\n{% endfor -%}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif -%}";

TEST(ResponsesRoutes, ToolLoopItemsReachTheTemplateAsChatMessages) {
  TestServerConfig cfg;
  cfg.chat_template = kFullTemplate;
  TestServer s(cfg);
  auto c = s.client();
  const json items = json::parse(R"([{"role": "user", "content": "Weather in Paris?"},
      {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "Use the tool."}]},
      {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call_output", "call_id": "call_9", "output": "18C"}])");
  const Reply r = post(c, "/v1/responses", body_of(items, {{"max_output_tokens", 2}}));
  ASSERT_EQ(r.status, 200) << r.raw;
  const json messages = json::parse(R"([{"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "reasoning_content": "Use the tool.", "tool_calls": [{"id": "call_9",
       "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_9", "content": "18C"}])");
  const Reply chat = post(c, "/v1/chat/completions", json{{"model", "test-model"}, {"max_tokens", 2}, {"messages", messages}}.dump());
  ASSERT_EQ(chat.status, 200) << chat.raw;
  const Reply text = post(c, "/apply-template", json{{"messages", messages}}.dump());
  ASSERT_NE(text.body["prompt"].get<std::string>().find("<think>Use the tool.</think><tool_call>call_9 get_weather"),
            std::string::npos)
      << text.raw;
  EXPECT_EQ(r.body["usage"]["input_tokens"], chat.body["usage"]["prompt_tokens"]);
}

TEST(ResponsesRoutes, RefusalsUseOpenAIsErrorShape) {
  TestServer s;
  auto c = s.client();
  const Reply r = post(c, "/v1/responses", body_of(json::array({{{"type", "function_call"}, {"name", "f"}}})));
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(r.body["error"]["param"], "input[0].call_id");
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error");
  const Reply model = post(c, "/v1/responses", body_of("x", {{"model", "other"}}));
  EXPECT_EQ(model.status, 404);
  EXPECT_EQ(model.body["error"]["code"], "model_not_found");
  // Over the context: the chat check's message, naming the input.
  const Reply big = post(c, "/v1/responses", body_of(std::string(600, 'a')));
  EXPECT_EQ(big.status, 400);
  EXPECT_EQ(big.body["error"]["param"], "input");
  EXPECT_EQ(big.body["error"]["code"], "context_length_exceeded");
  EXPECT_NE(big.body["error"]["message"].get<std::string>().find("input"), std::string::npos);
}

}  // namespace
}  // namespace ft
