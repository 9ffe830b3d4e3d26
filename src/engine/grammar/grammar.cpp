#include "engine/grammar/grammar.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace ft::grammar {

namespace {

constexpr uint32_t kInf = std::numeric_limits<uint32_t>::max();

uint32_t utf8_len(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

uint32_t add_sat(uint32_t a, uint32_t b) { return (a == kInf || b == kInf || a + b < a) ? kInf : a + b; }

Expr make(Expr::Node n) { return Expr(std::make_shared<const Expr::Node>(std::move(n))); }

}  // namespace

// ---- CharClass ----

CharClass CharClass::of(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  for (auto [lo, hi] : ranges)
    if (lo > hi || hi > kMaxCodePoint) fail(ErrorCode::kInvalidArgument, "bad code point range [{:#x}, {:#x}]", lo, hi);
  std::sort(ranges.begin(), ranges.end());
  CharClass c;
  for (auto r : ranges) {
    if (!c.ranges_.empty() && r.first <= c.ranges_.back().second + 1)
      c.ranges_.back().second = std::max(c.ranges_.back().second, r.second);
    else
      c.ranges_.push_back(r);
  }
  if (negated) {
    std::vector<std::pair<uint32_t, uint32_t>> comp;
    uint32_t next = 0;
    for (auto [lo, hi] : c.ranges_) {
      if (lo > next) comp.push_back({next, lo - 1});
      next = hi + 1;
    }
    if (next <= kMaxCodePoint) comp.push_back({next, kMaxCodePoint});
    c.ranges_ = std::move(comp);
  }
  return c;
}

bool CharClass::contains(uint32_t cp) const { return intersects(cp, cp); }

bool CharClass::intersects(uint32_t lo, uint32_t hi) const {
  // First range whose end is >= lo; it intersects when it starts at or before hi.
  auto it = std::lower_bound(ranges_.begin(), ranges_.end(), lo,
                             [](const std::pair<uint32_t, uint32_t>& r, uint32_t v) { return r.second < v; });
  return it != ranges_.end() && it->first <= hi;
}

uint32_t CharClass::min_utf8_len() const { return ranges_.empty() ? 0 : utf8_len(ranges_.front().first); }

// ---- Expressions ----

Expr literal(std::string_view utf8) {
  Expr::Node n{Expr::Kind::kSequence, {}, {}, 0, 0, -1};
  for (size_t i = 0; i < utf8.size();) {
    Utf8Char c = utf8_decode(utf8.substr(i));
    if (c.status != Utf8Char::kValid)
      fail(ErrorCode::kInvalidArgument, "grammar literal is not valid UTF-8 at byte {}", i);
    n.items.push_back(chars(CharClass::single(c.cp)));
    i += c.len;
  }
  return make(std::move(n));
}

Expr chars(CharClass cls) { return make({Expr::Kind::kClass, std::move(cls), {}, 0, 0, -1}); }

Expr chars(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated) {
  return chars(CharClass::of(std::move(ranges), negated));
}

Expr sequence(std::vector<Expr> items) { return make({Expr::Kind::kSequence, {}, std::move(items), 0, 0, -1}); }

Expr alternatives(std::vector<Expr> items) {
  if (items.empty()) fail(ErrorCode::kInvalidArgument, "grammar alternatives need at least one item");
  if (items.size() == 1) return items[0];
  return make({Expr::Kind::kAlternatives, {}, std::move(items), 0, 0, -1});
}

Expr repeat(Expr item, int64_t min, int64_t max) {
  if (min < 0 || (max != kUnbounded && max < min))
    fail(ErrorCode::kInvalidArgument, "bad grammar repetition {{{},{}}}", min, max);
  return make({Expr::Kind::kRepeat, {}, {std::move(item)}, min, max, -1});
}

Expr rule(RuleId id) { return make({Expr::Kind::kRule, {}, {}, 0, 0, id.index}); }

// ---- Builder ----

RuleId GrammarBuilder::declare(std::string name) {
  names_.push_back(std::move(name));
  bodies_.push_back(nullptr);
  return RuleId{static_cast<int32_t>(names_.size() - 1)};
}

void GrammarBuilder::define(RuleId id, Expr body) {
  if (id.index < 0 || id.index >= static_cast<int32_t>(names_.size()))
    fail(ErrorCode::kInvalidArgument, "grammar rule id {} was not declared", id.index);
  if (bodies_[id.index]) fail(ErrorCode::kInvalidArgument, "grammar rule '{}' is defined twice", names_[id.index]);
  bodies_[id.index] = std::make_shared<Expr>(std::move(body));
}

RuleId GrammarBuilder::add(std::string name, Expr body) {
  RuleId id = declare(std::move(name));
  define(id, std::move(body));
  return id;
}

bool GrammarBuilder::defined(RuleId id) const {
  return id.index >= 0 && id.index < static_cast<int32_t>(names_.size()) && bodies_[id.index] != nullptr;
}

namespace {

using Seq = std::vector<Grammar::Elem>;
using Alts = std::vector<Seq>;

uint64_t elem_key(Grammar::Elem e) { return (static_cast<uint64_t>(e.kind) << 32) | static_cast<uint32_t>(e.index); }

// Lowers builder rules reachable from the root into rules of alternatives of flat sequences.
struct Lowering {
  const std::vector<std::string>& names;
  const std::vector<std::shared_ptr<Expr>>& bodies;
  size_t max_elems;

