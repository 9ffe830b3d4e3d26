#include "tokenizer/special_tokens.h"

#include <algorithm>
#include <cstring>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace ft {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'; }

bool is_word_cp(uint32_t cp) {
  if (cp == '_') return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// Is the character ending just before `pos` a word character?
bool word_before(std::string_view s, size_t pos) {
  if (pos == 0) return false;
  size_t b = pos - 1;
  while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80 && pos - b < 4) --b;
  Utf8Char c = utf8_decode(s.substr(b, pos - b));
  return c.status == Utf8Char::kValid && is_word_cp(c.cp);
}

bool word_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return false;
  Utf8Char c = utf8_decode(s.substr(pos));
  return c.status == Utf8Char::kValid && is_word_cp(c.cp);
}

}  // namespace

void SpecialTokenMatcher::build(const TokenTable& table) {
  for (auto& v : by_first_byte_) v.clear();
  const uint32_t mask = token_attr::kControl | token_attr::kUnknown | token_attr::kUserDefined;
  for (int32_t id = 0; id < table.size(); ++id) {
    const TokenData& t = table.tokens[id];
    if (!(t.attr & mask) || t.text.empty()) continue;
    by_first_byte_[static_cast<uint8_t>(t.text[0])].push_back({t.text, id, t.attr});
  }
  for (auto& v : by_first_byte_) {
    std::stable_sort(v.begin(), v.end(), [](const Entry& a, const Entry& b) { return a.text.size() > b.text.size(); });
  }
}

void SpecialTokenMatcher::partition(std::string_view text, bool parse_special, std::vector<Fragment>& out,
                                    std::span<const std::pair<size_t, size_t>> literal) const {
  const uint32_t special = token_attr::kControl | token_attr::kUnknown;
  size_t text_start = 0;  // start of the pending plain-text fragment
  size_t i = 0;
  size_t lit = 0;  // the first literal range that ends after i
  while (i < text.size()) {
    while (lit < literal.size() && literal[lit].second <= i) ++lit;
    const auto& cands = by_first_byte_[static_cast<uint8_t>(text[i])];
    const Entry* hit = nullptr;
    for (const Entry& e : cands) {
      const bool control = (e.attr & special) && !(e.attr & token_attr::kUserDefined);
      if (control && !parse_special) continue;
      // A control token may not overlap a literal range [b, e): it must end by b or start at or after e.
      if (control && lit < literal.size() && i + e.text.size() > literal[lit].first) continue;
      if (e.text.size() > text.size() - i || std::memcmp(e.text.data(), text.data() + i, e.text.size()) != 0) continue;
      if ((e.attr & token_attr::kSingleWord) && (word_before(text, i) || word_at(text, i + e.text.size()))) continue;
      hit = &e;
      break;
    }
    if (!hit) {
      ++i;
      continue;
    }
    size_t left_end = i;
    if (hit->attr & token_attr::kLstrip)
      while (left_end > text_start && is_space(text[left_end - 1])) --left_end;
    if (left_end > text_start) out.push_back({text.substr(text_start, left_end - text_start), -1, text_start});
    out.push_back({text.substr(i, hit->text.size()), hit->id, i});
    i += hit->text.size();
    if (hit->attr & token_attr::kRstrip)
      while (i < text.size() && is_space(text[i])) ++i;
    text_start = i;
  }
  if (text_start < text.size()) out.push_back({text.substr(text_start), -1, text_start});
}

}  // namespace ft
