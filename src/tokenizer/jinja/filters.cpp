// Builtin filters (jinja2/filters.py, 3.1) and Hugging Face's tojson override
// (transformers chat_template_utils: json.dumps(x, ensure_ascii=False, indent=None, separators=None,
// sort_keys=False), positional order ensure_ascii, indent, separators, sort_keys).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <unordered_map>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/json.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

// jinja2 soft_str: strings (Markup kept) as they are, anything else through str().
Value soft_str(const Value& v) {
  if (v.is_string()) return v;
  return Value(v.to_str());
}

// The lazy iterator jinja2's map/select/reject/unique/items/batch filters return.
Value generator(std::vector<Value> items) { return Value::iter(std::move(items), "generator", true); }

int64_t int_arg(const Value& v, const char* what) {
  if (!v.is_int()) raise(ErrorKind::kTypeError, "'{}' object cannot be interpreted as an integer ({})", v.type_name(), what);
  return v.as_int();
}

// make_attrgetter: "a.b.0" -> successive environment.getitem lookups (ints for digit parts).
Value attr_path(const Value& item, const Value& attribute, const Value* dflt = nullptr) {
  auto fix = [&](Value v) { return (dflt && !dflt->is_none() && v.is_undefined()) ? *dflt : v; };
  if (!attribute.is_string()) return fix(get_item(item, attribute));
  Value cur = item;
  const std::string& path = attribute.str();
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = fix(get_item(cur, digits ? Value(static_cast<int64_t>(std::stoll(part))) : Value(part)));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return cur;
}

Value ignore_case(const Value& v) { return v.is_string() ? Value(py::lower(v.str())) : v; }

std::vector<Value> sorted_values(std::vector<Value> items, const std::function<Value(const Value&)>& key, bool reverse) {
  std::vector<std::pair<Value, size_t>> keyed;
  keyed.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) keyed.emplace_back(key(items[i]), i);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
  });
  std::vector<Value> out;
  out.reserve(items.size());
  for (auto& k : keyed) out.push_back(std::move(items[k.second]));
  return out;
}

int64_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined: return 0;
    case Value::Kind::kString: return static_cast<int64_t>(py::length(v.str()));
    case Value::Kind::kList: return static_cast<int64_t>(v.list().items.size());
    case Value::Kind::kIter:
      if (v.list().single_pass) raise(ErrorKind::kTypeError, "object of type '{}' has no len()", v.type_name());
      return static_cast<int64_t>(v.list().items.size());
    case Value::Kind::kDict: return static_cast<int64_t>(v.dict_ref().items.size());
    case Value::Kind::kObject: return static_cast<int64_t>(iterate(v).size());
    default: raise(ErrorKind::kTypeError, "object of type '{}' has no len()", v.type_name());
  }
}

Value f_length(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("length", args, {});
  return Value(length_of(v));
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("default", args, {"default_value", "boolean"});
  bool boolean = a.get_or(1, Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return a.get_or(0, Value(""));
  return v;
}

Value f_tojson(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  DumpOptions o;
  o.ensure_ascii = a.get_or(0, Value(false)).truthy();
  if (const Value* ind = a.get(1); ind && !ind->is_none()) {
    if (ind->is_string()) o.indent = ind->str();
    else {
      const int64_t width = std::max<int64_t>(0, int_arg(*ind, "indent"));
      py::check_str_bytes(static_cast<size_t>(width) * 1024);  // repeated once per nesting level and line
      o.indent = std::string(static_cast<size_t>(width), ' ');
    }
    o.item_sep = ",";
  }
  if (const Value* sep = a.get(2); sep && !sep->is_none()) {
    std::vector<Value> parts = iterate(*sep);
    if (parts.size() != 2 || !parts[0].is_string() || !parts[1].is_string())
      raise(ErrorKind::kValueError, "separators must be a pair of strings");
    o.item_sep = parts[0].str();
    o.key_sep = parts[1].str();
  }
  o.sort_keys = a.get_or(3, Value(false)).truthy();
  return Value(dumps(v, o));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("trim", args, {"chars"});
  Value s = soft_str(v);
  std::optional<std::string> chars;
  if (const Value* c = a.get(0); c && !c->is_none()) chars = c->to_str();
  return Value(py::strip(s.str(), chars, true, true), s.markup());
}

Value f_upper(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("upper", args, {});
  Value s = soft_str(v);
  return Value(py::upper(s.str()), s.markup());
}

Value f_lower(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("lower", args, {});
  Value s = soft_str(v);
  return Value(py::lower(s.str()), s.markup());
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("capitalize", args, {});
  Value s = soft_str(v);
  return Value(py::capitalize(s.str()), s.markup());
}

// jinja2 do_title: split on ([-\s({\[<]+), capitalize the first character of each piece.
Value f_title(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("title", args, {});
  Value sv = soft_str(v);
  const std::string& s = sv.str();
  std::string out;
  bool at_start = true;
  for (size_t i = 0; i < s.size();) {
    size_t j = i;
    char32_t c = py::next_cp(s, j);
    bool sep = py::is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      out.append(s, i, j - i);
      at_start = true;
    } else {
      std::string ch = s.substr(i, j - i);
      out += at_start ? py::upper(ch) : py::lower(ch);
      at_start = false;
    }
    i = j;
  }
  return Value(std::move(out), sv.markup());
}

