#include "server/json_grammar_rules.h"

namespace ft::server {

namespace g = ft::grammar;

namespace {

g::Expr digit() { return g::chars({{'0', '9'}}); }
g::Expr hex() { return g::chars({{'0', '9'}, {'a', 'f'}, {'A', 'F'}}); }
g::Expr lower_hex() { return g::chars({{'0', '9'}, {'a', 'f'}}); }

// Two digits "00".."max" (max <= 99).
g::Expr two_digits(int max) {
  std::vector<g::Expr> alts;
  int tens = max / 10;
  if (tens > 0) alts.push_back(g::sequence({g::chars({{'0', static_cast<uint32_t>('0' + tens - 1)}}), digit()}));
  alts.push_back(g::sequence({g::chars(g::CharClass::single('0' + tens)),
                              g::chars({{'0', static_cast<uint32_t>('0' + max % 10)}})}));
  return g::alternatives(std::move(alts));
}

// Decimal strings of equal length from lo to hi (lo <= hi, digit by digit).
g::Expr same_length_range(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return g::sequence({});
  if (lo.find_first_not_of('0') == std::string::npos && hi.find_first_not_of('9') == std::string::npos)
    return g::repeat(digit(), static_cast<int64_t>(lo.size()), static_cast<int64_t>(lo.size()));
  const uint32_t a = static_cast<uint32_t>(lo[0]), b = static_cast<uint32_t>(hi[0]);
  const size_t rest = lo.size() - 1;
  if (a == b) return g::sequence({g::chars(g::CharClass::single(a)), same_length_range(lo.substr(1), hi.substr(1))});
  std::vector<g::Expr> alts;
  alts.push_back(g::sequence({g::chars(g::CharClass::single(a)), same_length_range(lo.substr(1), std::string(rest, '9'))}));
  if (b - a > 1) alts.push_back(g::sequence({g::chars({{a + 1, b - 1}}), g::repeat(digit(), static_cast<int64_t>(rest), static_cast<int64_t>(rest))}));
  alts.push_back(g::sequence({g::chars(g::CharClass::single(b)), same_length_range(std::string(rest, '0'), hi.substr(1))}));
  return g::alternatives(std::move(alts));
}

constexpr int64_t kMaxMagnitude = 9999999999999999;  // 16 digits, as integer()

// Non-negative integers in [lo, hi] without leading zeros.
g::Expr natural_range(int64_t lo, int64_t hi) {
  std::vector<g::Expr> alts;
  const std::string los = std::to_string(lo), his = std::to_string(hi);
  for (size_t len = los.size(); len <= his.size(); ++len) {
    std::string a(len, '0');
    a[0] = '1';
    if (len == los.size()) a = los;
    std::string b = len == his.size() ? his : std::string(len, '9');
    alts.push_back(same_length_range(a, b));
  }
  return g::alternatives(std::move(alts));
}

}  // namespace

g::Expr JsonRules::integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  const int64_t a = std::max(lo.value_or(-kMaxMagnitude), -kMaxMagnitude);
  const int64_t b = std::min(hi.value_or(kMaxMagnitude), kMaxMagnitude);
  std::vector<g::Expr> alts;
  if (a < 0) alts.push_back(g::sequence({g::literal("-"), natural_range(std::max<int64_t>(1, -b), -a)}));
  if (b >= 0) alts.push_back(natural_range(std::max<int64_t>(0, a), b));
  return g::alternatives(std::move(alts));
}

g::Expr JsonRules::number_range(int64_t lo, std::optional<int64_t> hi) {
  g::Expr frac = g::sequence({g::literal("."), g::repeat(digit(), 1, 15)});
  std::vector<g::Expr> alts;
  if (!hi || *hi > lo) alts.push_back(g::sequence({integer_range(lo, hi ? std::optional<int64_t>(*hi - 1) : std::nullopt), g::optional(frac)}));
  if (hi) alts.push_back(g::sequence({integer_range(*hi, *hi), g::optional(g::sequence({g::literal("."), g::repeat(g::literal("0"), 1, 15)}))}));
  return g::alternatives(std::move(alts));
}

