// Tool calls in the formats other than Hermes (server/tool_calls_{llama3,mistral,harmony}.cpp): whole
// replies with 0, 1 and 2 calls, text around them, broken JSON, the same text streamed split at every
// position, and each format detected from the real chat templates in $FT_SHARED_DIR.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/chat_reply.h"
#include "server/tool_calls.h"
#include "test_util.h"
#include "tool_call_testing.h"

namespace ft::server {
namespace {

using testing::expect_every_split_equals_whole;

void expect_call(const ToolCall& c, const std::string& name, const std::string& arguments) {
  EXPECT_EQ(c.name, name);
  EXPECT_EQ(c.arguments, arguments);
}

TEST(ToolCallFormats, Llama3Json) {
  constexpr ToolCallFormat f = ToolCallFormat::kLlama3;
  ToolCallSplit s = parse_tool_calls("The weather in Paris is mild.", f);  // 0 calls
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "The weather in Paris is mild.");
  s = parse_tool_calls("{\"answer\": 42}", f);  // JSON, but not a call
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "{\"answer\": 42}");

  s = parse_tool_calls("\n{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", f);  // 1 call
  ASSERT_EQ(s.calls.size(), 1u);
  expect_call(s.calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(s.content, "");
  s = parse_tool_calls("{\"type\": \"function\", \"name\": \"now\", \"parameters\": {}}", f);
  ASSERT_EQ(s.calls.size(), 1u);
  expect_call(s.calls[0], "now", "{}");

  const std::string two =  // 2 calls after <|python_tag|>, text before it
      "Let me check.<|python_tag|>{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; "
      "{\"name\": \"get_time\", \"parameters\": {\"tz\": \"CET\", \"s\": \"a;}b\"}}";
  s = parse_tool_calls(two, f);
  ASSERT_EQ(s.calls.size(), 2u);
  expect_call(s.calls[0], "get_weather", R"({"city":"Paris"})");
  expect_call(s.calls[1], "get_time", R"({"tz":"CET","s":"a;}b"})");
  EXPECT_EQ(s.content, "Let me check.");
  s = parse_tool_calls("{\"name\": \"f\", \"parameters\": {\"x\": 1}}\nDone.", f);  // text after
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.content, "Done.");

  // broken: bad JSON, an unterminated object, a built-in tool call: text as it was
  for (const std::string bad : {"{\"name\": \"f\", \"parameters\": {\"x\": }}", "<|python_tag|>{\"name\": \"f\", \"parameters\": {",
                                "<|python_tag|>brave_search.call(query=\"x\")"}) {
    s = parse_tool_calls(bad, f);
    EXPECT_TRUE(s.calls.empty()) << bad;
    EXPECT_EQ(s.content, bad);
  }
  s = parse_tool_calls("{\"name\": \"a\", \"parameters\": {}}; {\"name\": }", f);  // the 2nd is broken
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.content, "; {\"name\": }");

  expect_every_split_equals_whole(two, f, "{\"name\"");
  expect_every_split_equals_whole("{\"name\": \"f\", \"parameters\": {\"x\": 1}}\nDone. {\"name\": \"g\"}", f, "");
  expect_every_split_equals_whole("Hi <|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": }}; x", f, "");

  // A `;` after the last call ends the list: no text.
  const std::string trailing = "{\"name\": \"f\", \"parameters\": {}} ; ";
  s = parse_tool_calls(trailing, f);
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.content, "");
  expect_every_split_equals_whole(trailing, f, "");
}

