// A reply cut by max_tokens inside a tool call (finish_reason "length"): in every format, the open
// call's markup and partial arguments never reach the content; calls complete before the cut are
// kept; streamed in any pieces it gives what the whole reply gives. A reply that ended on its own
// keeps an unterminated call as the text it was.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/chat_reply.h"
#include "server/tag_scan.h"
#include "server/tool_calls.h"

namespace ft::server {
namespace {

struct CutCase {
  ToolCallFormat format;
  std::string before;     // content before the calls (trimmed)
  std::string reasoning;  // reasoning before the calls (kHarmony's analysis channel)
  std::string calls;      // get_weather {"city": "Paris"} then get_time {"tz": "CET"}
};

std::vector<CutCase> cases() {
  return {
      {ToolCallFormat::kHermes, "Let me check.", "",
       "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n"
       "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call>"},
      {ToolCallFormat::kLlama3, "", "",
       "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}; {\"name\": \"get_time\", \"parameters\": "
       "{\"tz\": \"CET\"}}"},
      {ToolCallFormat::kMistral, "Let me check.", "",
       "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", "
       "\"arguments\": {\"tz\": \"CET\"}}]"},
      {ToolCallFormat::kHarmony, "", "Need the weather.",
       "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": "
       "\"Paris\"}<|call|><|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json<|message|>"
       "{\"tz\": \"CET\"}<|call|>"},
      {ToolCallFormat::kQwen3Coder, "Let me check.", "",
       "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>\n"
       "<tool_call>\n<function=get_time>\n<parameter=tz>\nCET\n</parameter>\n</function>\n</tool_call>"},
      {ToolCallFormat::kDeepSeekV31, "Let me check.", "",
       "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜>"
       "<｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": \"CET\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"},
      {ToolCallFormat::kGlm45, "Let me check.", "",
       "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>\n<tool_call>"
       "get_time\n<arg_key>tz</arg_key>\n<arg_value>CET</arg_value>\n</tool_call>"},
      {ToolCallFormat::kMiniMaxM2, "Let me check.", "",
       "\n<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris</parameter>\n</invoke>\n"
       "<invoke name=\"get_time\">\n<parameter name=\"tz\">CET</parameter>\n</invoke>\n</minimax:tool_call>"},
      {ToolCallFormat::kDeepSeekV32, "Let me check.", "",
       "\n<｜DSML｜function_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
       "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"get_time\">\n"
       "<｜DSML｜parameter name=\"tz\" string=\"true\">CET</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls>"},
      {ToolCallFormat::kKimiK2, "Let me check.", "",
       "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": "
       "\"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{\"tz\": "
       "\"CET\"}<|tool_call_end|><|tool_calls_section_end|>"},
      {ToolCallFormat::kGemma4, "Let me check.", "",
       "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_call>call:get_time{tz:<|\"|>CET<|\"|>}"
       "<tool_call|>"},
  };
}

std::string prefix_text(const CutCase& c) {
  if (c.format == ToolCallFormat::kHarmony)
    return "<|channel|>analysis<|message|>" + c.reasoning + "<|end|>";
  return c.before;
}

const std::vector<ToolCall> kExpected = {{"get_weather", R"({"city":"Paris"})"}, {"get_time", R"({"tz":"CET"})"}};

/** The streamed split of `text` in pieces of `step` bytes, finished as cut. */
ToolCallSplit streamed_cut(const std::string& text, ToolCallFormat f, size_t step) {
  ToolCallStream s(f);
  ToolCallSplit got;
  for (size_t i = 0; i < text.size(); i += step) got.append(s.push(std::string_view(text).substr(i, step)));
  got.append(s.finish(/*cut=*/true));
  trim_space(got.content);
  trim_space(got.reasoning);
  return got;
}

TEST(ToolCallsCut, AnOpenCallNeverReachesTheContent) {
  for (const CutCase& c : cases()) {
    const std::string head = prefix_text(c);
    const std::string whole = head + c.calls;
    // The uncut reply has both calls (the samples are right).
    const ToolCallSplit full = parse_tool_calls(whole, c.format);
    ASSERT_EQ(full.calls.size(), 2u) << tool_call_format_name(c.format);
    for (size_t n = head.size() + 1; n < whole.size(); ++n) {
      const std::string text = whole.substr(0, n);
      const ToolCallSplit got = parse_tool_calls(text, c.format, {}, /*cut=*/true);
      const std::string where = std::string(tool_call_format_name(c.format)) + " cut at " + std::to_string(n);
      EXPECT_EQ(got.content, c.before) << where;
      EXPECT_EQ(got.reasoning, c.reasoning) << where;
      ASSERT_LE(got.calls.size(), 2u) << where;
      for (size_t i = 0; i < got.calls.size(); ++i) {
        EXPECT_EQ(got.calls[i].name, kExpected[i].name) << where;
        EXPECT_EQ(got.calls[i].arguments, kExpected[i].arguments) << where;
      }
      for (size_t step : {size_t{1}, size_t{5}}) {
        const ToolCallSplit s = streamed_cut(text, c.format, step);
        EXPECT_EQ(s.content, got.content) << where << " step " << step;
        EXPECT_EQ(s.reasoning, got.reasoning) << where << " step " << step;
        EXPECT_EQ(s.calls.size(), got.calls.size()) << where << " step " << step;
      }
    }
  }
}

TEST(ToolCallsCut, CallsCompleteBeforeTheCutAreKept) {
  // Cut inside the second call's arguments: the first is whole in every format but the
  // single-section ones whose section parser needs every call whole (then none is kept, and still
  // no markup is shown).
  const std::string hermes = "Ok.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
                             "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"argu";
  const ToolCallSplit h = parse_tool_calls(hermes, ToolCallFormat::kHermes, {}, /*cut=*/true);
  EXPECT_EQ(h.content, "Ok.");
  ASSERT_EQ(h.calls.size(), 1u);
  EXPECT_EQ(h.calls[0].name, "get_weather");
  // A body whose JSON is whole, only the close tag missing, is a call.
  const ToolCallSplit whole_body =
      parse_tool_calls("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_",
                       ToolCallFormat::kHermes, {}, /*cut=*/true);
  EXPECT_EQ(whole_body.content, "");
  ASSERT_EQ(whole_body.calls.size(), 1u);
  EXPECT_EQ(whole_body.calls[0].arguments, R"({"tz":"CET"})");
}

TEST(ToolCallsCut, AReplyThatEndedOnItsOwnKeepsAnUnterminatedCallAsText) {
  const std::string text = "Let me check.\n<tool_call>\n{\"name\": \"get_ti";
  EXPECT_EQ(parse_tool_calls(text, ToolCallFormat::kHermes).content, text);
  EXPECT_EQ(parse_tool_calls(text, ToolCallFormat::kHermes, {}, /*cut=*/true).content, "Let me check.");
}

TEST(ToolCallsCut, ChatReplyPassesTheCutThrough) {
  ReplyFormat f;
  f.reasoning = ReasoningFormat::kThink;
  f.tool_calls = true;
  const std::string text = "<think>Need it.</think>Let me check.\n<tool_call>\n{\"name\": \"get_ti";
  const ChatReply cut = split_chat_reply(text, f, /*cut=*/true);
  EXPECT_EQ(cut.reasoning, "Need it.");
  EXPECT_EQ(cut.content, "Let me check.");
  EXPECT_TRUE(cut.calls.empty());
  ChatReplyStream s(f);
  ChatReplyPiece got;
  for (char ch : text) {
    ChatReplyPiece p = s.push(std::string_view(&ch, 1));
    got.reasoning += p.reasoning;
    got.content += p.content;
  }
  ChatReplyPiece rest = s.finish(/*cut=*/true);
  EXPECT_EQ(got.reasoning + rest.reasoning, "Need it.");
  EXPECT_EQ(got.content + rest.content, "Let me check.");
  EXPECT_EQ(split_chat_reply(text, f).content, "Let me check.\n<tool_call>\n{\"name\": \"get_ti");
}

}  // namespace
}  // namespace ft::server
