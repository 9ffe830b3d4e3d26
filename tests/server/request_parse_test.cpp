// Request parsing and validation: every refused field gives a 400 naming it; the API key check;
// ft::Error -> HTTP status mapping and OpenAI's error body.
#include <gtest/gtest.h>

#include "server/auth.h"
#include "server/errors.h"
#include "server/request_parse.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace ft::server {
namespace {

using ojson = nlohmann::ordered_json;

ApiError refusal(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ApiException& e) {
    return e.error;
  }
  ADD_FAILURE() << "no ApiException";
  return {};
}

ApiError chat_refusal(const std::string& body) {
  return refusal([&] { parse_chat_request(parse_json_body(body)); });
}

ApiError completion_refusal(const std::string& body) {
  return refusal([&] { parse_completion_request(parse_json_body(body)); });
}

TEST(RequestParse, ToolCallTurnWithNullContentRendersOnQwen3) {
  // The OpenAI SDK's agent loop: an assistant turn with "content": null and tool_calls, then the
  // tool's answer. Qwen3's template tests substrings of the content, which failed on None.
  const std::string src = ft::testing::read_file(ft::testing::shared_dir() + "/data/chat-templates/Qwen-Qwen3-0.6B.jinja");
  ASSERT_FALSE(src.empty());
  const ChatTemplate t(src, "", "<|im_end|>");
  for (const char* content : {R"("content": null, )", ""}) {
    const ChatRequest r = parse_chat_request(parse_json_body(std::string(R"({"messages": [
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", )") + content + R"("tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "content": "18 C", "tool_call_id": "c1"}]})"));
    const std::string text = t.render(r.messages, nullptr, true);
    EXPECT_NE(text.find("<tool_call>\n{\"name\": \"get_weather\""), std::string::npos) << text;
    EXPECT_NE(text.find("<tool_response>\n18 C\n</tool_response>"), std::string::npos) << text;
  }
}

TEST(RequestParse, ChatFieldsBecomeNativeValues) {
  ChatRequest r = parse_chat_request(parse_json_body(R"({
    "model": "m", "messages": [
      {"role": "system", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "tool", "content": "42", "tool_call_id": "x"}],
    "max_tokens": 7, "max_completion_tokens": 9, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
    "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1, "seed": -3,
    "stop": ["x", ""], "n": 1, "logprobs": true, "top_logprobs": 3, "ignore_eos": true, "min_tokens": 2,
    "stream": true, "stream_options": {"include_usage": true}, "chat_template_kwargs": {"enable_thinking": false}})"));
  EXPECT_EQ(r.gen.model, "m");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.messages[2]["content"], "");  // null next to tool_calls: "" for the template
  EXPECT_EQ(r.messages[3]["tool_call_id"], "x");
  EXPECT_EQ(r.gen.max_tokens, 9);  // max_completion_tokens wins
  EXPECT_FLOAT_EQ(r.gen.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.top_p, 0.9f);
  EXPECT_EQ(r.gen.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.gen.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.gen.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.gen.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.gen.sampling.seed, static_cast<uint64_t>(-3));
  EXPECT_EQ(r.gen.sampling.min_tokens, 2);
  EXPECT_EQ(r.gen.stop, std::vector<std::string>{"x"});
  EXPECT_TRUE(r.gen.logprobs);
  EXPECT_EQ(r.gen.top_logprobs, 3);
  EXPECT_TRUE(r.gen.ignore_eos);
  EXPECT_TRUE(r.gen.stream);
  EXPECT_TRUE(r.gen.include_usage);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
  // Defaults: OpenAI's temperature 1, no max_tokens, nulls treated as absent.
  ChatRequest d = parse_chat_request(parse_json_body(R"({"messages":[{"role":"user","content":"hi"}],"stop":null,"seed":null})"));
  EXPECT_FLOAT_EQ(d.gen.sampling.temperature, 1.0f);
  EXPECT_FALSE(d.gen.max_tokens.has_value());
  EXPECT_FALSE(d.gen.sampling.seed.has_value());
  EXPECT_TRUE(d.gen.stop.empty());
  // Any uint64 seed is taken as given (it was clamped to 2^63 - 1), -1 is none.
  ChatRequest big = parse_chat_request(
      parse_json_body(R"({"messages":[{"role":"user","content":"hi"}],"seed":18446744073709551615})"));
  EXPECT_EQ(big.gen.sampling.seed, UINT64_MAX);
  EXPECT_FALSE(parse_chat_request(parse_json_body(R"({"messages":[{"role":"user","content":"hi"}],"seed":-1})"))
                   .gen.sampling.seed.has_value());
  EXPECT_FALSE(d.gen.stream);
}

