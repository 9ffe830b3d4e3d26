#include "server/json_schema_grammar.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "server/errors.h"
#include "server/json_grammar_rules.h"
#include "util/error.h"

namespace ft::server {

namespace g = ft::grammar;
using Json = nlohmann::ordered_json;

namespace {

const std::set<std::string, std::less<>> kAnnotations = {
    "title", "description", "examples", "default", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", "$anchor", "$defs", "definitions"};

const std::set<std::string, std::less<>> kSupported = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items", "prefixItems",
    "additionalItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref", "format", "minLength",
    "maxLength", "uniqueItems", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

const std::set<std::string, std::less<>> kTypes = {"object", "array", "string", "number", "integer", "boolean", "null"};

bool is_annotation(std::string_view key) { return kAnnotations.count(key) || key.rfind("x-", 0) == 0; }

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

std::string compact(const Json& v) { return v.dump(-1, ' ', false, Json::error_handler_t::replace); }

// The JSON type names `v` has ("integer" values are also "number").
bool has_type(const Json& v, std::string_view type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "string") return v.is_string();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                     v.get<double>() == std::floor(v.get<double>()));
  return v.is_number();  // "number"
}

class SchemaCompiler {
 public:
  SchemaCompiler(g::GrammarBuilder& b, const Json& root, std::string param)
      : b_(b), rules_(b), root_(root), param_(std::move(param)) {}

  [[noreturn]] void refuse(const std::string& path, const std::string& what) {
    bad_request(param_, fmt::format("JSON Schema at '#{}': {}", path, what));
  }

  g::Expr compile(const Json& s, const std::string& path) {
    if (++depth_ > 256) refuse(path, "the schema nests more than 256 levels");
    g::Expr e = compile_inner(s, path);
    --depth_;
    return e;
  }

  g::RuleId ref_rule(const std::string& ref, const std::string& path) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    const Json& target = resolve(ref, path);
    g::RuleId r = b_.declare("ref " + ref);
    refs_.emplace(ref, r);
    b_.define(r, compile(target, ref.substr(1)));
    return r;
  }

 private:
  const Json& resolve(const std::string& ref, const std::string& path) {
    if (ref.empty() || ref[0] != '#') refuse(path, fmt::format("$ref '{}' is not a local reference (#/...)", ref));
    try {
      const Json& t = root_.at(Json::json_pointer(ref.substr(1)));
      if (!t.is_object() && !t.is_boolean()) refuse(path, fmt::format("$ref '{}' does not name a schema", ref));
      return t;
    } catch (const nlohmann::json::exception&) {
      refuse(path, fmt::format("$ref '{}' does not resolve in this schema", ref));
    }
  }

  // `s` with its $ref replaced by the target's keywords (for merging).
  Json inline_ref(const Json& s, const std::string& path, int hops = 0) {
    if (!s.is_object() || !s.contains("$ref")) return s;
    if (hops > 32) refuse(path, "$ref chain too long to merge");
    Json target = inline_ref(resolve(s["$ref"].get<std::string>(), path), path, hops + 1);
    Json rest = s;
    rest.erase("$ref");
    return merge(target.is_boolean() ? Json::object() : target, rest, path);
  }

