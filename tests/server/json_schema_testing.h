#pragma once
// What the constrained-decoding tests share (json_schema_grammar_test, tool_call_grammar_test): the
// vocabularies of /work/shared/data/vocab, a small independent JSON Schema validator for the subset the
// grammar compiler supports, and random walks through a compiled grammar (each step a uniformly random
// allowed token).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar_constraint.h"
#include "formats/checkpoint.h"
#include "test_util.h"
#include "tokenizer/vocab.h"

namespace ft::server::schema_testing {

using Json = nlohmann::ordered_json;
namespace g = ft::grammar;

inline const Vocab* load_vocab(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Vocab>> cache;
  auto& v = cache[name];
  if (!v) {
    std::string file = ft::testing::shared_dir() + "/data/vocab/ggml-vocab-" + name + ".gguf";
    v = std::make_unique<Vocab>(Vocab::from_gguf_metadata(open_checkpoint(file)->metadata()));
  }
  return v.get();
}

inline std::shared_ptr<const g::TokenTrie> gpt2_trie() {
  static auto trie = g::TokenTrie::from_vocab(*load_vocab("gpt-2"));
  return trie;
}

// ---- An independent validator for the subset the compiler supports ----

inline size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline bool digits(const std::string& s, size_t at, size_t n) {
  if (at + n > s.size()) return false;
  for (size_t i = at; i < at + n; ++i)
    if (s[i] < '0' || s[i] > '9') return false;
  return true;
}

inline bool valid_date(const std::string& s) {
  if (s.size() != 10 || !digits(s, 0, 4) || s[4] != '-' || !digits(s, 5, 2) || s[7] != '-' || !digits(s, 8, 2)) return false;
  int y = std::stoi(s.substr(0, 4)), m = std::stoi(s.substr(5, 2)), d = std::stoi(s.substr(8, 2));
  static const int days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m >= 1 && m <= 12 && d >= 1 && d <= (m == 2 && !leap ? 28 : days[m - 1]);
}

inline bool valid_time(const std::string& s) {  // HH:MM:SS(.f+)?(Z|+HH:MM|-HH:MM)
  if (s.size() < 9 || !digits(s, 0, 2) || s[2] != ':' || !digits(s, 3, 2) || s[5] != ':' || !digits(s, 6, 2)) return false;
  if (std::stoi(s.substr(0, 2)) > 23 || std::stoi(s.substr(3, 2)) > 59 || std::stoi(s.substr(6, 2)) > 59) return false;
  size_t i = 8;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && s[j] >= '0' && s[j] <= '9') ++j;
    if (j == i + 1) return false;
    i = j;
  }
  if (s.substr(i) == "Z" || s.substr(i) == "z") return true;
  return s.size() == i + 6 && (s[i] == '+' || s[i] == '-') && digits(s, i + 1, 2) && s[i + 3] == ':' && digits(s, i + 4, 2);
}

