#pragma once
// Tool calls in a chat reply, in the form the served model's chat template teaches it. One format is
// chosen per served model from its template text (detect_tool_call_format, as llama.cpp's server
// picks its chat format); every format yields the same ToolCall (name, arguments as JSON text):
//   kHermes   <tool_call>{"name": ..., "arguments": {...}}</tool_call>  (tool_calls_hermes.cpp)
//   kLlama3   {"name": ..., "parameters": {...}}, optionally after <|python_tag|>, `;`-separated (tool_calls_llama3.cpp)
//   kMistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or [TOOL_CALLS]name[ARGS]{...} (tool_calls_mistral.cpp)
//   kHarmony  gpt-oss: <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>,
//             with the `analysis` channel as reasoning and `final` as content (tool_calls_harmony.cpp)
// Text outside calls is the reply's content. A call whose JSON does not parse, or has no name, stays
// in the content as the text it was.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft::server {

enum class ToolCallFormat { kHermes, kLlama3, kMistral, kHarmony };

/** The format a chat template teaches, from markers in its Jinja source (as llama.cpp's
 *  common_chat_templates_apply picks one): `<|channel|>` or `to=functions` → kHarmony (gpt-oss);
 *  `[TOOL_CALLS]` → kMistral; `<tool_call>` → kHermes (Qwen2.5/3, QwQ, Hermes 2 Pro/3);
 *  `<|python_tag|>` or `ipython` → kLlama3 (Llama 3.1/3.2/3.3); anything else → kHermes. */
ToolCallFormat detect_tool_call_format(std::string_view template_source);

/** Whether the format's markers are control tokens in its models' vocabularies (Llama 3's
 *  <|python_tag|>, Mistral's [TOOL_CALLS], gpt-oss's <|channel|>...), which a reply's text drops
 *  unless asked to keep them (GenerationParams::keep_special_tokens); Hermes' <tool_call> is text. */
bool tool_call_markers_are_special(ToolCallFormat f);

/** Whether every reply in the format is structured, so it is split with or without tools: gpt-oss's
 *  harmony channels (analysis is reasoning, final is content, even in a reply without calls). Other
 *  formats' replies without calls are text as written. */
bool tool_call_format_structures_every_reply(ToolCallFormat f);

/** "hermes", "llama3_json", "mistral", "harmony" (the names of vLLM's tool parsers). */
const char* tool_call_format_name(ToolCallFormat f);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object (OpenAI sends it as a string)
};

/** What a piece of reply text holds: content to show, reasoning (kHarmony's analysis channel only),
 *  and the calls it completed. */
struct ToolCallSplit {
  std::string content;
  std::vector<ToolCall> calls;
  std::string reasoning;
  /** Adds a later piece of the same reply: its content, reasoning and calls after these. */
  void append(ToolCallSplit&& more) {
    content += more.content;
    reasoning += more.reasoning;
    for (ToolCall& c : more.calls) calls.push_back(std::move(c));
  }
};

/** One format's scanner (tool_call_scan.h); ToolCallStream runs the one its format names. */
class ToolCallScanner {
 public:
  virtual ~ToolCallScanner() = default;
  virtual void push(std::string_view piece, ToolCallSplit& out) = 0;
  virtual void finish(ToolCallSplit& out) = 0;
};

/** Splits text as it streams in. push() returns the content that can be shown now and the calls
 *  completed so far; text that may start a call, and an open call, are held until known. finish()
 *  returns what is held (an unterminated call comes back as text; kHarmony's call message, whose
 *  <|call|> end token the reply usually stops before, is a call at the end). */
class ToolCallStream {
 public:
  explicit ToolCallStream(ToolCallFormat format = ToolCallFormat::kHermes);
  ToolCallSplit push(std::string_view piece);
  ToolCallSplit finish();

 private:
  std::unique_ptr<ToolCallScanner> scanner_;
};

/** A whole reply: ToolCallStream over it, with the content's (and reasoning's) surrounding whitespace
 *  trimmed. */
ToolCallSplit parse_tool_calls(std::string_view text, ToolCallFormat format = ToolCallFormat::kHermes);

/** One entry of OpenAI's `tool_calls`: {"id", "type": "function", "function": {"name", "arguments"}};
 *  with `index` >= 0 also "index" (the streaming delta form). */
nlohmann::ordered_json tool_call_json(const ToolCall& call, const std::string& id, int index = -1);

}  // namespace ft::server
