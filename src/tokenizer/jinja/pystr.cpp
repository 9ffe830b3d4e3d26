#include "tokenizer/jinja/pystr.h"

#include <utf8proc.h>

#include <charconv>
#include <cmath>
#include <cstring>

#include "tokenizer/jinja/error.h"

namespace ft::jinja::py {

char32_t next_cp(std::string_view s, size_t& i) {
  auto c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) {
    ++i;
    return c;
  }
  int n = c >= 0xF8 ? -1 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
  if (n < 0 || i + static_cast<size_t>(n) >= s.size()) {
    ++i;
    return c;
  }
  char32_t cp = c & (0x3F >> n);
  for (int k = 1; k <= n; ++k) {
    auto cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  i += static_cast<size_t>(n) + 1;
  return cp;
}

void append_cp(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

static bool is_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

size_t length(std::string_view s) {
  size_t n = 0;
  for (char c : s)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++n;
  return n;
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(next_cp(s, i));
  return out;
}

bool is_space(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

static utf8proc_category_t category(char32_t cp) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(cp));
}
static bool cat_upper(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_LU; }
static bool cat_lower(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_LL; }
static bool cat_title(char32_t cp) { return category(cp) == UTF8PROC_CATEGORY_LT; }
static bool is_cased(char32_t cp) { return cat_upper(cp) || cat_lower(cp) || cat_title(cp); }
static bool is_letter(char32_t cp) {
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT ||
         c == UTF8PROC_CATEGORY_LM || c == UTF8PROC_CATEGORY_LO;
}
static bool is_numeric(char32_t cp) {
  auto c = category(cp);
  return c == UTF8PROC_CATEGORY_ND || c == UTF8PROC_CATEGORY_NL || c == UTF8PROC_CATEGORY_NO;
}
static char32_t to_upper(char32_t cp) {
  if (cp < 0x80) return (cp >= 'a' && cp <= 'z') ? cp - 32 : cp;
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
static char32_t to_lower(char32_t cp) {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
static char32_t to_title(char32_t cp) {
  if (cp < 0x80) return to_upper(cp);
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

template <typename F>
static std::string map_cps(std::string_view s, F f) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char c : s) out.push_back(static_cast<char>(f(static_cast<char32_t>(c))));
    return out;
  }
  for (size_t i = 0; i < s.size();) append_cp(out, f(next_cp(s, i)));
  return out;
}

std::string upper(std::string_view s) {
  // Full case mappings that expand (SpecialCasing.txt), which utf8proc's simple mapping lacks.
  if (s.find("\xc3\x9f") == std::string_view::npos && s.find("\xef\xac") == std::string_view::npos)
    return map_cps(s, to_upper);
  std::string out;
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_cp(s, i);
    switch (c) {
      case 0xDF: out += "SS"; break;
      case 0xFB00: out += "FF"; break;
      case 0xFB01: out += "FI"; break;
      case 0xFB02: out += "FL"; break;
      case 0xFB03: out += "FFI"; break;
      case 0xFB04: out += "FFL"; break;
      case 0xFB05: case 0xFB06: out += "ST"; break;
      default: append_cp(out, to_upper(c));
    }
  }
  return out;
}
std::string lower(std::string_view s) { return map_cps(s, to_lower); }
std::string swapcase(std::string_view s) {
  return map_cps(s, [](char32_t c) { return cat_upper(c) ? to_lower(c) : cat_lower(c) ? to_upper(c) : c; });
}

std::string title(std::string_view s) {
  bool prev_cased = false;
  return map_cps(s, [&](char32_t c) {
    char32_t r = prev_cased ? to_lower(c) : to_title(c);
    prev_cased = is_cased(c);
    return r;
  });
}

std::string capitalize(std::string_view s) {
  bool first = true;
  return map_cps(s, [&](char32_t c) {
    char32_t r = first ? to_title(c) : to_lower(c);
    first = false;
    return r;
  });
}

template <typename F>
static bool all_cps(std::string_view s, F f) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size();)
    if (!f(next_cp(s, i))) return false;
  return true;
}

