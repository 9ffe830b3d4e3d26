#pragma once
// Splitting input text around special / added tokens before normal tokenization. Tokens are
// matched as whole strings, leftmost-longest (Hugging Face tokenizers' AddedVocabulary uses
// Aho-Corasick LeftmostLongest); control and unknown tokens only when the caller allows special
// tokens, user-defined (added, non-special) tokens always, as llama.cpp's tokenizer_st_partition does.
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/token_table.h"

namespace ft {

/** A piece of the input: plain text (token < 0) or one matched special token. */
struct Fragment {
  std::string_view text;  // the text, or the matched token's text in the input
  int32_t token = -1;
  size_t offset = 0;      // byte offset of `text` in the input
};

class SpecialTokenMatcher {
 public:
  /** Indexes every token of `table` with kControl, kUnknown or kUserDefined and non-empty text. */
  void build(const TokenTable& table);

  /** Splits `text` into fragments (in order, empty text fragments dropped). `parse_special`: control
   *  and unknown tokens are matched too, except where such a match would overlap one of `literal`'s
   *  byte ranges [begin, end) (sorted, disjoint: text that only spells a control token, such as a
   *  user's message in a chat prompt). kLstrip/kRstrip tokens drop adjacent whitespace from the
   *  neighbouring text; kSingleWord tokens match only between non-word characters. */
  void partition(std::string_view text, bool parse_special, std::vector<Fragment>& out,
                 std::span<const std::pair<size_t, size_t>> literal = {}) const;

 private:
  struct Entry {
    std::string_view text;  // points into the TokenTable (keep it alive and unmoved)
    int32_t id;
    uint32_t attr;
  };
  std::vector<std::vector<Entry>> by_first_byte_ = std::vector<std::vector<Entry>>(256);
};

}  // namespace ft
