#include "server/tool_call_grammar.h"

#include <algorithm>
#include <map>
#include <set>

#include <fmt/format.h>

#include "server/errors.h"
#include "server/json_schema_grammar.h"
#include "tokenizer/utf8.h"

namespace ft::server {

namespace g = ft::grammar;
using Json = nlohmann::ordered_json;

namespace {

std::vector<uint32_t> code_points(std::string_view s) {
  std::vector<uint32_t> out;
  while (!s.empty()) {
    const Utf8Char c = utf8_decode(s);
    out.push_back(c.status == Utf8Char::kValid ? c.cp : 0xFFFD);
    s.remove_prefix(std::max<size_t>(c.len, 1));
  }
  return out;
}

std::string utf8_of(const std::vector<uint32_t>& cps) {
  std::string out;
  for (uint32_t cp : cps) utf8_append(out, cp);
  return out;
}

// Raw text never holds U+0000 (not text) or '\r' (the XML formats' parsers strip a "\r\n" around values).
const std::vector<std::pair<uint32_t, uint32_t>> kRawExcluded = {{0, 0}, {'\r', '\r'}};

}  // namespace

g::RuleId raw_text_rule(g::GrammarBuilder& b, const std::vector<std::string>& forbidden, const std::string& follow) {
  // States: every prefix of a forbidden string (the longest suffix of the text so far that is one).
  std::vector<std::vector<uint32_t>> words;
  for (const std::string& f : forbidden) words.push_back(code_points(f));
  std::map<std::vector<uint32_t>, int> index;
  std::vector<std::vector<uint32_t>> states;
  auto add_state = [&](const std::vector<uint32_t>& p) {
    if (index.emplace(p, static_cast<int>(states.size())).second) states.push_back(p);
  };
  add_state({});
  std::set<uint32_t> alphabet;
  for (const auto& w : words) {
    for (size_t n = 1; n < w.size(); ++n) add_state(std::vector<uint32_t>(w.begin(), w.begin() + n));
    alphabet.insert(w.begin(), w.end());
  }
  auto ends_with = [](const std::vector<uint32_t>& s, const std::vector<uint32_t>& w) {
    return w.size() <= s.size() && std::equal(w.begin(), w.end(), s.end() - static_cast<ptrdiff_t>(w.size()));
  };
  std::vector<g::RuleId> rules;
  for (size_t i = 0; i < states.size(); ++i) rules.push_back(b.declare("raw text " + std::to_string(i)));
  for (size_t i = 0; i < states.size(); ++i) {
    std::map<int, std::vector<std::pair<uint32_t, uint32_t>>> by_target;  // next state -> its characters
    std::vector<std::pair<uint32_t, uint32_t>> special(kRawExcluded);
    for (uint32_t c : alphabet) {
      special.push_back({c, c});
      std::vector<uint32_t> s = states[i];
      s.push_back(c);
      bool bad = false;
      for (const auto& w : words) bad = bad || ends_with(s, w);
      if (bad || c == 0 || c == '\r') continue;
      for (size_t cut = 0; cut <= s.size(); ++cut) {  // the longest suffix that is a state
        auto it = index.find(std::vector<uint32_t>(s.begin() + static_cast<ptrdiff_t>(cut), s.end()));
        if (it != index.end()) {
          by_target[it->second].push_back({c, c});
          break;
        }
      }
    }
    std::vector<g::Expr> alts;
    // Text may end here when no forbidden string starts inside it once `follow` is written.
    const std::string tail = utf8_of(states[i]) + follow;
    bool may_end = true;
    for (const std::string& f : forbidden) {
      const size_t at = tail.find(f);
      may_end = may_end && (at == std::string::npos || at >= tail.size() - follow.size());
    }
    if (may_end) alts.push_back(g::sequence({}));
    alts.push_back(g::sequence({g::chars(special, /*negated=*/true), g::rule(rules[0])}));
    for (const auto& [target, ranges] : by_target)
      alts.push_back(g::sequence({g::chars(ranges), g::rule(rules[static_cast<size_t>(target)])}));
    b.define(rules[i], g::alternatives(std::move(alts)));
  }
  return rules[0];
}

namespace {

bool plain_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.'))
      return false;
  return true;
}

struct Tool {
  std::string name;
  Json params;        // the parameters schema ({} when the tool has none)
  std::string param;  // "tools[i].function.parameters"
};

std::vector<Tool> chosen_tools(const Json& tools, std::string_view name) {
  std::vector<Tool> out;
  for (size_t i = 0; tools.is_array() && i < tools.size(); ++i) {
    const Json& t = tools[i];
    const Json& f = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    const std::string n = f.value("name", "");
    if (!name.empty() && n != name) continue;
    if (!plain_name(n))
      bad_request(fmt::format("tools[{}].function.name", i),
                  fmt::format("tool_choice forces a call to \"{}\", but the tool-call grammar takes only function names "
                              "of letters, digits, '_', '-' and '.'", n));
    // No parameters: the function takes none ({}); a schema that does not say what it is: an object.
    Json params = f.contains("parameters") && !f["parameters"].is_null()
                      ? f["parameters"]
                      : Json{{"type", "object"}, {"properties", Json::object()}};
    if (params.is_object() && !params.contains("type"))
      if (!params.contains("anyOf") && !params.contains("oneOf") && !params.contains("allOf") &&
          !params.contains("$ref") && !params.contains("enum") && !params.contains("const"))
        params["type"] = "object";
    out.push_back(Tool{n, std::move(params), fmt::format("tools[{}].function.parameters", i)});
  }
  if (out.empty())
    bad_request("tool_choice", name.empty() ? std::string("tool_choice \"required\" needs at least one tool")
                                            : fmt::format("tool_choice names \"{}\", which is not one of the tools", name));
  return out;
}

const std::set<std::string, std::less<>> kAnnotations = {"title", "description", "examples", "default", "$schema",
                                                         "$id", "$comment", "deprecated", "readOnly", "writeOnly",
                                                         "$anchor", "$defs", "definitions"};

/** Whether `s` constrains nothing (true, {}, or only annotations). */
bool unconstrained(const Json& s) {
  if (s.is_boolean()) return s.get<bool>();
  if (!s.is_object()) return false;
  for (const auto& [k, v] : s.items())
    if (!kAnnotations.count(k) && k.rfind("x-", 0) != 0) return false;
  return true;
}

/** The types typed_argument reads for `s` (its `type`, else those of its anyOf / oneOf branches);
 *  `complete` false when some branch has neither (the parser then keeps the text a string). */
void schema_types(const Json& s, std::vector<std::string>& types, bool& complete) {
  if (!s.is_object()) {
    complete = false;
    return;
  }
  if (const auto t = s.find("type"); t != s.end()) {
    for (const Json& e : t->is_array() ? *t : Json::array({*t}))
      if (e.is_string()) types.push_back(e.get<std::string>());
    return;
  }
  bool branches = false;
  for (const char* key : {"anyOf", "oneOf"}) {
    if (const auto b = s.find(key); b != s.end() && b->is_array())
      for (const Json& e : *b) branches = true, schema_types(e, types, complete);
  }
  if (!branches) complete = false;
}

bool has(const std::vector<std::string>& v, std::string_view x) { return std::find(v.begin(), v.end(), x) != v.end(); }

/** How the XML-like formats carry one property's value. */
struct XmlStyle {
  std::string key_open, key_close;          // around the key: <parameter= ... >\n
  std::string string_key_close;             // deepseek_v32: the key's close for a raw string value
  std::string value_close;                  // after the value
  std::vector<std::string> forbidden;       // what raw text must not hold
  bool dsml = false;                        // the format says itself whether a value is a string
};

class Forcer {
 public:
  Forcer(ToolCallFormat f) : f_(f) {}
  g::GrammarBuilder b;