TEST(RequestParse, ChatRefusalsNameTheField) {
  struct Case {
    const char* body;
    const char* param;
    const char* says;
  };
  const Case cases[] = {
      {R"({})", "messages", "required"},
      {R"({"messages": "hi"})", "messages", "must be a list"},
      {R"({"messages": []})", "messages", "at least one"},
      {R"({"messages": [1]})", "messages[0]", "must be an object"},
      {R"({"messages": [{"role": "wizard", "content": "x"}]})", "messages[0].role", "must be one of"},
      {R"({"messages": [{"content": "x"}]})", "messages[0].role", "must be a string"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content", "required"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content", "must be a string"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
       "messages[0].content[0]", "text-only"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content[0].text", "string"},
      {R"({"messages": [{"role": "user", "content": [{"type": "blob"}]}]})", "messages[0].content[0].type", "text"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature", "must be a number"},
      {R"({"messages": [{"role": "user", "content": "x"}], "temperature": 3})", "temperature", "[0, 2]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 0})", "top_p", "(0, 1]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_p": 1.5})", "top_p", "(0, 1], got 1.5"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}})", "stream_options",
       "only allowed when 'stream' is true"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n_predict": 0})", "n_predict", "-1 or -2"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n_predict": -3})", "n_predict", "[-2,"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0})", "max_tokens", "[1,"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.5})", "max_tokens", "integer"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 0})", "n", "[1, 128]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 129})", "n", "[1, 128]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "n": 2, "best_of": 3})", "best_of", "must equal n (2)"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": 3})", "stop", "string or a list"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stop": ["a", 1]})", "stop", "stop[1]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream", "boolean"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": 1})", "stream_options", "object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs", "requires"},
      {R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21})", "top_logprobs", "[0, 20]"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": []})", "chat_template_kwargs", "object"},
      // Reserved template inputs (issue 40: they overrode the validated request).
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"messages": []}})",
       "chat_template_kwargs", "cannot set 'messages'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"add_generation_prompt": false}})",
       "chat_template_kwargs", "cannot set 'add_generation_prompt'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"bos_token": "<|im_end|>"}})",
       "chat_template_kwargs", "cannot set 'bos_token'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"eos_token": ""}})",
       "chat_template_kwargs", "cannot set 'eos_token'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": {"tools": [1]}})",
       "chat_template_kwargs", "cannot set 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [1]})", "tools[0]", "\"type\": \"function\""},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]})", "tools[0]", "function"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {}}]})",
       "tools[0].function.name", "required"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f", "parameters": 1}}]})",
       "tools[0].function.parameters", "object"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       "tool_choice", "not one of the tools"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})", "tool_choice", "requires 'tools'"},
      {R"({"messages": [{"role": "user", "content": "x"}], "model": 7})", "model", "string"},
      {R"({"messages": [{"role": "user", "content": "x"}], "seed": "s"})", "seed", "integer"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 5, "min_tokens": 6})", "min_tokens", "exceed"},
  };
  for (const Case& c : cases) {
    ApiError e = chat_refusal(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.body << " -> " << e.message;
  }
}

