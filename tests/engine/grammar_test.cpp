// Grammar, matcher, token trie and GrammarConstraint (engine/grammar/): matching literal, class,
// repetition and ambiguous grammars over UTF-8 bytes (characters split anywhere), masks against a
// brute-force check of every token, and the budget rule that makes a walk always end complete.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "engine/grammar/grammar_constraint.h"
#include "util/error.h"

namespace ft::grammar {
namespace {

std::shared_ptr<const Grammar> build(GrammarBuilder& b, RuleId root) { return std::make_shared<const Grammar>(b.build(root)); }

// Whether the whole `text` is a string of the grammar.
bool matches(Matcher& m, std::string_view text) { return m.complete(m.advance(m.start(), text)); }
// Whether `text` is a prefix of some string of the grammar.
bool viable(Matcher& m, std::string_view text) { return m.advance(m.start(), text) != kDeadState; }

TEST(Grammar, LiteralMatchesExactlyAndRejectsAtTheFirstWrongByte) {
  GrammarBuilder b;
  auto m = Matcher(build(b, b.add("root", literal("hello"))));
  EXPECT_TRUE(matches(m, "hello"));
  EXPECT_FALSE(matches(m, "hell"));
  EXPECT_TRUE(viable(m, "hell"));
  EXPECT_FALSE(viable(m, "help"));
  EXPECT_FALSE(viable(m, "hello!"));
  EXPECT_EQ(m.min_bytes_to_complete(m.start()), 5u);
  EXPECT_EQ(m.min_bytes_to_complete(m.advance(m.start(), "he")), 3u);
  EXPECT_EQ(m.min_bytes_to_complete(m.advance(m.start(), "hello")), 0u);
  EXPECT_FALSE(m.can_continue(m.advance(m.start(), "hello")));
}

TEST(Grammar, ClassesNegatedClassesAndBoundedRepetition) {
  GrammarBuilder b;
  // '"' [^"\\]{2,4} '"' then one of [0-9a-f]
  RuleId root = b.add("root", sequence({literal("\""), repeat(chars({{'"', '"'}, {'\\', '\\'}}, true), 2, 4),
                                        literal("\""), chars({{'0', '9'}, {'a', 'f'}})}));
  Matcher m(build(b, root));
  EXPECT_TRUE(matches(m, "\"ab\"7"));
  EXPECT_TRUE(matches(m, "\"a\xC3\xA9z\"f"));  // é is one character: 3 characters
  EXPECT_TRUE(matches(m, "\"abcd\"0"));
  EXPECT_FALSE(matches(m, "\"a\"0"));       // too short
  EXPECT_FALSE(viable(m, "\"abcde"));       // too long
  EXPECT_FALSE(viable(m, "\"a\\"));         // backslash excluded
  EXPECT_FALSE(matches(m, "\"ab\"g"));
  EXPECT_EQ(m.min_bytes_to_complete(m.start()), 5u);
  EXPECT_EQ(m.min_bytes_to_complete(m.advance(m.start(), "\"abc")), 2u);
}

TEST(Grammar, AmbiguousAlternativesKeepEveryParse) {
  GrammarBuilder b;
  // Two overlapping "objects": {a, b?} and {a, c}; both start with the same bytes.
  RuleId x = b.add("x", sequence({literal("{a"), optional(literal(",b")), literal("}")}));
  RuleId y = b.add("y", sequence({literal("{a"), literal(",c}")}));
  RuleId root = b.add("root", alternatives({rule(x), rule(y), sequence({rule(x), literal("!")})}));
  Matcher m(build(b, root));
  EXPECT_TRUE(matches(m, "{a}"));
  EXPECT_TRUE(matches(m, "{a,b}"));
  EXPECT_TRUE(matches(m, "{a,c}"));
  EXPECT_TRUE(matches(m, "{a,b}!"));
  EXPECT_FALSE(viable(m, "{a,c}!"));
  EXPECT_FALSE(viable(m, "{a,d"));
  StateId s = m.advance(m.start(), "{a,b}");
  EXPECT_TRUE(m.complete(s));
  EXPECT_TRUE(m.can_continue(s));  // "!" may still follow
}

TEST(Grammar, RecursionNullableRulesAndStarRepetition) {
  GrammarBuilder b;
  RuleId list = b.declare("list");  // list ::= "[" (list ("," list)*)? "]"
  b.define(list, sequence({literal("["),
                           optional(sequence({rule(list), repeat(sequence({literal(","), rule(list)}), 0, kUnbounded)})),
                           literal("]")}));
  Matcher m(build(b, list));
  EXPECT_TRUE(matches(m, "[]"));
  EXPECT_TRUE(matches(m, "[[],[[]],[]]"));
  EXPECT_FALSE(viable(m, "[,"));
  EXPECT_FALSE(matches(m, "[[]"));
  EXPECT_EQ(m.min_bytes_to_complete(m.advance(m.start(), "[[[[")), 4u);
  // Deep nesting: states stay interned, bytes to complete grow with the depth.
  std::string deep(500, '[');
  EXPECT_EQ(m.min_bytes_to_complete(m.advance(m.start(), deep)), 500u);
}

TEST(Grammar, Utf8SplitAnywhereAndPrunedByPrefix) {
  GrammarBuilder b;
  // Greek small letters α..ω (U+03B1..U+03C9, bytes CE B1 .. CF 89), then 😀 (F0 9F 98 80).
  RuleId root = b.add("root", sequence({repeat(chars({{0x3B1, 0x3C9}}), 1, kUnbounded), literal("\xF0\x9F\x98\x80")}));
  Matcher m(build(b, root));
  const std::string text = "\xCE\xB1\xCF\x89\xF0\x9F\x98\x80";  // αω😀
  StateId s = m.start();
  for (size_t i = 0; i < text.size(); ++i) {
    EXPECT_FALSE(m.complete(s)) << i;
    s = m.advance(s, static_cast<uint8_t>(text[i]));
    ASSERT_NE(s, kDeadState) << "byte " << i;
  }
  EXPECT_TRUE(m.complete(s));
  EXPECT_EQ(m.advance(m.start(), static_cast<uint8_t>('a')), kDeadState);
  EXPECT_EQ(m.advance(m.start(), static_cast<uint8_t>(0xD0)), kDeadState);   // U+0400.. cannot be Greek
  EXPECT_NE(m.advance(m.start(), static_cast<uint8_t>(0xCE)), kDeadState);   // U+0380..U+03BF may be
  EXPECT_EQ(m.advance(m.start(), "\xCE\xB0"), kDeadState);                    // U+03B0 is just below α
  EXPECT_EQ(m.advance(m.start(), "\xCE\x41"), kDeadState);                    // not a continuation byte
  EXPECT_EQ(m.advance(m.start(), static_cast<uint8_t>(0xC0)), kDeadState);   // never in UTF-8
  // Inside a character, the rest of that character is the cheapest completion.
  EXPECT_EQ(m.min_bytes_to_complete(m.advance(m.start(), "\xCE")), 1u + 4u);
  EXPECT_EQ(m.min_bytes_to_complete(m.advance(m.start(), "\xCE\xB1\xF0\x9F")), 2u);
}

TEST(Grammar, NegatedClassRejectsSurrogatesAndOverlongForms) {
  GrammarBuilder b;
  Matcher m(build(b, b.add("root", repeat(chars({{0, 0x1F}}, true), 0, kUnbounded))));
  EXPECT_TRUE(matches(m, "any \xE2\x82\xAC text \xF4\x8F\xBF\xBF"));
  EXPECT_EQ(m.advance(m.start(), "\xED\xA0\x80"), kDeadState);  // U+D800
  EXPECT_EQ(m.advance(m.start(), "\xE0\x80"), kDeadState);      // overlong
  EXPECT_EQ(m.advance(m.start(), "\xF4\x90"), kDeadState);      // above U+10FFFF
  EXPECT_EQ(m.advance(m.start(), "\x01"), kDeadState);
}

TEST(Grammar, BuilderRefusesLeftRecursionUndefinedRulesAndEndlessRoots) {
  {
    GrammarBuilder b;
    RuleId e = b.declare("expr");
    b.define(e, alternatives({sequence({rule(e), literal("+1")}), literal("1")}));
    EXPECT_THROW(b.build(e), Error);
  }
  {
    GrammarBuilder b;
    RuleId u = b.declare("missing");
    RuleId r = b.add("root", sequence({literal("a"), rule(u)}));
    EXPECT_THROW(b.build(r), Error);
  }
  {
    GrammarBuilder b;
    RuleId r = b.declare("forever");
    b.define(r, sequence({literal("a"), rule(r)}));
    EXPECT_THROW(b.build(r), Error);
  }
  {  // An alternative that never ends is dropped; the rest still works.
    GrammarBuilder b;
    RuleId loop = b.declare("loop");
    b.define(loop, sequence({literal("x"), rule(loop)}));
    RuleId r = b.add("root", alternatives({rule(loop), literal("xy")}));
    Matcher m(build(b, r));
    EXPECT_TRUE(matches(m, "xy"));
    EXPECT_FALSE(viable(m, "xx"));
  }
  EXPECT_THROW(literal("\xFF"), Error);
}

// A small vocabulary: every byte, pieces over the grammar's alphabet, pieces that split UTF-8
// characters, and a control token.
struct SmallVocab {
  std::vector<std::string> pieces;
  std::vector<uint8_t> usable;
};

SmallVocab small_vocab(std::mt19937& rng) {
  SmallVocab v;
  for (int c = 0; c < 256; ++c) v.pieces.push_back(std::string(1, static_cast<char>(c)));
  const std::vector<std::string> atoms = {"[", "]", ",", "1", "23", "0", "\"", "a", "\xC3\xA9", "\xE2\x82\xAC", " ", "x"};
  for (int i = 0; i < 1500; ++i) {
    std::string p;
    int n = 1 + static_cast<int>(rng() % 5);
    for (int k = 0; k < n; ++k) p += atoms[rng() % atoms.size()];
    if (rng() % 5 == 0) p = p.substr(rng() % p.size());  // may start or end inside a character
    v.pieces.push_back(p);
  }
  v.pieces.push_back("<|end|>");
  v.usable.assign(v.pieces.size(), 1);
  v.usable.back() = 0;
  v.pieces.push_back("1");  // a duplicate piece: both ids allowed together
  v.usable.push_back(1);
  return v;
}

// [ (int | "str") ("," ...)* ] with int = [0-9]+, str = [a\u00e9\u20ac]{0,3}
std::shared_ptr<const Grammar> list_grammar() {
  GrammarBuilder b;
  Expr item = alternatives({repeat(chars({{'0', '9'}}), 1, kUnbounded),
                            sequence({literal("\""), repeat(chars({{'a', 'a'}, {0xE9, 0xE9}, {0x20AC, 0x20AC}}), 0, 3),
                                      literal("\"")})});
  RuleId root = b.add("root", sequence({literal("["), optional(sequence({item, repeat(sequence({literal(","), item}), 0, kUnbounded)})),
                                        literal("]")}));
  return std::make_shared<const Grammar>(b.build(root));
}

std::vector<int32_t> set_ids(const std::vector<uint32_t>& bits) {
  std::vector<int32_t> ids;
  for (size_t w = 0; w < bits.size(); ++w)
    for (int b = 0; b < 32; ++b)
      if (bits[w] >> b & 1) ids.push_back(static_cast<int32_t>(w * 32 + b));
  return ids;
}

TEST(GrammarConstraint, MasksEqualABruteForceCheckOfEveryToken) {
  std::mt19937 rng(7);
  SmallVocab v = small_vocab(rng);
  auto trie = std::make_shared<const TokenTrie>(v.pieces, v.usable);
  EXPECT_TRUE(trie->has_all_single_bytes());
  auto grammar = list_grammar();
  auto compiled = std::make_shared<CompiledGrammar>(grammar, trie);
  Matcher ref(grammar);
  const size_t words = (v.pieces.size() + 31) / 32;
  int checked = 0;
  for (int walk = 0; walk < 20; ++walk) {
    GrammarConstraint c(compiled);
    std::string text;
    for (int step = 0; step < 30; ++step) {
      std::vector<uint32_t> bits(words + 1, 0);  // one spare word: never touched
      int64_t n = c.allowed(bits, 1 << 20);
      std::vector<int32_t> expect;
      StateId at = ref.advance(ref.start(), text);
      for (int32_t id = 0; id < static_cast<int32_t>(v.pieces.size()); ++id)
        if (v.usable[id] && ref.advance(at, v.pieces[id]) != kDeadState) expect.push_back(id);
      ASSERT_EQ(set_ids(bits), expect) << "after '" << text << "'";
      ASSERT_EQ(n, static_cast<int64_t>(expect.size()));
      ASSERT_EQ(c.complete(), ref.complete(at));
      ++checked;
      if (expect.empty()) break;
      int32_t pick = expect[rng() % expect.size()];
      ASSERT_TRUE(c.accept(pick));
      text += v.pieces[pick];
    }
    EXPECT_FALSE(c.accept(static_cast<int32_t>(v.pieces.size()) - 2));  // the control token
  }
  EXPECT_GT(checked, 100);
}

TEST(GrammarConstraint, TightBudgetAlwaysEndsWithACompleteValue) {
  std::mt19937 rng(11);
  SmallVocab v = small_vocab(rng);
  auto trie = std::make_shared<const TokenTrie>(v.pieces, v.usable);
  auto grammar = list_grammar();
  auto compiled = std::make_shared<CompiledGrammar>(grammar, trie);
  Matcher ref(grammar);
  const size_t words = (v.pieces.size() + 31) / 32;
  for (int walk = 0; walk < 200; ++walk) {
    const int64_t max_tokens = 2 + walk % 40;  // "[]" needs two single-byte tokens
    GrammarConstraint c(compiled);
    std::string text;
    bool ended = false;
    for (int64_t used = 0; used < max_tokens; ++used) {
      std::vector<uint32_t> bits(words, 0);
      int64_t n = c.allowed(bits, max_tokens - used);
      if (c.complete() && (n == 0 || rng() % 4 == 0)) {
        ended = true;
        break;
      }
      ASSERT_GT(n, 0) << "stuck after '" << text << "'";
      std::vector<int32_t> ids = set_ids(bits);
      // Every allowed token leaves a completion within the remaining tokens at one token a byte.
      for (int32_t id : ids)
        ASSERT_LE(ref.min_bytes_to_complete(ref.advance(ref.advance(ref.start(), text), v.pieces[id])),
                  static_cast<uint32_t>(max_tokens - used - 1))
            << "token '" << v.pieces[id] << "' after '" << text << "'";
      int32_t pick = ids[rng() % ids.size()];
      ASSERT_TRUE(c.accept(pick));
      text += v.pieces[pick];
    }
    EXPECT_TRUE(ended || c.complete()) << "max_tokens " << max_tokens << ": '" << text << "'";
    EXPECT_TRUE(matches(ref, text)) << text;
  }
}

TEST(GrammarConstraint, WhenNothingFitsTheBudgetOnlyTokensBringingTheEndCloser) {
  std::vector<std::string> pieces = {"[", "]", "1", ",", "\"", "[1,", "a"};
  std::vector<uint8_t> usable(pieces.size(), 1);
  auto trie = std::make_shared<const TokenTrie>(pieces, usable);
  GrammarConstraint c(list_grammar(), trie);
  ASSERT_TRUE(c.accept(0));  // "["
  ASSERT_TRUE(c.accept(4));  // "\"": needs 2 bytes ("\"]")
  std::vector<uint32_t> bits(1, 0);
  // budget 1: no token completes; the closest is "\"" (leaves 1 byte).
  EXPECT_EQ(c.allowed(bits, 1), 1);
  EXPECT_EQ(set_ids(bits), std::vector<int32_t>{4});
  bits[0] = 0;
  EXPECT_EQ(c.allowed(bits, 100), 2);  // "\"" and "a"
  EXPECT_EQ(set_ids(bits), (std::vector<int32_t>{4, 6}));
}

}  // namespace
}  // namespace ft::grammar
