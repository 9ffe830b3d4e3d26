// GLM-4.5 / 4.6 / 4.7 tool calls (the zai-org GLM-4.5+ chat templates; vLLM's "glm45" tool parser).
// Each call is a block, its name first, then key / value pairs (GLM-4.7 writes it on one line):
//   <tool_call>get_weather
//   <arg_key>city</arg_key>
//   <arg_value>Paris</arg_value>
//   </tool_call>
// The template writes string values as they are and others as JSON, so values are typed by the
// tool's JSON Schema (typed_argument). A block that is not of this form, and one the reply ends
// inside, stays content as it was.
#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kKey = "<arg_key>", kKeyEnd = "</arg_key>", kValue = "<arg_value>", kValueEnd = "</arg_value>";

/** The text between `open` at the start of `s` (after whitespace) and the next `close`, taken from
 *  `s` with both markers; nothing when `s` does not start so. */
std::optional<std::string_view> take_element(std::string_view& s, std::string_view open, std::string_view close) {
  const size_t at = std::min(s.size(), s.find_first_not_of(" \t\r\n"));
  if (s.substr(at, open.size()) != open) return std::nullopt;
  const size_t end = s.find(close, at + open.size());
  if (end == std::string_view::npos) return std::nullopt;
  const std::string_view inner = s.substr(at + open.size(), end - at - open.size());
  s.remove_prefix(end + close.size());
  return inner;
}

class Glm45Scanner : public BlockScanner {
 public:
  explicit Glm45Scanner(ToolSchemas schemas) : BlockScanner("<tool_call>", "</tool_call>"), schemas_(std::move(schemas)) {}

 protected:
  std::optional<std::vector<ToolCall>> parse(std::string_view body, bool closed) override {
    if (!closed) return std::nullopt;  // no end of its own but the block's: cut off somewhere
    body.remove_prefix(std::min(body.size(), body.find_first_not_of(" \t\r\n")));
    const size_t name_end = std::min({body.size(), body.find('\n'), body.find(kKey)});
    const std::string_view name = trim_view(body.substr(0, name_end));
    if (!plausible_tool_name(name)) return std::nullopt;
    body.remove_prefix(name_end);
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    while (!all_space(body)) {
      const std::optional<std::string_view> key = take_element(body, kKey, kKeyEnd);
      if (!key || trim_view(*key).empty()) return std::nullopt;
      const std::optional<std::string_view> value = take_element(body, kValue, kValueEnd);
      if (!value) return std::nullopt;
      args[std::string(trim_view(*key))] = typed_argument(schemas_, name, trim_view(*key), *value);
    }
    return std::vector<ToolCall>{ToolCall{std::string(name), args.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace)}};
  }

 private:
  ToolSchemas schemas_;
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_glm45_scanner(ToolSchemas schemas) {
  return std::make_unique<Glm45Scanner>(std::move(schemas));
}

}  // namespace ft::server
