// The tool-call formats of Qwen3-Coder / Qwen3.5, DeepSeek V3 / R1 / V3.1, GLM-4.5+, MiniMax-M2, Kimi-K2
// and Gemma 4 (server/tool_calls_*.cpp): each sample reply is what the real chat template in
// $FT_SHARED_DIR writes for an assistant turn with two calls (checked by rendering it), split whole
// and streamed in every way (reply_split_testing.h); then text around calls, broken and unterminated
// calls, values typed by the tool's schema, and every template's detected format.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "reply_split_testing.h"
#include "server/chat_reply.h"
#include "server/reasoning.h"
#include "server/tool_call_scan.h"
#include "server/tool_calls.h"
#include "test_util.h"
#include "tokenizer/chat_template.h"

namespace ft::server {
namespace {

using ojson = nlohmann::ordered_json;
using testing::expect_streams_like_whole;
using testing::reply_format_for;

std::string real_template(const std::string& file) {
  std::ifstream in(std::filesystem::path(ft::testing::shared_dir()) / "data" / "chat-templates" / file);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/** The conversation each template renders: a question, the assistant's reasoning, text and two calls
 *  (arguments as objects, as the chat routes hand them over), and the first call's result. */
ojson conversation(const std::string& content = "Let me check.") {
  ojson m = ojson::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "", "reasoning_content": "Need the weather.", "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather",
        "arguments": {"city": "Paris", "days": 3, "opts": {"metric": true}}}},
      {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": {"tz": "CET"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])");
  m[1]["content"] = content;
  return m;
}

/** Expects `file` to render the conversation with `before + reply + after` in it: `reply` is then
 *  what the model writes after a prompt that ends with `before`. */
void expect_rendered(const std::string& file, const std::string& before, const std::string& reply,
                     const std::string& after, const std::string& content = "Let me check.") {
  const std::string src = real_template(file);
  ASSERT_FALSE(src.empty()) << "missing " << file << " under " << ft::testing::shared_dir();
  const std::string out = ChatTemplate(src, "<s>", "</s>").render(conversation(content), nullptr, false);
  EXPECT_NE(out.find(before + reply + after), std::string::npos) << file << " renders:\n" << out;
}

const std::string kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "opts": {"type": "object"}}}}},
  {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {
    "tz": {"type": "string"}}}}}])";
const char* kWeatherArgs = R"({"city":"Paris","days":3,"opts":{"metric":true}})";
const char* kTimeArgs = R"({"tz":"CET"})";

/** Expects the two calls of the conversation, `content` and `reasoning`. */
void expect_two_calls(const ChatReply& r, const std::string& content, const std::string& reasoning,
                      const char* weather_args = kWeatherArgs) {
  EXPECT_EQ(r.content, content);
  EXPECT_EQ(r.reasoning, reasoning);
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, weather_args);
  EXPECT_EQ(r.calls[1].name, "get_time");
  EXPECT_EQ(r.calls[1].arguments, kTimeArgs);
}

/** Expects `text` to come back whole as content, with no calls, whole and streamed. */
void expect_text(const std::string& text, const ReplyFormat& f) {
  const ChatReply r = expect_streams_like_whole(text, f, {}, 11);
  EXPECT_TRUE(r.calls.empty()) << text;
  std::string trimmed = text;
  trim_space(trimmed);
  EXPECT_EQ(r.content, trimmed);
}

const std::string kQwenCall =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
    "<parameter=opts>\n{\"metric\": true}\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=get_time>\n"
    "<parameter=tz>\nCET\n</parameter>\n</function>\n</tool_call>";

