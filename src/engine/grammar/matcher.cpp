#include "engine/grammar/matcher.h"

#include <algorithm>
#include <limits>
#include <string>
#include <unordered_map>

#include "util/error.h"

namespace ft::grammar {

namespace {

constexpr uint32_t kUnknown = std::numeric_limits<uint32_t>::max();
constexpr uint32_t kInf = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kEmptyKey = std::numeric_limits<uint64_t>::max();

uint32_t add_sat(uint32_t a, uint32_t b) { return (a == kInf || b == kInf || a + b < a) ? kInf : a + b; }

// Open-addressing map uint64 -> int32 (linear probing, power-of-two capacity, no erase).
class FlatMap {
 public:
  FlatMap() { rehash(1024); }
  const int32_t* find(uint64_t key) const {
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmptyKey) return nullptr;
    }
  }
  void insert(uint64_t key, int32_t value) {
    if ((size_ + 1) * 2 > keys_.size()) rehash(keys_.size() * 2);
    for (size_t i = mix(key) & mask_;; i = (i + 1) & mask_) {
      if (keys_[i] == kEmptyKey) {
        keys_[i] = key;
        values_[i] = value;
        ++size_;
        return;
      }
      if (keys_[i] == key) {
        values_[i] = value;
        return;
      }
    }
  }
  size_t size() const { return size_; }

 private:
  static size_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return static_cast<size_t>(k);
  }
  void rehash(size_t cap) {
    std::vector<uint64_t> keys(cap, kEmptyKey);
    std::vector<int32_t> values(cap, 0);
    keys.swap(keys_);
    values.swap(values_);
    mask_ = cap - 1;
    size_ = 0;
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] != kEmptyKey) insert(keys[i], values[i]);
  }
  std::vector<uint64_t> keys_;
  std::vector<int32_t> values_;
  size_t mask_ = 0, size_ = 0;
};

}  // namespace

struct Matcher::Impl {
  struct Node {
    int32_t pos;     // position in grammar.elems: a kClass element for a leaf, a kRule one otherwise
    int32_t parent;  // node to continue after this one's rule ends (-1: the root)
  };
  struct State {
    std::vector<int32_t> leaves;  // sorted node ids whose element is a class
    uint32_t partial = 0;         // bits of an unfinished UTF-8 character
    uint8_t need = 0;             // continuation bytes it still needs
    uint8_t len = 0;              // its length in bytes
    bool accept = false;          // the text is a whole string of the grammar
    uint32_t min_bytes = kUnknown;
  };

  const Grammar& g;
  std::vector<Node> nodes;
  FlatMap node_index;            // (pos, parent) -> node
  std::vector<State> states;
  std::unordered_map<std::string, StateId> state_index;
  FlatMap transitions;           // (state << 8 | byte) -> state or kDeadState
  std::vector<uint32_t> cont;    // per node: fewest bytes after its element to the end (memo)
  FlatMap expanded;              // (rule, continuation node) -> closure generation that expanded it
  uint32_t generation = 0;
  std::vector<int32_t> scratch;
  bool scratch_accept = false;

  explicit Impl(const Grammar& grammar) : g(grammar) {}

