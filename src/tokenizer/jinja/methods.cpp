// Attribute/subscript access and method calls on str, list, dict and host objects, with the
// ImmutableSandboxedEnvironment rules (jinja2/sandbox.py): mutating list/dict methods and dunder
// attributes resolve to an undefined that raises SecurityError when used.
#include <algorithm>
#include <cstring>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/objects.h"
#include "tokenizer/jinja/ops.h"
#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

bool is_dunder(const std::string& name) {
  return name.size() > 4 && name.compare(0, 2, "__") == 0 && name.compare(name.size() - 2, 2, "__") == 0;
}

bool in_list(const std::string& name, std::initializer_list<const char*> names) {
  for (const char* n : names)
    if (name == n) return true;
  return false;
}

bool is_str_method(const std::string& n) {
  return in_list(n, {"capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format",
                     "format_map", "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
                     "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower",
                     "lstrip", "maketrans", "partition", "removeprefix", "removesuffix", "replace", "rfind", "rindex",
                     "rjust", "rpartition", "rsplit", "rstrip", "split", "splitlines", "startswith", "strip",
                     "swapcase", "title", "translate", "upper", "zfill"});
}
bool is_list_mutator(const std::string& n) {
  return in_list(n, {"append", "clear", "pop", "reverse", "insert", "sort", "extend", "remove"});
}
bool is_dict_mutator(const std::string& n) { return in_list(n, {"clear", "pop", "popitem", "setdefault", "update"}); }
bool is_dict_method(const std::string& n) { return in_list(n, {"copy", "fromkeys", "get", "items", "keys", "values"}); }

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined_hint(
      fmt::format("access to attribute {} of '{}' object is unsafe.", py::repr(name), obj.type_name()),
      ErrorKind::kSecurityError);
}

Value missing(const Value& obj, const Value& key) {
  if (key.is_string()) return Value::undefined_missing(obj.type_name(), key.str(), false);
  return Value::undefined_missing(obj.type_name(), key.repr(), true);
}

Value missing(const Value& obj, const std::string& name) { return Value::undefined_missing(obj.type_name(), name, false); }

// Python getattr(obj, name) for builtin types: true when obj has that attribute (out = it).
bool python_attr(const Value& obj, const std::string& name, Value& out) {
  if (is_dunder(name)) {
    out = unsafe(obj, name);  // dunder attributes exist on every object and are never safe
    return true;
  }
  auto bind = [&] { out = Value::object(std::make_shared<BoundMethod>(obj, name)); };
  switch (obj.kind()) {
    case Value::Kind::kString:
      if (!is_str_method(name)) return false;
      bind();
      return true;
    case Value::Kind::kList:
      if (obj.is_tuple()) {
        if (name != "count" && name != "index") return false;
        bind();
        return true;
      }
      if (is_list_mutator(name)) out = unsafe(obj, name);
      else if (name == "count" || name == "index" || name == "copy") bind();
      else return false;
      return true;
    case Value::Kind::kDict:
      if (is_dict_mutator(name)) out = unsafe(obj, name);
      else if (is_dict_method(name)) bind();
      else return false;
      return true;
    case Value::Kind::kIter:
      if (!obj.is_range() || (name != "count" && name != "index")) return false;
      bind();
      return true;
    case Value::Kind::kInt:
    case Value::Kind::kBool:
      if (name == "real" || name == "numerator") out = Value(obj.as_int());
      else if (name == "imag") out = Value(int64_t{0});
      else if (name == "denominator") out = Value(int64_t{1});
      else return false;
      return true;
    case Value::Kind::kFloat:
      if (name == "real") out = Value(obj.as_float());
      else if (name == "imag") out = Value(0.0);
      else return false;
      return true;
    default:
      return false;
  }
}

// ---- str methods ----

std::optional<std::string> opt_str(const Value* v, const char* fn) {
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) raise(ErrorKind::kTypeError, "{} arg must be None or str", fn);
  return v->str();
}

int64_t opt_int(const Value* v, int64_t dflt) {
  if (!v || v->is_none()) return dflt;
  if (!v->is_int()) raise(ErrorKind::kTypeError, "'{}' object cannot be interpreted as an integer", v->type_name());
  return v->as_int();
}

std::string require_str(const Value& v, const char* fn) {
  if (!v.is_string()) raise(ErrorKind::kTypeError, "{}() argument must be str, not {}", fn, v.type_name());
  return v.str();
}

