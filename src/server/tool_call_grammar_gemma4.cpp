// Gemma 4's argument notation as a grammar (tool_call_grammar.h, gemma4_arguments): the schema walk of
// json_schema_grammar, with Gemma's spelling of strings (<|"|>text<|"|>, no escapes) and bare keys; the
// numbers, true, false and null are JSON's, so their rules come from json_schema_rule.
#include <map>
#include <set>

#include <fmt/format.h>

#include "server/errors.h"
#include "server/json_schema_grammar.h"
#include "server/tool_call_grammar.h"

namespace ft::server {

namespace g = ft::grammar;
using Json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kQuote = "<|\"|>";

const std::set<std::string, std::less<>> kIgnored = {"title", "description", "examples", "default", "$schema", "$id",
                                                     "$comment", "deprecated", "readOnly", "writeOnly", "$anchor",
                                                     "$defs", "definitions", "additionalProperties"};
const std::set<std::string, std::less<>> kSupported = {
    "type", "enum", "const", "properties", "required", "items", "minItems", "maxItems", "anyOf", "oneOf",
    "$ref", "minLength", "maxLength", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

bool bare_key(std::string_view k) {
  if (k.empty()) return false;
  for (char c : k)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  return true;
}

class GemmaCompiler {
 public:
  GemmaCompiler(g::GrammarBuilder& b, const Json& root, std::string param) : b_(b), root_(root), param_(std::move(param)) {}

  [[noreturn]] void refuse(const std::string& path, const std::string& what) {
    bad_request(param_, fmt::format("JSON Schema at '#{}': {} (tool_choice forces a call in Gemma 4's notation)", path,
                                    what));
  }

  g::Expr value(const Json& s, const std::string& path) {
    if (++depth_ > 64) refuse(path, "the schema nests more than 64 levels");
    g::Expr e = inner(s, path);
    --depth_;
    return e;
  }

  g::Expr object(const Json& s, const std::string& path) {
    const Json props = s.value("properties", Json::object());
    std::set<std::string> required;
    for (const Json& r : s.value("required", Json::array())) {
      if (!r.is_string() || !props.contains(r.get<std::string>()))
        refuse(path + "/required", fmt::format("required '{}' is not one of 'properties'", r.is_string() ? r.get<std::string>() : r.dump()));
      required.insert(r.get<std::string>());
    }
    // Items with commas between them, optional ones skippable: first[i] (nothing written yet) and
    // rest[i] (something written) over properties i.., as rules.
    std::vector<std::pair<std::string, const Json*>> list;
    for (const auto& [k, v] : props.items()) list.emplace_back(k, &v);
    const size_t n = list.size();
    std::vector<g::RuleId> first(n + 1), rest(n + 1);
    for (size_t i = 0; i <= n; ++i) first[i] = b_.declare("gemma first"), rest[i] = b_.declare("gemma rest");
    b_.define(first[n], g::sequence({}));
    b_.define(rest[n], g::sequence({}));
    for (size_t i = n; i-- > 0;) {
      const std::string& k = list[i].first;
      if (!bare_key(k) && k.find(kQuote) != std::string::npos) refuse(path + "/properties", "a key holds <|\"|>");
      const std::string key = bare_key(k) ? k : std::string(kQuote) + k + std::string(kQuote);
      g::Expr item = g::sequence({g::literal(key + ":"), value(*list[i].second, path + "/properties/" + k)});
      const bool req = required.count(k) > 0;
      g::Expr with_first = g::sequence({item, g::rule(rest[i + 1])});
      g::Expr with_rest = g::sequence({g::literal(","), item, g::rule(rest[i + 1])});
      b_.define(first[i], req ? with_first : g::alternatives({with_first, g::rule(first[i + 1])}));
      b_.define(rest[i], req ? with_rest : g::alternatives({with_rest, g::rule(rest[i + 1])}));
    }
    return g::sequence({g::literal("{"), g::rule(first[0]), g::literal("}")});
  }

 private:
  g::Expr inner(const Json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) refuse(path, "the schema false allows no value");
      return any_scalar(path);
    }
    if (!s.is_object()) refuse(path, "a schema must be an object or a boolean");
    bool constrained = false;
    for (const auto& [k, v] : s.items()) {
      if (kIgnored.count(k) || k.rfind("x-", 0) == 0) continue;
      if (!kSupported.count(k)) refuse(path + "/" + k, fmt::format("keyword '{}' is not supported", k));
      constrained = true;
    }
    if (!constrained) return any_scalar(path);
    if (s.contains("$ref")) {
      if (s.size() > 1 + count_ignored(s)) refuse(path, "$ref beside other keywords is not supported");
      return g::rule(ref_rule(s["$ref"].get<std::string>(), path));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      if (!s[key].is_array() || s[key].empty()) refuse(path + "/" + key, fmt::format("'{}' must be a non-empty array", key));
      if (s.size() > 1 + count_ignored(s)) refuse(path, fmt::format("'{}' beside other keywords is not supported", key));
      std::vector<g::Expr> alts;
      for (size_t i = 0; i < s[key].size(); ++i) alts.push_back(value(s[key][i], path + "/" + key + "/" + std::to_string(i)));
      return g::alternatives(std::move(alts));
    }
    if (s.contains("const") || s.contains("enum")) {
      std::vector<g::Expr> alts;
      for (const Json& v : s.contains("const") ? Json::array({s["const"]}) : s["enum"]) {
        std::string text;
        if (literal(v, text)) alts.push_back(g::literal(text));
      }
      if (alts.empty()) refuse(path, "no enum / const value can be written");
      return g::alternatives(std::move(alts));
    }
    std::vector<std::string> types;
    if (!s.contains("type")) {
      types = {s.contains("properties") || s.contains("required") ? "object" : s.contains("items") ? "array" : ""};
      if (types[0].empty()) refuse(path, "a schema without 'type' is not supported");
    } else {
      for (const Json& t : s["type"].is_array() ? s["type"] : Json::array({s["type"]})) types.push_back(t.get<std::string>());
    }
    std::vector<g::Expr> alts;
    for (const std::string& t : types) alts.push_back(typed(s, t, path));
    if (alts.empty()) refuse(path + "/type", "'type' is empty");
    return g::alternatives(std::move(alts));
  }