g::RuleId JsonRules::string_char() {
  if (!char_) {
    g::Expr unescaped = g::chars({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, /*negated=*/true);
    // \uXXXX naming no surrogate: first digit not d/D, or d/D then 0-7.
    g::Expr u = g::alternatives({g::sequence({g::chars({{'0', '9'}, {'a', 'c'}, {'A', 'C'}, {'e', 'f'}, {'E', 'F'}}),
                                              g::repeat(hex(), 3, 3)}),
                                 g::sequence({g::chars({{'d', 'd'}, {'D', 'D'}}), g::chars({{'0', '7'}}),
                                              g::repeat(hex(), 2, 2)})});
    g::Expr escape = g::sequence(
        {g::literal("\\"), g::alternatives({g::chars({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'},
                                                      {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                                            g::sequence({g::literal("u"), u})})});
    char_ = b_.add("json-char", g::alternatives({unescaped, escape}));
  }
  return *char_;
}

g::Expr JsonRules::string_of_length(int64_t min, int64_t max) {
  return g::sequence({g::literal("\""), g::repeat(g::rule(string_char()), min, max), g::literal("\"")});
}

g::RuleId JsonRules::string() {
  if (!string_) string_ = b_.add("json-string", string_of_length(0, g::kUnbounded));
  return *string_;
}

g::RuleId JsonRules::integer() {
  if (!integer_) {
    integer_ = b_.add("json-integer",
                      g::sequence({g::optional(g::literal("-")),
                                   g::alternatives({g::literal("0"), g::sequence({g::chars({{'1', '9'}}),
                                                                                  g::repeat(digit(), 0, 15)})})}));
  }
  return *integer_;
}

g::RuleId JsonRules::number() {
  if (!number_) {
    g::Expr frac = g::sequence({g::literal("."), g::repeat(digit(), 1, 15)});
    g::Expr exp = g::sequence({g::chars({{'e', 'e'}, {'E', 'E'}}), g::optional(g::chars({{'+', '+'}, {'-', '-'}})),
                               g::repeat(digit(), 1, 2)});
    number_ = b_.add("json-number", g::sequence({g::rule(integer()), g::optional(frac), g::optional(exp)}));
  }
  return *number_;
}

g::RuleId JsonRules::value() {
  if (!value_) {
    value_ = b_.declare("json-value");
    b_.define(*value_, g::alternatives({g::rule(object()), g::rule(array()), g::rule(string()), g::rule(number()),
                                        g::literal("true"), g::literal("false"), g::literal("null")}));
  }
  return *value_;
}

g::RuleId JsonRules::object() {
  if (!object_) {
    object_ = b_.declare("json-object");
    g::Expr member = g::sequence({g::rule(string()), g::literal(":"), g::rule(value())});
    b_.define(*object_, g::sequence({g::literal("{"),
                                     g::optional(g::sequence({member, g::repeat(g::sequence({g::literal(","), member}),
                                                                                0, g::kUnbounded)})),
                                     g::literal("}")}));
  }
  return *object_;
}

g::RuleId JsonRules::array() {
  if (!array_) {
    array_ = b_.declare("json-array");
    g::Expr item = g::rule(value());
    b_.define(*array_, g::sequence({g::literal("["),
                                    g::optional(g::sequence({item, g::repeat(g::sequence({g::literal(","), item}), 0,
                                                                             g::kUnbounded)})),
                                    g::literal("]")}));
  }
  return *array_;
}

std::optional<g::Expr> JsonRules::format_string(std::string_view format) {
  g::Expr date = g::sequence({g::chars({{'1', '2'}}), g::repeat(digit(), 3, 3), g::literal("-"),
                              g::alternatives({g::sequence({g::literal("0"), g::chars({{'1', '9'}})}),
                                               g::sequence({g::literal("1"), g::chars({{'0', '2'}})})}),
                              g::literal("-"),
                              g::alternatives({g::sequence({g::literal("0"), g::chars({{'1', '9'}})}),
                                               g::sequence({g::literal("1"), digit()}),
                                               g::sequence({g::literal("2"), g::chars({{'0', '8'}})})})});
  g::Expr time = g::sequence({two_digits(23), g::literal(":"), two_digits(59), g::literal(":"), two_digits(59),
                              g::optional(g::sequence({g::literal("."), g::repeat(digit(), 1, 6)})), g::literal("Z")});
  auto quoted = [](g::Expr e) { return g::sequence({g::literal("\""), std::move(e), g::literal("\"")}); };
  if (format == "date") return quoted(date);
  if (format == "time") return quoted(time);
  if (format == "date-time") return quoted(g::sequence({date, g::literal("T"), time}));
  if (format == "uuid") {
    std::vector<g::Expr> parts;
    for (int n : {8, 4, 4, 4, 12}) {
      if (!parts.empty()) parts.push_back(g::literal("-"));
      parts.push_back(g::repeat(lower_hex(), n, n));
    }
    return quoted(g::sequence(std::move(parts)));
  }
  return std::nullopt;
}

}  // namespace ft::server