Value f_string(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("string", args, {});
  return soft_str(v);
}

Value f_safe(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("safe", args, {});
  return Value(v.to_str(), true);
}

Value f_escape(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("escape", args, {});
  if (v.is_string() && v.markup()) return v;
  return Value(html_escape(v.to_str()), true);
}

Value f_forceescape(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("forceescape", args, {});
  return Value(html_escape(v.to_str()), true);
}

Value f_join(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("join", args, {"d", "attribute"});
  std::string sep = a.get_or(0, Value("")).to_str();
  const Value* attr = a.get(1);
  std::string out;
  bool first = true;
  for (const auto& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    (attr && !attr->is_none() ? attr_path(item, *attr) : item).append_to(out);
  }
  return Value(std::move(out));
}

Value f_list(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("list", args, {});
  return Value::list(iterate(v));
}

Value f_first(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("first", args, {});
  if (v.is_list() && !v.list().items.empty()) return v.list().items.front();
  if (v.is_iter() && v.list().single_pass) {  // next(iter(generator)) consumes one item
    const List& l = v.list();
    if (l.pos < l.items.size()) return l.items[l.pos++];
    return Value::undefined_hint("No first item, sequence was empty.");
  }
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined_hint("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("last", args, {});
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined_hint("No last item, sequence was empty.");
  return items.back();
}

Value f_reverse(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("reverse", args, {});
  if (v.is_string()) return Value(py::slice(v.str(), std::nullopt, std::nullopt, -1), v.markup());
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::iter(std::move(items), v.is_dict() ? "dict_reversekeyiterator" : "list_reverseiterator", true);
}

Value f_sort(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("sort", args, {"reverse", "case_sensitive", "attribute"});
  bool reverse = a.get_or(0, Value(false)).truthy();
  bool cs = a.get_or(1, Value(false)).truthy();
  const Value* attr = a.get(2);
  return Value::list(sorted_values(iterate(v), [&](const Value& x) {
    Value k = attr && !attr->is_none() ? attr_path(x, *attr) : x;
    return cs ? k : ignore_case(k);
  }, reverse));
}

Value f_dictsort(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("dictsort", args, {"case_sensitive", "by", "reverse"});
  bool cs = a.get_or(0, Value(false)).truthy();
  std::string by = a.get_or(1, Value("key")).to_str();
  bool reverse = a.get_or(2, Value(false)).truthy();
  if (v.is_undefined()) v.raise_undefined();
  if (!v.is_dict()) raise(ErrorKind::kTypeError, "dictsort: '{}' object has no attribute 'items'", v.type_name());
  int pos = by == "key" ? 0 : by == "value" ? 1 : -1;
  if (pos < 0) raise(ErrorKind::kValueError, "You can only sort by either \"key\" or \"value\"");
  std::vector<Value> items;
  for (const auto& kv : v.dict_ref().items) items.push_back(Value::tuple({kv.first, kv.second}));
  return Value::list(sorted_values(std::move(items), [&](const Value& x) {
    const Value& k = x.list().items[static_cast<size_t>(pos)];
    return cs ? k : ignore_case(k);
  }, reverse));
}

Value f_items(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("items", args, {});
  if (v.is_undefined()) return generator({});
  if (!v.is_dict()) raise(ErrorKind::kTypeError, "Can only get item pairs from a mapping.");
  std::vector<Value> items;
  for (const auto& kv : v.dict_ref().items) items.push_back(Value::tuple({kv.first, kv.second}));
  return generator(std::move(items));
}

Value f_unique(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("unique", args, {"case_sensitive", "attribute"});
  bool cs = a.get_or(0, Value(false)).truthy();
  const Value* attr = a.get(1);
  std::vector<Value> seen, out;
  for (const auto& x : iterate(v)) {
    Value k = attr && !attr->is_none() ? attr_path(x, *attr) : x;
    if (!cs) k = ignore_case(k);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, k); })) continue;
    seen.push_back(k);
    out.push_back(x);
  }
  return generator(std::move(out));
}

