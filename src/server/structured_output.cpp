#include "server/structured_output.h"

#include <algorithm>

#include "server/errors.h"
#include "server/json_schema_grammar.h"

namespace ft::server {

std::shared_ptr<const grammar::TokenTrie> StructuredOutputs::trie_with(const Vocab& vocab,
                                                                     const std::vector<std::string>& control) {
  std::vector<int32_t> ids;
  for (const std::string& text : control) {
    const int32_t id = vocab.find(text);
    if (id >= 0 && vocab.is_special(id) && !vocab.is_eog(id)) ids.push_back(id);
  }
  if (ids.empty()) return trie_;  // the markers are text in this vocabulary
  std::sort(ids.begin(), ids.end());
  std::string key;
  for (int32_t id : ids) key += std::to_string(id) + ",";
  if (auto it = control_tries_.find(key); it != control_tries_.end()) return it->second;
  const int32_t n = vocab.n_tokens();
  std::vector<std::string> pieces(n);
  std::vector<uint8_t> usable(n);
  for (int32_t id = 0; id < n; ++id) {
    pieces[id] = vocab.piece(id);
    usable[id] = !vocab.is_special(id) && !vocab.is_eog(id);
  }
  for (int32_t id : ids) usable[id] = 1;
  auto trie = std::make_shared<const grammar::TokenTrie>(pieces, usable);
  control_tries_.emplace(key, trie);
  return trie;
}

std::shared_ptr<grammar::CompiledGrammar> StructuredOutputs::compiled(const Vocab& vocab, const GenerationParams& gen) {
  const bool object = gen.structured == GenerationParams::Structured::kJsonObject;
  const bool prebuilt = gen.structured == GenerationParams::Structured::kGrammar;
  const std::string key = object     ? std::string("json_object")
                          : prebuilt ? "grammar:" + gen.grammar_key
                                     : "schema:" + gen.json_schema.dump();
  std::shared_ptr<const grammar::TokenTrie> trie;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (trie_vocab_ != &vocab) {  // the first constrained request (or another vocabulary: tests)
      trie_ = grammar::TokenTrie::from_vocab(vocab);
      trie_vocab_ = &vocab;
      grammars_.clear();
      lru_.clear();
      control_tries_.clear();
    }
    if (auto it = grammars_.find(key); it != grammars_.end()) {
      lru_.splice(lru_.begin(), lru_, it->second.second);
      return it->second.first;
    }
    trie = prebuilt ? trie_with(vocab, gen.grammar_control_tokens) : trie_;
  }
  // Compiled outside the lock (a large schema takes a while; a request with a bad one throws here).
  std::shared_ptr<const grammar::Grammar> g;
  if (prebuilt) {
    g = gen.grammar;
  } else if (object) {
    grammar::GrammarBuilder b;
    const grammar::RuleId root = json_object_rule(b);
    g = std::make_shared<const grammar::Grammar>(b.build(root));
  } else {
    g = json_schema_grammar(gen.json_schema, gen.json_schema_param);
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (auto it = grammars_.find(key); it != grammars_.end()) return it->second.first;  // raced: theirs
  auto c = std::make_shared<grammar::CompiledGrammar>(std::move(g), std::move(trie));
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
