#pragma once
// SentencePiece-style encoding for GGUF `tokenizer.ggml.model = llama` vocabularies, with the
// semantics of llama.cpp's llm_tokenizer_spm_session (itself SentencePiece's BPE mode): start from
// UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is a token with the
// highest score (leftmost on ties), then emit each symbol's token or, when a character has none,
// its bytes as <0xXX> byte-fallback tokens.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/token_table.h"

namespace ft {

/** Encodes `text` (spaces already replaced by U+2581) and appends the ids to `out`. A byte with no
 *  <0xXX> token and no single-byte token becomes `unk` (skipped when unk < 0). `split_words`: the
 *  vocabulary has no token with U+2581 after another character (see spm_can_split_words), so the
 *  text is merged word by word (before each U+2581 that follows another character) with the same
 *  result, in less time and memory than one queue over the whole text. */
void spm_encode(const TokenTable& table, std::string_view text, int32_t unk, bool split_words,
                std::vector<int32_t>& out);

/** True when no token of `table` contains U+2581 right after a character other than U+2581: then no
 *  merge can cross the start of a word, and words are independent. */
bool spm_can_split_words(const TokenTable& table);

/** The token for byte `b`: "<0xXX>", else the one-byte token, else -1. */
int32_t spm_byte_token(const TokenTable& table, uint8_t b);

}  // namespace ft
