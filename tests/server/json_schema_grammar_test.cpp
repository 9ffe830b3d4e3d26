// JSON Schema -> grammar (server/json_schema_grammar): for each of 29 schemas, random walks over a real
// vocabulary (GPT-2's 50,257 tokens, each step a uniformly random allowed token, max_tokens from the
// fewest the schema needs to that plus 200) always end with compact JSON that parses and validates against
// the schema (checked by the small independent validator of json_schema_testing.h); refused keywords get a 400 naming
// the keyword and its JSON pointer; and mask times on a 152k-token vocabulary.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <set>

#include "engine/grammar/grammar_constraint.h"
#include "formats/checkpoint.h"
#include "server/errors.h"
#include "server/json_schema_grammar.h"
#include "json_schema_testing.h"
#include "test_util.h"
#include "tokenizer/vocab.h"

namespace ft::server {
namespace {

using Json = nlohmann::ordered_json;
namespace g = ft::grammar;

using namespace schema_testing;

std::vector<Json> schemas() {
  const char* texts[] = {
      R"({"type": "string"})",
      R"({"type": "integer"})",
      R"({"type": "number"})",
      R"({"type": "boolean", "title": "flag", "description": "annotations are ignored", "$schema": "https://json-schema.org/draft/2020-12/schema"})",
      R"({"type": ["string", "null"], "maxLength": 5})",
      R"({"enum": ["red", "grün", "青", 1, 2.5, null, true, {"a": [1]}]})",
      R"({"const": {"k": [1, 2, "x"], "é": null}})",
      R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string", "format": "email"}}, "required": ["name", "age"]})",
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}, "c": {"type": "null"}}})",
      R"({"type": "object", "properties": {"person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "address": {"type": "object", "properties": {"street": {"type": "string"}, "zip": {"type": "string", "minLength": 5, "maxLength": 5}}, "required": ["zip"], "additionalProperties": false}, "tags": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 3}}, "required": ["name", "address", "tags"]}}, "required": ["person"]})",
      R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 4})",
      R"({"type": "array", "items": {"enum": ["x", "y", "z"]}, "uniqueItems": false, "maxItems": 6})",
      R"({"anyOf": [{"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["a"]}, {"type": "object", "properties": {"a": {"type": "integer"}, "c": {"type": "boolean"}}, "required": ["a", "c"]}]})",
      R"({"oneOf": [{"type": "string", "maxLength": 3}, {"type": "object", "properties": {"n": {"type": "number"}}, "required": ["n"]}]})",
      R"({"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}}, "required": ["value", "children"]}}, "$ref": "#/$defs/node"})",
      R"({"definitions": {"list": {"anyOf": [{"type": "null"}, {"type": "object", "properties": {"head": {"type": "number"}, "tail": {"$ref": "#/definitions/list"}}, "required": ["head", "tail"], "additionalProperties": false}]}}, "$ref": "#/definitions/list"})",
      R"({"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}, {"type": "boolean"}], "items": false, "minItems": 2})",
      R"({"type": "array", "prefixItems": [{"const": "head"}], "items": {"type": "integer"}, "minItems": 3, "maxItems": 5})",
      R"({"allOf": [{"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}, {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]})",
      R"({"type": "object", "properties": {"d": {"type": "string", "format": "date"}, "t": {"type": "string", "format": "date-time"}, "u": {"type": "string", "format": "uuid"}, "h": {"type": "string", "format": "time"}}, "required": ["d", "t", "u", "h"]})",
      R"({"type": "object", "properties": {"名前": {"type": "string", "minLength": 1, "maxLength": 4}, "emoji 😀": {"enum": ["😀", "é", "\u0000", "a\"b"]}}, "required": ["名前", "emoji 😀"], "additionalProperties": false})",
      R"({"type": "object", "additionalProperties": {"type": "integer"}})",
      R"({})",
      R"({"type": ["object", "array", "integer"], "properties": {"x": {"type": "null"}}, "required": ["x"], "items": {"type": "boolean"}, "maxItems": 2})",
      R"({"type": "object", "properties": {"kind": {"type": "string", "maxLength": 6}}, "required": ["kind"], "anyOf": [{"properties": {"x": {"type": "integer"}}, "required": ["x"]}, {"properties": {"y": {"type": "string"}}, "required": ["y"]}]})",
      R"({"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 1, "maxItems": 2}, "maxItems": 3})",
      R"({"type": "string", "enum": ["a", "b", 3]})",
      R"({"type": "array", "items": {"type": "object", "properties": {"i": {"type": "integer", "minimum": -37, "maximum": 1205}, "p": {"type": "integer", "exclusiveMinimum": 0}, "n": {"type": "integer", "exclusiveMaximum": -99}, "c": {"type": "number", "minimum": 0, "maximum": 1}, "r": {"type": "number", "minimum": 10}}, "required": ["i", "p", "n", "c", "r"]}, "minItems": 1})",
      R"({"type": "object", "properties": {"steps": {"type": "array", "items": {"type": "object", "properties": {"explanation": {"type": "string"}, "output": {"type": "string"}}, "required": ["explanation", "output"], "additionalProperties": false}}, "final_answer": {"type": "string"}}, "required": ["steps", "final_answer"], "additionalProperties": false})",
  };
  std::vector<Json> out;
  for (const char* t : texts) out.push_back(Json::parse(t));
  return out;
}