bool is_upper(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_cp(s, i);
    if (cat_lower(c) || cat_title(c)) return false;
    if (cat_upper(c)) cased = true;
  }
  return cased;
}
bool is_lower(std::string_view s) {
  bool cased = false;
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_cp(s, i);
    if (cat_upper(c) || cat_title(c)) return false;
    if (cat_lower(c)) cased = true;
  }
  return cased;
}
bool is_alpha(std::string_view s) { return all_cps(s, is_letter); }
bool is_digit(std::string_view s) {
  return all_cps(s, [](char32_t c) { return category(c) == UTF8PROC_CATEGORY_ND; });
}
bool is_alnum(std::string_view s) {
  return all_cps(s, [](char32_t c) { return is_letter(c) || is_numeric(c); });
}
bool is_all_space(std::string_view s) { return all_cps(s, is_space); }
bool is_word_char(char32_t cp) { return cp == '_' || is_letter(cp) || is_numeric(cp); }

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::vector<char32_t> set;
  if (chars) set = code_points(*chars);
  auto drop = [&](char32_t c) {
    if (!chars) return is_space(c);
    for (char32_t x : set)
      if (x == c) return true;
    return false;
  };
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      size_t j = b;
      if (!drop(next_cp(s, j))) break;
      b = j;
    }
  }
  if (right) {
    while (e > b) {
      size_t start = e - 1;
      while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
      size_t j = start;
      if (!drop(next_cp(s, j))) break;
      e = start;
    }
  }
  return std::string(s.substr(b, e - b));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) raise(ErrorKind::kValueError, "empty separator");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  size_t i = 0;
  while (true) {
    // skip whitespace
    while (i < s.size()) {
      size_t j = i;
      if (!is_space(next_cp(s, j))) break;
      i = j;
    }
    if (i >= s.size()) break;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) >= maxsplit) {
      // remainder, with trailing whitespace removed
      out.push_back(strip(s.substr(i), std::nullopt, false, true));
      break;
    }
    size_t start = i;
    while (i < s.size()) {
      size_t j = i;
      if (is_space(next_cp(s, j))) break;
      i = j;
    }
    out.emplace_back(s.substr(start, i - start));
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    if (sep->empty()) raise(ErrorKind::kValueError, "empty separator");
    size_t end = s.size();
    while (static_cast<int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    std::vector<char32_t> cps = code_points(s);
    int64_t e = static_cast<int64_t>(cps.size());
    auto encode = [&](int64_t a, int64_t b) {
      std::string r;
      for (int64_t k = a; k < b; ++k) append_cp(r, cps[static_cast<size_t>(k)]);
      return r;
    };
    while (true) {
      while (e > 0 && is_space(cps[static_cast<size_t>(e - 1)])) --e;
      if (e <= 0) break;
      if (static_cast<int64_t>(out.size()) >= maxsplit) {
        out.push_back(encode(0, e));
        break;
      }
      int64_t b = e;
      while (b > 0 && !is_space(cps[static_cast<size_t>(b - 1)])) --b;
      out.push_back(encode(b, e));
      e = b;
    }
  }
  return std::vector<std::string>(out.rbegin(), out.rend());
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> out;
  size_t i = 0, start = 0;
  while (i < s.size()) {
    size_t j = i;
    char32_t c = next_cp(s, j);
    bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
               c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      i = j;
      continue;
    }
    size_t end_line = i;
    if (c == '\r' && j < s.size() && s[j] == '\n') ++j;
    out.emplace_back(s.substr(start, (keepends ? j : end_line) - start));
    start = i = j;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

void check_str_bytes(size_t bytes) {
  if (bytes > kMaxStrBytes) raise(ErrorKind::kOverflowError, "string of {} bytes is too large (at most {})", bytes, kMaxStrBytes);
}

std::string replace(std::string_view s, std::string_view old_s, std::string_view new_s, int64_t count) {
  std::string out;
  if (old_s.empty()) {
    int64_t n = 0;
    size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || n < count) {
        out.append(new_s);
        ++n;
        check_str_bytes(out.size());
      }
      if (i == s.size()) break;
      size_t j = i;
      next_cp(s, j);
      out.append(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t hit = s.find(old_s, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_s);
    check_str_bytes(out.size());
    pos = hit + old_s.size();
    ++n;
  }
  out.append(s.substr(pos));
  return out;
}

