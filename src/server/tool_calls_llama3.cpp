// Llama 3.1 / 3.2 / 3.3 JSON tool calls (Meta's Llama 3.1 model card, "JSON based tool calling"; the
// meta-llama Llama-3.x-Instruct templates; vLLM's "llama3_json" tool parser, llama.cpp's Llama 3.x
// chat format): the reply is the call itself,
//   {"name": "get_weather", "parameters": {"city": "Paris"}}
// optionally after <|python_tag|>, several calls separated by `;`. A reply that starts with other
// text has no call unless a <|python_tag|> follows; an object that is not a call (broken JSON, no
// name) stays content, and so does all that follows it.
#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kPythonTag = "<|python_tag|>";

enum class Llama3State { kStart, kText, kCall, kAfterCall };

class Llama3Scanner : public HeldTextScanner<Llama3State> {
 public:
  using State = Llama3State;
  Llama3Scanner() : HeldTextScanner(State::kStart) {}
  bool step(size_t at, std::string_view rest, ToolCallSplit& out) override {
    switch (state_) {
      case State::kStart:  // whitespace, then <|python_tag|>, `{`, or text
        if (rest.empty() || may_become(rest, kPythonTag)) return false;
        if (rest.substr(0, kPythonTag.size()) == kPythonTag) {
          t_.take(at + kPythonTag.size());
        } else if (rest[0] == '{') {
          t_.take(at);
        } else {
          state_ = State::kText;
          return true;
        }
        state_ = State::kCall;
        return true;
      case State::kText:
        if (!take_until_tag(t_.held, kPythonTag, out.content)) return false;
        t_.pending = kPythonTag;
        state_ = State::kCall;
        return true;
      case State::kCall: {  // whitespace, then a JSON object that must be a call
        const TakenObject j = take_object(at, rest, out);
        if (!j.ready || !j.object) return j.ready;
        std::optional<ToolCall> c = call_from_json(*j.object);
        if (!c) {
          give_up(out);
          return true;
        }
        out.calls.push_back(std::move(*c));
        t_.pending.clear();
        state_ = State::kAfterCall;
        return true;
      }
      case State::kAfterCall:  // `;` and another call, or the end (anything else is text)
        if (rest.empty()) return false;
        if (rest[0] == ';') {
          t_.take(at + 1);
          state_ = State::kCall;
        } else {
          state_ = State::kText;
        }
        return true;
    }
    return false;  // not reached: every state returns
  }
  void finish(ToolCallSplit& out) override {
    // A `;` after the last call, and the space around it, ends the list: it is not text.
    std::string sep = t_.pending;
    if (state_ == State::kCall && all_space(t_.held) && sep.find(';') != std::string::npos) {
      sep.erase(sep.find(';'), 1);
      if (all_space(sep)) t_.pending.clear(), t_.held.clear();
    }
    HeldTextScanner::finish(out);
  }
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_llama3_scanner() { return std::make_unique<Llama3Scanner>(); }

}  // namespace ft::server
