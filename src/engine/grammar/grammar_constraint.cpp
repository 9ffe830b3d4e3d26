#include "engine/grammar/grammar_constraint.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "util/error.h"

namespace ft::grammar {

namespace {

constexpr uint32_t kInf = std::numeric_limits<uint32_t>::max();
// A cache entry keeps at most this many (bytes after, token) pairs; past it, budget-limited masks for
// that state walk the trie again.
constexpr size_t kMaxChanged = 32768;

}  // namespace

CompiledGrammar::CompiledGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                                 size_t cache_bytes)
    : grammar_(std::move(grammar)), trie_(std::move(trie)), matcher_(grammar_), cache_limit_(cache_bytes) {
  FT_CHECK(trie_ != nullptr);
  walk_states_.assign(trie_->max_depth() + 1, kDeadState);
}

size_t CompiledGrammar::state_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return matcher_.state_count();
}

int32_t* CompiledGrammar::row(StateId s) {
  if (static_cast<size_t>(s) >= rows_.size()) rows_.resize(std::max<size_t>(s + 1, rows_.size() * 2));
  if (!rows_[s]) {
    rows_[s] = std::make_unique<int32_t[]>(256);
    std::fill(rows_[s].get(), rows_[s].get() + 256, -2);
    row_bytes_ += 1024;
  }
  return rows_[s].get();
}

uint32_t CompiledGrammar::min_bytes(StateId s) {
  if (static_cast<size_t>(s) >= min_bytes_.size()) min_bytes_.resize(std::max<size_t>(s + 1, min_bytes_.size() * 2), 0);
  if (min_bytes_[s] == 0) min_bytes_[s] = std::min(matcher_.min_bytes_to_complete(s), kInf - 1) + 1;
  return min_bytes_[s] - 1;
}

int64_t CompiledGrammar::walk(StateId s, std::span<uint32_t> out, uint32_t limit, uint32_t* min_after,
                              MaskEntry* entry) {
  const std::vector<TokenTrie::Node>& nodes = trie_->nodes();
  const std::vector<int32_t>& tokens = trie_->tokens();
  const size_t words = out.size();
  if (row_bytes_ > cache_limit_) {  // rows are dropped between walks only: a walk holds pointers to them
    for (auto& r : rows_) r.reset();
    row_bytes_ = 0;
  }
  walk_rows_.assign(walk_states_.size(), nullptr);
  walk_states_[0] = s;
  walk_rows_[0] = row(s);
  int64_t count = 0;
  uint32_t best = kInf;
  for (size_t i = 0; i < nodes.size();) {
    const TokenTrie::Node& n = nodes[i];
    int32_t* r = walk_rows_[n.depth - 1];
    StateId ns = r[n.byte];
    if (ns == -2) {
      ns = matcher_.advance(walk_states_[n.depth - 1], n.byte);
      r[n.byte] = ns;
    }
    if (ns == kDeadState) {
      i = n.end;
      continue;
    }
    walk_states_[n.depth] = ns;
    if (n.tok_end > n.tok_begin) {
      const uint32_t m = min_bytes(ns);
      best = std::min(best, m);
      if (m <= limit) {
        for (uint32_t k = n.tok_begin; k < n.tok_end; ++k) {
          const int32_t t = tokens[k];
          if (static_cast<size_t>(t / 32) >= words) continue;
          out[t / 32] |= 1u << (t % 32);
          ++count;
          if (entry) {
            entry->max_after = std::max(entry->max_after, m);
            if (m != entry->base && entry->exact) {
              if (entry->changed.size() < kMaxChanged)
                entry->changed.push_back({m, t});
              else
                entry->exact = false;
            }
          }
        }
      }
    }
    if (n.end == i + 1) {  // a leaf of the trie
      ++i;
    } else if (!matcher_.can_continue(ns)) {  // nothing follows: the subtree is dead
      i = n.end;
    } else {
      walk_rows_[n.depth] = row(ns);
      ++i;
    }
  }
  if (min_after) *min_after = best;
  return count;
}