TEST(ToolCallFormats2, Qwen3Coder) {
  const std::string reply = "Let me check.\n\n" + kQwenCall;
  expect_rendered("Qwen3-Coder.jinja", "<|im_start|>assistant\n", reply, "<|im_end|>");
  const ReplyFormat f = reply_format_for(ToolCallFormat::kQwen3Coder, kTools);
  expect_two_calls(expect_streams_like_whole(reply, f, {"<tool_call", "<function", "<parameter"}), "Let me check.", "");
  // Without the tools' schemas every value is a string.
  const ChatReply untyped = split_chat_reply(reply, reply_format_for(ToolCallFormat::kQwen3Coder));
  expect_two_calls(untyped, "Let me check.", "", R"({"city":"Paris","days":"3","opts":"{\"metric\": true}"})");

  // Broken: no </function>, a stray tag, no name; an unterminated block: text as it was.
  for (const std::string bad :
       {"a <tool_call>\n<function=f>\n<parameter=x>\n1\n</parameter>\n</tool_call> b",
        "<tool_call>\n<function=f>\n<oops>\n</function>\n</tool_call>", "<tool_call>\n<function=>\n</function>\n</tool_call>",
        "Sure. <tool_call>\n<function=get_weather>\n<parameter=city>\nPar"})
    expect_text(bad, f);
  // A block the reply ends in after its </function> is a call; text after a call is content.
  const ChatReply cut = expect_streams_like_whole(
      "<tool_call>\n<function=get_time>\n<parameter=tz>\nCET\n</parameter>\n</function>\n", f);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, kTimeArgs);
  const ChatReply after = expect_streams_like_whole(kQwenCall + "\nDone.", f);
  EXPECT_EQ(after.content, "Done.");
  EXPECT_EQ(after.calls.size(), 2u);
}

TEST(ToolCallFormats2, Qwen35ThinksThenCalls) {
  // Qwen3.5's prompt ends inside <think>: the reply starts in the reasoning.
  const std::string reply = "Need the weather.\n</think>\n\nLet me check.\n\n" + kQwenCall;
  expect_rendered("Qwen3.5-4B.jinja", "<|im_start|>assistant\n<think>\n", reply, "<|im_end|>");
  const ReplyFormat f = reply_format_for(ToolCallFormat::kQwen3Coder, kTools, ReasoningFormat::kThink, true);
  const ChatReply r = expect_streams_like_whole(reply, f, {"<tool_call", "</think", "<parameter"});
  expect_two_calls(r, "Let me check.", "Need the weather.");
  EXPECT_TRUE(r.thought);
  // The same calls with no text before them (the template then writes the block at once).
  expect_rendered("Qwen3.5-4B.jinja", "<|im_start|>assistant\n<think>\n", "Need the weather.\n</think>\n\n" + kQwenCall,
                  "<|im_end|>", "");
}

const std::string kDeepSeekV31Calls =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\", \"days\": 3, \"opts\": "
    "{\"metric\": true}}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": \"CET\"}<｜tool▁call▁end｜>"
    "<｜tool▁calls▁end｜>";
const std::string kDeepSeekV3Calls =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": \"Paris\", \"days\": "
    "3, \"opts\": {\"metric\": true}}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n"
    "{\"tz\": \"CET\"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

TEST(ToolCallFormats2, DeepSeekV31) {
  const std::string reply = "Let me check." + kDeepSeekV31Calls;
  expect_rendered("deepseek-ai-DeepSeek-V3.1.jinja", "<｜Assistant｜><think></think>", reply, "<｜end▁of▁sentence｜>");
  const std::vector<std::string> hidden = {"<｜tool", "get_weather"};
  expect_two_calls(expect_streams_like_whole(reply, reply_format_for(ToolCallFormat::kDeepSeekV31), hidden),
                   "Let me check.", "");
  // Thinking on: the prompt ends with <think>, so the reply starts in the reasoning.
  const ReplyFormat thinking = reply_format_for(ToolCallFormat::kDeepSeekV31, "[]", ReasoningFormat::kThink, true);
  expect_two_calls(expect_streams_like_whole("Need the weather.</think>" + reply, thinking, hidden), "Let me check.",
                   "Need the weather.");
  // Either form is read in either format.
  expect_two_calls(split_chat_reply(kDeepSeekV3Calls, reply_format_for(ToolCallFormat::kDeepSeekV31)), "", "");

  const ReplyFormat f = reply_format_for(ToolCallFormat::kDeepSeekV31);
  for (const std::string bad :
       {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>{\"x\": }<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "a <｜tool▁calls▁begin｜>junk<｜tool▁calls▁end｜> b", "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>[1]<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": "})
    expect_text(bad, f);
  // The reply ended before <｜tool▁calls▁end｜>, after a whole call: that call.
  const ChatReply cut = expect_streams_like_whole(
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": \"CET\"}<｜tool▁call▁end｜>", f);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, kTimeArgs);
}

