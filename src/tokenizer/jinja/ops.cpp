#include "tokenizer/jinja/ops.h"

#include <cmath>
#include <cstdio>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

const char* op_symbol(BinOp op) {
  switch (op) {
    case BinOp::kAdd: return "+";
    case BinOp::kSub: return "-";
    case BinOp::kMul: return "*";
    case BinOp::kDiv: return "/";
    case BinOp::kFloorDiv: return "//";
    case BinOp::kMod: return "%";
    case BinOp::kPow: return "** or pow()";
  }
  return "?";
}

[[noreturn]] void unsupported(BinOp op, const Value& a, const Value& b) {
  raise(ErrorKind::kTypeError, "unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op), a.type_name(),
        b.type_name());
}

void check_overflow(bool overflow) {
  if (overflow) raise(ErrorKind::kOverflowError, "integer result too large for this engine (64-bit)");
}

int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

int64_t floor_mod(int64_t a, int64_t b) {
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

double float_mod(double a, double b) {
  double r = std::fmod(a, b);
  if (r != 0) {
    if ((b < 0) != (r < 0)) r += b;
  } else {
    r = std::copysign(0.0, b);
  }
  return r;
}

// CPython float_divmod's quotient.
double float_floordiv(double vx, double wx) {
  double mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0 && ((wx < 0) != (mod < 0))) div -= 1.0;
  if (div == 0) return std::copysign(0.0, vx / wx);
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return floordiv;
}

