#include "server/prompt_literals.h"

#include <string>

namespace ft::server {
namespace {

bool literal_role(const nlohmann::ordered_json& m) {
  const auto role = m.find("role");
  if (role == m.end() || !role->is_string()) return false;
  const std::string& r = role->get_ref<const std::string&>();
  return r == "user" || r == "system" || r == "developer" || r == "tool";
}

/** The message's content texts: the string, or each text part's text. */
std::vector<std::string_view> content_texts(const nlohmann::ordered_json& m) {
  std::vector<std::string_view> out;
  const auto c = m.find("content");
  if (c == m.end()) return out;
  if (c->is_string()) {
    out.push_back(c->get_ref<const std::string&>());
  } else if (c->is_array()) {
    for (const auto& part : *c) {
      const auto t = part.is_object() ? part.find("text") : part.end();
      if (part.is_object() && t != part.end() && t->is_string()) out.push_back(t->get_ref<const std::string&>());
    }
  }
  return out;
}

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace

std::vector<std::pair<size_t, size_t>> message_literal_ranges(const Vocab& vocab, std::string_view prompt,
                                                              const nlohmann::ordered_json& messages) {
  std::vector<std::pair<size_t, size_t>> ranges;
  if (!messages.is_array()) return ranges;
  size_t cursor = 0;
  for (const auto& m : messages) {
    if (!m.is_object() || !literal_role(m)) continue;
    for (std::string_view text : content_texts(m)) {
      if (text.empty() || !vocab.spells_control_token(text)) continue;
      for (std::string_view want : {text, trimmed(text)}) {
        if (want.empty()) continue;
        const size_t at = prompt.find(want, cursor);
        if (at == std::string_view::npos) continue;
        ranges.emplace_back(at, at + want.size());
        cursor = at + want.size();
        break;
      }
    }
  }
  return ranges;
}

std::vector<int32_t> encode_chat_prompt(const Vocab& vocab, std::string_view prompt,
                                        const nlohmann::ordered_json& messages) {
  const std::vector<std::pair<size_t, size_t>> literal = message_literal_ranges(vocab, prompt, messages);
  EncodeOptions opts{/*add_special=*/false, /*parse_special=*/true};
  opts.literal = literal;
  return vocab.encode(prompt, opts);
}

}  // namespace ft::server