Value min_max(const Value& v, CallArgs& args, bool want_max) {
  ArgBinder a(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  bool cs = a.get_or(0, Value(false)).truthy();
  const Value* attr = a.get(1);
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined_hint("No aggregated item, sequence was empty.");
  auto key = [&](const Value& x) {
    Value k = attr && !attr->is_none() ? attr_path(x, *attr) : x;
    return cs ? k : ignore_case(k);
  };
  size_t best = 0;
  Value best_key = key(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value k = key(items[i]);
    if (want_max ? less_than(best_key, k) : less_than(k, best_key)) {
      best = i;
      best_key = k;
    }
  }
  return items[best];
}
Value f_max(Interpreter&, const Value& v, CallArgs& args) { return min_max(v, args, true); }
Value f_min(Interpreter&, const Value& v, CallArgs& args) { return min_max(v, args, false); }

Value f_sum(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("sum", args, {"attribute", "start"});
  const Value* attr = a.get(0);
  Value total = a.get_or(1, Value(int64_t{0}));
  for (const auto& x : iterate(v)) total = binary_op(BinOp::kAdd, total, attr && !attr->is_none() ? attr_path(x, *attr) : x);
  return total;
}

Value f_map(Interpreter& in, const Value& v, CallArgs& args) {
  std::vector<Value> items;
  if (v.truthy()) items = iterate(v);
  std::vector<Value> out;
  out.reserve(items.size());
  auto attr = std::find_if(args.kw.begin(), args.kw.end(), [](const auto& kv) { return kv.first == "attribute"; });
  if (args.pos.empty() && attr != args.kw.end()) {
    Value dflt;
    for (const auto& kv : args.kw) {
      if (kv.first == "default") dflt = kv.second;
      else if (kv.first != "attribute") raise(ErrorKind::kTypeError, "Unexpected keyword argument '{}'", kv.first);
    }
    for (const auto& x : items) out.push_back(attr_path(x, attr->second, dflt.is_undefined() ? nullptr : &dflt));
    return generator(std::move(out));
  }
  if (args.pos.empty()) raise(ErrorKind::kTypeError, "map requires a filter argument");
  std::string name = args.pos[0].to_str();
  CallArgs rest;
  rest.pos.assign(args.pos.begin() + 1, args.pos.end());
  rest.kw = args.kw;
  for (const auto& x : items) {
    CallArgs copy = rest;
    out.push_back(in.apply_filter(name, x, copy));
  }
  return generator(std::move(out));
}

// select/reject/selectattr/rejectattr (jinja2 select_or_reject).
Value select_or_reject(Interpreter& in, const Value& v, CallArgs& args, bool lookup_attr, bool keep_if) {
  size_t off = 0;
  Value attr;
  if (lookup_attr) {
    if (args.pos.empty()) raise(ErrorKind::kTypeError, "Missing parameter for attribute name");
    attr = args.pos[0];
    off = 1;
  }
  std::string test;
  CallArgs rest;
  if (args.pos.size() > off) {
    test = args.pos[off].to_str();
    rest.pos.assign(args.pos.begin() + static_cast<std::ptrdiff_t>(off) + 1, args.pos.end());
  }
  rest.kw = args.kw;
  std::vector<Value> out;
  if (!v.truthy()) return generator({});
  for (const auto& x : iterate(v)) {
    Value probe = lookup_attr ? attr_path(x, attr) : x;
    bool ok;
    if (test.empty()) {
      ok = probe.truthy();
    } else {
      CallArgs copy = rest;
      ok = in.apply_test(test, probe, copy);
    }
    if (ok == keep_if) out.push_back(x);
  }
  return generator(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, true); }
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, false, false); }
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, true); }
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_or_reject(in, v, a, true, false); }

