#pragma once
// Checks shared by the reply-format tests: a reply streamed through ChatReplyStream in pieces, split
// at every byte, at every pair of positions and at random, must give exactly what split_chat_reply
// gives for the whole reply (content, reasoning, calls; whitespace included), and no piece of markup
// may ever show in the streamed content.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "server/chat_reply.h"

namespace ft::server::testing {

/** Streams `text` in `pieces` and expects `whole`; `hidden` must never be in the content so far. */
inline void expect_pieces_equal_whole(const std::vector<std::string_view>& pieces, const ReplyFormat& f,
                                      const ChatReply& whole, const std::vector<std::string>& hidden,
                                      const std::string& where) {
  ChatReplyStream s(f);
  ChatReply got;
  auto add = [&](ChatReplyPiece p) {
    got.content += p.content;
    got.reasoning += p.reasoning;
    for (ToolCall& c : p.calls) got.calls.push_back(std::move(c));
    for (const std::string& h : hidden) ASSERT_EQ(got.content.find(h), std::string::npos) << where << ": " << h;
  };
  for (std::string_view piece : pieces) add(s.push(piece));
  add(s.finish());
  EXPECT_EQ(got.content, whole.content) << where;
  EXPECT_EQ(got.reasoning, whole.reasoning) << where;
  EXPECT_EQ(s.thought(), whole.thought) << where;
  ASSERT_EQ(got.calls.size(), whole.calls.size()) << where;
  for (size_t i = 0; i < got.calls.size(); ++i) {
    EXPECT_EQ(got.calls[i].name, whole.calls[i].name) << where;
    EXPECT_EQ(got.calls[i].arguments, whole.calls[i].arguments) << where;
  }
}

/** split_chat_reply(text, f), after checking that streaming `text` in any pieces gives the same:
 *  two pieces split at every position, three pieces [0, a), [a, b), [b, end) for every a with b in
 *  steps of `b_step`, one byte at a time, and 50 random splits into 2 to 12 pieces (fixed seed). */
inline ChatReply expect_streams_like_whole(const std::string& text, const ReplyFormat& f,
                                           const std::vector<std::string>& hidden = {}, size_t b_step = 5) {
  const ChatReply whole = split_chat_reply(text, f);
  const std::string_view t(text);
  for (size_t a = 0; a <= t.size(); ++a) {
    for (size_t b = a; b <= t.size(); b += b_step) {
      expect_pieces_equal_whole({t.substr(0, a), t.substr(a, b - a), t.substr(b)}, f, whole, hidden,
                                "split at " + std::to_string(a) + ", " + std::to_string(b));
      if (::testing::Test::HasFatalFailure()) return whole;
    }
  }
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < t.size(); ++i) bytes.push_back(t.substr(i, 1));
  expect_pieces_equal_whole(bytes, f, whole, hidden, "byte by byte");
  std::mt19937 rng(38);
  for (int n = 0; n < 50; ++n) {
    std::vector<size_t> cuts = {0, t.size()};
    const int k = 1 + static_cast<int>(rng() % 11);
    for (int i = 0; i < k; ++i) cuts.push_back(t.empty() ? 0 : rng() % t.size());
    std::sort(cuts.begin(), cuts.end());
    std::vector<std::string_view> pieces;
    for (size_t i = 0; i + 1 < cuts.size(); ++i) pieces.push_back(t.substr(cuts[i], cuts[i + 1] - cuts[i]));
    expect_pieces_equal_whole(pieces, f, whole, hidden, "random split " + std::to_string(n));
  }
  return whole;
}

/** A ReplyFormat for `tool_format` with the schemas of `tools` (OpenAI's tools array as JSON text),
 *  reasoning in `reasoning` starting inside the block when `reasoning_open`. */
inline ReplyFormat reply_format_for(ToolCallFormat tool_format, const std::string& tools = "[]",
                                    ReasoningFormat reasoning = ReasoningFormat::kNone, bool reasoning_open = false) {
  ReplyFormat f;
  f.tool_calls = true;
  f.tool_format = tool_format;
  f.tool_schemas = tool_schemas(nlohmann::ordered_json::parse(tools));
  f.reasoning = reasoning;
  f.reasoning_open = reasoning_open;
  return f;
}

}  // namespace ft::server::testing