Value str_list(const std::vector<std::string>& parts, bool markup) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (const auto& p : parts) items.emplace_back(p, markup);
  return Value::list(std::move(items));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix, const char* fn) {
  auto one = [&](const Value& a) {
    if (!a.is_string())
      raise(ErrorKind::kTypeError, "{} first arg must be str or a tuple of str, not {}", fn, a.type_name());
    const std::string& x = a.str();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const auto& a : affix.list().items)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

// str.format: {} {0} {name} {name.attr} {name[key]} with !r/!s and a format spec.
std::string format_spec(const Value& v, const std::string& spec);

std::string str_format(const std::string& f, const CallArgs& args) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') ++i;
      else raise(ErrorKind::kValueError, "Single '}}' encountered in format string");
      out.push_back('}');
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string::npos) raise(ErrorKind::kValueError, "expected '}}' before end of string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conv;
    if (size_t colon = field.find(':'); colon != std::string::npos) {
      spec = field.substr(colon + 1);
      field = field.substr(0, colon);
    }
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conv = field.substr(bang + 1);
      field = field.substr(0, bang);
    }
    size_t end = std::min(field.find('.'), field.find('['));
    std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_idx >= args.pos.size()) raise(ErrorKind::kIndexError, "Replacement index {} out of range", auto_idx);
      v = args.pos[auto_idx++];
    } else if (std::all_of(head.begin(), head.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      size_t k = std::stoul(head);
      if (k >= args.pos.size()) raise(ErrorKind::kIndexError, "Replacement index {} out of range", k);
      v = args.pos[k];
    } else {
      auto it = std::find_if(args.kw.begin(), args.kw.end(), [&](const auto& kv) { return kv.first == head; });
      if (it == args.kw.end()) raise(ErrorKind::kKeyError, "{}", py::repr(head));
      v = it->second;
    }
    for (size_t p = end; p < field.size();) {
      if (field[p] == '.') {
        size_t q = std::min(field.find('.', p + 1), field.find('[', p + 1));
        v = get_attr(v, field.substr(p + 1, q - p - 1));
        p = q;
      } else {
        size_t q = field.find(']', p);
        if (q == std::string::npos) raise(ErrorKind::kValueError, "Missing ']' in format string");
        std::string key = field.substr(p + 1, q - p - 1);
        bool digits = !key.empty() && std::all_of(key.begin(), key.end(), [](char d) { return d >= '0' && d <= '9'; });
        v = get_item(v, digits ? Value(static_cast<int64_t>(std::stoll(key))) : Value(key));
        p = q + 1;
      }
    }
    if (conv == "r") v = Value(v.repr());
    else if (conv == "s") v = Value(v.to_str());
    out += format_spec(v, spec);
  }
  return out;
}

std::string format_spec(const Value& v, const std::string& spec) {
  if (spec.empty()) return v.to_str();
  // [[fill]align][sign][0][width][,][.precision][type]
  size_t i = 0;
  char32_t fill = ' ';
  char align = 0;
  auto is_align = [](char c) { return c == '<' || c == '>' || c == '^' || c == '='; };
  if (spec.size() >= 2 && is_align(spec[1])) {
    fill = static_cast<unsigned char>(spec[0]);
    align = spec[1];
    i = 2;
  } else if (!spec.empty() && is_align(spec[0])) {
    align = spec[0];
    i = 1;
  }
  std::string sign;
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) sign = spec[i++];
  bool zero = false;
  if (i < spec.size() && spec[i] == '0') {
    zero = true;
    ++i;
  }
  std::string width;
  while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) width.push_back(spec[i++]);
  std::string prec;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) prec.push_back(spec[i++]);
  }
  char type = i < spec.size() ? spec[i] : 0;
  std::string body;
  if (v.is_number() && type != 's') {
    std::string pf = "%" + sign + (prec.empty() ? "" : "." + prec);
    char buf[128];
    if (type == 'd' || (type == 0 && v.is_int() && prec.empty())) {
      std::snprintf(buf, sizeof(buf), (pf + "lld").c_str(), static_cast<long long>(v.as_int()));
    } else if (type == 0 && prec.empty()) {
      return v.to_str();
    } else {
      char t = type == 0 ? 'g' : type == '%' ? 'f' : type;
      std::snprintf(buf, sizeof(buf), (pf + t).c_str(), type == '%' ? v.as_float() * 100 : v.as_float());
    }
    body = buf;
    if (type == '%') body += '%';
    if (!align) align = '>';
    if (zero && !width.empty()) {
      fill = '0';
      align = '=';
    }
  } else {
    body = v.to_str();
    if (!prec.empty()) body = py::slice(body, 0, std::stoll(prec), std::nullopt);
    if (!align) align = '<';
  }
  int64_t w = width.empty() ? 0 : std::stoll(width);
  if (align == '=') {
    std::string sgn;
    if (!body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ')) {
      sgn = body.substr(0, 1);
      body = body.substr(1);
    }
    return sgn + py::pad(body, w - static_cast<int64_t>(sgn.size()), fill, 1);
  }
  return py::pad(body, w, fill, align == '<' ? -1 : align == '>' ? 1 : 0);
}

