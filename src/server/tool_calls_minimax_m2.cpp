// MiniMax-M2 tool calls (the MiniMaxAI MiniMax-M2 chat template; vLLM's "minimax_m2" tool parser):
// one block holds every call of the turn,
//   <minimax:tool_call>
//   <invoke name="get_weather">
//   <parameter name="city">Paris</parameter>
//   <parameter name="days">3</parameter>
//   </invoke>
//   </minimax:tool_call>
// The template writes string values as they are and others as JSON, so values are typed by the
// tool's JSON Schema (typed_argument). DeepSeek-V3.2 writes the same shape with its DSML token after
// each `<` and `</` (the deepseek-ai DeepSeek-V3.2 template; vLLM's "deepseek_v32" tool parser), and
// says itself whether a value is a string:
//   <｜DSML｜function_calls>
//   <｜DSML｜invoke name="get_weather">
//   <｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>
//   <｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜function_calls>
// A block that is not of this form stays content as it was; a block the reply ends inside gives the
// calls whose </invoke> came, when nothing else follows them.
#include <map>

#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

/** The tags of one dialect: `<` + prefix + name. */
struct InvokeTags {
  std::string invoke, invoke_end, parameter, parameter_end;
  explicit InvokeTags(std::string_view prefix)
      : invoke("<" + std::string(prefix) + "invoke"), invoke_end("</" + std::string(prefix) + "invoke>"),
        parameter("<" + std::string(prefix) + "parameter"), parameter_end("</" + std::string(prefix) + "parameter>") {}
};

/** `lit` at the start of `s` after whitespace, taken from `s` with it. */
bool take(std::string_view& s, std::string_view lit) {
  s = s.substr(std::min(s.size(), s.find_first_not_of(" \t\r\n")));
  if (s.substr(0, lit.size()) != lit) return false;
  s.remove_prefix(lit.size());
  return true;
}

/** The attributes of a tag up to its `>` (`name="x" string="true"`; a value may also be bare or in
 *  single quotes), taken from `s` with the `>`; nothing when the tag does not close or is malformed. */
std::optional<std::map<std::string, std::string, std::less<>>> take_attributes(std::string_view& s) {
  std::map<std::string, std::string, std::less<>> out;
  size_t i = 0;
  for (;;) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n')) ++i;
    if (i >= s.size()) return std::nullopt;
    if (s[i] == '>') break;
    const size_t eq = s.find('=', i);
    if (eq == std::string_view::npos) return std::nullopt;
    const std::string key(trim_view(s.substr(i, eq - i)));
    if (key.empty() || key.find_first_of("<>\"'") != std::string::npos) return std::nullopt;
    i = eq + 1;
    if (i < s.size() && (s[i] == '"' || s[i] == '\'')) {
      const size_t close = s.find(s[i], i + 1);
      if (close == std::string_view::npos) return std::nullopt;
      out[key] = std::string(s.substr(i + 1, close - i - 1));
      i = close + 1;
    } else {
      const size_t end = std::min(s.size(), s.find_first_of(" \t\n>", i));
      out[key] = std::string(s.substr(i, end - i));
      i = end;
    }
  }
  s.remove_prefix(i + 1);
  return out;
}

class InvokeScanner : public BlockScanner {
 public:
  InvokeScanner(std::string_view open, std::string_view close, std::string_view prefix, ToolSchemas schemas)
      : BlockScanner(open, close), tags_(prefix), schemas_(std::move(schemas)) {}

 protected:
  std::optional<std::vector<ToolCall>> parse(std::string_view body, bool /*closed*/) override {
    std::vector<ToolCall> calls;
    while (!all_space(body)) {
      std::optional<ToolCall> c = take_invoke(body);
      if (!c) return std::nullopt;
      calls.push_back(std::move(*c));
    }
    if (calls.empty()) return std::nullopt;
    return calls;
  }

 private:
  std::optional<ToolCall> take_invoke(std::string_view& s) const {
    if (!take(s, tags_.invoke)) return std::nullopt;
    const auto attrs = take_attributes(s);
    if (!attrs) return std::nullopt;
    const auto name = attrs->find("name");
    if (name == attrs->end() || !plausible_tool_name(name->second)) return std::nullopt;
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    for (;;) {
      if (take(s, tags_.invoke_end)) break;
      if (!take(s, tags_.parameter)) return std::nullopt;
      const auto p = take_attributes(s);
      if (!p) return std::nullopt;
      const auto key = p->find("name");
      if (key == p->end() || key->second.empty()) return std::nullopt;
      const size_t end = s.find(tags_.parameter_end);
      if (end == std::string_view::npos) return std::nullopt;
      const std::string_view text = s.substr(0, end);
      const auto is_string = p->find("string");
      nlohmann::ordered_json v;
      if (is_string != p->end() && is_string->second == "true") {
        v = std::string(text);
      } else if (is_string != p->end() && is_string->second == "false") {  // JSON (the schema's type if not)
        v = nlohmann::ordered_json::parse(trim_view(text), nullptr, /*allow_exceptions=*/false);
        if (v.is_discarded()) v = typed_argument(schemas_, name->second, key->second, text);
      } else {
        v = typed_argument(schemas_, name->second, key->second, text);
      }
      args[key->second] = std::move(v);
      s.remove_prefix(end + tags_.parameter_end.size());
    }
    return ToolCall{name->second, args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)};
  }

  InvokeTags tags_;
  ToolSchemas schemas_;
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_minimax_m2_scanner(ToolSchemas schemas) {
  return std::make_unique<InvokeScanner>("<minimax:tool_call>", "</minimax:tool_call>", "", std::move(schemas));
}

std::unique_ptr<ToolCallScanner> make_deepseek_v32_scanner(ToolSchemas schemas) {
  return std::make_unique<InvokeScanner>("<｜DSML｜function_calls>", "</｜DSML｜function_calls>", "｜DSML｜",
                                         std::move(schemas));
}

}  // namespace ft::server
