// Forced tool calls (server/tool_call_grammar): for every tool-call format, random walks over GPT-2's
// vocabulary (each step a uniformly random allowed token, max_tokens from the fewest the grammar needs
// to that plus 150) through the forced grammar, framed by the format's opening and closing, always parse
// (parse_tool_calls of that format, with the tools' schemas) as exactly one call to the forced function
// (or, for "required", one of the tools) whose arguments validate against its schema, with no content
// left over. Also: raw text values never hold the markers that would end them, and what a format cannot
// carry is a 400 naming the tool.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "json_schema_testing.h"
#include "server/errors.h"
#include "server/structured_output.h"
#include "server/tool_call_grammar.h"
#include "server_fixture.h"

namespace ft::server {
namespace {

using namespace schema_testing;

const Json& tools() {
  static const Json t = Json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
      "parameters": {"type": "object", "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer", "minimum": 1, "maximum": 14},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "search.docs",
      "parameters": {"type": "object", "properties": {
        "query": {"type": "string", "maxLength": 12},
        "filters": {"type": "object", "properties": {"lang": {"type": "string"}, "year": {"type": "integer"}},
                    "required": ["lang"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "maxItems": 3},
        "exact": {"type": "boolean"},
        "ratio": {"type": ["number", "null"]},
        "note": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
        "required": ["query", "exact"]}}},
    {"type": "function", "function": {"name": "ping"}},
    {"type": "function", "function": {"name": "plot-points",
      "parameters": {"type": "object", "$defs": {"point": {"type": "object",
          "properties": {"x": {"type": "integer"}, "y": {"type": "number", "minimum": 0}}, "required": ["x", "y"]}},
        "properties": {"points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "minItems": 1, "maxItems": 2},
                       "label": {"type": "string", "minLength": 2, "maxLength": 4}},
        "required": ["points", "label"]}}}
  ])");
  return t;
}

const Json& params_of(const std::string& name) {
  static const Json empty = Json::object();
  for (const Json& t : tools())
    if (t["function"]["name"] == name) return t["function"].contains("parameters") ? t["function"]["parameters"] : empty;
  ADD_FAILURE() << "no tool " << name;
  return empty;
}

std::shared_ptr<const g::TokenTrie> gpt2() {
  static auto trie = g::TokenTrie::from_vocab(*load_vocab("gpt-2"));
  return trie;
}

struct Case {
  ToolCallFormat format;
  std::string template_source;  // picks Mistral's form
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (ToolCallFormat f : {ToolCallFormat::kHermes, ToolCallFormat::kLlama3, ToolCallFormat::kMistral,
                           ToolCallFormat::kHarmony, ToolCallFormat::kQwen3Coder, ToolCallFormat::kDeepSeekV3,
                           ToolCallFormat::kDeepSeekV31, ToolCallFormat::kDeepSeekV32, ToolCallFormat::kGlm45,
                           ToolCallFormat::kMiniMaxM2, ToolCallFormat::kKimiK2, ToolCallFormat::kGemma4})
    out.push_back({f, ""});
  out.push_back({ToolCallFormat::kMistral, "{{ '[TOOL_CALLS]' + name + '[ARGS]' + args }}"});
  return out;
}

TEST(ToolCallGrammar, RandomWalksInEveryFormatParseAsOneValidCall) {
  std::mt19937 rng(38);
  const ToolSchemas schemas = tool_schemas(tools());
  for (const Case& c : cases()) {
    const std::string fname = std::string(tool_call_format_name(c.format)) + (c.template_source.empty() ? "" : " v11");
    std::vector<std::string> choices = {"", "get_weather", "search.docs", "ping", "plot-points"};
    for (const std::string& choice : choices) {
      const ToolCallForcing f = tool_call_forcing(c.format, tools(), choice, c.template_source);
      auto compiled = std::make_shared<g::CompiledGrammar>(f.grammar, gpt2());
      g::Matcher probe(f.grammar);
      const int64_t fewest = probe.min_bytes_to_complete(probe.start());
      std::set<std::string> names, texts;
      for (int w = 0; w < 12; ++w) {
        const int64_t max_tokens = fewest + static_cast<int64_t>(rng() % 150);
        const WalkResult r = random_walk(compiled, max_tokens, rng);
        const std::string where = fname + " choice '" + choice + "': " + f.opening + r.text + f.closing;
        ASSERT_TRUE(r.complete) << where;
        const ToolCallSplit split = parse_tool_calls(f.opening + r.text + f.closing, c.format, schemas);
        ASSERT_EQ(split.calls.size(), 1u) << where;
        EXPECT_EQ(split.content, "") << where;
        const ToolCall& call = split.calls[0];
        if (!choice.empty()) EXPECT_EQ(call.name, choice) << where;
        Json args;
        ASSERT_NO_THROW(args = Json::parse(call.arguments)) << where << "\narguments: " << call.arguments;
        const Json& p = params_of(call.name);
        EXPECT_EQ(validate(args, p, p), "") << where << "\narguments: " << call.arguments;
        names.insert(call.name);
        texts.insert(r.text);
      }
      if (choice.empty()) EXPECT_GE(names.size(), 2u) << fname << ": required chooses among the tools";
      if (choice != "ping") EXPECT_GE(texts.size(), choice.empty() ? 4u : 6u) << fname << " '" << choice << "': the walks explore";
    }
  }
}

