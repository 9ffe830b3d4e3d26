#pragma once
// The compact JSON grammar's building blocks (RFC 8259 syntax without insignificant whitespace), made
// once per GrammarBuilder on first use: any value, object, array, string, string character, number,
// integer, and the string formats generated exactly (date, time, date-time, uuid).
#include <optional>
#include <string>
#include <string_view>

#include "engine/grammar/grammar.h"

namespace ft::server {

class JsonRules {
 public:
  explicit JsonRules(grammar::GrammarBuilder& b) : b_(b) {}

  /** Any JSON value. */
  grammar::RuleId value();
  /** Any JSON object / array. */
  grammar::RuleId object();
  grammar::RuleId array();
  /** A JSON string (quotes included) of any length. */
  grammar::RuleId string();
  /** One character of a string's contents: an unescaped code point (not '"', '\\' or a control
   *  character) or an escape; \u escapes name no surrogate (lone surrogates are not text). */
  grammar::RuleId string_char();
  /** A string of min..max characters (max may be grammar::kUnbounded). */
  grammar::Expr string_of_length(int64_t min, int64_t max);
  /** Number: -?(0|[1-9][0-9]{0,15})(.[0-9]{1,15})?([eE][+-]?[0-9]{1,2})?  (always a finite double). */
  grammar::RuleId number();
  /** Integer: -?(0|[1-9][0-9]{0,15}). */
  grammar::RuleId integer();
  /** An integer in [lo, hi] (each bound optional; the unbounded ends stop at 16 digits like
   *  integer()), no leading zeros, "-0" never. Requires lo <= hi. */
  grammar::Expr integer_range(std::optional<int64_t> lo, std::optional<int64_t> hi);
  /** A number in [lo, hi] for integer bounds with 0 <= lo (hi optional): an integer part in
   *  [lo, hi - 1] with an optional fraction, or hi itself with an optional all-zero fraction; no
   *  exponent. Requires lo <= hi. */
  grammar::Expr number_range(int64_t lo, std::optional<int64_t> hi);
  /** The string (quotes included) of a format generated exactly: "date" (YYYY-MM-DD, days 01-28 so
   *  every one exists), "time" (HH:MM:SS with an optional fraction, then Z), "date-time" (date T time),
   *  "uuid" (8-4-4-4-12 lowercase hex); nullopt for other formats. */
  std::optional<grammar::Expr> format_string(std::string_view format);

 private:
  grammar::GrammarBuilder& b_;
  std::optional<grammar::RuleId> value_, object_, array_, string_, char_, number_, integer_;
};

}  // namespace ft::server
