// Found by fuzz/reply_stream_fuzz.cpp: the XML-like tool-call formats (Qwen3-Coder, GLM-4.5, MiniMax-M2,
// Gemma 4) build a call's arguments from the reply's raw text, and a value with bytes that are not
// UTF-8 made the JSON serializer throw nlohmann's type_error out of ToolCallStream. Such bytes now
// become U+FFFD in the arguments, whole or streamed.
#include <gtest/gtest.h>

#include <string>

#include "server/tool_calls.h"

namespace ft::server {
namespace {

struct Case {
  ToolCallFormat format;
  std::string reply;  // a call whose city value holds the byte 0xF8 (never valid in UTF-8)
};

TEST(ToolCallsInvalidUtf8, ValueBytesBecomeReplacementCharacters) {
  const Case cases[] = {
      {ToolCallFormat::kQwen3Coder,
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nPa\xF8ris\n</parameter>\n</function>\n</tool_call>"},
      {ToolCallFormat::kGlm45, "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Pa\xF8ris</arg_value>\n</tool_call>"},
      {ToolCallFormat::kMiniMaxM2,
       "<minimax:tool_call>\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Pa\xF8ris</parameter>\n</invoke>\n"
       "</minimax:tool_call>"},
      {ToolCallFormat::kGemma4, "<|tool_call>call:get_weather{city:<|\"|>Pa\xF8ris<|\"|>}<tool_call|>"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(tool_call_format_name(c.format));
    const ToolCallSplit whole = parse_tool_calls(c.reply, c.format);
    ASSERT_EQ(whole.calls.size(), 1u);
    EXPECT_EQ(whole.calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(whole.calls[0].arguments), nlohmann::json::parse("{\"city\": \"Pa\xEF\xBF\xBDris\"}"));
    ToolCallStream stream(c.format);  // one byte at a time: the same call
    ToolCallSplit streamed;
    for (char ch : c.reply) streamed.append(stream.push(std::string_view(&ch, 1)));
    streamed.append(stream.finish());
    ASSERT_EQ(streamed.calls.size(), 1u);
    EXPECT_EQ(streamed.calls[0].arguments, whole.calls[0].arguments);
  }
}

}  // namespace
}  // namespace ft::server
