#include "tokenizer/jinja/lexer.h"

#include <cstring>

#include "tokenizer/jinja/error.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

[[noreturn]] void syntax_error(int line, const std::string& msg) {
  throw TemplateError(ErrorKind::kTemplateSyntaxError, msg, line);
}

int count_newlines(std::string_view s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

// Python `\s` / str.isspace() at s[i]; returns the byte length of the space or 0.
size_t space_at(std::string_view s, size_t i) {
  size_t j = i;
  char32_t c = py::next_cp(s, j);
  return py::is_space(c) ? j - i : 0;
}

size_t skip_spaces(std::string_view s, size_t i) {
  while (i < s.size()) {
    size_t n = space_at(s, i);
    if (!n) break;
    i += n;
  }
  return i;
}

// str.rstrip() with Python whitespace.
std::string_view rstrip_space(std::string_view s) {
  size_t e = s.size();
  while (e > 0) {
    size_t b = e - 1;
    while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
    if (!space_at(s, b)) break;
    e = b;
  }
  return s.substr(0, e);
}

bool all_space(std::string_view s) {
  if (s.empty()) return false;  // jinja2 uses \s+ with fullmatch
  for (size_t i = 0; i < s.size();) {
    size_t n = space_at(s, i);
    if (!n) return false;
    i += n;
  }
  return true;
}

struct OpSpelling {
  const char* text;
  Op op;
};
// Longest first, as jinja2's operator regex is sorted by length.
constexpr OpSpelling kOps[] = {
    {"//", Op::kFloorDiv}, {"**", Op::kPow}, {"==", Op::kEq}, {"!=", Op::kNe}, {">=", Op::kGe},
    {"<=", Op::kLe},       {"+", Op::kAdd},  {"-", Op::kSub}, {"/", Op::kDiv}, {"*", Op::kMul},
    {"%", Op::kMod},       {"~", Op::kTilde}, {"[", Op::kLBracket}, {"]", Op::kRBracket},
    {"(", Op::kLParen},    {")", Op::kRParen}, {"{", Op::kLBrace}, {"}", Op::kRBrace}, {">", Op::kGt},
    {"<", Op::kLt},        {"=", Op::kAssign}, {".", Op::kDot}, {":", Op::kColon}, {"|", Op::kPipe},
    {",", Op::kComma},     {";", Op::kSemicolon},
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// (\d+_)*\d+ starting at i; returns end or i when no match.
size_t match_digits(std::string_view s, size_t i) {
  size_t j = i;
  if (j >= s.size() || !is_digit(s[j])) return i;
  while (true) {
    while (j < s.size() && is_digit(s[j])) ++j;
    if (j + 1 < s.size() && s[j] == '_' && is_digit(s[j + 1])) {
      ++j;
      continue;
    }
    return j;
  }
}

// jinja2 float_re: (?<!\.)(\d+_)*\d+((\.(\d+_)*\d+)?e[+\-]?(\d+_)*\d+|\.(\d+_)*\d+)
size_t match_float(std::string_view s, size_t i) {
  if (i > 0 && s[i - 1] == '.') return i;
  size_t j = match_digits(s, i);
  if (j == i) return i;
  size_t k = j;
  bool frac = false;
  if (k < s.size() && s[k] == '.') {
    size_t f = match_digits(s, k + 1);
    if (f != k + 1) {
      k = f;
      frac = true;
    }
  }
  if (k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
    size_t e = k + 1;
    if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
    size_t d = match_digits(s, e);
    if (d != e) return d;
  }
  return frac ? k : i;
}

std::string strip_underscores(std::string_view s) {
  std::string r;
  for (char c : s)
    if (c != '_') r.push_back(c);
  return r;
}

// Python string-literal escapes (jinja2 decodes with "unicode-escape").
std::string unescape(std::string_view body, int line) {
  std::string out;
  out.reserve(body.size());
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    char e = body[++i];
    auto hex = [&](int n) -> char32_t {
      if (i + static_cast<size_t>(n) >= body.size()) syntax_error(line, "truncated escape in string literal");
      char32_t v = 0;
      for (int k = 1; k <= n; ++k) {
        char h = body[i + static_cast<size_t>(k)];
        int d = is_digit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
        if (d < 0) syntax_error(line, "truncated escape in string literal");
        v = v * 16 + static_cast<char32_t>(d);
      }
      i += static_cast<size_t>(n);
      return v;
    };
    switch (e) {
      case '\n': break;
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': py::append_cp(out, hex(2)); break;
      case 'u': py::append_cp(out, hex(4)); break;
      case 'U': py::append_cp(out, hex(8)); break;
      default:
        if (e >= '0' && e <= '7') {
          char32_t v = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++k)
            v = v * 8 + static_cast<char32_t>(body[++i] - '0');
          py::append_cp(out, v);
        } else {
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    src_.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        src_.push_back('\n');
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        src_.push_back(raw[i]);
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
  }

  std::vector<Token> run() {
    std::string_view s = src_;
    toks_.reserve(src_.size() / 6 + 16);
    while (pos_ < s.size()) root();
    push(Tok::kEof, "");
    return std::move(toks_);
  }

 private:
  void push(Tok type, std::string text, Op op = Op::kNone) {
    Token t;
    t.type = type;
    t.op = op;
    t.line = line_;
    t.text = std::move(text);
    toks_.push_back(std::move(t));
  }

  // Applies `-` stripping or lstrip_blocks to the text before a tag and emits it.
  void emit_text(std::string_view text, char sign, bool is_variable) {
    std::string_view kept = text;
    if (sign == '-') {
      kept = rstrip_space(text);
    } else if (sign != '+' && !is_variable) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting_) && all_space(text.substr(l_pos))) kept = text.substr(0, l_pos);
    }
    if (!kept.empty()) push(Tok::kData, std::string(kept));
    line_ += count_newlines(text);
  }

  // Matches a block end at i: "+%}" | "-%}\s*" | "%}\n?". Returns end or npos.
  size_t block_end_at(size_t i) const {
    std::string_view s = src_;
    if (s.compare(i, 3, "+%}") == 0) return i + 3;
    if (s.compare(i, 3, "-%}") == 0) return skip_spaces(s, i + 3);
    if (s.compare(i, 2, "%}") == 0) return (i + 2 < s.size() && s[i + 2] == '\n') ? i + 3 : i + 2;
    return std::string_view::npos;
  }

  void root() {
    std::string_view s = src_;
    size_t p = pos_;
    while (true) {
      p = s.find('{', p);
      if (p == std::string_view::npos || p + 1 >= s.size()) {
        emit_text_plain(s.substr(pos_));
        pos_ = s.size();
        return;
      }
      char k = s[p + 1];
      if (k == '{' || k == '%' || k == '#') break;
      ++p;
    }
    char kind = s[p + 1];
    char sign = (p + 2 < s.size() && (s[p + 2] == '-' || s[p + 2] == '+')) ? s[p + 2] : 0;
    size_t after = p + 2 + (sign ? 1 : 0);
    if (kind == '%') {
      size_t raw_end = match_raw_begin(after);
      if (raw_end != std::string_view::npos) {
        emit_text(s.substr(pos_, p - pos_), sign, false);
        line_ += count_newlines(s.substr(p, raw_end - p));
        line_starting_ = s[raw_end - 1] == '\n';
        pos_ = raw_end;
        raw_body();
        return;
      }
    }
    emit_text(s.substr(pos_, p - pos_), sign, kind == '{');
    line_starting_ = false;
    pos_ = after;
    if (kind == '#') {
      comment();
    } else {
      push(kind == '{' ? Tok::kVarBegin : Tok::kBlockBegin, "");
      tag(kind == '{');
    }
  }

  void emit_text_plain(std::string_view text) {
    if (!text.empty()) push(Tok::kData, std::string(text));
    line_ += count_newlines(text);
  }

  // After "{%" and its sign: \s*raw\s*(-%}\s*|%}). Returns end or npos.
  size_t match_raw_begin(size_t i) const {
    std::string_view s = src_;
    i = skip_spaces(s, i);
    if (s.compare(i, 3, "raw") != 0) return std::string_view::npos;
    i = skip_spaces(s, i + 3);
    if (s.compare(i, 3, "-%}") == 0) return skip_spaces(s, i + 3);
    if (s.compare(i, 2, "%}") == 0) return i + 2;
    return std::string_view::npos;
  }

  void raw_body() {
    std::string_view s = src_;
    size_t p = pos_;
    while (true) {
      p = s.find("{%", p);
      if (p == std::string_view::npos) syntax_error(line_, "Missing end of raw directive");
      char sign = (p + 2 < s.size() && (s[p + 2] == '-' || s[p + 2] == '+')) ? s[p + 2] : 0;
      size_t i = skip_spaces(s, p + 2 + (sign ? 1 : 0));
      if (s.compare(i, 6, "endraw") == 0) {
        size_t e = block_end_at(skip_spaces(s, i + 6));
        if (e != std::string_view::npos) {
          emit_text(s.substr(pos_, p - pos_), sign, false);
          line_ += count_newlines(s.substr(p, e - p));
          line_starting_ = s[e - 1] == '\n';
          pos_ = e;
          return;
        }
      }
      p += 2;
    }
  }

  void comment() {
    std::string_view s = src_;
    for (size_t p = pos_; p < s.size(); ++p) {
      size_t e = std::string_view::npos;
      if (s.compare(p, 3, "+#}") == 0) e = p + 3;
      else if (s.compare(p, 3, "-#}") == 0) e = skip_spaces(s, p + 3);
      else if (s.compare(p, 2, "#}") == 0) e = (p + 2 < s.size() && s[p + 2] == '\n') ? p + 3 : p + 2;
      if (e == std::string_view::npos) continue;
      line_ += count_newlines(s.substr(pos_, e - pos_));
      line_starting_ = s[e - 1] == '\n';
      pos_ = e;
      return;
    }
    syntax_error(line_, "Missing end of comment tag");
  }

  void tag(bool variable) {
    std::string_view s = src_;
    std::vector<char> balance;
    size_t i = pos_;
    while (true) {
      if (i >= s.size()) {
        syntax_error(line_, variable ? "unexpected end of template, expected end of print statement"
                                     : "unexpected end of template, expected end of statement block");
      }
      if (balance.empty() && (s[i] == '-' || s[i] == '+' || s[i] == '%' || s[i] == '}')) {
        size_t e = std::string_view::npos;
        if (variable) {
          if (s.compare(i, 3, "-}}") == 0) e = skip_spaces(s, i + 3);
          else if (s.compare(i, 2, "}}") == 0) e = i + 2;
        } else {
          e = block_end_at(i);
        }
        if (e != std::string_view::npos) {
          push(variable ? Tok::kVarEnd : Tok::kBlockEnd, "");
          line_ += count_newlines(s.substr(i, e - i));
          line_starting_ = s[e - 1] == '\n';
          pos_ = e;
          return;
        }
      }
      if (size_t n = space_at(s, i)) {
        line_ += s[i] == '\n';
        i += n;
        continue;
      }
      if (size_t e = match_float(s, i); e != i) {
        Token t;
        t.type = Tok::kFloat;
        t.line = line_;
        t.text = std::string(s.substr(i, e - i));
        t.fval = std::strtod(strip_underscores(t.text).c_str(), nullptr);
        toks_.push_back(std::move(t));
        i = e;
        continue;
      }
      if (is_digit(s[i])) {
        i = integer(i);
        continue;
      }
      if (is_name_start(s[i])) {
        size_t e = i;
        while (e < s.size() && is_name_char(s[e])) ++e;
        push(Tok::kName, std::string(s.substr(i, e - i)));
        i = e;
        continue;
      }
      if (s[i] == '\'' || s[i] == '"') {
        i = string_literal(i);
        continue;
      }
      bool matched = false;
      for (const auto& o : kOps) {
        if (o.text[0] != s[i]) continue;
        size_t n = o.text[1] ? 2 : 1;
        if (n == 2 && (i + 1 >= s.size() || s[i + 1] != o.text[1])) continue;
        if (o.op == Op::kLBrace || o.op == Op::kLParen || o.op == Op::kLBracket) {
          balance.push_back(o.op == Op::kLBrace ? '}' : o.op == Op::kLParen ? ')' : ']');
        } else if (o.op == Op::kRBrace || o.op == Op::kRParen || o.op == Op::kRBracket) {
          if (balance.empty()) syntax_error(line_, fmt::format("unexpected '{}'", o.text));
          char want = balance.back();
          balance.pop_back();
          if (want != o.text[0]) syntax_error(line_, fmt::format("unexpected '{}', expected '{}'", o.text, want));
        }
        push(Tok::kOp, o.text, o.op);
        i += n;
        matched = true;
        break;
      }
      if (!matched) {
        size_t j = i;
        std::string ch;
        py::append_cp(ch, py::next_cp(s, j));
        syntax_error(line_, fmt::format("unexpected char {} at {}", py::repr(ch), i));
      }
    }
  }

  size_t integer(size_t i) {
    std::string_view s = src_;
    size_t e = i;
    int base = 10;
    if (s[i] == '0' && i + 1 < s.size() && std::strchr("bBoOxX", s[i + 1]) && s[i + 1] != 0) {
      char b = static_cast<char>(s[i + 1] | 0x20);
      base = b == 'b' ? 2 : b == 'o' ? 8 : 16;
      e = i + 2;
      while (e < s.size() && (std::isxdigit(static_cast<unsigned char>(s[e])) || s[e] == '_')) ++e;
    } else {
      e = match_digits(s, i);
    }
    Token t;
    t.type = Tok::kInt;
    t.line = line_;
    t.text = std::string(s.substr(i, e - i));
    std::string digits = strip_underscores(base == 10 ? t.text : t.text.substr(2));
    errno = 0;
    t.ival = std::strtoll(digits.c_str(), nullptr, base);
    if (errno == ERANGE) syntax_error(line_, "integer literal too large");
    toks_.push_back(std::move(t));
    return e;
  }

  size_t string_literal(size_t i) {
    std::string_view s = src_;
    char q = s[i];
    size_t j = i + 1;
    while (j < s.size() && s[j] != q) j += (s[j] == '\\') ? 2 : 1;
    if (j >= s.size()) syntax_error(line_, "unexpected char " + py::repr(std::string(1, q)) + " at " + std::to_string(i));
    Token t;
    t.type = Tok::kString;
    t.line = line_;
    t.text = unescape(s.substr(i + 1, j - i - 1), line_);
    toks_.push_back(std::move(t));
    line_ += count_newlines(s.substr(i, j - i));
    return j + 1;
  }

  std::string src_;
  size_t pos_ = 0;
  int line_ = 1;
  bool line_starting_ = true;
  std::vector<Token> toks_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::kEof: return "end of template";
    case Tok::kVarEnd: return "end of print statement";
    case Tok::kBlockEnd: return "end of statement block";
    case Tok::kVarBegin: return "begin of print statement";
    case Tok::kBlockBegin: return "begin of statement block";
    case Tok::kData: return "template data / text";
    case Tok::kInt:
    case Tok::kFloat: return t.text;
    case Tok::kString: return py::repr(t.text);
    default: return t.text;
  }
}

}  // namespace ft::jinja
