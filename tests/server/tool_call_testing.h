#pragma once
// Checks shared by the tool-call tests: a reply streamed in pieces, split at every position, must give
// the same content, reasoning and calls as the whole reply.
#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "server/tag_scan.h"
#include "server/tool_calls.h"

namespace ft::server::testing {

/** Streams `text` through ToolCallStream(format) in three pieces [0, a), [a, b), [b, end) for every a
 *  (b in steps of `b_step`), and one byte at a time, and expects parse_tool_calls' split; `hidden`
 *  (when not empty) must never show up in the streamed content (a call's marker or body). */
inline void expect_every_split_equals_whole(const std::string& text, ToolCallFormat format, std::string_view hidden,
                                            size_t b_step = 7) {
  const ToolCallSplit whole = parse_tool_calls(text, format);
  const std::string_view t(text);
  std::vector<std::vector<std::string_view>> splits;
  for (size_t a = 0; a <= text.size(); ++a)
    for (size_t b = a; b <= text.size(); b += (b == text.size() ? 1 : std::min(b_step, text.size() - b)))
      splits.push_back({t.substr(0, a), t.substr(a, b - a), t.substr(b)});
  splits.emplace_back();
  for (size_t i = 0; i < text.size(); ++i) splits.back().push_back(t.substr(i, 1));
  for (size_t n = 0; n < splits.size(); ++n) {
    const size_t a = n, b = splits[n].size();  // for the messages: which split failed
    {
      ToolCallStream s(format);
      ToolCallSplit got;
      for (const std::string_view piece : splits[n]) {
        got.append(s.push(piece));
        if (!hidden.empty()) {
          EXPECT_EQ(got.content.find(hidden), std::string::npos) << a << " " << b;
        }
      }
      got.append(s.finish());
      trim_space(got.content);
      trim_space(got.reasoning);
      EXPECT_EQ(got.content, whole.content) << a << " " << b;
      EXPECT_EQ(got.reasoning, whole.reasoning) << a << " " << b;
      ASSERT_EQ(got.calls.size(), whole.calls.size()) << a << " " << b;
      for (size_t i = 0; i < got.calls.size(); ++i) {
        EXPECT_EQ(got.calls[i].name, whole.calls[i].name) << a << " " << b;
        EXPECT_EQ(got.calls[i].arguments, whole.calls[i].arguments) << a << " " << b;
      }
    }
  }
}

}  // namespace ft::server::testing
