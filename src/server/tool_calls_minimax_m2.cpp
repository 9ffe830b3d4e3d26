// MiniMax-M2 tool calls (the MiniMaxAI MiniMax-M2 chat template; vLLM's "minimax_m2" tool parser):
// one block holds every call of the turn,
//   <minimax:tool_call>
//   <invoke name="get_weather">
//   <parameter name="city">Paris</parameter>
//   <parameter name="days">3</parameter>
//   </invoke>
//   </minimax:tool_call>
// The template writes string values as they are and others as JSON, so values are typed by the
// tool's JSON Schema (typed_argument). A block that is not of this form stays content as it was; a
// block the reply ends inside gives the calls whose </invoke> came, when nothing else follows them.
#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kInvoke = "<invoke name=", kInvokeEnd = "</invoke>", kParameter = "<parameter name=",
                           kParameterEnd = "</parameter>";

bool take(std::string_view& s, std::string_view lit) {
  s = s.substr(std::min(s.size(), s.find_first_not_of(" \t\r\n")));
  if (s.substr(0, lit.size()) != lit) return false;
  s.remove_prefix(lit.size());
  return true;
}

/** An attribute value up to the tag's `>` ("quoted" or bare), taken from `s` with the `>`. */
std::optional<std::string_view> take_attribute(std::string_view& s) {
  const size_t gt = s.find('>');
  if (gt == std::string_view::npos) return std::nullopt;
  std::string_view v = trim_view(s.substr(0, gt));
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front()) v = v.substr(1, v.size() - 2);
  s.remove_prefix(gt + 1);
  return v;
}

std::optional<ToolCall> take_invoke(std::string_view& s, const ToolSchemas& schemas) {
  if (!take(s, kInvoke)) return std::nullopt;
  const std::optional<std::string_view> name = take_attribute(s);
  if (!name || !plausible_tool_name(*name)) return std::nullopt;
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  for (;;) {
    if (take(s, kInvokeEnd)) break;
    if (!take(s, kParameter)) return std::nullopt;
    const std::optional<std::string_view> key = take_attribute(s);
    if (!key || key->empty()) return std::nullopt;
    const size_t end = s.find(kParameterEnd);
    if (end == std::string_view::npos) return std::nullopt;
    args[std::string(*key)] = typed_argument(schemas, *name, *key, s.substr(0, end));
    s.remove_prefix(end + kParameterEnd.size());
  }
  return ToolCall{std::string(*name), args.dump()};
}

class MiniMaxM2Scanner : public BlockScanner {
 public:
  explicit MiniMaxM2Scanner(ToolSchemas schemas)
      : BlockScanner("<minimax:tool_call>", "</minimax:tool_call>"), schemas_(std::move(schemas)) {}

 protected:
  std::optional<std::vector<ToolCall>> parse(std::string_view body, bool /*closed*/) override {
    std::vector<ToolCall> calls;
    while (!all_space(body)) {
      std::optional<ToolCall> c = take_invoke(body, schemas_);
      if (!c) return std::nullopt;
      calls.push_back(std::move(*c));
    }
    if (calls.empty()) return std::nullopt;
    return calls;
  }

 private:
  ToolSchemas schemas_;
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_minimax_m2_scanner(ToolSchemas schemas) {
  return std::make_unique<MiniMaxM2Scanner>(std::move(schemas));
}

}  // namespace ft::server
