// --reasoning-format deepseek (server/reasoning.h): a leading <think> block split from the content, as
// a whole and streamed in pieces split at every position.
#include <gtest/gtest.h>

#include "server/reasoning.h"

namespace ft::server {
namespace {

TEST(Reasoning, WholeReplies) {
  ReasoningSplit s = split_reasoning("<think>\nThe user wants a number.\n</think>\n\n42");
  EXPECT_TRUE(s.thought);
  EXPECT_EQ(s.reasoning, "The user wants a number.");
  EXPECT_EQ(s.content, "42");
  s = split_reasoning("\n<think>\n\n</think>\n\nHello there.");  // Qwen3 with thinking off: an empty block
  EXPECT_TRUE(s.thought);
  EXPECT_EQ(s.reasoning, "");
  EXPECT_EQ(s.content, "Hello there.");
  s = split_reasoning("No thoughts, and a <think> tag later.\n");  // not at the start: all content, as written
  EXPECT_FALSE(s.thought);
  EXPECT_EQ(s.content, "No thoughts, and a <think> tag later.\n");
  s = split_reasoning("<think>cut off by max_tokens");  // unterminated: all reasoning
  EXPECT_EQ(s.reasoning, "cut off by max_tokens");
  EXPECT_EQ(s.content, "");
  s = split_reasoning("<thin");  // only a partial tag: content
  EXPECT_FALSE(s.thought);
  EXPECT_EQ(s.content, "<thin");
}

TEST(Reasoning, StreamingAtEverySplitEqualsWhole) {
  for (const std::string& text : {std::string("  <think>\nStep 1. Step 2 </thi nk>.\n</think>\n\nDone </think> here."),
                                 std::string("Plain <think> reply."), std::string("<think>open")}) {
    const ReasoningSplit whole = split_reasoning(text);
    for (size_t a = 0; a <= text.size(); ++a) {
      for (size_t b = a; b <= text.size(); b += 5) {
        ReasoningStream s;
        std::string reasoning, content;
        for (const std::string_view piece : {std::string_view(text).substr(0, a),
                                             std::string_view(text).substr(a, b - a), std::string_view(text).substr(b)}) {
          const ReasoningSplit o = s.push(piece);
          reasoning += o.reasoning, content += o.content;
          EXPECT_EQ(reasoning.find("</think"), std::string::npos) << text << " " << a << " " << b;
        }
        const ReasoningSplit rest = s.finish();
        reasoning += rest.reasoning, content += rest.content;
        if (whole.thought) {  // the stream is untrimmed; the whole reply trims both parts
          auto trim = [](std::string x) {
            x.erase(0, x.find_first_not_of(" \n"));
            x.erase(x.find_last_not_of(" \n") + 1);
            return x;
          };
          EXPECT_EQ(trim(reasoning), whole.reasoning) << text << " " << a << " " << b;
          EXPECT_EQ(trim(content), whole.content) << text << " " << a << " " << b;
        } else {
          EXPECT_EQ(reasoning, "");
          EXPECT_EQ(content, text) << a << " " << b;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ft::server
