#pragma once
// Tool calls in a chat reply, in the form Hermes-style chat templates teach the model (Qwen2.5,
// Qwen3, QwQ, Hermes 2 Pro / 3, and the templates that copied them): each call is
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
// (NousResearch Hermes function-calling format; the same parsing as vLLM's "hermes" tool parser and
// llama.cpp's Hermes 2 Pro chat format). Text outside the blocks is the reply's content. A block whose
// JSON does not parse, or has no string "name", stays in the content as text.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft::server {

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object (OpenAI sends it as a string)
};

/** What a piece of reply text holds: content to show, and the calls it completed. */
struct ToolCallSplit {
  std::string content;
  std::vector<ToolCall> calls;
};

/** Splits text as it streams in. push() returns the content that can be shown now and the calls
 *  completed so far; text that may be the start of a `<tool_call>` tag, and an open call's body, are
 *  held until known. finish() returns what is held (an unterminated call comes back as text). */
class ToolCallStream {
 public:
  ToolCallSplit push(std::string_view piece);
  ToolCallSplit finish();

 private:
  std::string held_;
  bool in_call_ = false;
};

/** A whole reply: ToolCallStream over it, with the content's surrounding whitespace trimmed. */
ToolCallSplit parse_tool_calls(std::string_view text);

/** One entry of OpenAI's `tool_calls`: {"id", "type": "function", "function": {"name", "arguments"}};
 *  with `index` >= 0 also "index" (the streaming delta form). */
nlohmann::ordered_json tool_call_json(const ToolCall& call, const std::string& id, int index = -1);

}  // namespace ft::server
