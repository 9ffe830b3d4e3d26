// Hermes-format tool calls in replies (server/tool_calls.h): whole replies, and the same text streamed
// in pieces split at every position, which must give the same content and calls.
#include <gtest/gtest.h>

#include "server/tool_calls.h"
#include "tool_call_testing.h"

namespace ft::server {
namespace {

const char* kTwoCalls =
    "<think>\nTwo cities.\n</think>\n\nLet me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
    "{\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
    "\"Rome\", \"unit\": \"C\"}}\n</tool_call>";

TEST(ToolCalls, WholeReplies) {
  ToolCallSplit s = parse_tool_calls(kTwoCalls);
  ASSERT_EQ(s.calls.size(), 2u);
  EXPECT_EQ(s.calls[0].name, "get_weather");
  EXPECT_EQ(s.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(s.calls[1].arguments, R"({"city":"Rome","unit":"C"})");
  EXPECT_EQ(s.content, "<think>\nTwo cities.\n</think>\n\nLet me check.");

  s = parse_tool_calls("Just text, <b>with</b> tags and a <tool_ mention.");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "Just text, <b>with</b> tags and a <tool_ mention.");

  // only a call: no content; arguments given as a JSON string are kept as they are; none: {}
  s = parse_tool_calls("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"x\\\": 1}\"}</tool_call>\n");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, R"({"x": 1})");
  EXPECT_EQ(s.content, "");
  s = parse_tool_calls("<tool_call>{\"name\": \"now\"}</tool_call>");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, "{}");

  // not calls: broken JSON, no name, an unterminated block; they stay text
  s = parse_tool_calls("a <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> b");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "a <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> b");
  s = parse_tool_calls("<tool_call>{\"arguments\": {}}</tool_call>");
  EXPECT_TRUE(s.calls.empty());
  s = parse_tool_calls("ok <tool_call>{\"name\": \"f\"");
  EXPECT_TRUE(s.calls.empty());
  EXPECT_EQ(s.content, "ok <tool_call>{\"name\": \"f\"");
}

TEST(ToolCalls, StreamingAtEverySplitEqualsWhole) {
  testing::expect_every_split_equals_whole(kTwoCalls, ToolCallFormat::kHermes, "<tool");
  testing::expect_every_split_equals_whole("a <tool_call>{\"name\": \"f\", \"arguments\": {</tool_call> b <tool_call>{",
                                           ToolCallFormat::kHermes, "");
  // a held partial tag that never completes comes back at the end
  ToolCallStream s;
  EXPECT_EQ(s.push("see <tool_").content, "see ");
  EXPECT_EQ(s.finish().content, "<tool_");
}

TEST(ToolCalls, OpenAiJson) {
  const ToolCall c{"get_weather", R"({"city":"Paris"})"};
  EXPECT_EQ(tool_call_json(c, "call_1").dump(),
            R"({"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}})");
  EXPECT_EQ(tool_call_json(c, "call_2", 0)["index"], 0);
}

}  // namespace
}  // namespace ft::server