Value f_replace(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("replace", args, {"old", "new", "count"});
  int64_t count = -1;
  if (const Value* c = a.get(2); c && !c->is_none()) count = int_arg(*c, "count");
  return Value(py::replace(v.to_str(), a.require(0).to_str(), a.require(1).to_str(), count));
}

// Python int(str): optional sign, digits with single underscores, surrounding whitespace.
bool parse_int(const std::string& raw, int base, int64_t& out) {
  std::string s = py::strip(raw, std::nullopt, true, true);
  std::string digits;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '_' && i > 0 && i + 1 < s.size() && s[i - 1] != '_' && std::isalnum(static_cast<unsigned char>(s[i + 1]))) continue;
    digits.push_back(s[i]);
  }
  if (digits.empty()) return false;
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(digits.c_str(), &end, base);
  if (*end != 0 || errno == ERANGE) return false;
  if (std::isspace(static_cast<unsigned char>(digits[0]))) return false;
  out = v;
  return true;
}

bool parse_float(const std::string& raw, double& out) {
  std::string s = py::strip(raw, std::nullopt, true, true);
  if (s.empty()) return false;
  std::string t;
  for (char c : s)
    if (c != '_') t.push_back(c);
  std::string low = py::lower(t);
  std::string body = (low[0] == '+' || low[0] == '-') ? low.substr(1) : low;
  if (body == "inf" || body == "infinity" || body == "nan") {
    out = body == "nan" ? NAN : (low[0] == '-' ? -INFINITY : INFINITY);
    return true;
  }
  if (body.find_first_not_of("0123456789.e+-") != std::string::npos) return false;
  char* end = nullptr;
  out = std::strtod(t.c_str(), &end);
  return *end == 0;
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("int", args, {"default", "base"});
  Value dflt = a.get_or(0, Value(int64_t{0}));
  int base = static_cast<int>(a.get_or(1, Value(int64_t{10})).as_int());
  if (v.is_undefined()) v.raise_undefined();
  if (v.is_int()) return Value(v.as_int());
  auto from_double = [&](double d) {
    if (!std::isfinite(d)) return dflt;  // int(inf) raises OverflowError, int(nan) ValueError: default
    if (std::fabs(d) >= 9.2e18) raise(ErrorKind::kOverflowError, "integer too large for this engine (64-bit)");
    return Value(static_cast<int64_t>(std::trunc(d)));
  };
  if (v.is_float()) return from_double(v.as_float());
  if (v.is_string()) {
    int64_t i;
    if (parse_int(v.str(), base, i)) return Value(i);
    double d;
    if (parse_float(v.str(), d)) return from_double(d);
  }
  return dflt;
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("float", args, {"default"});
  Value dflt = a.get_or(0, Value(0.0));
  if (v.is_undefined()) v.raise_undefined();
  if (v.is_number()) return Value(v.as_float());
  double d;
  if (v.is_string() && parse_float(v.str(), d)) return Value(d);
  return dflt;
}

