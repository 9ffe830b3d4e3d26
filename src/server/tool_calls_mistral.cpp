// Mistral tool calls (Mistral's tokenizer v3+ templates; vLLM's "mistral" tool parser, llama.cpp's
// Mistral Nemo / Magistral chat formats), after the [TOOL_CALLS] control token, either
//   [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, ...]      (Mistral Nemo, 7B v0.3)
// or, one call per token (Mistral Small 3.2, Ministral 3, Devstral: tokenizer v11+),
//   [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}   (optionally name[CALL_ID]id[ARGS]{...})
// Text before the token is content. What follows [TOOL_CALLS] but is not a call (broken JSON, an
// element without a name, arguments that are not an object) stays content, the token with it.
#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kToolCalls = "[TOOL_CALLS]", kArgs = "[ARGS]", kCallId = "[CALL_ID]";

bool name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
}

enum class MistralState { kText, kAfterTag, kName, kArgs };

class MistralScanner : public HeldTextScanner<MistralState> {
 public:
  using State = MistralState;
  MistralScanner() : HeldTextScanner(State::kText) {}
  bool step(size_t at, std::string_view rest, ToolCallSplit& out) override {
    switch (state_) {
      case State::kText:
        if (!take_until_tag(t_.held, kToolCalls, out.content)) return false;
        t_.pending = kToolCalls;
        state_ = State::kAfterTag;
        return true;
      case State::kAfterTag: {  // a JSON list (or one object) of calls, or a name
        if (rest.empty()) return false;
        if (rest[0] != '[' && rest[0] != '{') {
          t_.take(at);
          state_ = State::kName;
          return true;
        }
        const std::optional<nlohmann::ordered_json> parsed = take_value(at, rest);
        if (!parsed) return false;
        const nlohmann::ordered_json& j = *parsed;
        std::vector<ToolCall> calls;
        for (const auto& e : j.is_array() ? j : nlohmann::ordered_json::array({j})) {
          std::optional<ToolCall> c = call_from_json(e);
          if (!c) break;
          calls.push_back(std::move(*c));
        }
        if (calls.empty() || calls.size() != (j.is_array() ? j.size() : 1)) {
          give_up(out);
          return true;
        }
        for (ToolCall& c : calls) out.calls.push_back(std::move(c));
        t_.pending.clear();
        state_ = State::kText;
        return true;
      }
      case State::kName: {  // name[ARGS] or name[CALL_ID]id[ARGS]
        size_t i = 0;
        while (i < t_.held.size() && name_char(t_.held[i])) ++i;
        if (i == t_.held.size()) return false;
        const std::string_view tail = std::string_view(t_.held).substr(i);
        if (i > 0 && tail.substr(0, kArgs.size()) == kArgs) {
          name_ = t_.held.substr(0, i);
          t_.take(i + kArgs.size());
          state_ = State::kArgs;
        } else if (i > 0 && tail.substr(0, kCallId.size()) == kCallId) {
          const size_t a = t_.held.find(kArgs, i + kCallId.size());
          if (a == std::string::npos) return false;
          name_ = t_.held.substr(0, i);
          t_.take(a + kArgs.size());
          state_ = State::kArgs;
        } else if (i > 0 && (may_become(tail, kArgs) || may_become(tail, kCallId))) {
          return false;
        } else {
          give_up(out);
        }
        return true;
      }
      case State::kArgs: {  // a JSON object
        const TakenObject j = take_object(at, rest, out);
        if (!j.ready || !j.object) return j.ready;
        out.calls.push_back(ToolCall{name_, j.object->dump()});
        t_.pending.clear();
        state_ = State::kText;
        return true;
      }
    }
    return false;  // not reached: every state returns
  }

 private:
  std::string name_;
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_mistral_scanner() { return std::make_unique<MistralScanner>(); }

}  // namespace ft::server
