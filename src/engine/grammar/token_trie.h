#pragma once
// TokenTrie: a vocabulary's token byte strings as a prefix tree, stored flat in preorder so a mask
// computation walks it with one loop and skips a whole subtree on the first byte the grammar rejects
// (the token-trie walk of llama.cpp's and XGrammar's token masks). Built once per vocabulary;
// immutable, so one instance serves every request on any thread.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ft {
class Vocab;
}

namespace ft::grammar {

class TokenTrie {
 public:
  struct Node {
    uint32_t end;        // index one past this node's subtree
    uint32_t tok_begin;  // tokens whose bytes end here: tokens()[tok_begin, tok_end)
    uint32_t tok_end;
    uint16_t depth;      // bytes from the root (1 for a first byte)
    uint8_t byte;
  };

  /** `pieces[id]`: the bytes token `id` adds to the text; `usable[id]` false for tokens a grammar
   *  never allows (control and end-of-generation tokens; empty pieces are never usable). Throws
   *  ft::Error(kInvalidArgument) when the spans differ in size or a piece is over 65,535 bytes. */
  TokenTrie(std::span<const std::string> pieces, std::span<const uint8_t> usable);

  /** The trie of `vocab`: Vocab::piece() bytes, with is_special() and is_eog() tokens unusable. */
  static std::shared_ptr<const TokenTrie> from_vocab(const Vocab& vocab);

  int32_t vocab_size() const { return static_cast<int32_t>(pieces_.size()); }
  std::string_view piece(int32_t id) const { return pieces_[id]; }
  bool usable(int32_t id) const { return usable_[id] != 0; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  /** Longest usable piece in bytes. */
  size_t max_depth() const { return max_depth_; }
  /** Whether every byte 0..255 is a usable single-byte token (then any text can be produced at one
   *  token a byte, the premise of TokenConstraint's budget rule). */
  bool has_all_single_bytes() const { return all_single_bytes_; }

 private:
  std::vector<std::string> pieces_;
  std::vector<uint8_t> usable_;
  std::vector<Node> nodes_;
  std::vector<int32_t> tokens_;
  size_t max_depth_ = 0;
  bool all_single_bytes_ = false;
};

}  // namespace ft::grammar