TEST(RequestParse, LogitBiasIsAMapOfTokenIdsToBiases) {
  ChatRequest r = parse_chat_request(
      parse_json_body(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":{"50256":-100,"7":100,"12":0.5}})"));
  EXPECT_EQ(r.gen.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{50256, -100.0f}, {7, 100.0f}, {12, 0.5f}}));
  CompletionRequest c = parse_completion_request(parse_json_body(R"({"prompt":"x","logit_bias":{"3":-1}})"));
  EXPECT_EQ(c.gen.sampling.logit_bias, (std::vector<std::pair<int32_t, float>>{{3, -1.0f}}));
  EXPECT_TRUE(parse_chat_request(parse_json_body(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":null})"))
                  .gen.sampling.logit_bias.empty());
  // llama.cpp's list of [id, bias] pairs; false bans the token (-inf).
  c = parse_completion_request(parse_json_body(R"({"prompt":"x","logit_bias":[[3,2.5],[9,false]]})"));
  EXPECT_EQ(c.gen.sampling.logit_bias,
            (std::vector<std::pair<int32_t, float>>{{3, 2.5f}, {9, -std::numeric_limits<float>::infinity()}}));
  for (const char* bias : {R"([1])", R"([[1,true]])", R"([["a",1]])", R"([[1,101]])", R"([[-1,1]])", R"([[1,2,3]])",
                           R"("x")", R"({"abc":1})", R"({"-1":1})", R"({"1.5":1})", R"({"":1})",
                           R"({"99999999999":1})", R"({"1":101})", R"({"1":-100.5})", R"({"1":"5"})", R"({"1":true})",
                           R"({"1":null})"}) {
    const std::string body = std::string(R"({"messages":[{"role":"user","content":"x"}],"logit_bias":)") + bias + "}";
    ApiError e = chat_refusal(body);
    EXPECT_EQ(e.status, 400) << bias;
    EXPECT_EQ(e.param, "logit_bias") << bias;
    EXPECT_NE(e.message.find("logit_bias"), std::string::npos) << bias << " -> " << e.message;
    EXPECT_EQ(completion_refusal(std::string(R"({"prompt":"x","logit_bias":)") + bias + "}").param, "logit_bias") << bias;
  }
}

TEST(RequestParse, ResponseFormatTextJsonObjectAndJsonSchema) {
  const std::string head = R"({"messages":[{"role":"user","content":"x"}],"response_format":)";
  using S = GenerationParams::Structured;
  EXPECT_EQ(parse_chat_request(parse_json_body(head + R"({"type":"text"}})")).gen.structured, S::kNone);
  EXPECT_EQ(parse_chat_request(parse_json_body(head + "null}")).gen.structured, S::kNone);
  EXPECT_EQ(parse_chat_request(parse_json_body(head + R"({"type":"json_object"}})")).gen.structured, S::kJsonObject);
  const GenerationParams js = parse_chat_request(parse_json_body(
      head + R"({"type":"json_schema","json_schema":{"name":"x","strict":true,"schema":{"type":"object"}}}})")).gen;
  EXPECT_EQ(js.structured, S::kJsonSchema);
  EXPECT_EQ(js.json_schema.dump(), R"({"type":"object"})");
  EXPECT_EQ(js.json_schema_param, "response_format.json_schema.schema");
  EXPECT_EQ(parse_completion_request(parse_json_body(R"({"prompt":"x","response_format":{"type":"json_object"}})"))
                .gen.structured,
            S::kJsonObject);
  // llama.cpp's json_object with a schema is that schema (it was a plain object before).
  const GenerationParams lj = parse_chat_request(parse_json_body(head + R"({"type":"json_object","schema":{"type":"string"}}})")).gen;
  EXPECT_EQ(lj.structured, S::kJsonSchema);
  EXPECT_EQ(lj.json_schema.dump(), R"({"type":"string"})");
  EXPECT_EQ(lj.json_schema_param, "response_format.schema");
  EXPECT_EQ(chat_refusal(head + R"({"type":"json_object","schema":3}})").param, "response_format.schema");
  // OpenAI's deprecated functions form is refused, not ignored.
  EXPECT_EQ(chat_refusal(R"({"messages":[{"role":"user","content":"x"}],"functions":[{"name":"f"}]})").param, "functions");
  EXPECT_EQ(chat_refusal(R"({"messages":[{"role":"user","content":"x"}],"function_call":"auto"})").param, "function_call");
  struct Case {
    const char* format;
    const char* param;
    const char* says;
  };
  const Case cases[] = {
      {R"({"type":"json_schema"})", "response_format.json_schema", "required"},
      {R"({"type":"json_schema","json_schema":{"name":"x"}})", "response_format.json_schema.schema", "required"},
      {R"({"type":"json_schema","json_schema":{"name":"x","schema":[]}})", "response_format.json_schema.schema", "JSON Schema object"},
      {R"({"type":"json_schema","json_schema":{"name":3,"schema":{}}})", "response_format.json_schema.name", "string"},
      {R"({"type":"json_schema","json_schema":{"strict":"yes","schema":{}}})", "response_format.json_schema.strict", "boolean"},
      {R"({"type":"yaml"})", "response_format.type", "must be \"text\""},
      {R"({})", "response_format.type", "required"},
      {R"({"type":3})", "response_format.type", "required"},
      {R"("json")", "response_format", "must be an object"},
  };
  for (const Case& c : cases) {
    ApiError e = chat_refusal(head + c.format + "}");
    EXPECT_EQ(e.status, 400) << c.format;
    EXPECT_EQ(e.param, c.param) << c.format;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.format << " -> " << e.message;
    EXPECT_EQ(completion_refusal(std::string(R"({"prompt":"x","response_format":)") + c.format + "}").param, c.param);
  }
}