TEST(ToolCallFormats2, DeepSeekV3AndR1) {
  expect_rendered("llama-cpp-deepseek-r1.jinja", "<｜Assistant｜>", kDeepSeekV3Calls, "<｜end▁of▁sentence｜>", "");
  // R1's prompt ends with <think>\n: reasoning, then the calls.
  const ReplyFormat f = reply_format_for(ToolCallFormat::kDeepSeekV3, "[]", ReasoningFormat::kThink, true);
  const ChatReply r = expect_streams_like_whole("Need the weather.\n</think>\n\n" + kDeepSeekV3Calls, f, {"<｜tool", "```"});
  expect_two_calls(r, "", "Need the weather.");
  for (const std::string bad :
       {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"x\": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f {}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"})
    expect_text(bad, reply_format_for(ToolCallFormat::kDeepSeekV3));
}

const std::string kGlm46Calls =
    "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>3"
    "</arg_value>\n<arg_key>opts</arg_key>\n<arg_value>{\"metric\": true}</arg_value>\n</tool_call>\n<tool_call>get_time\n"
    "<arg_key>tz</arg_key>\n<arg_value>CET</arg_value>\n</tool_call>";

TEST(ToolCallFormats2, Glm45) {
  // GLM-4.6: the model writes its own <think> block (the prompt ends at <|assistant|>).
  const std::string reply46 = "\n<think>Need the weather.</think>\nLet me check.\n" + kGlm46Calls;
  expect_rendered("GLM-4.6.jinja", "<|assistant|>", reply46, "<|observation|>");
  const ReplyFormat f = reply_format_for(ToolCallFormat::kGlm45, kTools, ReasoningFormat::kThink);
  const std::vector<std::string> hidden = {"<tool_call", "<arg_", "</think"};
  expect_two_calls(expect_streams_like_whole(reply46, f, hidden), "Let me check.", "Need the weather.");
  // GLM-4.7: one line, and the prompt ends with <think>.
  const std::string reply47 =
      "Need the weather.</think>Let me check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>"
      "<arg_key>days</arg_key><arg_value>3</arg_value><arg_key>opts</arg_key><arg_value>{\"metric\": true}</arg_value>"
      "</tool_call><tool_call>get_time<arg_key>tz</arg_key><arg_value>CET</arg_value></tool_call>";
  expect_rendered("GLM-4.7-Flash.jinja", "<|assistant|><think>", reply47, "<|observation|>");
  const ReplyFormat f47 = reply_format_for(ToolCallFormat::kGlm45, kTools, ReasoningFormat::kThink, true);
  expect_two_calls(expect_streams_like_whole(reply47, f47, hidden), "Let me check.", "Need the weather.");

  const ReplyFormat plain = reply_format_for(ToolCallFormat::kGlm45, kTools);
  for (const std::string bad : {"<tool_call>f\n<arg_key>x</arg_key>\n</tool_call>", "<tool_call>{\"name\": \"f\"}</tool_call>",
                                "<tool_call>f\n<arg_value>1</arg_value>\n</tool_call>", "<tool_call>get_time\n<arg_key>tz"})
    expect_text(bad, plain);
  const ChatReply none = expect_streams_like_whole("<tool_call>get_time\n</tool_call>", plain);  // no arguments
  ASSERT_EQ(none.calls.size(), 1u);
  EXPECT_EQ(none.calls[0].arguments, "{}");
}