TEST(JsonSchemaGrammar, RandomWalksOverARealVocabAlwaysGiveValidJson) {
  auto trie = gpt2_trie();
  std::mt19937 rng(1234);
  const auto all = schemas();
  ASSERT_GE(all.size(), 20u);
  int walks = 0, forced = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const Json& schema = all[i];
    auto grammar = json_schema_grammar(schema, "response_format");
    auto compiled = std::make_shared<g::CompiledGrammar>(grammar, trie);
    g::Matcher probe(grammar);
    const int64_t fewest = probe.min_bytes_to_complete(probe.start());
    std::set<std::string> distinct;
    for (int w = 0; w < 30; ++w) {
      const int64_t max_tokens = fewest + static_cast<int64_t>(rng() % 200);
      WalkResult r = random_walk(compiled, max_tokens, rng);
      ++walks;
      forced += r.tokens == max_tokens;
      ASSERT_TRUE(r.complete) << "schema " << i << " max_tokens " << max_tokens << ": " << r.text;
      Json v;
      ASSERT_NO_THROW(v = Json::parse(r.text)) << "schema " << i << ": " << r.text;
      EXPECT_EQ(validate(v, schema, schema), "") << "schema " << i << ": " << r.text;
      EXPECT_EQ(v.dump(-1, ' ', false, Json::error_handler_t::strict).size() > 0, true);
      distinct.insert(r.text);
    }
    // The walks explore: most schemas give many different values (const / enum-only ones cannot).
    if (!schema.contains("const") && !schema.contains("enum") && schema.value("type", Json()) != Json("boolean")) {
      EXPECT_GT(distinct.size(), 3u) << "schema " << i;
    }
  }
  EXPECT_GT(forced, walks / 8);  // many walks ran into max_tokens and still ended complete
}

TEST(JsonSchemaGrammar, CompactOutputForKnownText) {
  auto grammar = json_schema_grammar(schemas()[7], "response_format");
  g::Matcher m(grammar);
  auto ok = [&](std::string_view t) { return m.complete(m.advance(m.start(), t)); };
  EXPECT_TRUE(ok(R"({"name":"Ann","age":41})"));
  EXPECT_TRUE(ok(R"({"name":"Ann","age":-7,"email":"a@b.c"})"));
  EXPECT_FALSE(ok(R"({"name": "Ann","age":41})"));      // no whitespace
  EXPECT_FALSE(ok(R"({"age":41,"name":"Ann"})"));       // schema order
  EXPECT_FALSE(ok(R"({"name":"Ann"})"));                // age required
  EXPECT_FALSE(ok(R"({"name":"Ann","age":4.5})"));      // integer
  EXPECT_FALSE(ok(R"({"name":"Ann","age":41,"x":1})"));  // no extra properties
  EXPECT_FALSE(ok(R"({"name":"Ann","age":041})"));
  EXPECT_TRUE(ok(R"({"name":"\u00e9\n\"","age":0})"));
  EXPECT_FALSE(ok(R"({"name":"\ud800","age":0})"));     // lone surrogate escape
}