  std::vector<Alts> rules;
  std::vector<std::string> rule_names;
  std::vector<CharClass> classes;
  std::map<std::vector<std::pair<uint32_t, uint32_t>>, int32_t> class_index;
  std::unordered_map<int32_t, int32_t> builder_rule;          // builder index -> grammar rule
  std::vector<int32_t> pending;                               // builder rules still to lower
  std::unordered_map<uint64_t, int32_t> star_rule;            // item -> S ::= item S | ""
  std::unordered_map<uint64_t, std::vector<int32_t>> opt_chain;  // item -> O_1, O_2, ...
  size_t elem_count = 0;

  int32_t new_rule(std::string name) {
    rules.emplace_back();
    rule_names.push_back(std::move(name));
    return static_cast<int32_t>(rules.size() - 1);
  }

  void count(size_t n) {
    elem_count += n;
    if (elem_count > max_elems)
      fail(ErrorCode::kUnsupported, "the grammar is too large: over {} elements after expanding repetitions", max_elems);
  }

  int32_t class_of(const CharClass& c) {
    auto [it, fresh] = class_index.try_emplace(c.ranges(), static_cast<int32_t>(classes.size()));
    if (fresh) classes.push_back(c);
    return it->second;
  }

  int32_t ref(int32_t builder_index) {
    if (builder_index < 0 || builder_index >= static_cast<int32_t>(names.size()))
      fail(ErrorCode::kInvalidArgument, "grammar refers to rule id {}, which was not declared", builder_index);
    auto [it, fresh] = builder_rule.try_emplace(builder_index, 0);
    if (fresh) {
      if (!bodies[builder_index]) fail(ErrorCode::kInvalidArgument, "grammar rule '{}' is declared but never defined", names[builder_index]);
      it->second = new_rule(names[builder_index]);
      pending.push_back(builder_index);
    }
    return it->second;
  }

  void alts_of(const Expr& e, Alts& out) {
    if (e.node().kind == Expr::Kind::kAlternatives) {
      for (const Expr& item : e.node().items) alts_of(item, out);
      return;
    }
    Seq s;
    seq_of(e, s);
    out.push_back(std::move(s));
  }

  void seq_of(const Expr& e, Seq& out) {
    const Expr::Node& n = e.node();
    switch (n.kind) {
      case Expr::Kind::kClass: count(1); out.push_back({Grammar::Elem::kClass, class_of(n.cls)}); return;
      case Expr::Kind::kRule: count(1); out.push_back({Grammar::Elem::kRule, ref(n.rule)}); return;
      case Expr::Kind::kSequence:
        for (const Expr& item : n.items) seq_of(item, out);
        return;
      case Expr::Kind::kAlternatives: {
        int32_t r = new_rule("alt");
        Alts alts;
        alts_of(e, alts);
        rules[r] = std::move(alts);
        count(1);
        out.push_back({Grammar::Elem::kRule, r});
        return;
      }
      case Expr::Kind::kRepeat: repeat_of(n, out); return;
    }
  }

  void repeat_of(const Expr::Node& n, Seq& out) {
    if (n.max == 0) return;
    Seq item;
    seq_of(n.items[0], item);
    if (item.empty()) return;  // repeating "" matches ""
    Grammar::Elem el = item[0];
    if (item.size() > 1) {
      el = {Grammar::Elem::kRule, new_rule("item")};
      rules[el.index] = {std::move(item)};
    }
    count(static_cast<size_t>(n.min));
    for (int64_t i = 0; i < n.min; ++i) out.push_back(el);
    if (n.max == kUnbounded) {
      auto [it, fresh] = star_rule.try_emplace(elem_key(el), 0);
      if (fresh) {
        int32_t s = new_rule("star");
        it->second = s;
        rules[s] = {Seq{el, {Grammar::Elem::kRule, s}}, Seq{}};
        count(3);
      }
      out.push_back({Grammar::Elem::kRule, it->second});
      return;
    }
    int64_t k = n.max - n.min;
    if (k == 0) return;
    std::vector<int32_t>& chain = opt_chain[elem_key(el)];
    count(static_cast<size_t>(std::max<int64_t>(0, k - static_cast<int64_t>(chain.size())) * 3));
    while (static_cast<int64_t>(chain.size()) < k) {
      int32_t o = new_rule("opt");
      if (chain.empty())
        rules[o] = {Seq{el}, Seq{}};
      else
        rules[o] = {Seq{el, {Grammar::Elem::kRule, chain.back()}}, Seq{}};
      chain.push_back(o);
    }
    count(1);
    out.push_back({Grammar::Elem::kRule, chain[k - 1]});
  }

