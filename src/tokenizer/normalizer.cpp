#include "tokenizer/normalizer.h"

#include <cstdlib>

#include <utf8proc.h>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace ft {
namespace {

std::string utf8proc_transform(std::string_view text, int options) {
  utf8proc_uint8_t* out = nullptr;
  auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                        static_cast<utf8proc_ssize_t>(text.size()), &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) fail(ErrorCode::kInvalidArgument, "normalizer: {}", utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

// Applies a per-code-point function to valid UTF-8.
template <typename F>
std::string map_codepoints(std::string_view text, F&& f) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    Utf8Char c = utf8_decode(text.substr(i));
    if (c.status != Utf8Char::kValid) {  // callers validate; copy stray bytes unchanged
      out += text[i++];
      continue;
    }
    f(c.cp, out);
    i += c.len;
  }
  return out;
}

}  // namespace

void Normalizer::add(Kind kind, std::string a, std::string b, bool regex) {
  Step s{kind, std::move(a), std::move(b), nullptr};
  if (kind == Kind::kReplace && regex) s.regex = std::make_shared<const Regex>(s.a);
  steps_.push_back(std::move(s));
}

std::string Normalizer::apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kNFC: s = utf8proc_transform(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE); break;
      case Kind::kNFD: s = utf8proc_transform(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); break;
      case Kind::kNFKC: s = utf8proc_transform(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
      case Kind::kNFKD: s = utf8proc_transform(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
      case Kind::kLowercase:
        s = map_codepoints(s, [](uint32_t cp, std::string& out) {
          utf8_append(out, static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
        });
        break;
      case Kind::kStripAccents:
        s = map_codepoints(s, [](uint32_t cp, std::string& out) {
          if (utf8proc_category(static_cast<utf8proc_int32_t>(cp)) != UTF8PROC_CATEGORY_MN) utf8_append(out, cp);
        });
        break;
      case Kind::kPrepend:
        if (!s.empty()) s.insert(0, step.a);
        break;
      case Kind::kReplace:
        if (step.regex) {
          std::vector<std::pair<size_t, size_t>> hits;
          step.regex->find_all(s, hits);
          std::string out;
          size_t pos = 0;
          for (auto [b, e] : hits) {
            out.append(s, pos, b - pos);
            out.append(step.b);
            pos = e;
          }
          out.append(s, pos);
          s.swap(out);
        } else {
          replace_all(s, step.a, step.b);
        }
        break;
    }
  }
  return s;
}

}  // namespace ft
