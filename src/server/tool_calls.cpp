#include "server/tool_calls.h"

#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

bool tool_call_markers_are_special(ToolCallFormat f) { return f != ToolCallFormat::kHermes; }

bool tool_call_format_structures_every_reply(ToolCallFormat f) { return f == ToolCallFormat::kHarmony; }

ToolCallFormat detect_tool_call_format(std::string_view src) {
  const auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  if (has("<|channel|>") || has("to=functions")) return ToolCallFormat::kHarmony;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("<|python_tag|>") || has("ipython")) return ToolCallFormat::kLlama3;
  return ToolCallFormat::kHermes;
}

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kLlama3: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kHarmony: return "harmony";
    case ToolCallFormat::kHermes: break;
  }
  return "hermes";
}

std::optional<ToolCall> call_from_json(const nlohmann::ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  ToolCall c;
  c.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");  // Llama 3.x's name, seen in Hermes-format output too
  if (args == j.end() || args->is_null()) c.arguments = "{}";
  else if (args->is_string()) {  // JSON text: a call only if it is an object or array
    const auto parsed = nlohmann::ordered_json::parse(args->get_ref<const std::string&>(), nullptr, false);
    if (!parsed.is_object() && !parsed.is_array()) return std::nullopt;
    c.arguments = args->get<std::string>();  // as written
  } else {
    c.arguments = args->dump();
  }
  return c;
}

size_t json_value_end(std::string_view s) { return JsonValueScan{}.end(s); }

size_t JsonValueScan::end(std::string_view s) {
  for (; pos_ < s.size(); ++pos_) {
    const char ch = s[pos_];
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (ch == '\\') escaped_ = true;
      else if (ch == '"') in_string_ = false;
    } else if (ch == '"') {
      in_string_ = true;
    } else if (ch == '{' || ch == '[') {
      ++depth_;
    } else if ((ch == '}' || ch == ']') && --depth_ == 0) {
      return ++pos_;
    }
  }
  return std::string_view::npos;
}

size_t skip_space(std::string& s) {
  const size_t n = std::min(s.size(), s.find_first_not_of(" \t\r\n"));
  s.erase(0, n);
  return n;
}

ToolCallStream::ToolCallStream(ToolCallFormat format) {
  switch (format) {
    case ToolCallFormat::kLlama3: scanner_ = make_llama3_scanner(); break;
    case ToolCallFormat::kMistral: scanner_ = make_mistral_scanner(); break;
    case ToolCallFormat::kHarmony: scanner_ = make_harmony_scanner(); break;
    case ToolCallFormat::kHermes: scanner_ = make_hermes_scanner(); break;
  }
}

ToolCallSplit ToolCallStream::push(std::string_view piece) {
  ToolCallSplit out;
  scanner_->push(piece, out);
  return out;
}

ToolCallSplit ToolCallStream::finish() {
  ToolCallSplit out;
  scanner_->finish(out);
  return out;
}

ToolCallSplit parse_tool_calls(std::string_view text, ToolCallFormat format) {
  ToolCallStream s(format);
  ToolCallSplit out = s.push(text);
  out.append(s.finish());
  trim_space(out.content);
  trim_space(out.reasoning);
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
