#include "tokenizer/wordpiece.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace ft {
namespace {

// CJK ideograph blocks, as Hugging Face's BertNormalizer (_is_chinese_char) defines them.
bool is_chinese_char(uint32_t cp) {
  return (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0x3400 && cp <= 0x4DBF) || (cp >= 0x20000 && cp <= 0x2A6DF) ||
         (cp >= 0x2A700 && cp <= 0x2B73F) || (cp >= 0x2B740 && cp <= 0x2B81F) || (cp >= 0x2B920 && cp <= 0x2CEAF) ||
         (cp >= 0xF900 && cp <= 0xFAFF) || (cp >= 0x2F800 && cp <= 0x2FA1F);
}

std::vector<std::string> bert_words(std::string_view text, const WordPieceOptions& opts) {
  std::string buf;
  if (opts.strip_accents) {
    utf8proc_uint8_t* nfd = nullptr;
    auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                          static_cast<utf8proc_ssize_t>(text.size()), &nfd,
                          static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_DECOMPOSE));
    if (n >= 0) {
      buf.assign(reinterpret_cast<const char*>(nfd), static_cast<size_t>(n));
      text = buf;
    }
    std::free(nfd);
  }
  std::vector<std::string> words(1);
  for (size_t i = 0; i < text.size();) {
    Utf8Char c = utf8_decode(text.substr(i));
    i += c.len;
    if (c.status != Utf8Char::kValid) continue;
    const auto cp = static_cast<utf8proc_int32_t>(c.cp);
    const auto cat = utf8proc_category(cp);
    const bool space = c.cp == ' ' || c.cp == '\t' || c.cp == '\n' || c.cp == '\r' || cat == UTF8PROC_CATEGORY_ZS;
    if (space) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const bool control = cat == UTF8PROC_CATEGORY_CC || cat == UTF8PROC_CATEGORY_CF || cat == UTF8PROC_CATEGORY_CN ||
                         cat == UTF8PROC_CATEGORY_CO || cat == UTF8PROC_CATEGORY_CS;
    if (c.cp == 0 || c.cp == 0xFFFD || control) continue;
    if (opts.strip_accents && cat == UTF8PROC_CATEGORY_MN) continue;
    std::string s;
    utf8_append(s, opts.lowercase ? static_cast<uint32_t>(utf8proc_tolower(cp)) : c.cp);
    const bool punct = (cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO) ||
                       (c.cp < 0x7F && cat >= UTF8PROC_CATEGORY_SM && cat <= UTF8PROC_CATEGORY_SO);
    if (punct || is_chinese_char(c.cp)) {
      if (!words.back().empty()) words.emplace_back();
      words.back() = std::move(s);
      words.emplace_back();
    } else {
      words.back() += s;
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void wordpiece_encode(const TokenTable& table, std::string_view text, const WordPieceOptions& opts, int32_t unk,
                      std::vector<int32_t>& out) {
  for (const std::string& word : bert_words(text, opts)) {
    const std::string w = "\xE2\x96\x81" + word;
    const size_t n = w.size(), start = out.size();
    bool ok = true;
    for (size_t i = 0; i < n && ok;) {
      ok = false;
      for (size_t j = std::min(n, i + opts.max_token_len + 1); j > i; --j) {
        const int32_t id = table.find(std::string_view(w).substr(i, j - i));
        if (id >= 0) {
          out.push_back(id);
          i = j;
          ok = true;
          break;
        }
      }
    }
    if (!ok) out.resize(start);
    if (out.size() == start && unk >= 0) out.push_back(unk);
  }
}

}  // namespace ft