int64_t find(std::string_view s, std::string_view sub, bool reverse) {
  size_t hit = reverse ? s.rfind(sub) : s.find(sub);
  if (hit == std::string_view::npos) return -1;
  return static_cast<int64_t>(length(s.substr(0, hit)));
}

int64_t count(std::string_view s, std::string_view sub) {
  if (sub.empty()) return static_cast<int64_t>(length(s)) + 1;
  int64_t n = 0;
  for (size_t pos = s.find(sub); pos != std::string_view::npos; pos = s.find(sub, pos + sub.size())) ++n;
  return n;
}

std::vector<int64_t> slice_indices(int64_t n, std::optional<int64_t> start, std::optional<int64_t> stop,
                                   std::optional<int64_t> step) {
  int64_t st = step.value_or(1);
  if (st == 0) raise(ErrorKind::kValueError, "slice step cannot be zero");
  auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
    if (!v) return dflt;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = st < 0 ? -1 : 0;
    } else if (x >= n) {
      x = st < 0 ? n - 1 : n;
    }
    return x;
  };
  int64_t b = clamp(start, st < 0 ? n - 1 : 0);
  int64_t e = clamp(stop, st < 0 ? -1 : n);
  std::vector<int64_t> idx;
  if (st > 0)
    for (int64_t k = b; k < e; k += st) idx.push_back(k);
  else
    for (int64_t k = b; k > e; k += st) idx.push_back(k);
  return idx;
}

std::string slice(std::string_view s, std::optional<int64_t> start, std::optional<int64_t> stop,
                  std::optional<int64_t> step) {
  std::string out;
  if (is_ascii(s)) {
    for (int64_t k : slice_indices(static_cast<int64_t>(s.size()), start, stop, step))
      out.push_back(s[static_cast<size_t>(k)]);
    return out;
  }
  std::vector<char32_t> cps = code_points(s);
  for (int64_t k : slice_indices(static_cast<int64_t>(cps.size()), start, stop, step))
    append_cp(out, cps[static_cast<size_t>(k)]);
  return out;
}

std::string pad(std::string_view s, int64_t width, char32_t fill, int where) {
  int64_t n = static_cast<int64_t>(length(s));
  if (width <= n) return std::string(s);
  check_str_bytes(static_cast<size_t>(width));
  int64_t total = width - n, left = 0;
  if (where == 1) left = total;
  else if (where == 0) left = total / 2 + (total & width & 1);  // CPython's str.center rounding
  std::string out, f;
  append_cp(f, fill);
  for (int64_t k = 0; k < left; ++k) out += f;
  out.append(s);
  for (int64_t k = 0; k < total - left; ++k) out += f;
  return out;
}

static bool is_printable(char32_t cp) {
  if (cp == ' ') return true;
  switch (category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    char32_t c = next_cp(s, i);
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c < 0x7F || is_printable(c)) {
      append_cp(out, c);
    } else if (c <= 0xFF) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if (c <= 0xFFFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out += fmt::format("\\U{:08x}", static_cast<unsigned>(c));
    }
  }
  out.push_back(quote);
  return out;
}

std::string float_repr(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // "-1.2345e+20": shortest round-trip digits
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp10 = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  int decpt = exp10 + 1;  // value = 0.digits * 10^decpt
  std::string out;
  if (neg) out.push_back('-');
  if (decpt <= -4 || decpt > 16) {
    out.push_back(digits[0]);
    if (digits.size() > 1) {
      out.push_back('.');
      out.append(digits, 1, std::string::npos);
    }
    out += fmt::format("e{}{:02d}", exp10 < 0 ? '-' : '+', std::abs(exp10));
  } else if (decpt <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-decpt), '0');
    out += digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out += digits;
    out.append(static_cast<size_t>(decpt) - digits.size(), '0');
    out += ".0";
  } else {
    out.append(digits, 0, static_cast<size_t>(decpt));
    out.push_back('.');
    out.append(digits, static_cast<size_t>(decpt), std::string::npos);
  }
  return out;
}

}  // namespace ft::jinja::py