  int32_t intern_node(int32_t pos, int32_t parent) {
    uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent + 1);
    if (const int32_t* id = node_index.find(key)) return *id;
    nodes.push_back({pos, parent});
    cont.push_back(kUnknown);
    int32_t id = static_cast<int32_t>(nodes.size() - 1);
    node_index.insert(key, id);
    return id;
  }

  // Adds to `scratch` the leaves reached from element `pos` continuing at `parent`.
  void expand(int32_t pos, int32_t parent) {
    for (;;) {
      const Grammar::Elem& e = g.elems[pos];
      if (e.kind == Grammar::Elem::kEnd) {
        if (parent < 0) {
          scratch_accept = true;
          return;
        }
        pos = nodes[parent].pos + 1;
        parent = nodes[parent].parent;
        continue;
      }
      if (e.kind == Grammar::Elem::kClass) {
        scratch.push_back(intern_node(pos, parent));
        return;
      }
      // A reference in tail position returns straight to `parent` (no frame: right recursion such as
      // S ::= x S keeps the stack, so a string's states repeat instead of growing with its length).
      const int32_t cont = g.elems[pos + 1].kind == Grammar::Elem::kEnd ? parent : intern_node(pos, parent);
      const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(e.index)) << 32) | static_cast<uint32_t>(cont + 1);
      if (const int32_t* seen = expanded.find(key); seen && *seen == static_cast<int32_t>(generation)) return;
      expanded.insert(key, static_cast<int32_t>(generation));  // same rule, same continuation: same leaves
      auto [begin, end] = g.rule_alts[e.index];
      for (int32_t a = begin; a < end; ++a) expand(g.alt_starts[a], cont);
      return;
    }
  }

  void begin_closure() {
    scratch.clear();
    scratch_accept = false;
    if (++generation > static_cast<uint32_t>(std::numeric_limits<int32_t>::max())) {
      expanded = FlatMap();
      generation = 1;
    }
  }

  StateId intern_state(State s) {
    std::sort(s.leaves.begin(), s.leaves.end());
    s.leaves.erase(std::unique(s.leaves.begin(), s.leaves.end()), s.leaves.end());
    if (s.leaves.empty() && !s.accept) return kDeadState;
    std::string key(reinterpret_cast<const char*>(s.leaves.data()), s.leaves.size() * sizeof(int32_t));
    key.push_back(static_cast<char>(s.need));
    key.push_back(static_cast<char>(s.len));
    key.push_back(static_cast<char>(s.accept));
    key.append(reinterpret_cast<const char*>(&s.partial), sizeof(s.partial));
    auto [it, fresh] = state_index.try_emplace(std::move(key), static_cast<StateId>(states.size()));
    if (fresh) states.push_back(std::move(s));
    return it->second;
  }

  const CharClass& leaf_class(int32_t leaf) const { return g.classes[g.elems[nodes[leaf].pos].index]; }

  StateId step_code_point(const std::vector<int32_t>& leaves, uint32_t cp) {
    begin_closure();
    for (int32_t leaf : leaves)
      if (leaf_class(leaf).contains(cp)) expand(nodes[leaf].pos + 1, nodes[leaf].parent);
    State next;
    next.leaves = scratch;
    next.accept = scratch_accept;
    return intern_state(std::move(next));
  }

  // State inside a character: the leaves whose class may still hold it.
  StateId step_partial(const std::vector<int32_t>& leaves, uint32_t partial, uint8_t need, uint8_t len) {
    static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
    static constexpr uint32_t kMax[5] = {0, 0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    uint64_t lo = static_cast<uint64_t>(partial) << (6 * need);
    uint64_t hi = lo | ((uint64_t{1} << (6 * need)) - 1);
    lo = std::max<uint64_t>(lo, kMin[len]);
    hi = std::min<uint64_t>(hi, kMax[len]);
    if (lo > hi || (lo >= 0xD800 && hi <= 0xDFFF)) return kDeadState;
    State next;
    for (int32_t leaf : leaves)
      if (leaf_class(leaf).intersects(static_cast<uint32_t>(lo), static_cast<uint32_t>(hi))) next.leaves.push_back(leaf);
    if (next.leaves.empty()) return kDeadState;
    next.partial = partial;
    next.need = need;
    next.len = len;
    return intern_state(std::move(next));
  }

  StateId compute(StateId s, uint8_t b) {
    const State& st = states[s];
    if (st.need == 0) {
      if (b < 0x80) return step_code_point(st.leaves, b);
      if (b >= 0xC2 && b <= 0xDF) return step_partial(st.leaves, b & 0x1F, 1, 2);
      if (b >= 0xE0 && b <= 0xEF) return step_partial(st.leaves, b & 0x0F, 2, 3);
      if (b >= 0xF0 && b <= 0xF4) return step_partial(st.leaves, b & 0x07, 3, 4);
      return kDeadState;
    }
    if ((b & 0xC0) != 0x80) return kDeadState;
    uint32_t partial = (st.partial << 6) | (b & 0x3F);
    uint8_t need = st.need - 1, len = st.len;
    if (need > 0) {
      std::vector<int32_t> leaves = st.leaves;  // states may grow while stepping
      return step_partial(leaves, partial, need, len);
    }
    if ((len == 3 && partial < 0x800) || (len == 4 && (partial < 0x10000 || partial > 0x10FFFF)) ||
        (partial >= 0xD800 && partial <= 0xDFFF))
      return kDeadState;
    std::vector<int32_t> leaves = st.leaves;
    return step_code_point(leaves, partial);
  }

  uint32_t cont_of(int32_t node) {
    // Fewest bytes after `node`'s element up to the end of the text: iterate up the parents.
    std::vector<int32_t> path;
    int32_t n = node;
    while (n >= 0 && cont[n] == kUnknown) {
      path.push_back(n);
      n = nodes[n].parent;
    }
    uint32_t acc = n < 0 ? 0 : cont[n];
    for (size_t i = path.size(); i-- > 0;) {
      int32_t p = path[i];
      int32_t parent = nodes[p].parent;
      // cont[p] = rest of p's sequence after its element, then what follows p's parent element.
      acc = add_sat(g.suffix_min[nodes[p].pos + 1], parent < 0 ? 0 : cont[parent]);
      cont[p] = acc;
    }
    return n == node ? cont[node] : acc;
  }
};