TEST(ToolCallFormats2, MiniMaxM2) {
  const std::string reply =
      "Need the weather.\n</think>\n\nLet me check.\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter "
      "name=\"city\">Paris</parameter>\n<parameter name=\"days\">3</parameter>\n<parameter name=\"opts\">{\"metric\": "
      "true}</parameter>\n</invoke>\n<invoke name=\"get_time\">\n<parameter name=\"tz\">CET</parameter>\n</invoke>\n"
      "</minimax:tool_call>";
  expect_rendered("MiniMax-M2.jinja", "]~b]ai\n<think>\n", reply, "[e~[");
  const ReplyFormat f = reply_format_for(ToolCallFormat::kMiniMaxM2, kTools, ReasoningFormat::kThink, true);
  expect_two_calls(expect_streams_like_whole(reply, f, {"<minimax", "<invoke", "</think"}), "Let me check.",
                   "Need the weather.");
  const ReplyFormat plain = reply_format_for(ToolCallFormat::kMiniMaxM2, kTools);
  for (const std::string bad :
       {"<minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"x\">1</parameter>\n</minimax:tool_call>",
        "<minimax:tool_call>\nhello\n</minimax:tool_call>", "Ok <minimax:tool_call>\n<invoke name=\"get_time\">\n<param"})
    expect_text(bad, plain);
  const ChatReply cut = expect_streams_like_whole(
      "<minimax:tool_call>\n<invoke name=\"get_time\">\n<parameter name=\"tz\">CET</parameter>\n</invoke>\n", plain);
  ASSERT_EQ(cut.calls.size(), 1u);
  EXPECT_EQ(cut.calls[0].arguments, kTimeArgs);
}

TEST(ToolCallFormats2, DeepSeekV32Dsml) {
  const std::string reply =
      "Let me check.\n\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
      "string=\"true\">Paris</｜DSML｜parameter>\n<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"opts\" string=\"false\">{\"metric\": true}</｜DSML｜parameter>\n</｜DSML｜invoke>\n"
      "<｜DSML｜invoke name=\"get_time\">\n<｜DSML｜parameter name=\"tz\" string=\"true\">CET</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜function_calls>";
  // Thinking off: the prompt ends with </think> (the template writes <think></think> as "</think>").
  expect_rendered("deepseek-ai-DeepSeek-V3.2.jinja", "<｜Assistant｜></think>", reply, "<｜end▁of▁sentence｜>");
  // The string attribute types values without the tools' schemas.
  const ReplyFormat f = reply_format_for(ToolCallFormat::kDeepSeekV32);
  expect_two_calls(expect_streams_like_whole(reply, f, {"DSML", "<｜"}), "Let me check.", "");
  const ReplyFormat thinking = reply_format_for(ToolCallFormat::kDeepSeekV32, "[]", ReasoningFormat::kThink, true);
  expect_two_calls(expect_streams_like_whole("Need the weather.</think>" + reply, thinking, {"DSML"}), "Let me check.",
                   "Need the weather.");
  for (const std::string bad :
       {"<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"f\">\n</｜DSML｜function_calls>",
        "<｜DSML｜function_calls>\n<｜DSML｜invoke nom=\"f\">\n</｜DSML｜invoke>\n</｜DSML｜function_calls>",
        "Ok<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_time\">\n<｜DSML｜param"})
    expect_text(bad, f);
}

const std::string kKimiCalls =
    "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": "
    "\"Paris\", \"days\": 3, \"opts\": {\"metric\": true}}<|tool_call_end|><|tool_call_begin|>functions.get_time:1"
    "<|tool_call_argument_begin|>{\"tz\": \"CET\"}<|tool_call_end|><|tool_calls_section_end|>";

