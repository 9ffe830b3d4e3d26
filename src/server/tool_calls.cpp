#include "server/tool_calls.h"

#include <optional>

#include "server/tag_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kOpen = "<tool_call>", kClose = "</tool_call>";

/** The call in a block's body, or nothing when it is not a JSON object with a string "name". */
std::optional<ToolCall> parse_call(const std::string& body) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  ToolCall c;
  c.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");  // Llama-3.1-style name, seen in Hermes-format output too
  if (args == j.end() || args->is_null()) c.arguments = "{}";
  else if (args->is_string()) c.arguments = args->get<std::string>();  // already JSON text
  else c.arguments = args->dump();
  return c;
}

}  // namespace

ToolCallSplit ToolCallStream::push(std::string_view piece) {
  held_.append(piece);
  ToolCallSplit out;
  for (;;) {
    if (!in_call_) {
      if (!take_until_tag(held_, kOpen, out.content)) return out;
      in_call_ = true;
    } else {
      const size_t at = held_.find(kClose);  // a call's body is held whole, tag prefix or not
      if (at == std::string::npos) return out;
      const std::string body = held_.substr(0, at);
      held_.erase(0, at + kClose.size());
      in_call_ = false;
      if (std::optional<ToolCall> c = parse_call(body)) out.calls.push_back(std::move(*c));
      else out.content.append(std::string(kOpen) + body + std::string(kClose));  // not a call: text
    }
  }
}

ToolCallSplit ToolCallStream::finish() {
  ToolCallSplit out;
  out.content = in_call_ ? std::string(kOpen) + held_ : held_;
  held_.clear();
  in_call_ = false;
  return out;
}

ToolCallSplit parse_tool_calls(std::string_view text) {
  ToolCallStream s;
  ToolCallSplit out = s.push(text);
  out.content += s.finish().content;
  trim_space(out.content);
  return out;
}

nlohmann::ordered_json tool_call_json(const ToolCall& call, const std::string& id, int index) {
  nlohmann::ordered_json j;
  if (index >= 0) j["index"] = index;
  j["id"] = id;
  j["type"] = "function";
  j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
  return j;
}

}  // namespace ft::server