  // allOf-style merge of two object schemas when each keyword merges trivially; refuses otherwise.
  Json merge(Json a, const Json& bs, const std::string& path) {
    Json b = inline_ref(bs, path);
    if (b.is_boolean()) {
      if (!b.get<bool>()) refuse(path, "a false schema in allOf allows no value");
      return a;
    }
    a = inline_ref(a, path);
    auto closed_against = [&](const Json& x, const Json& y) {  // x closes properties y needs
      if (!x.contains("additionalProperties") || x["additionalProperties"] == Json(true)) return;
      for (const char* key : {"properties", "required"}) {
        if (!y.contains(key)) continue;
        for (const auto& [k, v] : y[key].items()) {
          std::string name = y[key].is_array() ? v.get<std::string>() : k;
          if (!x.contains("properties") || !x["properties"].contains(name))
            refuse(path, fmt::format("allOf cannot be merged: property '{}' is excluded by additionalProperties", name));
        }
      }
    };
    closed_against(a, b);
    closed_against(b, a);
    for (const auto& [k, v] : b.items()) {
      if (is_annotation(k)) continue;
      if (!a.contains(k)) {
        a[k] = v;
      } else if (a[k] == v) {
      } else if (k == "required") {
        for (const Json& r : v)
          if (std::find(a[k].begin(), a[k].end(), r) == a[k].end()) a[k].push_back(r);
      } else if (k == "properties") {
        for (const auto& [pk, pv] : v.items())
          a[k][pk] = a[k].contains(pk) ? merge(a[k][pk], pv, path + "/properties/" + escape_pointer(pk)) : pv;
      } else if (k == "type") {
        auto list = [](const Json& t) { return t.is_array() ? t : Json::array({t}); };
        Json both = Json::array();
        for (const Json& t : list(a[k]))
          for (const Json& u : list(v))
            if (t == u || (t == "number" && u == "integer")) both.push_back(u);
            else if (t == "integer" && u == "number") both.push_back(t);
        if (both.empty()) refuse(path, "allOf has no type in common");
        a[k] = both;
      } else if ((k == "minimum" || k == "exclusiveMinimum") && v.is_number() && a[k].is_number()) {
        a[k] = std::max(a[k].get<double>(), v.get<double>());
      } else if ((k == "maximum" || k == "exclusiveMaximum") && v.is_number() && a[k].is_number()) {
        a[k] = std::min(a[k].get<double>(), v.get<double>());
      } else if ((k == "minLength" || k == "minItems") && v.is_number_unsigned()) {
        a[k] = std::max(a[k].get<uint64_t>(), v.get<uint64_t>());
      } else if ((k == "maxLength" || k == "maxItems") && v.is_number_unsigned()) {
        a[k] = std::min(a[k].get<uint64_t>(), v.get<uint64_t>());
      } else {
        refuse(path, fmt::format("allOf cannot be merged: keyword '{}' differs between subschemas", k));
      }
    }
    return a;
  }