Value f_abs(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("abs", args, {});
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_undefined()) v.raise_undefined();
  raise(ErrorKind::kTypeError, "bad operand type for abs(): '{}'", v.type_name());
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("round", args, {"precision", "method"});
  int64_t prec = int_arg(a.get_or(0, Value(int64_t{0})), "precision");
  std::string method = a.get_or(1, Value("common")).to_str();
  if (v.is_undefined()) v.raise_undefined();
  if (!v.is_number()) raise(ErrorKind::kTypeError, "type {} doesn't define __round__ method", v.type_name());
  if (method == "common") {
    if (v.is_int()) return Value(v.as_int());
    char buf[512];
    std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(prec, 0, 300)), v.as_float());
    return Value(std::strtod(buf, nullptr));
  }
  if (method != "ceil" && method != "floor") raise(ErrorKind::kTypeError, "method must be common, ceil or floor");
  double scale = std::pow(10.0, static_cast<double>(prec));
  double x = v.as_float() * scale;
  return Value((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Value f_indent(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("indent", args, {"width", "first", "blank"});
  Value w = a.get_or(0, Value(int64_t{4}));
  const int64_t width = w.is_string() ? 0 : std::max<int64_t>(0, int_arg(w, "width"));
  py::check_str_bytes(static_cast<size_t>(width));
  std::string ind = w.is_string() ? w.str() : std::string(static_cast<size_t>(width), ' ');
  bool first = a.get_or(1, Value(false)).truthy();
  bool blank = a.get_or(2, Value(false)).truthy();
  if (v.is_undefined()) v.raise_undefined();
  if (!v.is_string())  // do_indent starts with `s += "\n"`
    raise(ErrorKind::kTypeError, "unsupported operand type(s) for +=: '{}' and 'str'", v.type_name());
  std::string s = v.str() + "\n";
  std::vector<std::string> lines = py::splitlines(s, false);
  py::check_str_bytes(s.size() + lines.size() * ind.size());
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? lines[i] : ind + lines[i]);
  }
  if (first) rv = ind + rv;
  return Value(std::move(rv), v.markup());
}

Value f_center(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("center", args, {"width"});
  Value s = soft_str(v);
  return Value(py::pad(s.str(), int_arg(a.get_or(0, Value(int64_t{80})), "width"), ' ', 0), s.markup());
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("wordcount", args, {});
  std::string s = v.to_str();
  int64_t n = 0;
  bool in_word = false;
  for (size_t i = 0; i < s.size();) {
    bool w = py::is_word_char(py::next_cp(s, i));
    if (w && !in_word) ++n;
    in_word = w;
  }
  return Value(n);
}

Value f_format(Interpreter&, const Value& v, CallArgs& args) {
  if (!args.pos.empty() && !args.kw.empty())
    raise(ErrorKind::kTypeError, "can't handle positional and keyword arguments at the same time");
  Value fmt_args;
  if (!args.kw.empty()) {
    auto d = std::make_shared<Dict>();
    for (const auto& kv : args.kw) d->set(Value(kv.first), kv.second);
    fmt_args = Value::dict(d);
  } else {
    fmt_args = Value::tuple(args.pos);
  }
  Value s = soft_str(v);
  return binary_op(BinOp::kMod, s, fmt_args);
}

Value f_batch(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("batch", args, {"linecount", "fill_with"});
  int64_t n = int_arg(a.require(0), "linecount");
  if (n <= 0) raise(ErrorKind::kValueError, "batch size must be positive");
  const Value* fill = a.get(1);
  std::vector<Value> out, cur;
  for (const auto& x : iterate(v)) {
    cur.push_back(x);
    if (static_cast<int64_t>(cur.size()) == n) {
      out.push_back(Value::list(std::move(cur)));
      cur.clear();
    }
  }
  if (!cur.empty()) {
    if (fill && !fill->is_none() && n > static_cast<int64_t>(py::kMaxStrBytes / sizeof(Value)))
      raise(ErrorKind::kOverflowError, "batch of {} items is too large", n);
    if (fill && !fill->is_none())
      while (static_cast<int64_t>(cur.size()) < n) cur.push_back(*fill);
    out.push_back(Value::list(std::move(cur)));
  }
  return generator(std::move(out));
}

Value f_slice(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("slice", args, {"slices", "fill_with"});
  int64_t slices = int_arg(a.require(0), "slices");
  if (slices <= 0) raise(ErrorKind::kValueError, "slices must be positive");
  const Value* fill = a.get(1);
  std::vector<Value> seq = iterate(v);
  int64_t n = static_cast<int64_t>(seq.size()), per = n / slices, extra = n % slices, offset = 0;
  std::vector<Value> out;
  for (int64_t i = 0; i < slices; ++i) {
    int64_t start = offset + i * per;
    if (i < extra) ++offset;
    int64_t end = offset + (i + 1) * per;
    std::vector<Value> part(seq.begin() + start, seq.begin() + end);
    if (fill && !fill->is_none() && i >= extra) part.push_back(*fill);
    out.push_back(Value::list(std::move(part)));
  }
  return generator(std::move(out));
}