Matcher::Matcher(std::shared_ptr<const Grammar> grammar) : grammar_(std::move(grammar)) {
  FT_CHECK(grammar_ && grammar_->root >= 0);
  impl_ = std::make_unique<Impl>(*grammar_);
  impl_->begin_closure();
  auto [begin, end] = grammar_->rule_alts[grammar_->root];
  for (int32_t a = begin; a < end; ++a) impl_->expand(grammar_->alt_starts[a], -1);
  Impl::State s;
  s.leaves = impl_->scratch;
  s.accept = impl_->scratch_accept;
  start_ = impl_->intern_state(std::move(s));
  FT_CHECK(start_ != kDeadState);
}

Matcher::~Matcher() = default;

StateId Matcher::advance(StateId s, uint8_t byte) {
  if (s < 0) return kDeadState;
  uint64_t key = (static_cast<uint64_t>(s) << 8) | byte;
  if (const int32_t* hit = impl_->transitions.find(key)) return *hit;
  StateId next = impl_->compute(s, byte);
  impl_->transitions.insert(key, next);
  return next;
}

StateId Matcher::advance(StateId s, std::string_view bytes) {
  for (char c : bytes) {
    s = advance(s, static_cast<uint8_t>(c));
    if (s == kDeadState) break;
  }
  return s;
}

bool Matcher::complete(StateId s) const { return s >= 0 && impl_->states[s].accept; }

bool Matcher::can_continue(StateId s) const { return s >= 0 && !impl_->states[s].leaves.empty(); }

uint32_t Matcher::min_bytes_to_complete(StateId s) {
  FT_CHECK(s >= 0);
  Impl& m = *impl_;
  if (m.states[s].min_bytes != kUnknown) return m.states[s].min_bytes;
  uint32_t best = m.states[s].accept ? 0 : kInf;
  const uint8_t need = m.states[s].need;
  const std::vector<int32_t> leaves = m.states[s].leaves;
  for (int32_t leaf : leaves) {
    int32_t pos = m.nodes[leaf].pos;
    // Inside a character: its remaining bytes, then the rest after the class element.
    uint32_t here = need > 0 ? need + m.g.suffix_min[pos + 1] : m.g.suffix_min[pos];
    int32_t parent = m.nodes[leaf].parent;
    best = std::min(best, add_sat(here, parent < 0 ? 0 : m.cont_of(parent)));
  }
  m.states[s].min_bytes = best;
  return best;
}

size_t Matcher::state_count() const { return impl_->states.size(); }
size_t Matcher::node_count() const { return impl_->nodes.size(); }

}  // namespace ft::grammar