TEST(JsonSchemaGrammar, IntegerAndNumberRangesAreExact) {
  std::map<std::string, std::unique_ptr<g::Matcher>> matchers;
  auto accepts = [&](const char* schema, std::string_view text) {
    auto& m = matchers[schema];
    if (!m) m = std::make_unique<g::Matcher>(json_schema_grammar(Json::parse(schema), "response_format"));
    return m->complete(m->advance(m->start(), text));
  };
  const char* ints = R"({"type": "integer", "minimum": -37, "maximum": 1205})";
  for (int v = -60; v <= 1300; ++v) EXPECT_EQ(accepts(ints, std::to_string(v)), v >= -37 && v <= 1205) << v;
  EXPECT_FALSE(accepts(ints, "01"));
  EXPECT_FALSE(accepts(ints, "-0"));
  const char* positive = R"({"type": "integer", "exclusiveMinimum": 0})";
  EXPECT_FALSE(accepts(positive, "0"));
  EXPECT_TRUE(accepts(positive, "1"));
  EXPECT_TRUE(accepts(positive, "9999999999999999"));
  EXPECT_FALSE(accepts(positive, "-1"));
  const char* unit = R"({"type": "number", "minimum": 0, "maximum": 1})";
  EXPECT_TRUE(accepts(unit, "0"));
  EXPECT_TRUE(accepts(unit, "0.999"));
  EXPECT_TRUE(accepts(unit, "1"));
  EXPECT_TRUE(accepts(unit, "1.000"));
  EXPECT_FALSE(accepts(unit, "1.001"));
  EXPECT_FALSE(accepts(unit, "-0.5"));
  EXPECT_FALSE(accepts(unit, "1e-3"));
}

TEST(JsonSchemaGrammar, EmbedsInALargerGrammar) {
  g::GrammarBuilder b;
  g::RuleId args = json_schema_rule(b, Json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})"), "tools");
  g::RuleId root = b.add("call", g::sequence({g::literal("<tool_call>{\"name\": \"weather\", \"arguments\": "), g::rule(args),
                                              g::literal("}</tool_call>")}));
  g::Matcher m(std::make_shared<const g::Grammar>(b.build(root)));
  EXPECT_TRUE(m.complete(m.advance(m.start(), R"(<tool_call>{"name": "weather", "arguments": {"city":"Oslo"}}</tool_call>)")));
  EXPECT_FALSE(m.complete(m.advance(m.start(), R"(<tool_call>{"name": "weather", "arguments": {}}</tool_call>)")));
}

void expect_refused(const std::string& schema, const std::string& keyword, const std::string& pointer) {
  try {
    json_schema_grammar(Json::parse(schema), "response_format");
    ADD_FAILURE() << "accepted: " << schema;
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.status, 400);
    EXPECT_EQ(e.error.type, "invalid_request_error");
    EXPECT_EQ(e.error.param, "response_format");
    EXPECT_NE(e.error.message.find(keyword), std::string::npos) << e.error.message;
    EXPECT_NE(e.error.message.find("'#" + pointer + "'"), std::string::npos) << e.error.message;
  }
}