Value f_attr(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("attr", args, {"name"});
  return get_python_attr(v, a.require(0).to_str());
}

// pprint.pformat for short values: repr() with dict keys sorted (lines are not wrapped at 80 columns).
std::string pformat(const Value& v) {
  if (v.is_dict()) {
    std::vector<std::pair<Value, Value>> items = v.dict_ref().items;
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return less_than(a.first, b.first); });
    std::string out = "{";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + pformat(items[i].first) + ": " + pformat(items[i].second);
    return out + "}";
  }
  if (v.is_list()) {
    std::string out = v.is_tuple() ? "(" : "[";
    const auto& items = v.list().items;
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + pformat(items[i]);
    if (v.is_tuple() && items.size() == 1) out += ",";
    return out + (v.is_tuple() ? ")" : "]");
  }
  return v.repr();
}

Value f_pprint(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("pprint", args, {});
  return Value(pformat(v));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder a("truncate", args, {"length", "killwords", "end", "leeway"});
  int64_t length = int_arg(a.get_or(0, Value(int64_t{255})), "length");
  bool killwords = a.get_or(1, Value(false)).truthy();
  std::string end = a.get_or(2, Value("...")).to_str();
  int64_t leeway = int_arg(a.get_or(3, Value(int64_t{5})), "leeway");
  if (v.is_undefined()) return v;  // len(Undefined) == 0: returned as is
  if (!v.is_string()) {  // do_truncate calls len() on its input
    if ((v.is_list() || v.is_dict() || (v.is_iter() && !v.list().single_pass)) &&
        static_cast<int64_t>(length_of(v)) <= length + leeway)
      return v;
    raise(ErrorKind::kTypeError, "object of type '{}' has no len()", v.type_name());
  }
  std::string s = v.to_str();
  int64_t n = static_cast<int64_t>(py::length(s)), ne = static_cast<int64_t>(py::length(end));
  if (length < ne) raise(ErrorKind::kValueError, "expected length >= {}, got {}", ne, length);
  if (leeway < 0) raise(ErrorKind::kValueError, "expected leeway >= 0, got {}", leeway);
  if (n <= length + leeway) return Value(s);
  std::string cut = py::slice(s, 0, length - ne, std::nullopt);
  if (killwords) return Value(cut + end);
  size_t sp = cut.rfind(' ');
  return Value((sp == std::string::npos ? cut : cut.substr(0, sp)) + end);
}

Value f_striptags(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("striptags", args, {});
  std::string s = v.to_str(), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') {
      size_t close = s.find('>', i);
      if (close != std::string::npos) {
        i = close;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  std::vector<std::string> words = py::split(out, std::nullopt, -1);
  std::string joined;
  for (size_t i = 0; i < words.size(); ++i) joined += (i ? " " : "") + words[i];
  return Value(joined);
}

const std::unordered_map<std::string_view, FilterFn>& registry() {
  static const std::unordered_map<std::string_view, FilterFn> filters = {
      {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize}, {"center", f_center},
      {"count", f_length}, {"d", f_default}, {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape},
      {"escape", f_escape}, {"first", f_first}, {"float", f_float}, {"forceescape", f_forceescape},
      {"format", f_format}, {"indent", f_indent}, {"int", f_int}, {"items", f_items}, {"join", f_join},
      {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map},
      {"max", f_max}, {"min", f_min}, {"pprint", f_pprint}, {"reject", f_reject}, {"rejectattr", f_rejectattr},
      {"replace", f_replace}, {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select}, {"slice", f_slice},
      {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"striptags", f_striptags},
      {"sum", f_sum}, {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"truncate", f_truncate},
      {"unique", f_unique}, {"upper", f_upper}, {"wordcount", f_wordcount},
  };
  return filters;
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  auto it = registry().find(name);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace ft::jinja
