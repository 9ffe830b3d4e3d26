#pragma once
// Structured outputs (issue 38): a request's response_format / json_schema turned into the engine's
// TokenConstraint. The schema is compiled to a grammar (server/json_schema_grammar.h) and bound to the
// served vocabulary's token trie (built once, on the first constrained request); compiled grammars are
// kept for the last kCachedGrammars distinct schemas, so an agent that sends the same schema every turn
// reuses the masks its earlier requests computed. A grammar built by the route (kGrammar: a forced tool
// call's) is cached alike, bound to a trie of the vocabulary in which the control tokens its markers name
// are usable (one trie per set of such tokens, kept for the server's life: one per tool-call format).
#include <cstddef>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/grammar/grammar_constraint.h"
#include "server/api_types.h"
#include "tokenizer/vocab.h"

namespace ft::server {

class StructuredOutputs {
 public:
  /** Distinct schemas whose compiled grammars (and mask caches) are kept. */
  static constexpr size_t kCachedGrammars = 32;

  /** The constraint of `gen` (null when it asks for none) over `vocab`'s tokens: its json_object or
   *  json_schema compiled, or its prebuilt grammar (kGrammar) with gen.grammar_control_tokens usable.
   *  Throws ApiException 400 naming gen.json_schema_param for a schema that cannot be compiled
   *  (json_schema_grammar). */
  std::shared_ptr<TokenConstraint> constraint(const Vocab& vocab, const GenerationParams& gen);

 private:
  std::shared_ptr<grammar::CompiledGrammar> compiled(const Vocab& vocab, const GenerationParams& gen);

  std::mutex mu_;
  const Vocab* trie_vocab_ = nullptr;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  // Tries with some control tokens usable, by their ids (sorted, comma-separated).
  std::unordered_map<std::string, std::shared_ptr<const grammar::TokenTrie>> control_tries_;
  std::shared_ptr<const grammar::TokenTrie> trie_with(const Vocab& vocab, const std::vector<std::string>& control);
  std::list<std::string> lru_;  // keys, most recent first
  std::unordered_map<std::string, std::pair<std::shared_ptr<grammar::CompiledGrammar>, std::list<std::string>::iterator>>
      grammars_;
};

}  // namespace ft::server
