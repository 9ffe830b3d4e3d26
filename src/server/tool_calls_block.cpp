// What the block formats share (tool_call_scan.h): BlockScanner, which holds a call's block from its
// open to its close marker, and the typing of the XML-like formats' text values by the tool's JSON
// Schema (as vLLM's qwen3_coder / glm45 / minimax_m2 tool parsers type them).
#include <algorithm>
#include <cctype>

#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

void BlockScanner::push(std::string_view piece, ToolCallSplit& out) {
  held_.append(piece);
  for (;;) {
    if (!in_block_) {
      if (!take_until_tag(held_, open_, out.content)) return;
      in_block_ = true;
      scanned_ = 0;
      continue;
    }
    // Only what arrived since the last look is searched (and the tail that may start the marker),
    // so a long block streamed in small pieces costs O(L), not O(L^2).
    const size_t from = scanned_ >= close_.size() ? scanned_ - close_.size() + 1 : 0;
    const size_t at = held_.find(close_, from);
    if (at == std::string::npos) {
      scanned_ = held_.size();
      return;
    }
    const std::string_view body = std::string_view(held_).substr(0, at);
    if (std::optional<std::vector<ToolCall>> calls = parse(body, /*closed=*/true)) {
      for (ToolCall& c : *calls) out.calls.push_back(std::move(c));
    } else {
      out.content.append(open_).append(body).append(close_);  // not calls: the text it was
    }
    held_.erase(0, at + close_.size());
    in_block_ = false;
  }
}

void BlockScanner::finish(ToolCallSplit& out) {
  if (in_block_) {
    if (std::optional<std::vector<ToolCall>> calls = parse(held_, /*closed=*/false)) {
      for (ToolCall& c : *calls) out.calls.push_back(std::move(c));
    } else {
      out.content.append(open_).append(held_);
    }
  } else {
    out.content += held_;
  }
  held_.clear();
  in_block_ = false;
  scanned_ = 0;
}

void BlockScanner::drop_open_call(ToolCallSplit& out) {
  if (in_block_) {
    if (std::optional<std::vector<ToolCall>> calls = parse(held_, /*closed=*/false)) {
      for (ToolCall& c : *calls) out.calls.push_back(std::move(c));
    }
  }
  held_.clear();
  in_block_ = false;
  scanned_ = 0;
}

std::string_view strip_one_newline(std::string_view s) {
  if (s.substr(0, 2) == "\r\n") s.remove_prefix(2);
  else if (!s.empty() && s.front() == '\n') s.remove_prefix(1);
  if (s.size() >= 2 && s.substr(s.size() - 2) == "\r\n") s.remove_suffix(2);
  else if (!s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

std::string_view trim_view(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

bool plausible_tool_name(std::string_view name) {
  return !name.empty() && name.find_first_of(" \t\r\n<>{}\"") == std::string_view::npos;
}

namespace {

/** The JSON Schema types `schema` allows: its "type" (a name or a list), else those of its anyOf /
 *  oneOf branches. */
void collect_types(const ojson& schema, std::vector<std::string>& types, int depth = 0) {
  if (!schema.is_object() || depth > 4) return;
  if (const auto t = schema.find("type"); t != schema.end()) {
    if (t->is_string()) types.push_back(t->get<std::string>());
    else if (t->is_array())
      for (const ojson& e : *t)
        if (e.is_string()) types.push_back(e.get<std::string>());
    return;
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    if (const auto b = schema.find(key); b != schema.end() && b->is_array())
      for (const ojson& e : *b) collect_types(e, types, depth + 1);
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/** `text` read as a value of JSON Schema type `type`, or a discarded value. */
ojson as_type(const std::string& type, std::string_view text) {
  const std::string_view t = trim_view(text);
  if (type == "null") return lower(t) == "null" || t == "None" ? ojson(nullptr) : ojson(ojson::value_t::discarded);
  if (type == "boolean") {
    const std::string l = lower(t);
    if (l == "true") return true;
    if (l == "false") return false;
    return ojson(ojson::value_t::discarded);
  }
  const ojson j = ojson::parse(t, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return j;
  if ((type == "integer" && j.is_number_integer()) || (type == "number" && j.is_number()) ||
      (type == "object" && j.is_object()) || (type == "array" && j.is_array()))
    return j;
  return ojson(ojson::value_t::discarded);
}

}  // namespace

ojson typed_argument(const ToolSchemas& schemas, std::string_view function, std::string_view key, std::string_view text) {
  const auto tool = schemas.find(function);
  if (tool == schemas.end() || !tool->second.is_object()) return std::string(text);
  const auto props = tool->second.find("properties");
  if (props == tool->second.end() || !props->is_object()) return std::string(text);
  const auto prop = props->find(std::string(key));
  if (prop == props->end()) return std::string(text);
  std::vector<std::string> types;
  collect_types(*prop, types);
  // "null" first (the text "null" of a nullable string is null), then a string as written.
  if (std::find(types.begin(), types.end(), "null") != types.end()) {
    if (ojson j = as_type("null", text); !j.is_discarded()) return j;
  }
  if (types.empty() || std::find(types.begin(), types.end(), "string") != types.end()) return std::string(text);
  for (const std::string& type : types) {
    if (ojson j = as_type(type, text); !j.is_discarded()) return j;
  }
  return std::string(text);
}

}  // namespace ft::server