Value str_method(Interpreter& in, const Value& self, const std::string& name, CallArgs& args) {
  (void)in;
  const std::string& s = self.str();
  bool mk = self.markup();
  auto escape_arg = [&](const Value& v) { return (mk && !(v.is_string() && v.markup())) ? html_escape(v.to_str()) : v.to_str(); };
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgBinder a(name.c_str(), args, {"chars"});
    return Value(py::strip(s, opt_str(a.get(0), name.c_str()), name != "rstrip", name != "lstrip"), mk);
  }
  if (name == "split" || name == "rsplit") {
    ArgBinder a(name.c_str(), args, {"sep", "maxsplit"});
    auto sep = opt_str(a.get(0), name.c_str());
    int64_t maxsplit = opt_int(a.get(1), -1);
    return str_list(name == "split" ? py::split(s, sep, maxsplit) : py::rsplit(s, sep, maxsplit), mk);
  }
  if (name == "splitlines") {
    ArgBinder a("splitlines", args, {"keepends"});
    return str_list(py::splitlines(s, a.get_or(0, Value(false)).truthy()), mk);
  }
  if (name == "startswith" || name == "endswith") {
    ArgBinder a(name.c_str(), args, {"prefix", "start", "end"});
    std::string sub = s;
    if (a.get(1) || a.get(2)) {
      std::optional<int64_t> b, e;
      if (a.get(1) && !a.get(1)->is_none()) b = opt_int(a.get(1), 0);
      if (a.get(2) && !a.get(2)->is_none()) e = opt_int(a.get(2), 0);
      sub = py::slice(s, b, e, std::nullopt);
    }
    return Value(affix_match(sub, a.require(0), name == "startswith", name.c_str()));
  }
  if (name == "upper") return Value(py::upper(s), mk);
  if (name == "lower" || name == "casefold") return Value(py::lower(s), mk);
  if (name == "title") return Value(py::title(s), mk);
  if (name == "capitalize") return Value(py::capitalize(s), mk);
  if (name == "swapcase") return Value(py::swapcase(s), mk);
  if (name == "replace") {
    ArgBinder a("replace", args, {"old", "new", "count"});
    std::string o = require_str(a.require(0), "replace"), n = require_str(a.require(1), "replace");
    if (mk) {
      o = escape_arg(a.require(0));
      n = escape_arg(a.require(1));
    }
    return Value(py::replace(s, o, n, opt_int(a.get(2), -1)), mk);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
    ArgBinder a(name.c_str(), args, {"sub", "start", "end"});
    std::string sub = require_str(a.require(0), name.c_str());
    int64_t offset = 0;
    std::string hay = s;
    if (a.get(1) || a.get(2)) {
      std::optional<int64_t> b, e;
      if (a.get(1) && !a.get(1)->is_none()) b = opt_int(a.get(1), 0);
      if (a.get(2) && !a.get(2)->is_none()) e = opt_int(a.get(2), 0);
      hay = py::slice(s, b, e, std::nullopt);
      int64_t n = static_cast<int64_t>(py::length(s));
      offset = b ? (*b < 0 ? std::max<int64_t>(0, *b + n) : std::min(*b, n)) : 0;
    }
    int64_t r = py::find(hay, sub, name[0] == 'r');
    if (r < 0 && name.find("index") != std::string::npos) raise(ErrorKind::kValueError, "substring not found");
    return Value(r < 0 ? r : r + offset);
  }
  if (name == "count") {
    ArgBinder a("count", args, {"sub"});
    return Value(py::count(s, require_str(a.require(0), "count")));
  }
  if (name == "join") {
    ArgBinder a("join", args, {"iterable"});
    std::string out;
    bool first = true;
    size_t idx = 0;
    for (const auto& v : iterate(a.require(0))) {
      if (!v.is_string())
        raise(ErrorKind::kTypeError, "sequence item {}: expected str instance, {} found", idx, v.type_name());
      ++idx;
      if (!first) out += s;
      first = false;
      out += escape_arg(v);
    }
    return Value(std::move(out), mk);
  }
  if (name == "format") return Value(str_format(s, args), mk);
  if (name == "center" || name == "ljust" || name == "rjust") {
    ArgBinder a(name.c_str(), args, {"width", "fillchar"});
    char32_t fill = ' ';
    if (const Value* f = a.get(1)) {
      if (!f->is_string() || py::length(f->str()) != 1)
        raise(ErrorKind::kTypeError, "The fill character must be exactly one character long");
      size_t k = 0;
      fill = py::next_cp(f->str(), k);
    }
    int where = name == "center" ? 0 : name == "ljust" ? -1 : 1;
    return Value(py::pad(s, opt_int(&a.require(0), 0), fill, where), mk);
  }
  if (name == "zfill") {
    ArgBinder a("zfill", args, {"width"});
    int64_t w = opt_int(&a.require(0), 0);
    std::string body = s, sign;
    if (!body.empty() && (body[0] == '-' || body[0] == '+')) {
      sign = body.substr(0, 1);
      body = body.substr(1);
    }
    int64_t n = static_cast<int64_t>(py::length(s));
    if (w <= n) return Value(s, mk);
    return Value(sign + std::string(static_cast<size_t>(w - n), '0') + body, mk);
  }
  if (name == "isalpha") return Value(py::is_alpha(s));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return Value(py::is_digit(s));
  if (name == "isalnum") return Value(py::is_alnum(s));
  if (name == "isspace") return Value(py::is_all_space(s));
  if (name == "isupper") return Value(py::is_upper(s));
  if (name == "islower") return Value(py::is_lower(s));
  if (name == "isascii") return Value(std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }));
  if (name == "istitle") return Value(py::title(s) == s && py::lower(s) != py::upper(s));
  if (name == "partition" || name == "rpartition") {
    ArgBinder a(name.c_str(), args, {"sep"});
    std::string sep = require_str(a.require(0), name.c_str());
    if (sep.empty()) raise(ErrorKind::kValueError, "empty separator");
    size_t hit = name == "partition" ? s.find(sep) : s.rfind(sep);
    if (hit == std::string::npos) {
      if (name == "partition") return Value::tuple({Value(s, mk), Value("", mk), Value("", mk)});
      return Value::tuple({Value("", mk), Value("", mk), Value(s, mk)});
    }
    return Value::tuple({Value(s.substr(0, hit), mk), Value(sep, mk), Value(s.substr(hit + sep.size()), mk)});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    ArgBinder a(name.c_str(), args, {"affix"});
    std::string x = require_str(a.require(0), name.c_str());
    if (name == "removeprefix" && s.compare(0, x.size(), x) == 0) return Value(s.substr(x.size()), mk);
    if (name == "removesuffix" && !x.empty() && s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0)
      return Value(s.substr(0, s.size() - x.size()), mk);
    return Value(s, mk);
  }
  if (name == "expandtabs") {
    ArgBinder a("expandtabs", args, {"tabsize"});
    int64_t tab = opt_int(a.get(0), 8), col = 0;
    std::string out;
    for (size_t i = 0; i < s.size();) {
      size_t j = i;
      char32_t c = py::next_cp(s, j);
      if (c == '\t') {
        int64_t n = tab > 0 ? tab - col % tab : 0;
        py::check_str_bytes(out.size() + static_cast<size_t>(n));
        out.append(static_cast<size_t>(n), ' ');
        col += n;
      } else {
        out.append(s, i, j - i);
        col = (c == '\n' || c == '\r') ? 0 : col + 1;
      }
      i = j;
    }
    return Value(std::move(out), mk);
  }
  raise(ErrorKind::kTypeError, "str.{}() is not supported by this template engine", name);
}