TEST(ToolCallFormats2, KimiK2) {
  const std::string reply = "Let me check." + kKimiCalls;
  expect_rendered("moonshotai-Kimi-K2.jinja", "<|im_assistant|>assistant<|im_middle|>", reply, "<|im_end|>");
  const std::vector<std::string> hidden = {"<|tool", "functions."};
  expect_two_calls(expect_streams_like_whole(reply, reply_format_for(ToolCallFormat::kKimiK2), hidden), "Let me check.", "");
  // Kimi-K2-Thinking writes its own <think> block first (its template puts <think>...</think> before
  // the content of the turn).
  const ReplyFormat thinking = reply_format_for(ToolCallFormat::kKimiK2, "[]", ReasoningFormat::kThink);
  expect_two_calls(expect_streams_like_whole("<think>Need the weather.</think>" + reply, thinking, hidden), "Let me check.",
                   "Need the weather.");
  const ReplyFormat f = reply_format_for(ToolCallFormat::kKimiK2);
  for (const std::string bad :
       {"<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{x}<|tool_call_end|>"
        "<|tool_calls_section_end|>",
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_end|><|tool_calls_section_end|>",
        "Hm <|tool_calls_section_begin|><|tool_call_begin|>functions.get_time:0<|tool_call_argument_begin|>{\"tz\""})
    expect_text(bad, f);
}

TEST(ToolCallFormats2, Gemma4) {
  const std::string calls =
      "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,days:3,opts:{metric:true}}<tool_call|><|tool_call>call:"
      "get_time{tz:<|\"|>CET<|\"|>}<tool_call|>";
  const std::string reply = "<|channel>thought\nNeed the weather.\n<channel|>" + calls;
  expect_rendered("google-gemma-4-31B-it.jinja", "<|turn>model\n", reply, "<|tool_response>");
  const ReplyFormat f = reply_format_for(ToolCallFormat::kGemma4, kTools, ReasoningFormat::kGemma4);
  expect_two_calls(expect_streams_like_whole(reply, f, {"<|tool_call", "call:", "<|channel", "<channel|"}), "",
                   "Need the weather.");
  // Every value type of the template's format_argument; text before the call.
  const ChatReply all = expect_streams_like_whole(
      "Sure. <|tool_call>call:f{a:<|\"|>x, \"y\": {z}<|\"|>,b:-1.5,c:false,d:null,e:[1,<|\"|>t<|\"|>,{k:true}],g:{}}"
      "<tool_call|>",
      reply_format_for(ToolCallFormat::kGemma4));
  EXPECT_EQ(all.content, "Sure.");
  ASSERT_EQ(all.calls.size(), 1u);
  EXPECT_EQ(all.calls[0].arguments, R"({"a":"x, \"y\": {z}","b":-1.5,"c":false,"d":null,"e":[1,"t",{"k":true}],"g":{}})");
  for (const std::string bad : {"<|tool_call>call:f{a:<|\"|>x}<tool_call|>", "<|tool_call>f{a:1}<tool_call|>",
                                "<|tool_call>call:f{a:1}}<tool_call|>", "<|tool_call>call:f{a:1,"})
    expect_text(bad, reply_format_for(ToolCallFormat::kGemma4));
}

TEST(ToolCallFormats2, ValuesTypedBySchema) {
  const ToolSchemas s = tool_schemas(ojson::parse(R"([{"type": "function", "function": {"name": "f", "parameters": {
      "type": "object", "properties": {"s": {"type": "string"}, "i": {"type": "integer"}, "n": {"type": "number"},
      "b": {"type": "boolean"}, "o": {"type": "object"}, "a": {"type": "array"}, "ns": {"type": ["string", "null"]},
      "u": {"anyOf": [{"type": "integer"}, {"type": "array"}]}}}}}])"));
  const auto t = [&](const char* key, const char* text) { return typed_argument(s, "f", key, text).dump(); };
  EXPECT_EQ(t("s", "42"), "\"42\"");
  EXPECT_EQ(t("i", "42"), "42");
  EXPECT_EQ(t("i", "4.5"), "\"4.5\"");  // not an integer: the text
  EXPECT_EQ(t("n", " 4.5 "), "4.5");
  EXPECT_EQ(t("b", "True"), "true");    // Jinja's `string` of a boolean
  EXPECT_EQ(t("b", "yes"), "\"yes\"");
  EXPECT_EQ(t("o", "{\"k\": [1]}"), R"({"k":[1]})");
  EXPECT_EQ(t("o", "[1]"), "\"[1]\"");
  EXPECT_EQ(t("a", "[1, \"x\"]"), R"([1,"x"])");
  EXPECT_EQ(t("ns", "null"), "null");
  EXPECT_EQ(t("ns", "nil"), "\"nil\"");
  EXPECT_EQ(t("u", "[2]"), "[2]");
  EXPECT_EQ(t("u", "7"), "7");
  EXPECT_EQ(t("unknown", "7"), "\"7\"");
  EXPECT_EQ(typed_argument(s, "g", "i", "7").dump(), "\"7\"");  // an unknown tool
}

