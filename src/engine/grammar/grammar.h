#pragma once
// A context-free grammar over Unicode code points (its text is UTF-8), for constrained decoding: rules,
// each an alternation of sequences of elements (a code point class or a rule reference), and a builder
// that composes grammars in C++ (literal, class, sequence, alternatives, bounded repetition, rule
// reference) and lowers them into that form. Repetition X{m,n} becomes m copies of X followed by a
// right-recursive chain of optional rules, as GBNF's converter in llama.cpp lowers it; X* becomes
// S ::= X S | "". Grammars must be free of left recursion (the matcher expands rules top-down).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft::grammar {

inline constexpr uint32_t kMaxCodePoint = 0x10FFFF;

/** A set of Unicode code points: sorted, disjoint, non-adjacent closed ranges [lo, hi]. */
class CharClass {
 public:
  CharClass() = default;
  /** Union of `ranges` (any order, may overlap; lo <= hi <= U+10FFFF), or its complement within
   *  [0, U+10FFFF] when `negated`. Throws ft::Error(kInvalidArgument) for a bad range. */
  static CharClass of(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false);
  static CharClass single(uint32_t cp) { return of({{cp, cp}}); }

  bool contains(uint32_t cp) const;
  /** Whether some code point in [lo, hi] belongs to the class. */
  bool intersects(uint32_t lo, uint32_t hi) const;
  /** UTF-8 length in bytes of the class's shortest code point; 0 for the empty class. */
  uint32_t min_utf8_len() const;
  bool empty() const { return ranges_.empty(); }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }
  bool operator==(const CharClass& o) const { return ranges_ == o.ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

/** A rule of a GrammarBuilder. */
struct RuleId {
  int32_t index = -1;
};

/** An expression for GrammarBuilder: an immutable tree, cheap to copy (nodes are shared). */
class Expr {
 public:
  enum class Kind { kClass, kSequence, kAlternatives, kRepeat, kRule };
  struct Node;
  explicit Expr(std::shared_ptr<const Node> n) : node_(std::move(n)) {}
  const Node& node() const { return *node_; }

 private:
  std::shared_ptr<const Node> node_;
};

inline constexpr int64_t kUnbounded = -1;

struct Expr::Node {
  Kind kind;
  CharClass cls;               // kClass
  std::vector<Expr> items;     // kSequence, kAlternatives; kRepeat: the one repeated item
  int64_t min = 0, max = 0;    // kRepeat: max may be kUnbounded
  int32_t rule = -1;           // kRule
};

/** The text `utf8` exactly (one element per code point; "" is the empty sequence). Throws
 *  ft::Error(kInvalidArgument) when `utf8` is not valid UTF-8. */
Expr literal(std::string_view utf8);
/** One code point of `cls`. */
Expr chars(CharClass cls);
/** One code point in any of `ranges` (or none of them when `negated`). */
Expr chars(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated = false);
/** The items one after the other (empty: matches ""). */
Expr sequence(std::vector<Expr> items);
/** Any one of the items (at least one). */
Expr alternatives(std::vector<Expr> items);
/** `item` repeated min..max times (max >= min, or kUnbounded). */
Expr repeat(Expr item, int64_t min, int64_t max);
inline Expr optional(Expr item) { return repeat(std::move(item), 0, 1); }
/** A reference to a rule (may be defined later, may recurse except on its left edge). */
Expr rule(RuleId id);

/** Compiled grammar: sequences stored flat, each ended by a kEnd element. */
struct Grammar {
  struct Elem {
    enum Kind : uint8_t { kEnd, kClass, kRule } kind = kEnd;
    int32_t index = -1;  // class index (kClass) or rule index (kRule)
  };
  std::vector<Elem> elems;                   // every alternative's sequence, each ended by kEnd
  std::vector<int32_t> alt_starts;           // position in `elems` of each alternative
  std::vector<std::pair<int32_t, int32_t>> rule_alts;  // per rule: [begin, end) into alt_starts
  std::vector<std::string> rule_names;
  std::vector<CharClass> classes;
  std::vector<uint32_t> rule_min;            // per rule: fewest bytes of a string it matches
  std::vector<uint32_t> suffix_min;          // per position: fewest bytes from there to the kEnd
  int32_t root = -1;
};

/** Builds a Grammar from rules given as expressions. Rules may refer to each other in any order.
 *  Usable for several grammars: build() does not change the builder. */
class GrammarBuilder {
 public:
  /** A new rule without a body yet (define it before build()). Names need not be unique. */
  RuleId declare(std::string name);
  /** Sets the body of a declared rule. Throws ft::Error(kInvalidArgument) if it already has one. */
  void define(RuleId id, Expr body);
  /** declare + define. */
  RuleId add(std::string name, Expr body);
  /** Whether `id` has a body. */
  bool defined(RuleId id) const;

  /** The grammar whose start rule is `root`: lowered, its alternatives that can never end removed.
   *  Throws ft::Error(kInvalidArgument) naming the rule for an undefined rule, left recursion, or a
   *  root that matches no finite string; kUnsupported when lowering needs over `max_elems` elements. */
  Grammar build(RuleId root, size_t max_elems = 4u << 20) const;

 private:
  std::vector<std::string> names_;
  std::vector<std::shared_ptr<Expr>> bodies_;
};

}  // namespace ft::grammar