Value dict_method(const Value& self, const std::string& name, CallArgs& args) {
  const Dict& d = self.dict_ref();
  if (name == "get") {
    ArgBinder a("get", args, {"key", "default"});
    const Value& key = a.require(0);
    if (key.is_list() && !key.is_tuple()) raise(ErrorKind::kTypeError, "unhashable type: 'list'");
    const Value* v = d.find(key);
    return v ? *v : a.get_or(1, Value::none());
  }
  ArgBinder a(name.c_str(), args, {});
  if (name == "items") {
    std::vector<Value> items;
    items.reserve(d.items.size());
    for (const auto& kv : d.items) items.push_back(Value::tuple({kv.first, kv.second}));
    return Value::iter(std::move(items), "dict_items", false);
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> items;
    items.reserve(d.items.size());
    for (const auto& kv : d.items) items.push_back(name == "keys" ? kv.first : kv.second);
    return Value::iter(std::move(items), name == "keys" ? "dict_keys" : "dict_values", false);
  }
  if (name == "copy") return Value::dict(std::make_shared<Dict>(d));
  raise(ErrorKind::kTypeError, "dict.{}() is not supported by this template engine", name);
}

Value list_method(const Value& self, const std::string& name, CallArgs& args) {
  const auto& items = self.list().items;
  if (name == "count") {
    ArgBinder a("count", args, {"value"});
    return Value(static_cast<int64_t>(std::count_if(items.begin(), items.end(), [&](const Value& v) { return equals(v, a.require(0)); })));
  }
  if (name == "index") {
    ArgBinder a("index", args, {"value"});
    for (size_t i = 0; i < items.size(); ++i)
      if (equals(items[i], a.require(0))) return Value(static_cast<int64_t>(i));
    raise(ErrorKind::kValueError, "{} is not in list", a.require(0).repr());
  }
  if (name == "copy") return Value::list(items);
  raise(ErrorKind::kTypeError, "list.{}() is not supported by this template engine", name);
}

}  // namespace

