#pragma once
// WordPiece for GGUF `tokenizer.ggml.model = bert` vocabularies (llama.cpp stores word-initial
// pieces with a U+2581 prefix and continuations bare, instead of BERT's "##"). Pre-processing is
// Hugging Face's BertNormalizer + BertPreTokenizer: drop control characters, NFD + drop Mn marks
// and lowercase when asked, split on whitespace, isolate punctuation (Unicode P*, ASCII S*) and CJK
// ideographs; then greedy longest-match per word, the whole word becoming [UNK] when a piece is
// missing (llama.cpp llm_tokenizer_wpm_session).
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/token_table.h"

namespace ft {

struct WordPieceOptions {
  bool lowercase = true;
  bool strip_accents = true;
  size_t max_token_len = 0;  // longest token text in bytes
};

/** Encodes `text` (valid UTF-8) and appends ids to `out`; a word with no full match becomes `unk`. */
void wordpiece_encode(const TokenTable& table, std::string_view text, const WordPieceOptions& opts, int32_t unk,
                      std::vector<int32_t>& out);

}  // namespace ft