inline bool valid_uuid(const std::string& s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < 36; ++i) {
    bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-')) return false;
    if (!dash && !std::isxdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

inline bool is_type(const Json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == std::floor(v.get<double>()));
  if (t == "number") return v.is_number();
  return false;
}

// Empty when `v` is valid against `s`; else why not.
inline std::string validate(const Json& v, const Json& s, const Json& root) {
  if (s.is_boolean()) return s.get<bool>() ? "" : "false schema";
  if (s.contains("$ref")) {
    std::string err = validate(v, root.at(Json::json_pointer(s["$ref"].get<std::string>().substr(1))), root);
    if (!err.empty()) return err;
  }
  if (s.contains("allOf"))
    for (const Json& sub : s["allOf"])
      if (auto err = validate(v, sub, root); !err.empty()) return "allOf: " + err;
  if (s.contains("anyOf")) {
    bool any = false;
    for (const Json& sub : s["anyOf"]) any = any || validate(v, sub, root).empty();
    if (!any) return "no anyOf branch";
  }
  if (s.contains("oneOf")) {
    int n = 0;
    for (const Json& sub : s["oneOf"]) n += validate(v, sub, root).empty();
    if (n != 1) return "oneOf matched " + std::to_string(n);
  }
  if (s.contains("const") && v != s["const"]) return "not the const";
  if (s.contains("enum") && std::find(s["enum"].begin(), s["enum"].end(), v) == s["enum"].end()) return "not in enum";
  if (s.contains("type")) {
    const Json& t = s["type"];
    bool ok = false;
    for (const Json& one : t.is_array() ? t : Json::array({t})) ok = ok || is_type(v, one.get<std::string>());
    if (!ok) return "type " + t.dump();
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return "minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return "maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return "exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return "exclusiveMaximum";
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<size_t>()) return "minLength";
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<size_t>()) return "maxLength";
    std::string f = s.value("format", "");
    if ((f == "date" && !valid_date(str)) || (f == "time" && !valid_time(str)) || (f == "uuid" && !valid_uuid(str)) ||
        (f == "date-time" && (str.size() < 11 || str[10] != 'T' || !valid_date(str.substr(0, 10)) || !valid_time(str.substr(11)))))
      return "format " + f + ": " + str;
  }
  if (v.is_array()) {
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return "minItems";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return "maxItems";
    size_t k = 0;
    if (s.contains("prefixItems")) {
      k = s["prefixItems"].size();
      for (size_t i = 0; i < std::min(k, v.size()); ++i)
        if (auto err = validate(v[i], s["prefixItems"][i], root); !err.empty()) return "item " + std::to_string(i) + ": " + err;
    }
    if (s.contains("items"))
      for (size_t i = k; i < v.size(); ++i)
        if (auto err = validate(v[i], s["items"], root); !err.empty()) return "item " + std::to_string(i) + ": " + err;
  }
  if (v.is_object()) {
    if (s.contains("required"))
      for (const Json& r : s["required"])
        if (!v.contains(r.get<std::string>())) return "missing " + r.get<std::string>();
    for (const auto& [k, val] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(k)) {
        if (auto err = validate(val, s["properties"][k], root); !err.empty()) return k + ": " + err;
      } else if (s.contains("additionalProperties")) {
        if (auto err = validate(val, s["additionalProperties"], root); !err.empty()) return "additional " + k + ": " + err;
      }
    }
  }
  return "";
}

// ---- Random walks ----

struct WalkResult {
  std::string text;
  bool complete = false;
  int tokens = 0;
};

inline WalkResult random_walk(const std::shared_ptr<g::CompiledGrammar>& compiled, int64_t max_tokens, std::mt19937& rng) {
  g::GrammarConstraint c(compiled);
  const auto& trie = compiled->trie();
  std::vector<uint32_t> bits((trie.vocab_size() + 31) / 32);
  WalkResult r;
  for (int64_t used = 0; used < max_tokens; ++used) {
    std::fill(bits.begin(), bits.end(), 0);
    int64_t n = c.allowed(bits, max_tokens - used);
    if (c.complete() && (n == 0 || rng() % 3 == 0)) break;  // end-of-generation sampled
    if (n == 0) break;
    int64_t k = static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
    int32_t pick = -1;
    for (size_t w = 0; w < bits.size() && pick < 0; ++w) {
      int pc = __builtin_popcount(bits[w]);
      if (k >= pc) {
        k -= pc;
        continue;
      }
      for (int b = 0; b < 32; ++b)
        if ((bits[w] >> b & 1) && k-- == 0) {
          pick = static_cast<int32_t>(w * 32 + b);
          break;
        }
    }
    EXPECT_TRUE(c.accept(pick));
    r.text += trie.piece(pick);
    ++r.tokens;
  }
  r.complete = c.complete();
  return r;
}

}  // namespace ft::server::schema_testing
