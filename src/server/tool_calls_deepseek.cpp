// DeepSeek tool calls (the deepseek-ai DeepSeek-V3 / R1 / V3.1 chat templates; vLLM's "deepseek_v3" and
// "deepseek_v31" tool parsers): one section holds every call of the turn. V3 and R1 write each call
// with its type and a fenced JSON block,
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
//   ```json
//   {"city": "Paris"}
//   ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
// and V3.1 the name and the JSON alone,
//   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>
// Both forms are read for either format (a fine-tune may mix them). A section that is not of this
// form, or whose arguments are not a JSON object, stays content as it was; a section the reply ends
// inside gives the calls whose <｜tool▁call▁end｜> came, when nothing else follows them.
#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kCall = "<｜tool▁call▁begin｜>", kSep = "<｜tool▁sep｜>", kCallEnd = "<｜tool▁call▁end｜>";

/** One call's text between <｜tool▁call▁begin｜> and <｜tool▁call▁end｜>. */
std::optional<ToolCall> parse_call(std::string_view call) {
  const size_t sep = call.find(kSep);
  if (sep == std::string_view::npos) return std::nullopt;
  const std::string_view head = trim_view(call.substr(0, sep));
  std::string_view rest = trim_view(call.substr(sep + kSep.size()));
  std::string_view name, json;
  if (!rest.empty() && rest.front() == '{') {  // V3.1: NAME<｜tool▁sep｜>{...}
    name = head;
    json = rest;
  } else {  // V3 / R1: TYPE<｜tool▁sep｜>NAME\n```json\n{...}\n```
    const size_t nl = rest.find('\n');
    if (nl == std::string_view::npos) return std::nullopt;
    name = trim_view(rest.substr(0, nl));
    rest = trim_view(rest.substr(nl + 1));
    if (rest.substr(0, 3) != "```" || rest.size() < 6 || rest.substr(rest.size() - 3) != "```") return std::nullopt;
    rest = rest.substr(3, rest.size() - 6);
    if (rest.substr(0, 4) == "json") rest.remove_prefix(4);
    json = trim_view(rest);
  }
  const auto j = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!plausible_tool_name(name) || !j.is_object()) return std::nullopt;
  return ToolCall{std::string(name), j.dump()};
}

class DeepSeekScanner : public BlockScanner {
 public:
  DeepSeekScanner() : BlockScanner("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>") {}

 protected:
  std::optional<std::vector<ToolCall>> parse(std::string_view body, bool /*closed*/) override {
    std::vector<ToolCall> calls;
    while (!all_space(body)) {
      body = body.substr(body.find_first_not_of(" \t\r\n"));
      if (body.substr(0, kCall.size()) != kCall) return std::nullopt;
      body.remove_prefix(kCall.size());
      const size_t end = body.find(kCallEnd);
      if (end == std::string_view::npos) return std::nullopt;
      std::optional<ToolCall> c = parse_call(body.substr(0, end));
      if (!c) return std::nullopt;
      calls.push_back(std::move(*c));
      body.remove_prefix(end + kCallEnd.size());
    }
    if (calls.empty()) return std::nullopt;
    return calls;
  }
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_deepseek_scanner() { return std::make_unique<DeepSeekScanner>(); }

}  // namespace ft::server
