// Hermes-format tool calls (NousResearch Hermes function calling; Qwen2.5, Qwen3, QwQ, Hermes 2 Pro / 3
// templates; vLLM's "hermes" tool parser, llama.cpp's Hermes 2 Pro chat format): each call is
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
// A block whose JSON does not parse, or has no string "name", stays in the content as text; so does
// an unterminated block.
#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

class HermesScanner : public ToolCallScanner {
 public:
  void push(std::string_view piece, ToolCallSplit& out) override {
    held_.append(piece);
    for (;;) {
      if (!in_call_) {
        if (!take_until_tag(held_, kOpen, out.content)) return;
        in_call_ = true;
        continue;
      }
      const size_t at = held_.find(kClose);  // a call's body is held whole, tag prefix or not
      if (at == std::string::npos) return;
      const std::string body = held_.substr(0, at);
      held_.erase(0, at + kClose.size());
      in_call_ = false;
      const auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (std::optional<ToolCall> c = call_from_json(j)) out.calls.push_back(std::move(*c));
      else out.content.append(std::string(kOpen) + body + std::string(kClose));  // not a call: text
    }
  }
  void finish(ToolCallSplit& out) override {
    out.content += in_call_ ? std::string(kOpen) + held_ : held_;
    held_.clear();
    in_call_ = false;
  }
  /** A body that is already a whole call (only its close tag missing) is kept; all else held is dropped. */
  void drop_open_call(ToolCallSplit& out) override {
    if (in_call_) {
      std::string body;
      take_until_tag(held_, kClose, body);  // the body without a start of the close tag
      const auto j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
      if (std::optional<ToolCall> c = call_from_json(j)) out.calls.push_back(std::move(*c));
    }
    held_.clear();
    in_call_ = false;
  }

 private:
  std::string held_;
  bool in_call_ = false;
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_hermes_scanner() { return std::make_unique<HermesScanner>(); }

}  // namespace ft::server
