// TokenTrie::from_vocab, apart from the trie itself so that code without a tokenizer (the grammar's
// fuzz harness) links the trie alone.
#include <string>
#include <vector>

#include "engine/grammar/token_trie.h"
#include "tokenizer/vocab.h"

namespace ft::grammar {

std::shared_ptr<const TokenTrie> TokenTrie::from_vocab(const Vocab& vocab) {
  const int32_t n = vocab.n_tokens();
  std::vector<std::string> pieces(n);
  std::vector<uint8_t> usable(n);
  for (int32_t id = 0; id < n; ++id) {
    pieces[id] = vocab.piece(id);
    usable[id] = !vocab.is_special(id) && !vocab.is_eog(id);
  }
  return std::make_shared<const TokenTrie>(pieces, usable);
}

}  // namespace ft::grammar