Value repeat(const Value& seq, int64_t n) {
  constexpr int64_t kMaxItems = int64_t{1} << 26;  // Python would raise MemoryError far sooner than we OOM
  int64_t unit = seq.is_string() ? static_cast<int64_t>(seq.str().size()) : static_cast<int64_t>(seq.list().items.size());
  if (n > 0 && unit > 0 && n > kMaxItems / unit) raise(ErrorKind::kOverflowError, "repeated sequence too large");
  if (seq.is_string()) {
    std::string out;
    if (n > 0 && unit > 0) {  // by doubling: a few appends, not n (a 2^26-byte repeat stays quick)
      const size_t total = static_cast<size_t>(n) * static_cast<size_t>(unit);
      out.reserve(total);
      out = seq.str();
      while (out.size() * 2 <= total) out += out;
      out.append(out, 0, total - out.size());
    }
    return Value(std::move(out), seq.markup());
  }
  std::vector<Value> items;
  for (int64_t i = 0; i < n; ++i)
    for (const auto& v : seq.list().items) items.push_back(v);
  return seq.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

Value arith(BinOp op, const Value& a, const Value& b) {
  bool fl = a.is_float() || b.is_float();
  if (!fl) {
    int64_t x = a.as_int(), y = b.as_int(), r = 0;
    switch (op) {
      case BinOp::kAdd:
        check_overflow(__builtin_add_overflow(x, y, &r));
        return Value(r);
      case BinOp::kSub:
        check_overflow(__builtin_sub_overflow(x, y, &r));
        return Value(r);
      case BinOp::kMul:
        check_overflow(__builtin_mul_overflow(x, y, &r));
        return Value(r);
      case BinOp::kDiv:
        if (y == 0) raise(ErrorKind::kZeroDivisionError, "division by zero");
        return Value(static_cast<double>(x) / static_cast<double>(y));
      case BinOp::kFloorDiv:
        if (y == 0) raise(ErrorKind::kZeroDivisionError, "integer division or modulo by zero");
        return Value(floor_div(x, y));
      case BinOp::kMod:
        if (y == 0) raise(ErrorKind::kZeroDivisionError, "integer division or modulo by zero");
        return Value(floor_mod(x, y));
      case BinOp::kPow: {
        if (y < 0) {
          if (x == 0) raise(ErrorKind::kZeroDivisionError, "0.0 cannot be raised to a negative power");
          return Value(std::pow(static_cast<double>(x), static_cast<double>(y)));
        }
        int64_t result = 1;
        for (int64_t i = 0; i < y; ++i) check_overflow(__builtin_mul_overflow(result, x, &result));
        return Value(result);
      }
    }
  }
  double x = a.as_float(), y = b.as_float();
  switch (op) {
    case BinOp::kAdd: return Value(x + y);
    case BinOp::kSub: return Value(x - y);
    case BinOp::kMul: return Value(x * y);
    case BinOp::kDiv:
      if (y == 0) raise(ErrorKind::kZeroDivisionError, "float division by zero");
      return Value(x / y);
    case BinOp::kFloorDiv:
      if (y == 0) raise(ErrorKind::kZeroDivisionError, "float floor division by zero");
      return Value(float_floordiv(x, y));
    case BinOp::kMod:
      if (y == 0) raise(ErrorKind::kZeroDivisionError, "float modulo");
      return Value(float_mod(x, y));
    case BinOp::kPow:
      if (x == 0 && y < 0) raise(ErrorKind::kZeroDivisionError, "0.0 cannot be raised to a negative power");
      return Value(std::pow(x, y));
  }
  return Value();
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

Value binary_op(BinOp op, const Value& a, const Value& b) {
  if (a.is_undefined()) a.raise_undefined();
  // str % Undefined formats (Undefined has __getitem__, so CPython treats it as a mapping).
  if (b.is_undefined() && !(op == BinOp::kMod && a.is_string())) b.raise_undefined();
  if (a.is_number() && b.is_number()) return arith(op, a, b);
  switch (op) {
    case BinOp::kAdd:
      if (a.is_string() && b.is_string()) {
        if (a.markup() == b.markup()) return Value(a.str() + b.str(), a.markup());
        if (a.markup()) return Value(a.str() + html_escape(b.str()), true);
        return Value(html_escape(a.str()) + b.str(), true);
      }
      if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
        std::vector<Value> items = a.list().items;
        items.insert(items.end(), b.list().items.begin(), b.list().items.end());
        return a.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
      if (a.is_string() && !b.markup() && !a.markup())
        raise(ErrorKind::kTypeError, "can only concatenate str (not \"{}\") to str", b.type_name());
      if (a.is_list())
        raise(ErrorKind::kTypeError, "can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(),
              a.type_name());
      unsupported(op, a, b);
    case BinOp::kMul:
      if ((a.is_string() || a.is_list()) && b.is_int()) return repeat(a, b.as_int());
      if (a.is_int() && (b.is_string() || b.is_list())) return repeat(b, a.as_int());
      if (a.is_string() || a.is_list() || b.is_string() || b.is_list())
        raise(ErrorKind::kTypeError, "can't multiply sequence by non-int of type '{}'",
              (a.is_string() || a.is_list()) ? b.type_name() : a.type_name());
      unsupported(op, a, b);
    case BinOp::kMod:
      if (a.is_string()) {
        if (!a.markup()) return Value(percent_format(a.str(), b));
        // Markup % args escapes the arguments.
        Value esc = b;
        if (b.is_tuple()) {
          std::vector<Value> items;
          for (const auto& v : b.list().items) items.push_back(v.is_string() && v.markup() ? v : Value(html_escape(v.to_str()), true));
          esc = Value::tuple(std::move(items));
        } else if (!(b.is_string() && b.markup()) && !b.is_dict()) {
          esc = Value(html_escape(b.to_str()), true);
        }
        return Value(percent_format(a.str(), esc), true);
      }
      unsupported(op, a, b);
    default:
      unsupported(op, a, b);
  }
}

bool less_than(const Value& a, const Value& b) {
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
    return a.as_int() < b.as_int();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.list().items;
    const auto& y = b.list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  raise(ErrorKind::kTypeError, "'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

static bool ordered(CmpOp op, const Value& a, const Value& b) {
  try {
    switch (op) {
      case CmpOp::kLt: return less_than(a, b);
      case CmpOp::kGt: return less_than(b, a);
      case CmpOp::kLe: return less_than(a, b) || equals(a, b);
      case CmpOp::kGe: return less_than(b, a) || equals(a, b);
      default: return false;
    }
  } catch (const TemplateError& e) {
    if (e.kind() != ErrorKind::kTypeError) throw;
    const char* sym = op == CmpOp::kLt ? "<" : op == CmpOp::kGt ? ">" : op == CmpOp::kLe ? "<=" : ">=";
    raise(ErrorKind::kTypeError, "'{}' not supported between instances of '{}' and '{}'", sym, a.type_name(),
          b.type_name());
  }
}

bool contains(const Value& container, const Value& needle) {
  switch (container.kind()) {
    case Value::Kind::kUndefined: return false;
    case Value::Kind::kString:
      if (!needle.is_string())
        raise(ErrorKind::kTypeError, "'in <string>' requires string as left operand, not {}", needle.type_name());
      return container.str().find(needle.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const auto& v : container.list().items)
        if (equals(v, needle)) return true;
      return false;
    case Value::Kind::kIter:
      for (const auto& v : iterate(container))
        if (equals(v, needle)) return true;
      return false;
    case Value::Kind::kDict:
      if (needle.is_list() && !needle.is_tuple()) raise(ErrorKind::kTypeError, "unhashable type: 'list'");
      if (needle.is_dict()) raise(ErrorKind::kTypeError, "unhashable type: 'dict'");
      return container.dict_ref().find(needle) != nullptr;
    default:
      raise(ErrorKind::kTypeError, "argument of type '{}' is not iterable", container.type_name());
  }
}

bool compare(CmpOp op, const Value& a, const Value& b) {
  switch (op) {
    case CmpOp::kEq: return equals(a, b);
    case CmpOp::kNe: return !equals(a, b);
    case CmpOp::kIn: return contains(b, a);
    case CmpOp::kNotIn: return !contains(b, a);
    default: return ordered(op, a, b);
  }
}

Value negate(const Value& v) {
  if (v.is_undefined()) v.raise_undefined();
  if (v.is_float()) return Value(-v.as_float());
  if (v.is_int()) return Value(-v.as_int());
  raise(ErrorKind::kTypeError, "bad operand type for unary -: '{}'", v.type_name());
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) v.raise_undefined();
  if (v.is_float()) return v;
  if (v.is_int()) return Value(v.as_int());
  raise(ErrorKind::kTypeError, "bad operand type for unary +: '{}'", v.type_name());
}

std::string percent_format(const std::string& f, const Value& args) {
  std::vector<Value> pos;
  // CPython treats any non-tuple, non-str argument with __getitem__ as a mapping: unused, no error.
  bool is_map = args.is_dict() || args.is_undefined() || (args.is_list() && !args.is_tuple());
  if (args.is_tuple()) pos = args.list().items;
  else pos.push_back(args);
  size_t next_arg = 0;
  bool used_map = false;
  std::string out;
  for (size_t i = 0; i < f.size(); ++i) {
    if (f[i] != '%') {
      out.push_back(f[i]);
      continue;
    }
    if (++i >= f.size()) raise(ErrorKind::kValueError, "incomplete format");
    const Value* arg = nullptr;
    Value keyed;
    if (f[i] == '(') {
      size_t close = f.find(')', i);
      if (close == std::string::npos) raise(ErrorKind::kValueError, "incomplete format key");
      if (!is_map) raise(ErrorKind::kTypeError, "format requires a mapping");
      if (args.is_undefined()) args.raise_undefined();
      if (!args.is_dict()) raise(ErrorKind::kTypeError, "list indices must be integers or slices, not str");
      const Value* v = args.dict_ref().find(std::string_view(f).substr(i + 1, close - i - 1));
      if (!v) raise(ErrorKind::kKeyError, "{}", py::repr(f.substr(i + 1, close - i - 1)));
      keyed = *v;
      arg = &keyed;
      used_map = true;
      i = close + 1;
    }
    std::string flags;
    while (i < f.size() && std::string_view("-+ #0").find(f[i]) != std::string_view::npos) flags.push_back(f[i++]);
    std::string width, prec;
    while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i]))) width.push_back(f[i++]);
    bool has_prec = false;
    if (i < f.size() && f[i] == '.') {
      has_prec = true;
      ++i;
      while (i < f.size() && std::isdigit(static_cast<unsigned char>(f[i]))) prec.push_back(f[i++]);
    }
    if (i >= f.size()) raise(ErrorKind::kValueError, "incomplete format");
    char type = f[i];
    if (type == '%') {
      out.push_back('%');
      continue;
    }
    if (!arg) {
      if (next_arg >= pos.size()) raise(ErrorKind::kTypeError, "not enough arguments for format string");
      arg = &pos[next_arg++];
    }
    std::string spec = "%" + flags + width + (has_prec ? "." + prec : "");
    char buf[512];
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        std::string s = type == 's' ? arg->to_str() : arg->repr();
        if (has_prec) s = py::slice(s, 0, std::stoll(prec.empty() ? "0" : prec), std::nullopt);
        int64_t w = width.empty() ? 0 : std::stoll(width);
        bool left = flags.find('-') != std::string::npos;
        out += py::pad(s, w, ' ', left ? -1 : 1);
        break;
      }
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o': {
        if (!arg->is_number()) raise(ErrorKind::kTypeError, "%{} format: a real number is required, not {}", type, arg->type_name());
        long long v = arg->is_float() ? static_cast<long long>(arg->as_float()) : arg->as_int();
        char t = type == 'i' || type == 'u' ? 'd' : type;
        std::snprintf(buf, sizeof(buf), (spec + "ll" + t).c_str(), v);
        out += buf;
        break;
      }
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
        if (!arg->is_number()) raise(ErrorKind::kTypeError, "must be real number, not {}", arg->type_name());
        std::snprintf(buf, sizeof(buf), (spec + type).c_str(), arg->as_float());
        out += buf;
        break;
      }
      case 'c': {
        if (arg->is_int()) py::append_cp(out, static_cast<char32_t>(arg->as_int()));
        else out += arg->to_str();
        break;
      }
      default:
        raise(ErrorKind::kValueError, "unsupported format character '{}'", type);
    }
  }
  if (!used_map && !is_map && next_arg < pos.size())
    raise(ErrorKind::kTypeError, "not all arguments converted during string formatting");
  return out;
}

}  // namespace ft::jinja