const CompiledGrammar::MaskEntry& CompiledGrammar::entry(StateId s) {
  if (auto it = cache_.find(s); it != cache_.end()) return it->second;
  MaskEntry e;
  e.bits.assign((static_cast<size_t>(trie_->vocab_size()) + 31) / 32, 0);
  e.base = matcher_.min_bytes_to_complete(s);
  e.count = walk(s, e.bits, kInf, nullptr, &e);
  if (!e.exact) e.changed.clear();
  e.changed.shrink_to_fit();
  std::sort(e.changed.begin(), e.changed.end());
  const size_t bytes = e.bits.size() * 4 + e.changed.size() * 8 + 64;
  if (cache_bytes_ + bytes > cache_limit_) {
    cache_.clear();
    cache_bytes_ = 0;
  }
  cache_bytes_ += bytes;
  return cache_.emplace(s, std::move(e)).first->second;
}

int64_t CompiledGrammar::mask(StateId s, std::span<uint32_t> out, int64_t budget) {
  if (!matcher_.can_continue(s)) return 0;
  const MaskEntry& e = entry(s);
  const size_t words = std::min(out.size(), e.bits.size());
  const uint32_t limit = budget <= 1 ? 0 : static_cast<uint32_t>(std::min<int64_t>(budget - 1, kInf - 1));
  if (e.max_after <= limit) {
    std::memcpy(out.data(), e.bits.data(), words * 4);
    return e.count;
  }
  if (!e.exact) {
    uint32_t fewest = kInf;
    int64_t n = walk(s, out, limit, &fewest, nullptr);
    if (n == 0 && !matcher_.complete(s)) n = walk(s, out, fewest, nullptr, nullptr);
    return n;
  }
  // Tokens not in `changed` leave e.base bytes to complete; `changed` is ascending.
  const int64_t n_base = e.count - static_cast<int64_t>(e.changed.size());
  auto select = [&](uint32_t lim) -> int64_t {
    int64_t n = 0;
    if (lim >= e.base) {
      std::memcpy(out.data(), e.bits.data(), words * 4);
      n = e.count;
      for (auto it = e.changed.rbegin(); it != e.changed.rend() && it->first > lim; ++it) {
        if (static_cast<size_t>(it->second / 32) >= words) continue;
        out[it->second / 32] &= ~(1u << (it->second % 32));
        --n;
      }
    } else {
      std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(words), 0u);
      for (auto it = e.changed.begin(); it != e.changed.end() && it->first <= lim; ++it) {
        if (static_cast<size_t>(it->second / 32) >= words) continue;
        out[it->second / 32] |= 1u << (it->second % 32);
        ++n;
      }
    }
    return n;
  };
  int64_t n = select(limit);
  if (n > 0) return n;
  // No token keeps the text completable within the budget: a complete text ends here (the service
  // then allows only end-of-generation); an incomplete one takes the tokens leaving the fewest bytes.
  if (matcher_.complete(s)) return 0;
  uint32_t fewest = n_base > 0 ? e.base : kInf;
  if (!e.changed.empty()) fewest = std::min(fewest, e.changed.front().first);
  return select(fewest);
}

GrammarConstraint::GrammarConstraint(std::shared_ptr<CompiledGrammar> compiled)
    : compiled_(std::move(compiled)), state_(compiled_->matcher_.start()) {}

GrammarConstraint::GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie)
    : GrammarConstraint(std::make_shared<CompiledGrammar>(std::move(grammar), std::move(trie))) {}

int64_t GrammarConstraint::allowed(std::span<uint32_t> allowed, int64_t budget) {
  std::lock_guard<std::mutex> lock(compiled_->mu_);
  return compiled_->mask(state_, allowed, budget);
}

bool GrammarConstraint::accept(int32_t id) {
  const TokenTrie& trie = *compiled_->trie_;
  if (id < 0 || id >= trie.vocab_size() || !trie.usable(id)) return false;
  return accept_text(trie.piece(id));
}

bool GrammarConstraint::accept_text(std::string_view bytes) {
  std::lock_guard<std::mutex> lock(compiled_->mu_);
  StateId next = compiled_->matcher_.advance(state_, bytes);
  if (next == kDeadState) return false;
  state_ = next;
  return true;
}

bool GrammarConstraint::complete() const {
  std::lock_guard<std::mutex> lock(compiled_->mu_);
  return compiled_->matcher_.complete(state_);
}

uint32_t GrammarConstraint::min_bytes_to_complete() const {
  std::lock_guard<std::mutex> lock(compiled_->mu_);
  return compiled_->matcher_.min_bytes_to_complete(state_);
}

}  // namespace ft::grammar
