#pragma once
// TokenConstraint: what a request may generate next, as a set of allowed token ids (constrained
// decoding: JSON Schema / json_object response formats, required or named tool calls). The service asks
// for the set before each sampled token, the backend's sampler gives every id outside it -inf (a bit
// mask, SampleRow::mask_index), and the sampled token is fed back with accept(). End-of-generation ids
// are the service's business: they are allowed exactly when complete() holds, and a request whose
// constraint is complete with nothing else allowed ends there (finish reason stop).
//
// Implementations: engine/grammar/ (a grammar over the tokens' bytes, compiled from a JSON Schema by
// server/json_schema_grammar).
#include <cstdint>
#include <span>

namespace ft {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;

  /** Sets bit (id % 32) of word (id / 32) of `allowed` for every token id that may come next.
   *  `allowed` has (vocab_size + 31) / 32 words, all zero on entry; end-of-generation ids are never set
   *  here (see complete()). Returns the count of ids set. Called on the engine thread before each
   *  sampled token of the request; must not throw for a state accept() produced.
   *  `budget`: the tokens the request may still generate, this one included. When the value could no
   *  longer be finished within the budget at one token a byte, only tokens that bring its end closer are
   *  allowed, so a request cut by max_tokens still ends with a whole value whenever the budget allowed
   *  one at all. */
  virtual int64_t allowed(std::span<uint32_t> allowed, int64_t budget) = 0;

  /** Advances over the sampled token `id`. Returns false, and keeps its state, when `id` is not one of
   *  the allowed ids. */
  virtual bool accept(int32_t id) = 0;

  /** Whether the text accepted so far is complete (a whole value of the grammar): generation may end
   *  here, so end-of-generation ids are allowed. */
  virtual bool complete() const = 0;
};

}  // namespace ft