TEST(RequestParse, OtherEnginesSchemaFieldsAreJsonSchemaConstraints) {
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  using S = GenerationParams::Structured;
  for (const char* f : {R"("json_schema":{"type":"integer"})", R"("guided_json":{"type":"integer"})",
                        R"("guided_json":"{\"type\":\"integer\"}")", R"("structured_outputs":{"json":{"type":"integer"}})"}) {
    const GenerationParams g = parse_chat_request(parse_json_body(chat + f + "}")).gen;
    EXPECT_EQ(g.structured, S::kJsonSchema) << f;
    EXPECT_EQ(g.json_schema.dump(), R"({"type":"integer"})") << f;
  }
  EXPECT_EQ(parse_chat_request(parse_json_body(chat + R"("json_schema":""})")).gen.structured, S::kNone);
  EXPECT_EQ(chat_refusal(chat + R"("json_schema":{},"response_format":{"type":"json_object"}})").param, "json_schema");
  EXPECT_EQ(chat_refusal(chat + R"("guided_json":"{nope"})").param, "guided_json");
  EXPECT_EQ(chat_refusal(chat + R"("structured_outputs":{"regex":"a+"}})").param, "structured_outputs.regex");
}

/** A field refused with a 400 naming `param`, whose message holds `says`. */
struct FieldCase {
  const char* field;  // "name":value
  const char* param;
  const char* says;
};

/** Each `ok` field is accepted and each refused one refused as described, on both OpenAI routes (a
 *  chat body and a completions body with the field added). */
void expect_fields_on_both_routes(std::initializer_list<const char*> ok, std::initializer_list<FieldCase> refused) {
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)", cmpl = R"({"prompt":"x",)";
  for (const char* f : ok) {
    EXPECT_NO_THROW(parse_chat_request(parse_json_body(chat + f + "}"))) << f;
    EXPECT_NO_THROW(parse_completion_request(parse_json_body(cmpl + f + "}"))) << f;
  }
  for (const FieldCase& c : refused) {
    ApiError e = chat_refusal(chat + c.field + "}");
    EXPECT_EQ(e.status, 400) << c.field;
    EXPECT_EQ(e.param, c.param) << c.field;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.field << " -> " << e.message;
    EXPECT_EQ(completion_refusal(cmpl + c.field + "}").param, c.param) << c.field;
  }
}

TEST(RequestParse, LlamaCppSamplersAtTheirNeutralValueOnly) {
  // llama.cpp's own sampler fields are accepted at the value that changes nothing (its web UI sends
  // them all) and refused otherwise, rather than silently ignored.
  expect_fields_on_both_routes({R"("repeat_penalty":1.0)", R"("repeat_last_n":0)", R"("repeat_last_n":-1)",
                                R"("mirostat":0)", R"("typical_p":1)", R"("tfs_z":1.0)", R"("dry_multiplier":0)",
                                R"("xtc_probability":0)", R"("repeat_penalty":null)", R"("top_n_sigma":-1)",
                                R"("top_n_sigma":0)", R"("dynatemp_range":0)"},
                               {{R"("repeat_penalty":1.3)", "repeat_penalty", "use 'repetition_penalty'"},
                                {R"("mirostat":2)", "mirostat", "not supported"},
                                {R"("typical_p":0.5)", "typical_p", "except at 1"},
                                {R"("top_n_sigma":1.0)", "top_n_sigma", "except at 0 or below"},
                                {R"("dynatemp_range":0.5)", "dynatemp_range", "except at 0"},
                                {R"("repeat_penalty":"high")", "repeat_penalty", "must be a number"}});
}

TEST(RequestParse, UnimplementedVllmFieldsAreRefusedUnlessTheyAskForNothing) {
  // Found by a fresh-user trial: these returned 200 with the output of a request without them.
  expect_fields_on_both_routes({R"("bad_words":[])", R"("allowed_token_ids":null)", R"("prompt_logprobs":null)",
                                R"("use_beam_search":false)", R"("truncate_prompt_tokens":null)", R"("top_a":0)"},
                               {{R"("bad_words":["Lily"])", "bad_words", "not supported"},
                                {R"("allowed_token_ids":[300])", "allowed_token_ids", "not supported"},
                                {R"("prompt_logprobs":1)", "prompt_logprobs", "not supported"},
                                {R"("use_beam_search":true)", "use_beam_search", "not supported"},
                                {R"("truncate_prompt_tokens":5)", "truncate_prompt_tokens", "not supported"},
                                {R"("top_a":0.2)", "top_a", "not supported"}});
}

TEST(RequestParse, ConstrainedDecodingIsRefusedAndVllmStopFieldsAreRead) {
  // Constrained decoding other than a JSON Schema (GBNF, regex, choice): asking for it is a 400 naming
  // the field (the reply would otherwise silently ignore the constraint); empty values ask for nothing.
  // vLLM's stop fields are read (malformed ones are a 400).
  expect_fields_on_both_routes(
      {R"("grammar":"")", R"("guided_choice":[])", R"("grammar":null)", R"("stop_token_ids":[])",
       R"("include_stop_str_in_output":false)"},
      {{R"("grammar":"root ::= [0-9]+")", "grammar", "takes a JSON Schema"},
       {R"("guided_choice":["yes","no"])", "guided_choice", "takes a JSON Schema"},
       {R"("guided_regex":"[0-9]+")", "guided_regex", "takes a JSON Schema"},
       {R"("stop_token_ids":432)", "stop_token_ids", "must be a list"},
       {R"("stop_token_ids":[1,-2])", "stop_token_ids", "'stop_token_ids[1]' must be in [0,"},
       {R"("stop_token_ids":[4294967672])", "stop_token_ids", "must be in [0, 2147483647]"},
       {R"("stop_token_ids":["a"])", "stop_token_ids", "'stop_token_ids[0]' must be an integer"},
       {R"("include_stop_str_in_output":1)", "include_stop_str_in_output", "boolean"}});
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  const ChatRequest st = parse_chat_request(parse_json_body(chat + R"("stop_token_ids":[432,7.0],"include_stop_str_in_output":true})"));
  EXPECT_EQ(st.gen.stop_token_ids, (std::vector<int32_t>{432, 7}));  // an integral float counts, as elsewhere
  EXPECT_TRUE(st.gen.include_stop_str);
  EXPECT_FALSE(parse_chat_request(parse_json_body(chat + R"("stop":"x"})")).gen.include_stop_str);
}

TEST(RequestParse, SeedMinusOneIsRandomAndNPredictIsMaxTokens) {
  // llama.cpp's conventions: seed -1 asks for a random seed (any other value is a fixed one), and
  // n_predict gives the token limit (ahead of max_tokens, as there), -1 meaning the context limit.
  const std::string chat = R"({"messages":[{"role":"user","content":"x"}],)";
  EXPECT_FALSE(parse_chat_request(parse_json_body(chat + R"("seed":-1})")).gen.sampling.seed.has_value());
  EXPECT_EQ(parse_chat_request(parse_json_body(chat + R"("seed":-2})")).gen.sampling.seed, static_cast<uint64_t>(-2));
  EXPECT_EQ(parse_chat_request(parse_json_body(chat + R"("seed":4294967295})")).gen.sampling.seed, 4294967295u);
  EXPECT_EQ(parse_chat_request(parse_json_body(chat + R"("n_predict":2})")).gen.max_tokens, 2);
  EXPECT_TRUE(parse_chat_request(parse_json_body(chat + R"("n_predict":2})")).gen.from_n_predict);
  EXPECT_FALSE(parse_chat_request(parse_json_body(chat + R"("max_tokens":2})")).gen.from_n_predict);
  EXPECT_EQ(parse_chat_request(parse_json_body(chat + R"("n_predict":2,"max_tokens":9})")).gen.max_tokens, 2);
  const ChatRequest unlimited = parse_chat_request(parse_json_body(chat + R"("n_predict":-1,"max_tokens":9})"));
  EXPECT_FALSE(unlimited.gen.max_tokens.has_value());
  // completions: 16 tokens by default, n_predict -1 lifts it, n_predict N sets it
  EXPECT_EQ(parse_completion_request(parse_json_body(R"({"prompt":"x"})")).gen.max_tokens, kCompletionDefaultMaxTokens);
  EXPECT_FALSE(parse_completion_request(parse_json_body(R"({"prompt":"x","n_predict":-1})")).gen.max_tokens.has_value());
  EXPECT_EQ(parse_completion_request(parse_json_body(R"({"prompt":"x","n_predict":40})")).gen.max_tokens, 40);
  EXPECT_NO_THROW(parse_chat_request(parse_json_body(chat + R"("stream":false,"stream_options":null})")));
  EXPECT_TRUE(parse_chat_request(parse_json_body(chat + R"("stream":true,"stream_options":{"include_usage":true}})"))
                  .gen.include_usage);
}

TEST(RequestParse, ContinueFinalMessageMakesItAPrefill) {
  // vLLM's continue_final_message: the final assistant message leaves the conversation and the reply
  // continues its text (ChatRequest::assistant_prefill) after the generation prompt.
  const std::string msgs =
      R"("messages":[{"role":"user","content":"Count"},{"role":"assistant","content":"One, two,"}])";
  for (const char* extra : {R"(,"continue_final_message":true,"add_generation_prompt":false)",
                            R"(,"continue_final_message":true)"}) {
    const ChatRequest r = parse_chat_request(parse_json_body("{" + msgs + extra + "}"));
    EXPECT_EQ(r.assistant_prefill, "One, two,") << extra;
    ASSERT_EQ(r.messages.size(), 1u) << extra;
    EXPECT_EQ(r.messages[0]["role"], "user");
    EXPECT_TRUE(r.add_generation_prompt);
  }
  const ChatRequest empty_calls = parse_chat_request(parse_json_body(
      R"({"messages":[{"role":"user","content":"Count"},{"role":"assistant","content":"One,","tool_calls":[]}],)"
      R"("continue_final_message":true})"));  // an empty tool_calls list is no call
  EXPECT_EQ(empty_calls.assistant_prefill, "One,");
  const ChatRequest plain = parse_chat_request(parse_json_body("{" + msgs + "}"));  // without it: a new turn
  EXPECT_EQ(plain.assistant_prefill, "");
  EXPECT_EQ(plain.messages.size(), 2u);
  struct Case {
    std::string body;
    const char* param;
    const char* says;
  };
  const Case cases[] = {
      {"{" + msgs + R"(,"continue_final_message":true,"add_generation_prompt":true})", "continue_final_message",
       "cannot both be true"},
      {R"({"messages":[{"role":"user","content":"x"}],"continue_final_message":true})", "continue_final_message",
       "final assistant message"},
      {R"({"messages":[{"role":"assistant","content":"x"}],"continue_final_message":true})", "messages", "before"},
      {"{" + msgs + R"(,"continue_final_message":"yes"})", "continue_final_message", "boolean"},
  };
  for (const Case& c : cases) {
    ApiError e = chat_refusal(c.body);
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body;
    EXPECT_NE(e.message.find(c.says), std::string::npos) << c.body << " -> " << e.message;
  }
}

TEST(RequestParse, BodiesThatAreNotJsonObjects) {
  for (const char* body : {"", "{", "nul", "[1,2]", "\"x\"", "{\"a\":}", "{\"messages\": [} ", "\xff\xfe"}) {
    ApiError e = refusal([&] { parse_json_body(body); });
    EXPECT_EQ(e.status, 400) << body;
  }
  std::string deep(100000, '[');
  ApiError e = refusal([&] { parse_json_body("{\"a\":" + deep); });
  EXPECT_NE(e.message.find("deeper"), std::string::npos) << e.message;
  std::string ok = "{\"a\":" + std::string(60, '[') + std::string(60, ']') + "}";
  EXPECT_NO_THROW(parse_json_body(ok));
}

TEST(RequestParse, CompletionPromptForms) {
  CompletionRequest a = parse_completion_request(parse_json_body(R"({"prompt": "hello", "echo": true})"));
  EXPECT_FALSE(a.prompt_is_ids);
  EXPECT_EQ(a.prompt_text, "hello");
  EXPECT_TRUE(a.echo);
  CompletionRequest b = parse_completion_request(parse_json_body(R"({"prompt": ["hi"], "logprobs": 2})"));
  EXPECT_EQ(b.prompt_text, "hi");
  EXPECT_TRUE(b.gen.logprobs);
  EXPECT_EQ(b.gen.top_logprobs, 2);
  EXPECT_EQ(a.gen.max_tokens, 16);  // OpenAI's default for this endpoint
  CompletionRequest c = parse_completion_request(parse_json_body(R"({"prompt": [1, 2, 3], "max_tokens": 40})"));
  EXPECT_EQ(c.gen.max_tokens, 40);
  EXPECT_TRUE(c.prompt_is_ids);
  EXPECT_EQ(c.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  CompletionRequest d = parse_completion_request(parse_json_body(R"({"prompt": [[4, 5]], "logprobs": 0})"));
  EXPECT_EQ(d.prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_TRUE(d.gen.logprobs);
  EXPECT_EQ(d.gen.top_logprobs, 0);

  EXPECT_EQ(completion_refusal(R"({})").param, "prompt");
  EXPECT_EQ(completion_refusal(R"({"prompt": 5})").param, "prompt");
  EXPECT_EQ(completion_refusal(R"({"prompt": ["a", "b"]})").param, "prompt");
  EXPECT_EQ(completion_refusal(R"({"prompt": [1, -2]})").param, "prompt");
  EXPECT_EQ(completion_refusal(R"({"prompt": [1, "a"]})").param, "prompt");
  EXPECT_EQ(completion_refusal(R"({"prompt": [[1], [2]]})").param, "prompt");
  EXPECT_EQ(completion_refusal(R"({"prompt": "x", "logprobs": 21})").param, "logprobs");
  EXPECT_EQ(completion_refusal(R"({"prompt": "x", "echo": true, "logprobs": 1})").param, "echo");
  EXPECT_EQ(completion_refusal(R"({"prompt": "x", "best_of": 2})").param, "best_of");
  EXPECT_EQ(completion_refusal(R"({"prompt": "x", "suffix": "y"})").param, "suffix");
}

TEST(Auth, BearerOrXApiKeyInConstantTime) {
  EXPECT_TRUE(constant_time_equal("abc", "abc"));
  EXPECT_FALSE(constant_time_equal("abd", "abc"));
  EXPECT_FALSE(constant_time_equal("ab", "abc"));
  EXPECT_FALSE(constant_time_equal("abcd", "abc"));
  EXPECT_FALSE(constant_time_equal("", "abc"));
  EXPECT_TRUE(api_key_ok("", "", ""));
  EXPECT_TRUE(api_key_ok("k1", "Bearer k1", ""));
  EXPECT_TRUE(api_key_ok("k1", "bearer  k1 ", ""));
  EXPECT_TRUE(api_key_ok("k1", "", "k1"));
  EXPECT_TRUE(api_key_ok("k1", "Bearer wrong", "k1"));
  EXPECT_FALSE(api_key_ok("k1", "", ""));
  EXPECT_FALSE(api_key_ok("k1", "Bearer k2", ""));
  EXPECT_FALSE(api_key_ok("k1", "k1", ""));  // no scheme
  EXPECT_FALSE(api_key_ok("k1", "Basic k1", ""));
  EXPECT_FALSE(api_key_ok("k1", "Bearer k1x", "k1x"));
  EXPECT_TRUE(is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(is_loopback_host("localhost"));
  EXPECT_TRUE(is_loopback_host("::1"));
  EXPECT_FALSE(is_loopback_host("0.0.0.0"));
  EXPECT_FALSE(is_loopback_host("192.168.1.2"));
  EXPECT_EQ(url_host("::1"), "[::1]");  // the serve banner's URL
  EXPECT_EQ(url_host("[::1]"), "[::1]");
  EXPECT_EQ(url_host("fe80::2"), "[fe80::2]");
  EXPECT_EQ(url_host("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(url_host("localhost"), "localhost");
}

TEST(Errors, StatusMappingAndBodyShape) {
  EXPECT_EQ(api_error_from(Error(ErrorCode::kInvalidArgument, "x")).status, 400);
  ApiError ctx = api_error_from(Error(ErrorCode::kContextLength, "too long"));
  EXPECT_EQ(ctx.status, 400);
  EXPECT_EQ(ctx.code, "context_length_exceeded");
  EXPECT_EQ(api_error_from(Error(ErrorCode::kNotFound, "x")).status, 404);
  EXPECT_EQ(api_error_from(Error(ErrorCode::kOverloaded, "x")).status, 503);
  EXPECT_EQ(api_error_from(Error(ErrorCode::kInternal, "x")).status, 500);
  EXPECT_EQ(api_error_from(Error(ErrorCode::kInternal, "x")).type, "server_error");
  auto body = error_body(ApiError{400, "bad", "invalid_request_error", "top_p", ""});
  EXPECT_EQ(body.dump(), R"({"error":{"code":null,"message":"bad","param":"top_p","type":"invalid_request_error"}})");
  EXPECT_EQ(api_error_for_status(413, "/x").code, "request_too_large");
  EXPECT_EQ(api_error_for_status(401, "/x").code, "invalid_api_key");
  EXPECT_EQ(dump_json(nlohmann::json("a\xff")), "\"a\xEF\xBF\xBD\"");  // invalid UTF-8 replaced, no throw
}

TEST(RequestParse, MalformedJsonSaysWhereWithoutTheLibrarysTag) {
  const ApiError e = chat_refusal("{not json");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("not valid JSON: parse error at line 1, column 3"), std::string::npos) << e.message;
  EXPECT_EQ(e.message.find("[json.exception"), std::string::npos) << e.message;
}

}  // namespace
}  // namespace ft::server
