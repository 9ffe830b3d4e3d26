// Builtin tests (jinja2/tests.py, 3.1): `x is defined`, `x is string`, `x is divisibleby 3`, ...
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

const Value& one_arg(const char* name, CallArgs& args) {
  if (args.pos.size() != 1 || !args.kw.empty()) raise(ErrorKind::kTypeError, "test '{}' takes exactly one argument", name);
  return args.pos[0];
}
void no_args(const char* name, CallArgs& args) {
  if (!args.pos.empty() || !args.kw.empty()) raise(ErrorKind::kTypeError, "test '{}' takes no arguments", name);
}

#define SIMPLE_TEST(fn, name, expr)                    \
  bool fn(Interpreter&, const Value& v, CallArgs& a) { \
    no_args(name, a);                                  \
    return (expr);                                     \
  }

SIMPLE_TEST(t_defined, "defined", !v.is_undefined())
SIMPLE_TEST(t_undefined, "undefined", v.is_undefined())
SIMPLE_TEST(t_none, "none", v.is_none())
SIMPLE_TEST(t_boolean, "boolean", v.is_bool())
SIMPLE_TEST(t_true, "true", v.is_bool() && v.as_bool())
SIMPLE_TEST(t_false, "false", v.is_bool() && !v.as_bool())
SIMPLE_TEST(t_string, "string", v.is_string())
SIMPLE_TEST(t_number, "number", v.is_number())
SIMPLE_TEST(t_integer, "integer", v.kind() == Value::Kind::kInt)
SIMPLE_TEST(t_float, "float", v.is_float())
SIMPLE_TEST(t_mapping, "mapping", v.is_dict())
SIMPLE_TEST(t_escaped, "escaped", v.is_string() && v.markup())
SIMPLE_TEST(t_callable, "callable", v.is_undefined() || (v.is_object() && v.object_ptr()->callable()))
// iter() succeeds: str, list, tuple, dict, Undefined (iterates as empty), the loop object.
SIMPLE_TEST(t_iterable, "iterable",
            v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() || v.is_iter() ||
                (v.is_object() && std::string_view(v.type_name()) == "LoopContext"))
// len() and __getitem__ exist: str, list, tuple, dict, and Undefined.
SIMPLE_TEST(t_sequence, "sequence", v.is_string() || v.is_list() || v.is_dict() || v.is_undefined() || v.is_range())
SIMPLE_TEST(t_lower, "lower", py::is_lower(v.to_str()))
SIMPLE_TEST(t_upper, "upper", py::is_upper(v.to_str()))

bool parity(const Value& v, int64_t want) {
  if (v.is_undefined()) v.raise_undefined();
  return equals(binary_op(BinOp::kMod, v, Value(int64_t{2})), Value(want));
}
bool t_even(Interpreter&, const Value& v, CallArgs& a) {
  no_args("even", a);
  return parity(v, 0);
}
bool t_odd(Interpreter&, const Value& v, CallArgs& a) {
  no_args("odd", a);
  return parity(v, 1);
}
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  return equals(binary_op(BinOp::kMod, v, one_arg("divisibleby", a)), Value(int64_t{0}));
}

bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kEq, v, one_arg("eq", a)); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kNe, v, one_arg("ne", a)); }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kLt, v, one_arg("lt", a)); }
bool t_le(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kLe, v, one_arg("le", a)); }
bool t_gt(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kGt, v, one_arg("gt", a)); }
bool t_ge(Interpreter&, const Value& v, CallArgs& a) { return compare(CmpOp::kGe, v, one_arg("ge", a)); }
bool t_in(Interpreter&, const Value& v, CallArgs& a) { return contains(one_arg("in", a), v); }

bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = one_arg("sameas", a);
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return v.as_bool() == o.as_bool();
    case Value::Kind::kInt: return v.as_int() == o.as_int() && v.as_int() >= -5 && v.as_int() <= 256;
    case Value::Kind::kString: return v.str() == o.str();
    case Value::Kind::kFloat: return false;
    default: return v.identity() == o.identity();
  }
}

bool t_filter(Interpreter&, const Value& v, CallArgs& a) {
  no_args("filter", a);
  return v.is_string() && find_filter(v.str()) != nullptr;
}
bool t_test(Interpreter&, const Value& v, CallArgs& a) {
  no_args("test", a);
  return v.is_string() && find_test(v.str()) != nullptr;
}

const std::unordered_map<std::string_view, TestFn>& registry() {
  static const std::unordered_map<std::string_view, TestFn> tests = {
      {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
      {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"escaped", t_escaped}, {"even", t_even},
      {"false", t_false}, {"filter", t_filter}, {"float", t_float}, {"ge", t_ge}, {">=", t_ge},
      {"gt", t_gt}, {"greaterthan", t_gt}, {">", t_gt}, {"in", t_in}, {"integer", t_integer},
      {"iterable", t_iterable}, {"le", t_le}, {"<=", t_le}, {"lower", t_lower}, {"lt", t_lt},
      {"lessthan", t_lt}, {"<", t_lt}, {"mapping", t_mapping}, {"ne", t_ne}, {"!=", t_ne},
      {"none", t_none}, {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas}, {"sequence", t_sequence},
      {"string", t_string}, {"test", t_test}, {"true", t_true}, {"undefined", t_undefined}, {"upper", t_upper},
  };
  return tests;
}

}  // namespace

TestFn find_test(std::string_view name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace ft::jinja
