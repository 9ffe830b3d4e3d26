#pragma once
// Python operator semantics on Values: arithmetic (+ - * / // % ** with int/float promotion, str and
// list concatenation/repetition, printf-style str % args, Markup escaping), comparisons, `in`,
// unary minus. Errors carry CPython's wording ("can only concatenate str (not "int") to str").
#include "tokenizer/jinja/ast.h"

namespace ft::jinja {

/** a op b. UndefinedError when either side is undefined; TypeError for unsupported types. */
Value binary_op(BinOp op, const Value& a, const Value& b);
/** a op b for ==, !=, <, <=, >, >=, in, not in. */
bool compare(CmpOp op, const Value& a, const Value& b);
/** Python `needle in container`. */
bool contains(const Value& container, const Value& needle);
/** Python a < b (TypeError for unorderable types). */
bool less_than(const Value& a, const Value& b);
/** -v / +v. */
Value negate(const Value& v);
Value unary_plus(const Value& v);
/** printf-style formatting: fmt % args (args: a tuple or a single value or a dict). */
std::string percent_format(const std::string& fmt, const Value& args);
/** markupsafe.escape(str(v)): & < > " ' as HTML entities. */
std::string html_escape(const std::string& s);

}  // namespace ft::jinja
