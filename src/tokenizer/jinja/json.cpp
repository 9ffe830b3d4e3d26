#include "tokenizer/jinja/json.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/pystr.h"

namespace ft::jinja {
namespace {

template <typename J>
Value convert(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(convert(e));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<Dict>();
      d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(Value(it.key()), convert(it.value()));
      return Value::dict(std::move(d));
    }
    default: return Value::none();  // binary / discarded: not produced by the JSON parser
  }
}

void dump_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\' && (c < 0x7F || (!ensure_ascii && c >= 0x7F))) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; ++i; continue;
      case '\\': out += "\\\\"; ++i; continue;
      case '\n': out += "\\n"; ++i; continue;
      case '\r': out += "\\r"; ++i; continue;
      case '\t': out += "\\t"; ++i; continue;
      case '\b': out += "\\b"; ++i; continue;
      case '\f': out += "\\f"; ++i; continue;
      default: break;
    }
    char32_t cp = py::next_cp(s, i);
    if (cp >= 0x10000) {
      char32_t v = cp - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(cp));
    }
  }
  out.push_back('"');
}

std::string float_json(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return py::float_repr(v);
}

std::string key_string(const Value& k) {
  switch (k.kind()) {
    case Value::Kind::kString: return k.str();
    case Value::Kind::kBool: return k.as_bool() ? "true" : "false";
    case Value::Kind::kInt: return std::to_string(k.as_int());
    case Value::Kind::kFloat: return float_json(k.as_float());
    case Value::Kind::kNone: return "null";
    default: raise(ErrorKind::kTypeError, "keys must be str, int, float, bool or None, not {}", k.type_name());
  }
}

class Dumper {
 public:
  explicit Dumper(const DumpOptions& o) : o_(o) {}

  void dump(std::string& out, const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::kNone: out += "null"; return;
      case Value::Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
      case Value::Kind::kInt: out += std::to_string(v.as_int()); return;
      case Value::Kind::kFloat: out += float_json(v.as_float()); return;
      case Value::Kind::kString: dump_string(out, v.str(), o_.ensure_ascii); return;
      case Value::Kind::kList: {
        const auto& items = v.list().items;
        const CycleGuard guard(&v.list());
        if (guard.reentered()) raise(ErrorKind::kValueError, "Circular reference detected");
        if (items.empty()) {
          out += "[]";
          return;
        }
        out.push_back('[');
        for (size_t i = 0; i < items.size(); ++i) {
          if (i) out += o_.item_sep;
          newline(out, level + 1);
          dump(out, items[i], level + 1);
        }
        newline(out, level);
        out.push_back(']');
        return;
      }
      case Value::Kind::kDict: {
        const auto& items = v.dict_ref().items;
        const CycleGuard guard(&v.dict_ref());
        if (guard.reentered()) raise(ErrorKind::kValueError, "Circular reference detected");
        if (items.empty()) {
          out += "{}";
          return;
        }
        std::vector<std::pair<std::string, const Value*>> kvs;
        kvs.reserve(items.size());
        for (const auto& kv : items) kvs.emplace_back(key_string(kv.first), &kv.second);
        if (o_.sort_keys)
          std::stable_sort(kvs.begin(), kvs.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
        out.push_back('{');
        for (size_t i = 0; i < kvs.size(); ++i) {
          if (i) out += o_.item_sep;
          newline(out, level + 1);
          dump_string(out, kvs[i].first, o_.ensure_ascii);
          out += o_.key_sep;
          dump(out, *kvs[i].second, level + 1);
        }
        newline(out, level);
        out.push_back('}');
        return;
      }
      default:
        raise(ErrorKind::kTypeError, "Object of type {} is not JSON serializable", v.type_name());
    }
  }

 private:
  void newline(std::string& out, int level) {
    if (!o_.indent) return;
    out.push_back('\n');
    for (int i = 0; i < level; ++i) out += *o_.indent;
  }
  const DumpOptions& o_;
};

}  // namespace

Value from_json(const nlohmann::ordered_json& j) { return convert(j); }
Value from_json(const nlohmann::json& j) { return convert(j); }

std::string dumps(const Value& v, const DumpOptions& options) {
  std::string out;
  Dumper(options).dump(out, v, 0);
  return out;
}

}  // namespace ft::jinja
