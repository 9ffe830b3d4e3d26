// Hermes-format tool calls in replies (server/tool_calls.h): whole replies, and the same text streamed
// in pieces split at every position, which must give the same content and calls.
#include <gtest/gtest.h>

#include "server/tool_calls.h"

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
  const std::string text = kTwoCalls;
  const ToolCallSplit whole = parse_tool_calls(text);
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); b += 7) {  // three pieces: [0, a), [a, b), [b, end)
      ToolCallStream s;
      std::string content;
      std::vector<ToolCall> calls;
      for (const std::string_view piece : {std::string_view(text).substr(0, a), std::string_view(text).substr(a, b - a),
                                           std::string_view(text).substr(b)}) {
        ToolCallSplit o = s.push(piece);
        content += o.content;
        for (ToolCall& c : o.calls) calls.push_back(std::move(c));
        // nothing of a tag or a call's body is shown as content
        EXPECT_EQ(content.find("<tool"), std::string::npos) << a << " " << b;
      }
      content += s.finish().content;
      ASSERT_EQ(calls.size(), whole.calls.size()) << a << " " << b;
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(calls[i].name, whole.calls[i].name);
        EXPECT_EQ(calls[i].arguments, whole.calls[i].arguments);
      }
      EXPECT_EQ(content.substr(0, whole.content.size()), whole.content) << a << " " << b;
    }
  }
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