TEST(JsonSchemaGrammar, UnsupportedKeywordsAre400sNamingKeywordAndPointer) {
  expect_refused(R"({"type": "string", "pattern": "^a+$"})", "pattern", "/pattern");
  expect_refused(R"({"type": "object", "properties": {"n": {"type": "number", "minimum": -1.5}}})", "minimum", "/properties/n/minimum");
  // Bounds beyond the grammar's exact range were clipped to +-9e15 before, so the output broke them.
  expect_refused(R"({"type": "integer", "minimum": 9223372036854775807})", "minimum", "/minimum");
  expect_refused(R"({"type": "number", "minimum": 1e20})", "minimum", "/minimum");
  expect_refused(R"({"type": "integer", "maximum": -1e20})", "maximum", "/maximum");
  expect_refused(R"({"type": "number", "exclusiveMaximum": 1})", "exclusiveMaximum", "/exclusiveMaximum");
  expect_refused(R"({"type": "integer", "minimum": 3, "maximum": 2.5})", "no integer", "");
  expect_refused(R"({"type": "number", "multipleOf": 2})", "multipleOf", "/multipleOf");
  expect_refused(R"({"type": "object", "patternProperties": {"^x": {}}})", "patternProperties", "/patternProperties");
  expect_refused(R"({"type": "array", "items": {"not": {"type": "null"}}})", "not", "/items/not");
  expect_refused(R"({"if": {"type": "string"}, "then": {"maxLength": 2}})", "if", "/if");
  expect_refused(R"({"type": "array", "uniqueItems": true})", "uniqueItems", "/uniqueItems");
  expect_refused(R"({"type": "object", "minProperties": 1})", "minProperties", "/minProperties");
  expect_refused(R"({"$ref": "https://example.com/s.json"})", "not a local reference", "");
  expect_refused(R"({"properties": {"a": {"$ref": "#/$defs/missing"}}})", "does not resolve", "/properties/a");
  expect_refused(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", "no type in common", "/allOf/1");
  expect_refused(R"({"allOf": [{"maxLength": 2}, {"format": "date"}, {"format": "uuid"}]})", "format", "/allOf/2");
  expect_refused(R"({"type": "array", "minItems": 3, "maxItems": 2})", "minItems", "");
  expect_refused(R"({"type": "strin"})", "unknown type", "/type");
  expect_refused(R"({"properties": {"a/b": {"type": "string", "contentEncoding": "base64"}}})", "contentEncoding",
                 "/properties/a~1b/contentEncoding");
  // A required property that can only recurse: no finite value.
  try {
    json_schema_grammar(Json::parse(R"({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}, "required": ["next"]}}, "$ref": "#/$defs/n"})"),
                        "response_format");
    ADD_FAILURE() << "an endless schema was accepted";
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.status, 400);
    EXPECT_NE(e.error.message.find("no finite"), std::string::npos) << e.error.message;
  }
}

// ---- Mask times on a 152k-token vocabulary ----

TEST(JsonSchemaGrammar, MaskTimesOnA152kVocab) {
  // The distinct usable pieces of eight real vocabularies (147,388), then pairs of them, to Qwen2's 152,064.
  std::vector<std::string> pieces;
  std::set<std::string> seen;
  for (const char* name : {"deepseek-llm", "gpt-2", "starcoder", "falcon", "mpt", "refact", "deepseek-coder", "llama-spm"}) {
    const Vocab* v = load_vocab(name);
    for (int32_t id = 0; id < v->n_tokens() && pieces.size() < 152064; ++id)
      if (!v->is_special(id) && seen.insert(v->piece(id)).second) pieces.push_back(v->piece(id));
  }
  // Then pairs of those pieces (deterministic) up to the size.
  std::mt19937 pick(3);
  const size_t real = pieces.size();
  while (pieces.size() < 152064) {
    std::string p = pieces[pick() % real] + pieces[pick() % real];
    if (seen.insert(p).second) pieces.push_back(p);
  }
  ASSERT_EQ(pieces.size(), 152064u);
  std::vector<uint8_t> usable(pieces.size(), 1);
  auto t0 = std::chrono::steady_clock::now();
  auto trie = std::make_shared<const g::TokenTrie>(pieces, usable);
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  double build_ms = ms(t0, std::chrono::steady_clock::now());

  auto compiled = std::make_shared<g::CompiledGrammar>(json_schema_grammar(schemas()[28], "response_format"), trie);
  std::vector<uint32_t> bits((pieces.size() + 31) / 32);
  auto timed = [&](g::GrammarConstraint& c, int64_t budget, int64_t* n) {
    std::fill(bits.begin(), bits.end(), 0);
    auto a = std::chrono::steady_clock::now();
    *n = c.allowed(bits, budget);
    return ms(a, std::chrono::steady_clock::now());
  };
  g::GrammarConstraint c(compiled);
  int64_t n = 0;
  double start_ms = timed(c, 1000, &n);
  EXPECT_GT(n, 0);
  ASSERT_TRUE(c.accept_text(R"({"steps":[{"explanation":")"));
  double string_first = timed(c, 1000, &n);
  const int64_t in_string = n;
  EXPECT_GT(in_string, 100000);  // nearly every piece may continue a string
  ASSERT_TRUE(c.accept_text("ab"));
  double string_cached = timed(c, 1000, &n);
  EXPECT_EQ(n, in_string);  // the same state: an unbounded string's characters do not change it
  double string_tight = timed(c, 30, &n);
  const int64_t tight = n;
  EXPECT_LT(tight, in_string);

  // Mean over random walks (first requests: masks computed as states are met).
  std::mt19937 rng(5);
  double total = 0;
  int steps = 0;
  for (int w = 0; w < 5; ++w) {
    g::GrammarConstraint wc(compiled);
    for (int64_t used = 0; used < 120; ++used) {
      double t = timed(wc, 120 - used, &n);
      total += t;
      ++steps;
      if (n == 0) break;
      std::vector<int32_t> ids;
      for (size_t i = 0; i < bits.size(); ++i)
        for (int b = 0; b < 32; ++b)
          if (bits[i] >> b & 1) ids.push_back(static_cast<int32_t>(i * 32 + b));
      ASSERT_TRUE(wc.accept(ids[rng() % ids.size()]));
    }
    EXPECT_TRUE(wc.complete());
  }
  std::printf("152,064-token vocab: trie build %.1f ms; mask at start %.2f ms; inside a string first %.2f ms, cached %.3f ms, "
              "tight budget %.2f ms (%lld of %lld tokens); random walks mean %.3f ms over %d masks; %zu states\n",
              build_ms, start_ms, string_first, string_cached, string_tight, static_cast<long long>(tight),
              static_cast<long long>(in_string), total / steps, steps, compiled->state_count());
  EXPECT_LT(string_cached, 5.0);
}

}  // namespace
}  // namespace ft::server
