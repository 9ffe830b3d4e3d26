#pragma once
// Test helpers: the vocabularies under $FT_SHARED_DIR/data (loaded once per test binary) and
// llama.cpp's tokenizer test vectors (test-tokenizer-0 format).
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/vocab.h"

namespace ft::testing {

/** One llama.cpp vector file pair: ggml-vocab-NAME.gguf.inp / .out. */
struct VocabVectors {
  std::vector<std::string> inputs;             // test strings
  std::vector<std::vector<int32_t>> expected;  // ids per string (no BOS)
};

/** Reads `<dir>/ggml-vocab-<name>.gguf.inp` and `.out`. The .inp strings are separated by the marker
 *  line "__ggml_vocab_test__": each case is followed by "\n__ggml_vocab_test__\n" (llama.cpp
 *  tests/test-tokenizer-0.cpp); the .out has one line of space-separated ids per case. */
VocabVectors read_vocab_vectors(const std::string& name);

/** Names NAME of every ggml-vocab-NAME.gguf.inp in data/vocab (none when the folder is missing). */
std::vector<std::string> vocab_vector_names();

/** Vocabulary named like the vector files: "gpt-2" -> data/vocab/ggml-vocab-gpt-2.gguf through the
 *  GGUF reader; "llama-bpe" -> data/tokenizers/llama3.2 (encoder.json + vocab.bpe as GGUF-style
 *  metadata with pre "llama-bpe"); "tinyllama" -> the Llama-2 SPM vocab (same ids). Returns nullptr
 *  when no vocabulary file exists for `name`. Cached for the whole run. */
const Vocab* shared_vocab(const std::string& name);

/** Every vocabulary shared_vocab() can load, by name (for property tests). */
std::vector<std::string> loadable_vocab_names();

/** A ~2,400-character text mixing Latin, Cyrillic, Greek, CJK, Arabic, Hebrew, Devanagari, Thai,
 *  emoji (with ZWJ sequences), combining marks, code and whitespace runs. */
const std::string& mixed_script_text();

}  // namespace ft::testing