  g::Expr json_args(const Tool& t) { return g::rule(json_schema_rule(b, t.params, t.param)); }

  /** The parameters of `t` in the XML style: each property's element, in schema order. */
  g::Expr xml_args(const Tool& t, const XmlStyle& st) {
    const Json& p = t.params;
    if (!p.is_object() || (p.contains("type") && p["type"] != "object"))
      bad_request(t.param, fmt::format("tool_choice forces a call in the {} format, whose arguments are named "
                                       "parameters: the schema must be an object schema with 'properties'",
                                       tool_call_format_name(f_)));
    for (const auto& [k, v] : p.items())
      if (k != "type" && k != "properties" && k != "required" && k != "additionalProperties" &&
          !kAnnotations.count(k) && k.rfind("x-", 0) != 0)
        bad_request(t.param + "." + k, fmt::format("tool_choice forces a call in the {} format, whose arguments are "
                                                   "named parameters: '{}' at the top of the schema is not supported",
                                                   tool_call_format_name(f_), k));
    const Json props = p.value("properties", Json::object());
    std::set<std::string> required;
    for (const Json& r : p.value("required", Json::array())) {
      if (!r.is_string() || !props.contains(r.get<std::string>()))
        bad_request(t.param + ".required", fmt::format("required names '{}', which is not one of 'properties'",
                                                       r.is_string() ? r.get<std::string>() : r.dump()));
      required.insert(r.get<std::string>());
    }
    std::vector<g::Expr> items;
    for (const auto& [key, schema] : props.items()) {
      if (key.empty() || key.find_first_of("<>\"'\n\t\r") != std::string::npos || key.front() == ' ' || key.back() == ' ')
        bad_request(t.param + ".properties", fmt::format("tool_choice forces a call in the {} format, which cannot "
                                                         "carry the parameter name \"{}\"", tool_call_format_name(f_), key));
      g::Expr e = xml_value(t, key, schema, st);
      items.push_back(required.count(key) ? e : g::optional(e));
    }
    return g::sequence(std::move(items));
  }

