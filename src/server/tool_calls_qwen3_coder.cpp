// Qwen3-Coder / Qwen3.5 XML tool calls (the Qwen3-Coder and Qwen3.5 chat templates; vLLM's
// "qwen3_coder" tool parser). Each call is a block
//   <tool_call>
//   <function=get_weather>
//   <parameter=city>
//   Paris
//   </parameter>
//   <parameter=days>
//   3
//   </parameter>
//   </function>
//   </tool_call>
// whose values are text on lines of their own, typed by the tool's JSON Schema (typed_argument: the
// template writes objects and arrays as JSON, other values as Jinja's `string`). A block that is not
// of this form, and one the reply ends inside before its </function>, stays content as it was.
#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>", kParameter = "<parameter=",
                           kParameterEnd = "</parameter>";

bool take(std::string_view& s, std::string_view lit) {
  if (s.substr(0, lit.size()) != lit) return false;
  s.remove_prefix(lit.size());
  return true;
}

/** `<function=NAME>` ... `</function>` at the start of `s` (after whitespace), taken from it. */
std::optional<ToolCall> take_function(std::string_view& s, const ToolSchemas& schemas) {
  s = s.substr(std::min(s.size(), s.find_first_not_of(" \t\r\n")));
  if (!take(s, kFunction)) return std::nullopt;
  const size_t gt = s.find('>');
  if (gt == std::string_view::npos) return std::nullopt;
  const std::string_view name = trim_view(s.substr(0, gt));
  if (!plausible_tool_name(name)) return std::nullopt;
  s.remove_prefix(gt + 1);
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  for (;;) {
    s = s.substr(std::min(s.size(), s.find_first_not_of(" \t\r\n")));
    if (take(s, kFunctionEnd)) break;
    if (!take(s, kParameter)) return std::nullopt;
    const size_t kgt = s.find('>');
    if (kgt == std::string_view::npos) return std::nullopt;
    const std::string_view key = trim_view(s.substr(0, kgt));
    if (key.empty()) return std::nullopt;
    s.remove_prefix(kgt + 1);
    const size_t end = s.find(kParameterEnd);
    if (end == std::string_view::npos) return std::nullopt;
    args[std::string(key)] = typed_argument(schemas, name, key, strip_one_newline(s.substr(0, end)));
    s.remove_prefix(end + kParameterEnd.size());
  }
  return ToolCall{std::string(name), args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)};
}

class Qwen3CoderScanner : public BlockScanner {
 public:
  explicit Qwen3CoderScanner(ToolSchemas schemas) : BlockScanner("<tool_call>", "</tool_call>"), schemas_(std::move(schemas)) {}

 protected:
  std::optional<std::vector<ToolCall>> parse(std::string_view body, bool /*closed*/) override {
    std::vector<ToolCall> calls;
    while (!all_space(body)) {  // one function per block as written; more are read alike
      std::optional<ToolCall> c = take_function(body, schemas_);
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

std::unique_ptr<ToolCallScanner> make_qwen3_coder_scanner(ToolSchemas schemas) {
  return std::make_unique<Qwen3CoderScanner>(std::move(schemas));
}

}  // namespace ft::server