TEST(ToolCallFormats, Mistral) {
  constexpr ToolCallFormat f = ToolCallFormat::kMistral;
  ToolCallSplit s = parse_tool_calls("Paris is [mostly] sunny.", f);  // 0 calls
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "Paris is [mostly] sunny.");

  s = parse_tool_calls("[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}]", f);  // 1 call
  ASSERT_EQ(s.calls.size(), 1u);
  expect_call(s.calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(s.content, "");
  s = parse_tool_calls("Sure. [TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", f);  // v11 form, text before
  ASSERT_EQ(s.calls.size(), 1u);
  expect_call(s.calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(s.content, "Sure.");

  const std::string list =  // 2 calls, list form (Mistral Nemo), with ids
      "[TOOL_CALLS] [{\"name\": \"a\", \"arguments\": {\"x\": \"]\"}, \"id\": \"abc123def\"}, "
      "{\"name\": \"b\", \"arguments\": {}}]";
  s = parse_tool_calls(list, f);
  ASSERT_EQ(s.calls.size(), 2u);
  expect_call(s.calls[0], "a", R"({"x":"]"})");
  expect_call(s.calls[1], "b", "{}");
  const std::string v11 =  // 2 calls, one per token (Mistral Small 3.2 / Ministral 3), a [CALL_ID]
      "Checking both.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}[TOOL_CALLS]get_time[CALL_ID]a1B2c3D4e[ARGS]{\"tz\": "
      "\"CET\"}";
  s = parse_tool_calls(v11, f);
  ASSERT_EQ(s.calls.size(), 2u);
  expect_call(s.calls[0], "get_weather", R"({"city":"Paris"})");
  expect_call(s.calls[1], "get_time", R"({"tz":"CET"})");
  EXPECT_EQ(s.content, "Checking both.");

  // broken: bad JSON, unterminated, no name, a name with no [ARGS]: text as it was
  for (const std::string bad : {"[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": tru}}]", "[TOOL_CALLS]f[ARGS]{\"x\": tru}",
                                "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {", "[TOOL_CALLS][{\"arguments\": {}}]",
                                "[TOOL_CALLS]get weather", "[TOOL_CALLS]f[ARGS][1]"}) {
    s = parse_tool_calls(bad, f);
    EXPECT_TRUE(s.calls.empty()) << bad;
    EXPECT_EQ(s.content, bad);
  }

  expect_every_split_equals_whole(list, f, "[TOOL");
  expect_every_split_equals_whole(v11, f, "[TOOL");
  expect_every_split_equals_whole("a [TOOL_CALLS]f[ARGS]{\"x\": tru} b [TOOL_CALLS]g[ARGS]{}", f, "");

  // Arguments given as a string must hold JSON: otherwise the entry is no call and stays text.
  const std::string not_json = "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": \"not json\"}]";
  s = parse_tool_calls(not_json, f);
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, not_json);
  s = parse_tool_calls("[TOOL_CALLS][{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}]", f);
  ASSERT_EQ(s.calls.size(), 1u);
  expect_call(s.calls[0], "f", R"({"x": 1})");  // JSON text kept as written
}

TEST(ToolCallFormats, Harmony) {
  constexpr ToolCallFormat f = ToolCallFormat::kHarmony;
  ToolCallSplit s = parse_tool_calls(  // 0 calls: analysis is reasoning, final is content
      "<|channel|>analysis<|message|>User says hi.<|end|><|start|>assistant<|channel|>final<|message|>Hello!", f);
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.reasoning, "User says hi.");
  EXPECT_EQ(s.content, "Hello!");
  s = parse_tool_calls("Plain text, no channels.", f);
  EXPECT_EQ(s.content, "Plain text, no channels.");

  const std::string one =  // 1 call, ended by <|call|>
      "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|>";
  s = parse_tool_calls(one, f);
  ASSERT_EQ(s.calls.size(), 1u);
  expect_call(s.calls[0], "get_weather", R"({"city":"Paris"})");
  EXPECT_EQ(s.reasoning, "Need the weather.");
  EXPECT_EQ(s.content, "");

  const std::string two =  // 2 calls, a preamble; the recipient after the role; the last cut at the end
      "<|channel|>commentary<|message|>Checking both.<|end|><|start|>assistant<|channel|>commentary "
      "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}<|call|><|start|>assistant "
      "to=functions.get_time<|channel|>commentary json<|message|>{\"tz\": \"CET\"}";
  s = parse_tool_calls(two, f);
  ASSERT_EQ(s.calls.size(), 2u);
  expect_call(s.calls[0], "get_weather", R"({"city":"Paris"})");
  expect_call(s.calls[1], "get_time", R"({"tz":"CET"})");
  EXPECT_EQ(s.content, "Checking both.");

  // broken: bad JSON, a built-in tool's recipient, an unfinished header: text as it was
  for (const std::string bad : {"<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"x\": <|call|>",
                                "<|channel|>analysis to=browser.search <|message|>{\"q\": 1}<|call|>",
                                "<|channel|>commentary to=functions.f"}) {
    s = parse_tool_calls(bad, f);
    EXPECT_TRUE(s.calls.empty()) << bad;
    EXPECT_EQ(s.content, bad);
  }

  expect_every_split_equals_whole(one, f, "to=");
  expect_every_split_equals_whole(two, f, "to=");
  expect_every_split_equals_whole(
      "<|channel|>analysis<|message|>Hm<|end|><|start|>assistant<|channel|>commentary to=functions.f<|message|>{x}<|call|>"
      "<|start|>assistant<|channel|>final<|message|>Done.<|return|>", f, "");
}