  /** `<key open>key<key close>VALUE<value close>` for one property. */
  g::Expr xml_value(const Tool& t, const std::string& key, const Json& s, const XmlStyle& st) {
    const std::string where = t.param + ".properties." + key;
    auto element = [&](const std::string& key_close, g::Expr value) {
      return g::sequence({g::literal(st.key_open + key + key_close), std::move(value), g::literal(st.value_close)});
    };
    auto refuse = [&](const std::string& why) -> g::Expr {
      bad_request(where, fmt::format("tool_choice forces a call in the {} format, which writes parameter values as "
                                     "text typed by their schema: {}", tool_call_format_name(f_), why));
    };
    const g::Expr raw = g::rule(raw_rule(st));
    if (st.dsml) {  // exact: string="true" raw text, string="false" JSON
      if (unconstrained(s) || (s.is_object() && s.value("type", Json()) == "string" && s.size() == 1 + annotations(s)))
        return element(st.string_key_close, raw);
      return element(st.key_close, json_value(t, s, where));
    }
    if (unconstrained(s)) return element(st.key_close, raw);  // typed_argument keeps it a string
    if (!s.is_object()) refuse("the schema is not an object");
    if (s.contains("$ref")) refuse("a $ref at the top of a parameter's schema is not followed by the parser");
    std::vector<std::string> types;
    bool complete = true;
    schema_types(s, types, complete);
    const bool enumerated = s.contains("enum") || s.contains("const");
    if (types.empty() && !enumerated) refuse("its schema has no 'type'");
    if (types.empty() || has(types, "string")) {
      // The parser reads the text as a string (or null for "null" when null is allowed).
      const Json* str = &s;
      if (!s.contains("type") && !types.empty()) {  // anyOf / oneOf: the first branch that allows strings
        str = nullptr;
        static const Json kNoBranches = Json::array();
        for (const char* k : {"anyOf", "oneOf"})
          for (const Json& e : s.contains(k) && s[k].is_array() ? s[k] : kNoBranches)  // refers into s
            if (!str && e.is_object()) {
              std::vector<std::string> bt;
              bool c = true;
              schema_types(e, bt, c);
              if (has(bt, "string")) str = &e;
            }
        if (!str) refuse("no branch of its anyOf / oneOf is a string schema");
      }
      for (const char* k : {"pattern", "$ref", "allOf", "anyOf", "oneOf"})
        if (str->contains(k)) refuse(fmt::format("'{}' on a string value is not supported", k));
      const std::string format = str->value("format", "");
      if (format == "date" || format == "time" || format == "date-time" || format == "uuid")
        refuse(fmt::format("a string of format '{}' is not supported", format));
      if (str->contains("enum") || str->contains("const")) {
        std::vector<g::Expr> alts;
        for (const Json& v : str->contains("const") ? Json::array({(*str)["const"]}) : (*str)["enum"]) {
          if (!v.is_string()) continue;
          const std::string& text = v.get_ref<const std::string&>();
          bool clean = text.find_first_of(std::string("\r\0", 2)) == std::string::npos;
          for (const std::string& f : st.forbidden) clean = clean && text.find(f) == std::string::npos;
          if (clean) alts.push_back(g::literal(text));
        }
        if (alts.empty()) refuse("none of its enum / const values is a string the format can write (a value of "
                                 "another type needs the schema's 'type' to be read back)");
        return element(st.key_close, g::alternatives(std::move(alts)));
      }
      const int64_t lo = str->value("minLength", int64_t{0});
      const int64_t hi = str->contains("maxLength") ? (*str)["maxLength"].get<int64_t>() : g::kUnbounded;
      if (lo == 0 && hi == g::kUnbounded) return element(st.key_close, raw);
      if (hi != g::kUnbounded && hi < lo) refuse("maxLength is below minLength");
      std::vector<std::pair<uint32_t, uint32_t>> no_lt(kRawExcluded);
      no_lt.push_back({'<', '<'});  // every marker that could end the value starts with '<'
      return element(st.key_close, g::repeat(g::chars(no_lt, /*negated=*/true), lo, hi));
    }
    if (!complete) refuse("a branch of its anyOf / oneOf has no 'type'");
    return element(st.key_close, json_value(t, s, where));
  }

