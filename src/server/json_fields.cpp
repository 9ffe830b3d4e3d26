#include "server/json_fields.h"

#include <algorithm>
#include <cmath>

#include "server/errors.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

const char* type_name(const ojson& v) {
  switch (v.type()) {
    case ojson::value_t::null: return "null";
    case ojson::value_t::boolean: return "a boolean";
    case ojson::value_t::string: return "a string";
    case ojson::value_t::array: return "an array";
    case ojson::value_t::object: return "an object";
    case ojson::value_t::number_float: return "a number";
    default: return "an integer";
  }
}

const ojson* field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

bool get_bool(const ojson& obj, const char* key, bool def) {
  const ojson* v = field(obj, key);
  if (!v) return def;
  if (!v->is_boolean()) bad_request(key, fmt::format("'{}' must be a boolean, got {}", key, type_name(*v)));
  return v->get<bool>();
}

double get_number(const ojson& obj, const char* key, double def, double lo, double hi) {
  const ojson* v = field(obj, key);
  if (!v) return def;
  if (!v->is_number()) bad_request(key, fmt::format("'{}' must be a number, got {}", key, type_name(*v)));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) bad_request(key, fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, x));
  return x;
}

int64_t as_int(const ojson& v, const std::string& param, const std::string& what, int64_t lo, int64_t hi) {
  int64_t x = 0;
  if (v.is_number_integer()) {
    x = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX)) : v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
             std::fabs(v.get<double>()) < 9e15) {
    x = static_cast<int64_t>(v.get<double>());
  } else {
    bad_request(param, fmt::format("'{}' must be an integer, got {}", what, type_name(v)));
  }
  if (x < lo || x > hi) bad_request(param, fmt::format("'{}' must be in [{}, {}], got {}", what, lo, hi, x));
  return x;
}

std::optional<int64_t> get_int(const ojson& obj, const char* key, int64_t lo, int64_t hi) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  return as_int(*v, key, key, lo, hi);
}

std::string get_string(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return {};
  if (!v->is_string()) bad_request(key, fmt::format("'{}' must be a string, got {}", key, type_name(*v)));
  return v->get<std::string>();
}

}  // namespace ft::server