std::string real_template(const std::string& file) {
  std::ifstream in(std::filesystem::path(ft::testing::shared_dir()) / "data" / "chat-templates" / file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ToolCallFormats, DetectedFromRealTemplates) {
  const std::pair<const char*, ToolCallFormat> cases[] = {
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", ToolCallFormat::kLlama3},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", ToolCallFormat::kMistral},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", ToolCallFormat::kMistral},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", ToolCallFormat::kMistral},
      {"unsloth-mistral-Devstral-Small-2507.jinja", ToolCallFormat::kMistral},
      {"openai-gpt-oss-120b.jinja", ToolCallFormat::kHarmony},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", ToolCallFormat::kHermes},
      {"Qwen-Qwen3-0.6B.jinja", ToolCallFormat::kHermes},
      {"Qwen-QwQ-32B.jinja", ToolCallFormat::kHermes},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", ToolCallFormat::kHermes},
      {"google-gemma-2-2b-it.jinja", ToolCallFormat::kHermes},  // no tool markers: the fallback
  };
  for (const auto& [file, want] : cases) {
    const std::string t = real_template(file);
    ASSERT_FALSE(t.empty()) << "missing " << file << " under " << ft::testing::shared_dir();
    EXPECT_EQ(tool_call_format_name(detect_tool_call_format(t)), std::string(tool_call_format_name(want))) << file;
  }
}

TEST(ToolCallFormats, TemplatesThatTakeOnlyTextArgumentsAreDetected) {
  // Every template is given the arguments as an object, as transformers documents and vLLM does
  // (`tojson` writes it once, Qwen3-Coder / GLM iterate it, Qwen3 tests `is string`), but those that
  // concatenate the text, which an object fails (some DeepSeek-R1 distills, functionary v3.2).
  const std::pair<const char*, bool> cases[] = {
      {"openai-gpt-oss-120b.jinja", true},         {"meta-llama-Llama-3.1-8B-Instruct.jinja", true},
      {"moonshotai-Kimi-K2.jinja", true},           {"deepseek-ai-DeepSeek-V3.1.jinja", true},
      {"Qwen-Qwen3-0.6B.jinja", true},              {"Qwen-Qwen2.5-7B-Instruct.jinja", true},
      {"Qwen3-Coder.jinja", true},                  {"GLM-4.6.jinja", true},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", false},
      {"meetkai-functionary-medium-v3.2.jinja", false},
  };
  for (const auto& [file, want] : cases) {
    const std::string t = real_template(file);
    ASSERT_FALSE(t.empty()) << "missing " << file << " under " << ft::testing::shared_dir();
    EXPECT_EQ(template_takes_object_arguments(ChatTemplate(t, "<s>", "</s>")), want) << file;
  }
  // The conversion: JSON text becomes its value, empty text {}, other text stays.
  const auto msgs = nlohmann::ordered_json::parse(R"([{"role": "assistant", "content": "", "tool_calls": [
      {"function": {"name": "a", "arguments": "{\"x\": [1, 2]}"}}, {"function": {"name": "b", "arguments": ""}},
      {"function": {"name": "c", "arguments": "not json"}}]}])");
  const auto out = with_object_tool_arguments(msgs);
  EXPECT_EQ(out[0]["tool_calls"][0]["function"]["arguments"].dump(), R"({"x":[1,2]})");
  EXPECT_EQ(out[0]["tool_calls"][1]["function"]["arguments"].dump(), "{}");
  EXPECT_EQ(out[0]["tool_calls"][2]["function"]["arguments"], "not json");
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  auto d = msgs;
  d[0]["tool_calls"][0]["function"]["arguments"] = deep;
  EXPECT_EQ(with_object_tool_arguments(d)[0]["tool_calls"][0]["function"]["arguments"], deep);
}

}  // namespace
}  // namespace ft::server