  /** Compact JSON of a property's schema, its $refs resolved against the tool's parameters. */
  g::Expr json_value(const Tool& t, const Json& s, const std::string& where) {
    Json doc = s;
    if (doc.is_object())
      for (const char* k : {"$defs", "definitions"})
        if (t.params.contains(k) && !doc.contains(k)) doc[k] = t.params[k];
    return g::rule(json_schema_rule(b, doc, where));
  }

 private:
  static size_t annotations(const Json& s) {
    size_t n = 0;
    for (const auto& [k, v] : s.items()) n += kAnnotations.count(k) > 0 || k.rfind("x-", 0) == 0;
    return n;
  }
  g::RuleId raw_rule(const XmlStyle& st) {
    const std::string k = fmt::format("{}", fmt::join(st.forbidden, "\x1f")) + "\x1e" + st.value_close;
    if (auto it = raw_.find(k); it != raw_.end()) return it->second;
    return raw_[k] = raw_text_rule(b, st.forbidden, st.value_close);
  }
  ToolCallFormat f_;
  std::map<std::string, g::RuleId> raw_;
};

/** A format's call: `head`, then per tool NAME + `mid` + its arguments + `after`, then `tail`. */
struct Shape {
  std::string opening, head, mid, after, tail, closing;
  std::vector<std::string> control_tokens;
};

}  // namespace