  g::Expr typed(const Json& s, const std::string& t, const std::string& path) {
    if (t == "string") {
      const std::string format = s.value("format", "");
      if (format == "date" || format == "time" || format == "date-time" || format == "uuid")
        refuse(path + "/format", fmt::format("a string of format '{}' is not supported", format));
      const int64_t lo = s.value("minLength", int64_t{0});
      const int64_t hi = s.contains("maxLength") ? s["maxLength"].get<int64_t>() : g::kUnbounded;
      if (hi != g::kUnbounded && hi < lo) refuse(path, "maxLength is below minLength");
      g::Expr body = lo == 0 && hi == g::kUnbounded
                         ? g::rule(raw())
                         : g::repeat(g::chars({{0, 0}, {'\r', '\r'}, {'<', '<'}}, /*negated=*/true), lo, hi);
      return g::sequence({g::literal(kQuote), body, g::literal(kQuote)});
    }
    if (t == "object") return object(s, path);
    if (t == "array") {
      const Json items = s.value("items", Json(true));
      const int64_t lo = s.value("minItems", int64_t{0});
      const int64_t hi = s.contains("maxItems") ? s["maxItems"].get<int64_t>() : g::kUnbounded;
      if (hi != g::kUnbounded && hi < lo) refuse(path, "maxItems is below minItems");
      g::Expr item = value(items, path + "/items");
      if (hi == 0) return g::literal("[]");
      g::Expr more = g::repeat(g::sequence({g::literal(","), item}), std::max<int64_t>(lo - 1, 0),
                               hi == g::kUnbounded ? g::kUnbounded : hi - 1);
      g::Expr some = g::sequence({item, more});
      return g::sequence({g::literal("["), lo > 0 ? some : g::optional(some), g::literal("]")});
    }
    if (t == "integer" || t == "number" || t == "boolean" || t == "null") {  // as JSON writes them
      Json scalar = {{"type", t}};
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
        if (s.contains(k)) scalar[k] = s[k];
      return g::rule(json_schema_rule(b_, scalar, param_));
    }
    refuse(path + "/type", fmt::format("unknown type '{}'", t));
  }

