#include "server/structured_output.h"

#include "server/errors.h"
#include "server/json_schema_grammar.h"

namespace ft::server {

std::shared_ptr<grammar::CompiledGrammar> StructuredOutputs::compiled(const Vocab& vocab, const GenerationParams& gen) {
  const bool object = gen.structured == GenerationParams::Structured::kJsonObject;
  const std::string key = object ? std::string("json_object") : "schema:" + gen.json_schema.dump();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (trie_vocab_ != &vocab) {  // the first constrained request (or another vocabulary: tests)
      trie_ = grammar::TokenTrie::from_vocab(vocab);
      trie_vocab_ = &vocab;
      grammars_.clear();
      lru_.clear();
    }
    if (auto it = grammars_.find(key); it != grammars_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
  }
  // Compiled outside the lock (a large schema takes a while; a request with a bad one throws here).
  std::shared_ptr<const grammar::Grammar> g;
  if (object) {
    grammar::GrammarBuilder b;
    const grammar::RuleId root = json_object_rule(b);
    g = std::make_shared<const grammar::Grammar>(b.build(root));
  } else {
    g = json_schema_grammar(gen.json_schema, gen.json_schema_param);
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = grammars_.find(key); it != grammars_.end()) return it->second.first;  // raced: theirs
  auto c = std::make_shared<grammar::CompiledGrammar>(std::move(g), trie_);
  lru_.push_front(key);
  grammars_.emplace(key, std::make_pair(c, lru_.begin()));
  while (grammars_.size() > kCachedGrammars) {
    grammars_.erase(lru_.back());
    lru_.pop_back();
  }
  return c;
}

std::shared_ptr<TokenConstraint> StructuredOutputs::constraint(const Vocab& vocab, const GenerationParams& gen) {
  if (gen.structured == GenerationParams::Structured::kNone) return nullptr;
  return std::make_shared<grammar::GrammarConstraint>(compiled(vocab, gen));
}

}  // namespace ft::server