ToolCallForcing tool_call_forcing(ToolCallFormat format, const Json& tools, std::string_view name,
                                  std::string_view template_source) {
  const std::vector<Tool> chosen = chosen_tools(tools, name);
  Forcer fc(format);
  Shape sh;
  XmlStyle xml;
  enum class Args { kJson, kXml, kGemma } args = Args::kJson;
  bool mistral_v11 = false;
  switch (format) {
    case ToolCallFormat::kHermes:
      sh = {"<tool_call>\n", "{\"name\": \"", "\", \"arguments\": ", "", "}", "\n</tool_call>", {}};
      break;
    case ToolCallFormat::kLlama3:
      sh = {"", "{\"name\": \"", "\", \"parameters\": ", "", "}", "", {}};
      break;
    case ToolCallFormat::kMistral:
      mistral_v11 = template_source.find("[ARGS]") != std::string_view::npos;
      sh = mistral_v11 ? Shape{"[TOOL_CALLS]", "", "[ARGS]", "", "", "", {"[ARGS]"}}
                       : Shape{"[TOOL_CALLS]", "[{\"name\": \"", "\", \"arguments\": ", "", "}]", "", {}};
      break;
    case ToolCallFormat::kHarmony:
      sh = {"<|channel|>commentary to=functions.", "", " <|constrain|>json<|message|>", "", "", "<|call|>",
            {"<|constrain|>", "<|message|>"}};
      break;
    case ToolCallFormat::kQwen3Coder:
      sh = {"<tool_call>\n", "<function=", ">\n", "", "</function>\n", "</tool_call>", {}};
      xml = {"<parameter=", ">\n", "", "\n</parameter>\n", {"</parameter>", "</tool_call>"}, false};
      args = Args::kXml;
      break;
    case ToolCallFormat::kDeepSeekV3:
      sh = {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>", "", "\n```json\n", "", "\n```",
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", {}};
      break;
    case ToolCallFormat::kDeepSeekV31:
      sh = {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>", "", "<｜tool▁sep｜>", "", "",
            "<｜tool▁call▁end｜><｜tool▁calls▁end｜>", {"<｜tool▁sep｜>"}};
      break;
    case ToolCallFormat::kDeepSeekV32:
      sh = {"<｜DSML｜function_calls>\n", "<｜DSML｜invoke name=\"", "\">\n", "", "</｜DSML｜invoke>\n",
            "</｜DSML｜function_calls>", {"｜DSML｜"}};
      xml = {"<｜DSML｜parameter name=\"", "\" string=\"false\">", "\" string=\"true\">", "</｜DSML｜parameter>\n",
             {"</｜DSML｜parameter>", "</｜DSML｜function_calls>"}, true};
      args = Args::kXml;
      break;
    case ToolCallFormat::kGlm45:
      sh = {"<tool_call>", "", "\n", "", "", "</tool_call>", {"<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"}};
      xml = {"<arg_key>", "</arg_key>\n<arg_value>", "", "</arg_value>\n", {"</arg_value>", "</tool_call>"}, false};
      args = Args::kXml;
      break;
    case ToolCallFormat::kMiniMaxM2:
      sh = {"<minimax:tool_call>\n", "<invoke name=\"", "\">\n", "", "</invoke>\n", "</minimax:tool_call>", {}};
      xml = {"<parameter name=\"", "\">", "", "</parameter>\n", {"</parameter>", "</minimax:tool_call>"}, false};
      args = Args::kXml;
      break;
    case ToolCallFormat::kKimiK2:
      sh = {"<|tool_calls_section_begin|><|tool_call_begin|>functions.", "", ":0<|tool_call_argument_begin|>", "", "",
            "<|tool_call_end|><|tool_calls_section_end|>", {"<|tool_call_argument_begin|>"}};
      break;
    case ToolCallFormat::kGemma4:
      sh = {"<|tool_call>call:", "", "", "", "", "<tool_call|>", {"<|\"|>"}};
      args = Args::kGemma;
      break;
  }
  std::vector<g::Expr> calls;
  for (const Tool& t : chosen) {
    g::Expr a = args == Args::kJson ? fc.json_args(t) : args == Args::kXml ? fc.xml_args(t, xml)
                                                                           : gemma4_arguments(fc.b, t.params, t.param);
    calls.push_back(g::sequence({g::literal(t.name + sh.mid), std::move(a), g::literal(sh.after)}));
  }
  const g::RuleId root =
      fc.b.add("tool call", g::sequence({g::literal(sh.head), g::alternatives(std::move(calls)), g::literal(sh.tail)}));
  ToolCallForcing out;
  out.opening = sh.opening;
  out.closing = sh.closing;
  out.control_tokens = sh.control_tokens;
  try {
    out.grammar = std::make_shared<const g::Grammar>(fc.b.build(root));
  } catch (const Error& e) {
    bad_request("tools", fmt::format("tool_choice: the tools' schemas give no finite call: {}", e.what()));
  }
  out.key = fmt::format("tool_call:{}{}:{}:{}", tool_call_format_name(format), mistral_v11 ? "/v11" : "", name,
                        tools.dump());
  return out;
}

std::string force_tool_call(const ChatRequest& r, ToolCallFormat format, std::string_view template_source,
                            std::string_view reasoning_close, GenerationParams& gen) {
  using Choice = ChatRequest::ToolChoice;
  if ((r.tool_choice != Choice::kRequired && r.tool_choice != Choice::kNamed) || r.tools.is_null()) return "";
  if (gen.structured != GenerationParams::Structured::kNone)
    bad_request("response_format", "'response_format' cannot be combined with a forced 'tool_choice' (\"required\" or "
                                   "a named function): decoding follows one grammar per request");
  ToolCallForcing f =
      tool_call_forcing(format, r.tools, r.tool_choice == Choice::kNamed ? r.tool_choice_name : "", template_source);
  gen.structured = GenerationParams::Structured::kGrammar;
  gen.grammar = std::move(f.grammar);
  gen.grammar_key = std::move(f.key);
  gen.grammar_control_tokens = std::move(f.control_tokens);
  gen.reply_prefix = (reasoning_close.empty() ? "" : std::string(reasoning_close) + "\n\n") + f.opening;
  gen.reply_suffix = std::move(f.closing);
  return gen.reply_prefix;
}

}  // namespace ft::server