  /** `v` in Gemma's notation; false when it cannot be written (a string holding <|"|>). */
  bool literal(const Json& v, std::string& out) {
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      if (s.find(kQuote) != std::string::npos || s.find_first_of(std::string("\r\0", 2)) != std::string::npos) return false;
      out += std::string(kQuote) + s + std::string(kQuote);
    } else if (v.is_object()) {
      out += "{";
      bool first = true;
      for (const auto& [k, e] : v.items()) {
        if (!bare_key(k) && k.find(kQuote) != std::string::npos) return false;
        out += (first ? "" : ",") + (bare_key(k) ? k : std::string(kQuote) + k + std::string(kQuote)) + ":";
        first = false;
        if (!literal(e, out)) return false;
      }
      out += "}";
    } else if (v.is_array()) {
      out += "[";
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) out += ",";
        if (!literal(v[i], out)) return false;
      }
      out += "]";
    } else {
      out += v.dump();
    }
    return true;
  }

  g::Expr any_scalar(const std::string& path) {
    return g::alternatives({typed(Json::object(), "string", path), typed(Json::object(), "number", path),
                            g::literal("true"), g::literal("false"), g::literal("null")});
  }

  g::RuleId raw() {
    if (!raw_) raw_ = raw_text_rule(b_, {std::string(kQuote), "<tool_call|>"}, std::string(kQuote));
    return *raw_;
  }

  g::RuleId ref_rule(const std::string& ref, const std::string& path) {
    if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
    if (ref.empty() || ref[0] != '#') refuse(path, fmt::format("$ref '{}' is not a local reference (#/...)", ref));
    const Json* target = nullptr;
    try {
      target = &root_.at(Json::json_pointer(ref.substr(1)));
    } catch (const nlohmann::json::exception&) {
      refuse(path, fmt::format("$ref '{}' does not resolve in this schema", ref));
    }
    g::RuleId r = b_.declare("gemma ref " + ref);
    refs_.emplace(ref, r);
    b_.define(r, value(*target, ref.substr(1)));
    return r;
  }

  static size_t count_ignored(const Json& s) {
    size_t n = 0;
    for (const auto& [k, v] : s.items()) n += kIgnored.count(k) > 0 || k.rfind("x-", 0) == 0;
    return n;
  }

  g::GrammarBuilder& b_;
  const Json& root_;
  std::string param_;
  int depth_ = 0;
  std::optional<g::RuleId> raw_;
  std::map<std::string, g::RuleId> refs_;
};

}  // namespace

g::Expr gemma4_arguments(g::GrammarBuilder& b, const Json& params, const std::string& param) {
  GemmaCompiler c(b, params, param);
  if (!params.is_object() || (params.contains("type") && params["type"] != "object"))
    bad_request(param, "tool_choice forces a call in Gemma 4's notation, whose arguments are an object: the parameters "
                       "schema must be an object schema");
  for (const auto& [k, v] : params.items())
    if (!kIgnored.count(k) && k != "type" && k != "properties" && k != "required" && k.rfind("x-", 0) != 0)
      bad_request(param + "." + k, fmt::format("tool_choice forces a call in Gemma 4's notation: '{}' at the top of the "
                                               "parameters schema is not supported", k));
  return c.object(params, "");
}

}  // namespace ft::server