  void run(int32_t root_builder) {
    ref(root_builder);
    while (!pending.empty()) {
      int32_t b = pending.back();
      pending.pop_back();
      Alts alts;
      alts_of(*bodies[b], alts);
      rules[builder_rule.at(b)] = std::move(alts);
    }
  }
};

uint32_t elem_min(const Grammar::Elem& e, const std::vector<CharClass>& classes, const std::vector<uint32_t>& rule_min) {
  if (e.kind == Grammar::Elem::kClass) return classes[e.index].empty() ? kInf : classes[e.index].min_utf8_len();
  return rule_min[e.index];
}

// Throws when some rule reaches itself through left corners (first elements, past nullable ones).
void check_left_recursion(const std::vector<Alts>& rules, const std::vector<std::string>& names,
                          const std::vector<uint32_t>& rule_min) {
  std::vector<std::vector<int32_t>> edges(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (const Seq& s : rules[r])
      for (const Grammar::Elem& e : s) {
        if (e.kind != Grammar::Elem::kRule) break;
        edges[r].push_back(e.index);
        if (rule_min[e.index] != 0) break;
      }
  std::vector<uint8_t> color(rules.size(), 0);  // 0 new, 1 on the path, 2 done
  for (size_t start = 0; start < rules.size(); ++start) {
    if (color[start]) continue;
    std::vector<std::pair<int32_t, size_t>> stack{{static_cast<int32_t>(start), 0}};
    color[start] = 1;
    while (!stack.empty()) {
      auto& [r, i] = stack.back();
      if (i < edges[r].size()) {
        int32_t next = edges[r][i++];
        if (color[next] == 1)
          fail(ErrorCode::kInvalidArgument, "grammar rule '{}' is left-recursive (it can start with itself)", names[next]);
        if (color[next] == 0) {
          color[next] = 1;
          stack.push_back({next, 0});
        }
      } else {
        color[r] = 2;
        stack.pop_back();
      }
    }
  }
}

}  // namespace

Grammar GrammarBuilder::build(RuleId root, size_t max_elems) const {
  Lowering low{names_, bodies_, max_elems, {}, {}, {}, {}, {}, {}, {}, {}, 0};
  low.run(root.index);

  // Fewest bytes each rule can match (kInf: never ends), by iteration to the fixed point.
  std::vector<uint32_t> rule_min(low.rules.size(), kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < low.rules.size(); ++r)
      for (const Seq& s : low.rules[r]) {
        uint32_t total = 0;
        for (const Grammar::Elem& e : s) total = add_sat(total, elem_min(e, low.classes, rule_min));
        if (total < rule_min[r]) {
          rule_min[r] = total;
          changed = true;
        }
      }
  }
  const int32_t groot = low.builder_rule.at(root.index);
  if (rule_min[groot] == kInf)
    fail(ErrorCode::kInvalidArgument, "grammar rule '{}' matches no finite text (every alternative recurses forever)", names_[root.index]);
  // Alternatives that can never end would trap the matcher: drop them.
  for (size_t r = 0; r < low.rules.size(); ++r) {
    Alts& alts = low.rules[r];
    alts.erase(std::remove_if(alts.begin(), alts.end(),
                              [&](const Seq& s) {
                                for (const Grammar::Elem& e : s)
                                  if (elem_min(e, low.classes, rule_min) == kInf) return true;
                                return false;
                              }),
               alts.end());
  }
  check_left_recursion(low.rules, low.rule_names, rule_min);

  Grammar g;
  g.classes = std::move(low.classes);
  g.rule_names = std::move(low.rule_names);
  g.rule_min = rule_min;
  g.root = groot;
  for (const Alts& alts : low.rules) {
    int32_t begin = static_cast<int32_t>(g.alt_starts.size());
    for (const Seq& s : alts) {
      g.alt_starts.push_back(static_cast<int32_t>(g.elems.size()));
      g.elems.insert(g.elems.end(), s.begin(), s.end());
      g.elems.push_back({Grammar::Elem::kEnd, -1});
    }
    g.rule_alts.push_back({begin, static_cast<int32_t>(g.alt_starts.size())});
  }
  g.suffix_min.assign(g.elems.size(), 0);
  for (size_t i = g.elems.size(); i-- > 0;) {
    if (g.elems[i].kind == Grammar::Elem::kEnd) continue;
    g.suffix_min[i] = add_sat(elem_min(g.elems[i], g.classes, g.rule_min), g.suffix_min[i + 1]);
  }
  return g;
}

}  // namespace ft::grammar