ArgBinder::ArgBinder(const char* fn, CallArgs& args, std::initializer_list<const char*> params)
    : fn_(fn), names_(params), slots_(params.size(), nullptr) {
  if (args.pos.size() > names_.size())
    raise(ErrorKind::kTypeError, "{}() takes at most {} argument(s) ({} given)", fn, names_.size(), args.pos.size());
  for (size_t i = 0; i < args.pos.size(); ++i) slots_[i] = &args.pos[i];
  for (const auto& kv : args.kw) {
    size_t k = 0;
    while (k < names_.size() && kv.first != names_[k]) ++k;
    if (k == names_.size()) raise(ErrorKind::kTypeError, "{}() got an unexpected keyword argument '{}'", fn, kv.first);
    if (slots_[k]) raise(ErrorKind::kTypeError, "{}() got multiple values for argument '{}'", fn, kv.first);
    slots_[k] = &kv.second;
  }
}

const Value& ArgBinder::require(size_t i) const {
  if (!slots_[i]) raise(ErrorKind::kTypeError, "{}() missing required argument '{}'", fn_, names_[i]);
  return *slots_[i];
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    if (is_dunder(name)) return unsafe(obj, name);  // real Python attributes of the Undefined object
    obj.raise_undefined();
  }
  if (obj.is_object()) return obj.object_ptr()->get_attr(name);
  Value out;
  if (python_attr(obj, name, out)) return out;
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_ref().find(std::string_view(name))) return *v;
  }
  return missing(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.raise_undefined();
  switch (obj.kind()) {
    case Value::Kind::kDict:
      if (const Value* v = obj.dict_ref().find(key)) return *v;
      break;
    case Value::Kind::kIter:
      if (!key.is_int() || !obj.is_range()) break;  // only range is indexable
      [[fallthrough]];
    case Value::Kind::kList:
    case Value::Kind::kString:
      if (key.is_int()) {
        int64_t i = key.as_int();
        if (obj.is_list() || obj.is_iter()) {
          int64_t n = static_cast<int64_t>(obj.list().items.size());
          if (i < 0) i += n;
          if (i >= 0 && i < n) return obj.list().items[static_cast<size_t>(i)];
        } else {
          std::string ch = py::slice(obj.str(), i, i == -1 ? std::nullopt : std::optional<int64_t>(i + 1), std::nullopt);
          int64_t n = static_cast<int64_t>(py::length(obj.str()));
          if ((i >= 0 && i < n) || (i < 0 && i + n >= 0)) return Value(std::move(ch), obj.markup());
        }
      }
      break;
    case Value::Kind::kObject:
      if (key.is_string()) return obj.object_ptr()->get_attr(key.str());
      break;
    default:
      break;
  }
  if (key.is_string()) {
    Value out;
    if (python_attr(obj, key.str(), out)) return out;
  }
  return missing(obj, key);
}

Value get_python_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return get_attr(obj, name);
  if (obj.is_object()) return obj.object_ptr()->get_attr(name);
  Value out;
  if (python_attr(obj, name, out)) return out;
  return missing(obj, name);
}

Value call_method(Interpreter& in, const Value& self, const std::string& name, CallArgs& args) {
  if (self.is_undefined()) self.raise_undefined();
  if (self.is_object()) {
    Value r;
    if (self.object_ptr()->call_method(in, name, args, r)) return r;
    return in.call_value(self.object_ptr()->get_attr(name), args);
  }
  Value attr;
  if (!python_attr(self, name, attr)) return in.call_value(get_attr(self, name), args);
  if (attr.is_undefined()) attr.raise_undefined();  // unsafe (mutating) method
  if (self.is_string()) return str_method(in, self, name, args);
  if (self.is_dict()) return dict_method(self, name, args);
  return list_method(self, name, args);
}

}  // namespace ft::jinja
