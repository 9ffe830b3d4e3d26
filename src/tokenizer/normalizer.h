#pragma once
// Normalizer: the text transformations Hugging Face tokenizers apply before pre-tokenization
// (tokenizers/src/normalizers): Unicode NFC/NFD/NFKC/NFKD and lowercasing through utf8proc,
// StripAccents (drop Mn marks), Prepend, Replace (literal or regex), in sequence.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace ft {

class Normalizer {
 public:
  enum class Kind { kNFC, kNFD, kNFKC, kNFKD, kLowercase, kStripAccents, kPrepend, kReplace };

  /** Appends one step. `a`: Prepend's text or Replace's pattern; `b`: Replace's content.
   *  `regex`: Replace's pattern is a regex. Throws ft::Error for a bad regex. */
  void add(Kind kind, std::string a = {}, std::string b = {}, bool regex = false);
  bool empty() const { return steps_.empty(); }

  /** Applies every step to `text` (valid UTF-8) in order. An empty input stays empty (Prepend too). */
  std::string apply(std::string_view text) const;

 private:
  struct Step {
    Kind kind;
    std::string a, b;
    std::shared_ptr<const Regex> regex;
  };
  std::vector<Step> steps_;
};

}  // namespace ft
