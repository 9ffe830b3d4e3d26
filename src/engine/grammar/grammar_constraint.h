#pragma once
// GrammarConstraint: a TokenConstraint from a Grammar and a vocabulary's TokenTrie. The allowed tokens
// of a matcher state are found by walking the trie against the state (a subtree is skipped on the
// first byte the grammar rejects) and cached per state, so the states that recur (inside a JSON string,
// between digits) cost one copy of the mask after their first walk. Each cache entry also keeps, for
// the tokens that change it, the fewest bytes left to complete after the token, so budget-limited masks
// (the last tokens of max_tokens) come from the cache too.
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar.h"
#include "engine/grammar/matcher.h"
#include "engine/grammar/token_trie.h"
#include "engine/token_constraint.h"

namespace ft::grammar {

/** A grammar bound to a vocabulary: the matcher (with its memoized transitions) and the mask cache.
 *  Several GrammarConstraints may share one (requests with the same schema); calls are serialized by a
 *  mutex. Memory grows with the states visited; the mask cache is dropped whole past `cache_bytes`. */
class CompiledGrammar {
 public:
  CompiledGrammar(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                  size_t cache_bytes = size_t{64} << 20);

  const TokenTrie& trie() const { return *trie_; }
  const Grammar& grammar() const { return *grammar_; }
  /** Interned matcher states so far (for tests and memory reports). */
  size_t state_count() const;

 private:
  friend class GrammarConstraint;
  struct MaskEntry {
    std::vector<uint32_t> bits;  // every token the grammar allows from the state
    int64_t count = 0;
    uint32_t base = 0;           // fewest bytes to complete from the state itself
    uint32_t max_after = 0;      // largest fewest-bytes-to-complete after one allowed token
    bool exact = true;           // `changed` holds every token whose value differs from `base`
    std::vector<std::pair<uint32_t, int32_t>> changed;  // (fewest bytes after, token), ascending
  };

  // Walks the trie from `s`, setting the bits of tokens after which at most `limit` bytes complete the
  // text. Returns the count; `min_after` gets the fewest bytes after any grammar-allowed token.
  int64_t walk(StateId s, std::span<uint32_t> out, uint32_t limit, uint32_t* min_after, MaskEntry* entry);
  const MaskEntry& entry(StateId s);
  int64_t mask(StateId s, std::span<uint32_t> out, int64_t budget);

  std::shared_ptr<const Grammar> grammar_;
  std::shared_ptr<const TokenTrie> trie_;
  Matcher matcher_;
  mutable std::mutex mu_;
  std::unordered_map<StateId, MaskEntry> cache_;
  size_t cache_bytes_ = 0, cache_limit_;
  std::vector<StateId> walk_states_;
  // Walk-local copies of the matcher's answers, indexed by state: a dense row of transitions for each
  // state a walk expands (-2: not asked yet), and fewest bytes to complete (+1; 0: not asked yet).
  // Dropped whole past `cache_limit_` like the masks.
  int32_t* row(StateId s);
  uint32_t min_bytes(StateId s);
  std::vector<std::unique_ptr<int32_t[]>> rows_;
  std::vector<uint32_t> min_bytes_;
  std::vector<int32_t*> walk_rows_;
  size_t row_bytes_ = 0;
};

class GrammarConstraint : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<CompiledGrammar> compiled);
  /** A constraint with its own CompiledGrammar. */
  GrammarConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie);

  /** TokenConstraint::allowed. Tokens with ids at or past the trie's vocabulary are never set. With a
   *  budget B, a token is allowed only when the text after it can be completed in at most B - 1 bytes;
   *  when no token can, none when the text is complete (it ends there), else only the tokens leaving
   *  the fewest bytes to complete. Returns 0 when the state
   *  is complete and nothing may follow. */
  int64_t allowed(std::span<uint32_t> allowed, int64_t budget) override;
  /** Advances over token `id`'s bytes; false (state kept) for an unusable id or bytes the grammar
   *  rejects. Does not check the budget of the last allowed() call. */
  bool accept(int32_t id) override;
  bool complete() const override;

  /** Advances over forced text (e.g. a prefix the server writes itself); false (state kept) if the
   *  grammar rejects it. */
  bool accept_text(std::string_view bytes);
  /** Fewest bytes that complete the text accepted so far. */
  uint32_t min_bytes_to_complete() const;
  /** The current state, for rollback with set_state (only states this constraint's CompiledGrammar
   *  produced). */
  StateId state() const { return state_; }
  void set_state(StateId s) { state_ = s; }
  const std::shared_ptr<CompiledGrammar>& compiled() const { return compiled_; }

 private:
  std::shared_ptr<CompiledGrammar> compiled_;
  StateId state_;
};

}  // namespace ft::grammar