TEST(ToolCallGrammar, FramesOfEachFormat) {
  // The opening the server writes, the closing it appends, and the control tokens the grammar may hold.
  auto f = tool_call_forcing(ToolCallFormat::kHermes, tools(), "ping");
  EXPECT_EQ(f.opening, "<tool_call>\n");
  EXPECT_EQ(f.closing, "\n</tool_call>");
  g::Matcher m(f.grammar);
  EXPECT_TRUE(m.complete(m.advance(m.start(), R"({"name": "ping", "arguments": {}})")));
  EXPECT_EQ(m.advance(m.start(), R"({"name": "get_weather")"), g::kDeadState);  // named: that function only
  f = tool_call_forcing(ToolCallFormat::kHarmony, tools(), "");
  EXPECT_EQ(f.opening, "<|channel|>commentary to=functions.");
  EXPECT_EQ(f.closing, "<|call|>");
  EXPECT_EQ(f.control_tokens, (std::vector<std::string>{"<|constrain|>", "<|message|>"}));
  g::Matcher h(f.grammar);
  EXPECT_TRUE(h.complete(h.advance(h.start(), R"(get_weather <|constrain|>json<|message|>{"city":"Oslo"})")));
  f = tool_call_forcing(ToolCallFormat::kQwen3Coder, tools(), "get_weather");
  g::Matcher q(f.grammar);
  EXPECT_TRUE(q.complete(q.advance(q.start(), "<function=get_weather>\n<parameter=city>\na<b\n</parameter>\n"
                                               "<parameter=days>\n14\n</parameter>\n</function>\n")));
  EXPECT_FALSE(q.complete(q.advance(q.start(), "<function=get_weather>\n<parameter=days>\n15\n</parameter>\n</function>\n")));
  EXPECT_EQ(q.advance(q.start(), "<function=get_weather>\n<parameter=city>\na</parameter>"), g::kDeadState);
  f = tool_call_forcing(ToolCallFormat::kKimiK2, tools(), "ping");
  EXPECT_EQ(f.opening, "<|tool_calls_section_begin|><|tool_call_begin|>functions.");
  EXPECT_EQ(f.closing, "<|tool_call_end|><|tool_calls_section_end|>");
  f = tool_call_forcing(ToolCallFormat::kMistral, tools(), "ping", "[ARGS]");
  g::Matcher mi(f.grammar);
  EXPECT_TRUE(mi.complete(mi.advance(mi.start(), "ping[ARGS]{}")));
}

TEST(ToolCallGrammar, RawTextAvoidsTheMarkersThatWouldEndIt) {
  g::GrammarBuilder b;
  const g::RuleId r = raw_text_rule(b, {"ab", "</x>"}, "b");
  g::Matcher m(std::make_shared<const g::Grammar>(b.build(r)));
  auto ok = [&](std::string_view t) { return m.complete(m.advance(m.start(), t)); };
  EXPECT_TRUE(ok(""));
  EXPECT_TRUE(ok("xb"));
  EXPECT_TRUE(ok("bbb</x"));
  EXPECT_TRUE(ok("é\n\t<"));
  EXPECT_FALSE(ok("ab"));       // holds a forbidden string
  EXPECT_FALSE(ok("q</x>q"));
  EXPECT_FALSE(ok("xa"));       // "xa" + "b": the forbidden "ab" would start inside the text
  EXPECT_FALSE(ok("x\ry"));     // no carriage returns
  EXPECT_TRUE(m.advance(m.start(), "xa") != g::kDeadState);  // but text may go on after the "a"
  EXPECT_TRUE(ok("xaa\"b"));
}

