#pragma once
// Matcher: a pushdown recognizer for a Grammar over UTF-8 bytes. A parse position is a stack (the
// element being matched, then the continuations of the rules it is nested in); a matcher state is the
// set of all stacks the text so far allows (ambiguity keeps several, as llama.cpp's grammar stacks do),
// with their tops on code point classes, plus the bytes of an unfinished UTF-8 character. Stacks are
// hash-consed into an arena and states are interned, so a state is an int: copying and rolling back
// are free, and transitions (state, byte) are memoized, which makes walking a token trie cheap.
// Not thread-safe: one thread at a time (the owner locks).
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "engine/grammar/grammar.h"

namespace ft::grammar {

using StateId = int32_t;
inline constexpr StateId kDeadState = -1;

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> grammar);
  ~Matcher();
  Matcher(const Matcher&) = delete;
  Matcher& operator=(const Matcher&) = delete;

  /** The state before any text. */
  StateId start() const { return start_; }

  /** The state after `byte` (UTF-8 text may stop inside a character), or kDeadState when no text of
   *  the grammar continues that way. Overlong forms, surrogates and bytes that can never occur in
   *  UTF-8 are rejected. Memoized per (state, byte). */
  StateId advance(StateId s, uint8_t byte);
  /** advance() over each byte of `bytes`; kDeadState as soon as one is rejected. */
  StateId advance(StateId s, std::string_view bytes);

  /** Whether the text leading to `s` is a whole string of the grammar (not inside a character). */
  bool complete(StateId s) const;
  /** Whether any byte may follow `s`. */
  bool can_continue(StateId s) const;
  /** Fewest bytes that make the text leading to `s` complete (0 when complete() holds). */
  uint32_t min_bytes_to_complete(StateId s);

  /** Number of interned states and stack nodes (for tests and memory reports). */
  size_t state_count() const;
  size_t node_count() const;
  const Grammar& grammar() const { return *grammar_; }

 private:
  struct Impl;
  std::shared_ptr<const Grammar> grammar_;
  std::unique_ptr<Impl> impl_;
  StateId start_ = kDeadState;
};

}  // namespace ft::grammar
