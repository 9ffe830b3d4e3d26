// Global functions: jinja2's defaults (range with the sandbox's MAX_RANGE, dict, namespace, cycler,
// joiner) and the two Hugging Face adds (raise_exception, strftime_now).
#include <ctime>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/objects.h"

namespace ft::jinja {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2.sandbox.MAX_RANGE

int64_t int_param(const Value& v) {
  if (!v.is_int()) raise(ErrorKind::kTypeError, "'{}' object cannot be interpreted as an integer", v.type_name());
  return v.as_int();
}

Value g_range(Interpreter&, CallArgs& args) {
  if (!args.kw.empty()) raise(ErrorKind::kTypeError, "range() takes no keyword arguments");
  if (args.pos.empty() || args.pos.size() > 3)
    raise(ErrorKind::kTypeError, "range expected at most 3 arguments, got {}", args.pos.size());
  int64_t start = 0, stop, step = 1;
  if (args.pos.size() == 1) {
    stop = int_param(args.pos[0]);
  } else {
    start = int_param(args.pos[0]);
    stop = int_param(args.pos[1]);
    if (args.pos.size() == 3) step = int_param(args.pos[2]);
  }
  if (step == 0) raise(ErrorKind::kValueError, "range() arg 3 must not be zero");
  int64_t n = step > 0 ? (stop > start ? (stop - start + step - 1) / step : 0)
                       : (start > stop ? (start - stop - step - 1) / (-step) : 0);
  if (n > kMaxRange)
    raise(ErrorKind::kOverflowError, "Range too big. The sandbox blocks ranges larger than MAX_RANGE ({}).", kMaxRange);
  return Value::range(start, stop, step);
}

// dict(mapping_or_pairs, **kwargs) / namespace(...) share the constructor rules.
std::shared_ptr<Dict> build_dict(const char* fn, CallArgs& args) {
  auto d = std::make_shared<Dict>();
  if (args.pos.size() > 1) raise(ErrorKind::kTypeError, "{} expected at most 1 argument, got {}", fn, args.pos.size());
  if (!args.pos.empty()) {
    const Value& src = args.pos[0];
    if (src.is_dict()) {
      *d = src.dict_ref();
    } else {
      for (const auto& pair : iterate(src)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) raise(ErrorKind::kValueError, "dictionary update sequence element has length {}; 2 is required", kv.size());
        d->set(kv[0], kv[1]);
      }
    }
  }
  for (const auto& kv : args.kw) d->set(Value(kv.first), kv.second);
  return d;
}

Value g_dict(Interpreter&, CallArgs& args) { return Value::dict(build_dict("dict", args)); }

Value g_namespace(Interpreter& in, CallArgs& args) {
  auto ns = std::make_shared<Namespace>();
  ns->attrs = *build_dict("namespace", args);
  in.own_namespace(ns);
  return Value::object(ns);
}

Value g_cycler(Interpreter&, CallArgs& args) {
  if (args.pos.empty()) raise(ErrorKind::kTypeError, "at least one item has to be provided");
  return Value::object(std::make_shared<Cycler>(args.pos));
}

Value g_joiner(Interpreter&, CallArgs& args) {
  ArgBinder a("joiner", args, {"sep"});
  return Value::object(std::make_shared<Joiner>(a.get_or(0, Value(", ")).to_str()));
}

Value g_raise_exception(Interpreter&, CallArgs& args) {
  ArgBinder a("raise_exception", args, {"message"});
  throw TemplateError(ErrorKind::kTemplateError, a.require(0).to_str());
}

Value g_strftime_now(Interpreter& in, CallArgs& args) {
  ArgBinder a("strftime_now", args, {"format"});
  const Value& f = a.require(0);
  if (!f.is_string()) raise(ErrorKind::kTypeError, "strftime() argument 1 must be str, not {}", f.type_name());
  std::tm tm{};
  if (in.options().now) {
    tm = *in.options().now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  if (f.str().empty()) return Value("");
  std::string buf(256 + f.str().size() * 8, '\0');
  size_t n = std::strftime(buf.data(), buf.size(), f.str().c_str(), &tm);
  buf.resize(n);
  return Value(std::move(buf));
}

struct GlobalFn {
  const char* name;
  BuiltinFunction::Fn fn;
};
constexpr GlobalFn kGlobals[] = {
    {"range", g_range},       {"dict", g_dict},     {"namespace", g_namespace},
    {"cycler", g_cycler},     {"joiner", g_joiner}, {"raise_exception", g_raise_exception},
    {"strftime_now", g_strftime_now},
};

}  // namespace

Value find_global(std::string_view name) {
  static const std::vector<std::pair<std::string_view, Value>> values = [] {
    std::vector<std::pair<std::string_view, Value>> v;
    for (const auto& g : kGlobals) v.emplace_back(g.name, Value::object(std::make_shared<BuiltinFunction>(g.name, g.fn)));
    return v;
  }();
  for (const auto& kv : values)
    if (kv.first == name) return kv.second;
  return Value();
}

}  // namespace ft::jinja