TEST(ToolCallGrammar, ACompleteCallEndsWhenTheBudgetAllowsNoOptionalParameter) {
  // GLM's call may end after its required parameters or go on with optional ones: with too few tokens
  // left for another parameter, nothing is allowed but the end (the engine then allows only EOG).
  const ToolCallForcing f = tool_call_forcing(ToolCallFormat::kGlm45, tools(), "get_weather");
  g::GrammarConstraint c(std::make_shared<g::CompiledGrammar>(f.grammar, gpt2()));
  ASSERT_TRUE(c.accept_text("get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n"));
  ASSERT_TRUE(c.complete());
  std::vector<uint32_t> bits((gpt2()->vocab_size() + 31) / 32);
  EXPECT_GT(c.allowed(bits, 200), 0);  // "<arg_key>days..." fits
  std::fill(bits.begin(), bits.end(), 0);
  EXPECT_EQ(c.allowed(bits, 3), 0);
}

TEST(ToolCallGrammar, MarkerControlTokensAreUsableWhereTheGrammarSpellsThem) {
  // A marker that is a control token of the vocabulary (the demo's <|im_start|>, standing in for
  // <|constrain|> or [ARGS]) may be generated as that token where the grammar spells its text; other
  // control tokens never are, and without the marker listed only its bytes spell it.
  const Vocab& vocab = testing::demo_vocab();
  const int32_t marker = vocab.find("<|im_start|>"), other = vocab.find("<|endoftext|>");
  ASSERT_GE(marker, 0);
  ASSERT_TRUE(vocab.is_special(marker));
  g::GrammarBuilder b;
  const g::RuleId root = b.add("r", g::alternatives({g::literal("<|im_start|>x"), g::literal("<|endoftext|>y")}));
  GenerationParams gen;
  gen.structured = GenerationParams::Structured::kGrammar;
  gen.grammar = std::make_shared<const g::Grammar>(b.build(root));
  StructuredOutputs outputs;
  std::vector<uint32_t> bits((vocab.n_tokens() + 31) / 32);
  auto allows = [&](int32_t id) { return id >= 0 && (bits[id / 32] >> (id % 32) & 1); };
  for (bool listed : {false, true}) {
    gen.grammar_key = listed ? "listed" : "bytes";
    gen.grammar_control_tokens = listed ? std::vector<std::string>{"<|im_start|>"} : std::vector<std::string>{};
    auto c = outputs.constraint(vocab, gen);
    std::fill(bits.begin(), bits.end(), 0);
    c->allowed(bits, 100);
    EXPECT_EQ(allows(marker), listed);
    EXPECT_FALSE(allows(other));
    EXPECT_TRUE(allows(vocab.find("<")));  // the bytes spell either text
    if (listed) {
      ASSERT_TRUE(c->accept(marker));
      EXPECT_FALSE(c->complete());
    }
  }
}

void expect_400(ToolCallFormat f, const std::string& tools_json, const std::string& name, const std::string& param,
                const std::string& words) {
  try {
    tool_call_forcing(f, Json::parse(tools_json), name);
    ADD_FAILURE() << "accepted " << tools_json;
  } catch (const ApiException& e) {
    EXPECT_EQ(e.error.status, 400);
    EXPECT_EQ(e.error.param, param) << e.error.message;
    EXPECT_NE(e.error.message.find(words), std::string::npos) << e.error.message;
  }
}

TEST(ToolCallGrammar, WhatAFormatCannotCarryIsA400NamingIt) {
  expect_400(ToolCallFormat::kHermes, R"([{"type": "function", "function": {"name": "say hi"}}])", "",
             "tools[0].function.name", "function names");
  expect_400(ToolCallFormat::kHermes, R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
             "properties": {"a": {"type": "string", "pattern": "^x"}}}}}])", "f", "tools[0].function.parameters", "pattern");
  // The XML formats type values from text: a property that could be a non-string without saying so.
  expect_400(ToolCallFormat::kQwen3Coder, R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
             "properties": {"a": {"enum": [1, 2]}}}}}])", "f", "tools[0].function.parameters.properties.a", "enum");
  expect_400(ToolCallFormat::kGlm45, R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
             "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {"type": "integer"}}}}}])", "f",
             "tools[0].function.parameters.properties.a", "$ref");
  expect_400(ToolCallFormat::kMiniMaxM2, R"([{"type": "function", "function": {"name": "f", "parameters": {"anyOf": [
             {"type": "object"}]}}}])", "f", "tools[0].function.parameters.anyOf", "anyOf");
  expect_400(ToolCallFormat::kGemma4, R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
             "properties": {"a": {"type": "string", "format": "date"}}}}}])", "f", "tools[0].function.parameters", "");
  expect_400(ToolCallFormat::kHermes, R"([{"type": "function", "function": {"name": "f"}}])", "g", "tool_choice", "\"g\"");
}

}  // namespace
}  // namespace ft::server