  int64_t count_of(const Json& s, const char* key, const std::string& path, int64_t fallback) {
    if (!s.contains(key)) return fallback;
    const Json& v = s[key];
    if (!v.is_number_unsigned() && !(v.is_number_float() && v.get<double>() >= 0 && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))))
      refuse(path + "/" + key, fmt::format("'{}' must be a non-negative integer", key));
    int64_t n = v.is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v.get<uint64_t>(), 1u << 30))
                                       : static_cast<int64_t>(v.get<double>());
    if (n > 100000) refuse(path + "/" + key, fmt::format("'{}' {} is over the 100000 that constrained decoding supports", key, n));
    return n;
  }

  g::Expr compile_inner(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema false allows no value");
      return g::rule(rules_.value());
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      if (is_annotation(k) || kSupported.count(k)) continue;
      refuse(path + "/" + escape_pointer(k), fmt::format("keyword '{}' is not supported by constrained decoding", k));
    }
    if (s.contains("uniqueItems") && s["uniqueItems"] != Json(false) && count_of(s, "maxItems", path, 2) > 1)
      refuse(path + "/uniqueItems", "keyword 'uniqueItems' is not supported by constrained decoding");

    if (s.contains("allOf")) {
      const Json& all = s["allOf"];
      if (!all.is_array() || all.empty()) refuse(path + "/allOf", "'allOf' must be a non-empty array");
      Json merged = s;
      merged.erase("allOf");
      for (size_t i = 0; i < all.size(); ++i) merged = merge(merged, all[i], path + "/allOf/" + std::to_string(i));
      return compile(merged, path);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      const Json& branches = s[key];
      if (!branches.is_array() || branches.empty()) refuse(path + "/" + key, fmt::format("'{}' must be a non-empty array", key));
      Json rest = s;
      rest.erase(key);
      bool plain = true;
      for (const auto& [k, v] : rest.items()) plain = plain && is_annotation(k);
      std::vector<g::Expr> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        std::string bp = path + "/" + key + "/" + std::to_string(i);
        if (branches[i] == Json(false)) continue;
        alts.push_back(plain ? compile(branches[i], bp) : compile(merge(rest, branches[i], bp), bp));
      }
      if (alts.empty()) refuse(path + "/" + key, "no branch allows a value");
      return g::alternatives(std::move(alts));
    }
    if (s.contains("$ref")) {
      if (!s["$ref"].is_string()) refuse(path + "/$ref", "'$ref' must be a string");
      for (const auto& [k, v] : s.items())
        if (k != "$ref" && !is_annotation(k)) return compile(inline_ref(s, path), path);
      return g::rule(ref_rule(s["$ref"].get<std::string>(), path));
    }

    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      for (const Json& one : t.is_array() ? t : Json::array({t})) {
        if (!one.is_string() || !kTypes.count(one.get<std::string>()))
          refuse(path + "/type", fmt::format("unknown type {}", compact(one)));
        types.push_back(one.get<std::string>());
      }
      if (types.empty()) refuse(path + "/type", "an empty type list allows no value");
    }
    if (s.contains("const") || s.contains("enum")) {
      Json values = s.contains("const") ? Json::array({s["const"]}) : s["enum"];
      if (!values.is_array()) refuse(path + "/enum", "'enum' must be an array");
      if (s.contains("const") && s.contains("enum") &&
          std::find(s["enum"].begin(), s["enum"].end(), s["const"]) == s["enum"].end())
        refuse(path, "'const' is not one of 'enum'");
      std::vector<g::Expr> alts;
      for (const Json& v : values) {
        bool typed = types.empty();
        for (const std::string& t : types) typed = typed || has_type(v, t);
        if (typed) alts.push_back(g::literal(compact(v)));
      }
      if (alts.empty()) refuse(path, "no enum / const value has the schema's type");
      return g::alternatives(std::move(alts));
    }
    if (types.empty()) {  // infer from the keywords present; no keyword: any value
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) types = {"object"};
      else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems")) types = {"array"};
      else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) types = {"string"};
      else if (s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum")) types = {"number"};
      else return g::rule(rules_.value());
    }
    std::vector<g::Expr> alts;
    for (const std::string& t : types) alts.push_back(compile_type(s, t, path));
    return g::alternatives(std::move(alts));
  }

  g::Expr compile_type(const Json& s, const std::string& t, const std::string& path) {
    if (t == "null") return g::literal("null");
    if (t == "boolean") return g::alternatives({g::literal("true"), g::literal("false")});
    if (t == "integer" || t == "number") return compile_numeric(s, t, path);
    if (t == "string") {
      int64_t lo = count_of(s, "minLength", path, 0), hi = count_of(s, "maxLength", path, g::kUnbounded);
      if (hi != g::kUnbounded && hi < lo) refuse(path, "maxLength is below minLength");
      if (s.contains("format")) {
        if (!s["format"].is_string()) refuse(path + "/format", "'format' must be a string");
        if (auto f = rules_.format_string(s["format"].get<std::string>())) {
          if (s.contains("minLength") || s.contains("maxLength"))
            refuse(path, "minLength / maxLength together with format '" + s["format"].get<std::string>() + "'");
          return *f;
        }
      }
      if (lo == 0 && hi == g::kUnbounded) return g::rule(rules_.string());
      return rules_.string_of_length(lo, hi);
    }
    if (t == "array") return compile_array(s, path);
    return compile_object(s, path);
  }

  // The bound `key` of `s` as a double, if present.
  static constexpr double kBoundLimit = 9.0e15;

  std::optional<double> bound(const Json& s, const char* key, const std::string& path) {
    if (!s.contains(key)) return std::nullopt;
    if (!s[key].is_number()) refuse(path + "/" + key, fmt::format("'{}' must be a number", key));
    double v = s[key].get<double>();
    if (!std::isfinite(v)) refuse(path + "/" + key, fmt::format("'{}' must be finite", key));
    // The grammar's ranges are int64 digit automata kept within doubles' exact integers; a bound
    // beyond them would be silently moved, so it is refused.
    if (std::fabs(v) > kBoundLimit)
      refuse(path + "/" + key, fmt::format("'{}' beyond +-9e15 is not supported by constrained decoding", key));
    return v;
  }

  g::Expr compile_numeric(const Json& s, const std::string& t, const std::string& path) {
    const auto min = bound(s, "minimum", path), max = bound(s, "maximum", path);
    const auto xmin = bound(s, "exclusiveMinimum", path), xmax = bound(s, "exclusiveMaximum", path);
    if (!min && !max && !xmin && !xmax) return g::rule(t == "integer" ? rules_.integer() : rules_.number());
    auto clip = [&](double v) { return static_cast<int64_t>(std::max(-kBoundLimit, std::min(kBoundLimit, v))); };
    if (t == "integer") {
      std::optional<int64_t> lo, hi;
      if (min) lo = clip(std::ceil(*min));
      if (xmin) lo = std::max(lo.value_or(INT64_MIN), clip(std::floor(*xmin) + 1));
      if (max) hi = clip(std::floor(*max));
      if (xmax) hi = std::min(hi.value_or(INT64_MAX), clip(std::ceil(*xmax) - 1));
      if (lo && hi && *lo > *hi) refuse(path, "no integer lies between minimum and maximum");
      return rules_.integer_range(lo, hi);
    }
    auto integral = [](const std::optional<double>& v) { return !v || *v == std::floor(*v); };
    if (xmin || xmax)
      refuse(path + (xmin ? "/exclusiveMinimum" : "/exclusiveMaximum"),
             "keyword 'exclusiveMinimum' / 'exclusiveMaximum' on numbers is not supported by constrained decoding "
             "(it is on integers)");
    if (!min || *min < 0 || !integral(min) || !integral(max))
      refuse(path + (min ? "/minimum" : "/maximum"),
             "keyword 'minimum' / 'maximum' on numbers is supported by constrained decoding only with whole-number "
             "bounds and a minimum >= 0 (any bounds on integers)");
    if (max && *max < *min) refuse(path, "maximum is below minimum");
    return rules_.number_range(clip(*min), max ? std::optional<int64_t>(clip(*max)) : std::nullopt);
  }

  g::Expr compile_array(const Json& s, const std::string& path) {
    std::vector<g::Expr> prefix;
    std::optional<g::Expr> rest = g::rule(rules_.value());  // nullopt: no items past the prefix
    const Json* tuple = s.contains("prefixItems") ? &s["prefixItems"] : nullptr;
    std::string tuple_path = path + "/prefixItems", rest_key = "items";
    if (s.contains("items") && s["items"].is_array()) {  // draft-7 tuple form
      tuple = &s["items"];
      tuple_path = path + "/items";
      rest_key = "additionalItems";
    }
    if (tuple) {
      if (!tuple->is_array()) refuse(tuple_path, "'prefixItems' must be an array");
      for (size_t i = 0; i < tuple->size(); ++i) prefix.push_back(compile((*tuple)[i], tuple_path + "/" + std::to_string(i)));
    }
    if (s.contains(rest_key)) {
      if (s[rest_key] == Json(false)) rest.reset();
      else rest = g::rule(b_.add("items", compile(s[rest_key], path + "/" + rest_key)));
    }
    const int64_t k = static_cast<int64_t>(prefix.size());
    int64_t lo = count_of(s, "minItems", path, 0), hi = count_of(s, "maxItems", path, g::kUnbounded);
    if (!rest) hi = hi == g::kUnbounded ? k : std::min(hi, k);
    if (hi != g::kUnbounded && hi < lo) refuse(path, "no array length satisfies minItems, maxItems and the items");
    // After j >= k items: more `rest` items, each after a comma.
    auto tail = [&](int64_t j) -> g::Expr {
      if (!rest || (hi != g::kUnbounded && hi <= j)) return g::sequence({});
      return g::repeat(g::sequence({g::literal(","), *rest}), std::max<int64_t>(0, lo - j),
                       hi == g::kUnbounded ? g::kUnbounded : hi - j);
    };
    // G_j: what may follow j >= 1 emitted items.
    g::Expr after = tail(std::max<int64_t>(k, 1));
    for (int64_t j = k - 1; j >= 1; --j) {
      g::Expr more = g::sequence({g::literal(","), prefix[j], after});
      after = j >= lo ? g::alternatives({more, g::sequence({})}) : more;
    }
    g::Expr first = k > 0 ? prefix[0] : (rest ? *rest : g::sequence({}));
    std::vector<g::Expr> body;
    if (hi != 0 && (k > 0 || rest)) body.push_back(g::sequence({first, after}));
    if (lo == 0) body.push_back(g::sequence({}));
    if (body.empty()) refuse(path, "no array satisfies the schema");
    return g::sequence({g::literal("["), g::alternatives(std::move(body)), g::literal("]")});
  }

  g::Expr compile_object(const Json& s, const std::string& path) {
    std::vector<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) refuse(path + "/required", "'required' must be an array of names");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) refuse(path + "/required", "'required' must be an array of names");
        required.push_back(r.get<std::string>());
      }
    }
    const Json* props = s.contains("properties") ? &s["properties"] : nullptr;
    if (props && !props->is_object()) refuse(path + "/properties", "'properties' must be an object");
    const bool closed = s.contains("additionalProperties") && s["additionalProperties"] == Json(false);
    std::optional<g::Expr> extra_rule;  // schema of other properties, compiled when needed
    auto extra = [&]() -> g::Expr {
      if (!extra_rule) {
        extra_rule = s.contains("additionalProperties")
                         ? g::rule(b_.add("additional", compile(s["additionalProperties"], path + "/additionalProperties")))
                         : g::rule(rules_.value());
      }
      return *extra_rule;
    };
    struct Member {
      g::Expr kv;
      bool required;
    };
    std::vector<Member> members;
    std::set<std::string> seen;
    auto is_required = [&](const std::string& n) { return std::find(required.begin(), required.end(), n) != required.end(); };
    if (props) {
      for (const auto& [name, sub] : props->items()) {
        std::string sub_path = path + "/properties/" + escape_pointer(name);
        seen.insert(name);
        if (sub == Json(false)) {
          if (is_required(name)) refuse(sub_path, "a required property whose schema is false");
          continue;
        }
        g::RuleId kv = b_.add("member " + name, g::sequence({g::literal(compact(Json(name)) + ":"), compile(sub, sub_path)}));
        members.push_back({g::rule(kv), is_required(name)});
      }
    }
    for (const std::string& name : required) {
      if (seen.count(name)) continue;
      if (closed) refuse(path + "/required", fmt::format("required property '{}' is excluded by additionalProperties", name));
      seen.insert(name);
      g::RuleId kv = b_.add("member " + name, g::sequence({g::literal(compact(Json(name)) + ":"), extra()}));
      members.push_back({g::rule(kv), true});
    }
    if (!props && !s.contains("required") && !closed) {
      // A map: any keys, values of additionalProperties (duplicate keys may occur; each value is valid).
      g::Expr member = g::sequence({g::rule(rules_.string()), g::literal(":"), extra()});
      return g::sequence({g::literal("{"),
                          g::optional(g::sequence({member, g::repeat(g::sequence({g::literal(","), member}), 0, g::kUnbounded)})),
                          g::literal("}")});
    }
    // F_i: members from i on, none written yet; K_i: the same after one was written (comma first).
    g::Expr f = g::sequence({}), kk = g::sequence({});
    for (size_t i = members.size(); i-- > 0;) {
      g::Expr f_take = g::sequence({members[i].kv, kk});
      g::Expr k_take = g::sequence({g::literal(","), members[i].kv, kk});
      g::Expr f_new = members[i].required ? f_take : g::alternatives({f_take, f});
      g::Expr k_new = members[i].required ? k_take : g::alternatives({k_take, kk});
      if (!members[i].required) {  // both tails appear twice: rules keep the lowering linear
        f_new = g::rule(b_.add("object-rest", f_new));
        k_new = g::rule(b_.add("object-rest", k_new));
      }
      f = f_new;
      kk = k_new;
    }
    return g::sequence({g::literal("{"), f, g::literal("}")});
  }

  g::GrammarBuilder& b_;
  JsonRules rules_;
  const Json& root_;
  std::string param_;
  std::map<std::string, g::RuleId> refs_;
  int depth_ = 0;
};

}  // namespace

g::RuleId json_schema_rule(g::GrammarBuilder& builder, const Json& schema, const std::string& param) {
  SchemaCompiler c(builder, schema, param);
  return c.ref_rule("#", "");
}

g::RuleId json_value_rule(g::GrammarBuilder& builder) { return JsonRules(builder).value(); }

g::RuleId json_object_rule(g::GrammarBuilder& builder) { return JsonRules(builder).object(); }

std::shared_ptr<const g::Grammar> json_schema_grammar(const Json& schema, const std::string& param) {
  g::GrammarBuilder b;
  g::RuleId root = json_schema_rule(b, schema, param);
  try {
    return std::make_shared<const g::Grammar>(b.build(root));
  } catch (const Error& e) {
    bad_request(param, fmt::format("the JSON Schema cannot be used for constrained decoding: {}", e.what()));
  }
}

}  // namespace ft::server