TEST(ToolCallFormats2, DetectedFromEveryRealTemplate) {
  // Every template in the folder: its tool-call and reasoning formats (a new file must be added here).
  const std::map<std::string, std::pair<const char*, const char*>> want = {
      {"Apertus-8B-Instruct.jinja", {"hermes", "none"}},
      {"Apriel-1.6-15b-Thinker-fixed.jinja", {"hermes", "none"}},
      {"Bielik-11B-v3.0-Instruct.jinja", {"hermes", "deepseek_r1"}},
      {"ByteDance-Seed-OSS.jinja", {"hermes", "none"}},
      {"Cohere2MoE.jinja", {"hermes", "none"}},
      {"CohereForAI-c4ai-command-r-plus-tool_use.jinja", {"hermes", "none"}},
      {"CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", {"hermes", "none"}},
      {"GLM-4.6.jinja", {"glm45", "deepseek_r1"}},
      {"GLM-4.7-Flash.jinja", {"glm45", "deepseek_r1"}},
      {"GigaChat3-10B-A1.8B.jinja", {"hermes", "none"}},
      {"GigaChat3.1-10B-A1.8B.jinja", {"hermes", "none"}},
      {"HuggingFaceTB-SmolLM3-3B.jinja", {"hermes", "deepseek_r1"}},
      {"Kimi-K2-Instruct.jinja", {"kimi_k2", "none"}},
      {"Kimi-K2-Thinking.jinja", {"kimi_k2", "deepseek_r1"}},
      {"LFM2-8B-A1B.jinja", {"hermes", "none"}},
      {"LFM2.5-8B-A1B.jinja", {"hermes", "deepseek_r1"}},
      {"LFM2.5-Instruct.jinja", {"hermes", "deepseek_r1"}},
      {"MiMo-VL.jinja", {"hermes", "none"}},
      {"MiniMax-M2.jinja", {"minimax_m2", "deepseek_r1"}},
      {"Mistral-Small-3.2-24B-Instruct-2506.jinja", {"mistral", "none"}},
      {"NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.jinja", {"qwen3_coder", "deepseek_r1"}},
      {"NVIDIA-Nemotron-Nano-v2.jinja", {"hermes", "deepseek_r1"}},
      {"NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja", {"hermes", "none"}},
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", {"hermes", "none"}},
      {"Qwen-QwQ-32B.jinja", {"hermes", "deepseek_r1"}},
      {"Qwen-Qwen2.5-7B-Instruct.jinja", {"hermes", "none"}},
      {"Qwen-Qwen3-0.6B.jinja", {"hermes", "deepseek_r1"}},
      {"Qwen3-Coder.jinja", {"qwen3_coder", "none"}},
      {"Qwen3.5-4B.jinja", {"qwen3_coder", "deepseek_r1"}},
      {"Reka-Edge.jinja", {"hermes", "deepseek_r1"}},
      {"StepFun3.5-Flash.jinja", {"qwen3_coder", "deepseek_r1"}},
      {"deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja", {"deepseek_v3", "deepseek_r1"}},
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", {"deepseek_v3", "deepseek_r1"}},
      {"deepseek-ai-DeepSeek-V3.1.jinja", {"deepseek_v31", "deepseek_r1"}},
      {"deepseek-ai-DeepSeek-V3.2.jinja", {"deepseek_v32", "deepseek_r1"}},
      {"fireworks-ai-llama-3-firefunction-v2.jinja", {"hermes", "none"}},
      {"google-gemma-2-2b-it.jinja", {"hermes", "none"}},
      {"google-gemma-4-31B-it-interleaved.jinja", {"gemma4", "gemma4"}},
      {"google-gemma-4-31B-it.jinja", {"gemma4", "gemma4"}},
      {"ibm-granite-granite-3.3-2B-Instruct.jinja", {"hermes", "deepseek_r1"}},
      {"ibm-granite-granite-4.0.jinja", {"hermes", "none"}},
      {"ibm-granite-granite-4.1.jinja", {"hermes", "none"}},
      {"llama-cpp-deepseek-r1.jinja", {"deepseek_v3", "deepseek_r1"}},
      {"llama-cpp-rwkv-world.jinja", {"hermes", "deepseek_r1"}},
      {"meetkai-functionary-medium-v3.1.jinja", {"llama3_json", "none"}},
      {"meetkai-functionary-medium-v3.2.jinja", {"hermes", "none"}},
      {"meta-llama-Llama-3.1-8B-Instruct.jinja", {"llama3_json", "none"}},
      {"meta-llama-Llama-3.2-3B-Instruct.jinja", {"llama3_json", "none"}},
      {"meta-llama-Llama-3.3-70B-Instruct.jinja", {"llama3_json", "none"}},
      {"microsoft-Phi-3.5-mini-instruct.jinja", {"hermes", "none"}},
      {"mistralai-Ministral-3-14B-Reasoning-2512.jinja", {"mistral", "none"}},
      {"mistralai-Mistral-Nemo-Instruct-2407.jinja", {"mistral", "none"}},
      {"moonshotai-Kimi-K2.jinja", {"kimi_k2", "none"}},
      {"openai-gpt-oss-120b.jinja", {"harmony", "none"}},
      {"stepfun-ai-Step-3.5-Flash.jinja", {"qwen3_coder", "deepseek_r1"}},
      {"unsloth-Apriel-1.5.jinja", {"hermes", "none"}},
      {"unsloth-mistral-Devstral-Small-2507.jinja", {"mistral", "none"}},
      {"upstage-Solar-Open-100B.jinja", {"hermes", "none"}},
  };
  size_t seen = 0;
  const auto dir = std::filesystem::path(ft::testing::shared_dir()) / "data" / "chat-templates";
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".jinja") continue;
    const std::string file = e.path().filename().string();
    const auto w = want.find(file);
    ASSERT_NE(w, want.end()) << "no expected formats for " << file;
    const std::string src = real_template(file);
    EXPECT_STREQ(tool_call_format_name(detect_tool_call_format(src)), w->second.first) << file;
    EXPECT_STREQ(reasoning_format_name(detect_reasoning_format(src)), w->second.second) << file;
    ++seen;
  }
  EXPECT_EQ(seen, want.size());
}

TEST(ToolCallFormats2, NamesRoundTrip) {
  for (const char* name : {"hermes", "llama3_json", "mistral", "harmony", "qwen3_coder", "deepseek_v3", "deepseek_v31",
                           "deepseek_v32", "glm45", "minimax_m2", "kimi_k2", "gemma4"}) {
    const std::optional<ToolCallFormat> f = tool_call_format_from_name(name);
    ASSERT_TRUE(f.has_value()) << name;
    EXPECT_STREQ(tool_call_format_name(*f), name);
    EXPECT_NE(tool_call_format_names().find(name), std::string::npos);
  }
  EXPECT_EQ(tool_call_format_from_name("openai"), ToolCallFormat::kHarmony);
  EXPECT_FALSE(tool_call_format_from_name("qwen4").has_value());
  EXPECT_EQ(reasoning_format_from_name("qwen3"), ReasoningFormat::kThink);
  EXPECT_EQ(reasoning_format_from_name("none"), ReasoningFormat::kNone);
  EXPECT_EQ(reasoning_format_from_name("gemma4"), ReasoningFormat::kGemma4);
  EXPECT_FALSE(reasoning_format_from_name("think").has_value());
}

}  // namespace
}  // namespace ft::server
