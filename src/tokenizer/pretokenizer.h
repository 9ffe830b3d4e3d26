#pragma once
// PreTokenizer: splits normalized text into words before the model (BPE) runs, following Hugging
// Face tokenizers' pre_tokenizers (Split with a regex and a delimiter behaviour, ByteLevel,
// Metaspace, Sequence) and llama.cpp's regex lists for GGUF `tokenizer.ggml.pre` values (each list
// = a Sequence of Split(regex, Isolated)). ByteLevel here only splits (GPT-2 regex) and adds the
// prefix space; the byte -> unicode mapping happens in the BPE model (see byte_level.h).
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace ft {

/** What happens to the matched part of a Split (tokenizers' SplitDelimiterBehavior). */
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

/** GPT-2's pre-tokenizer regex (the one ByteLevel(use_regex=true) uses). */
inline constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class PreTokenizer {
 public:
  /** Split by regex (or by a literal string when `literal`). `invert`: the pattern describes the
   *  pieces to keep rather than the delimiters. Throws ft::Error for a bad pattern. */
  void add_split(std::string_view pattern, SplitBehavior behavior, bool invert = false, bool literal = false);
  /** ByteLevel: optional prefix space on each piece, optional split by the GPT-2 regex. */
  void add_byte_level(bool add_prefix_space, bool use_regex);
  /** Metaspace: ' ' -> `replacement`; prepend it per `prepend` ("always", "first", "never");
   *  split before each replacement when `split`. Throws ft::Error for an unknown scheme. */
  void add_metaspace(std::string replacement, std::string_view prepend, bool split);
  bool empty() const { return steps_.empty(); }

  /** Splits `text` into non-empty words appended to `words`. Views point into `text` or into
   *  strings appended to `arena` (keep both alive while using the words). `at_start`: `text`
   *  begins at offset 0 of the caller's input (Metaspace "first" prepends only there). */
  void run(std::string_view text, bool at_start, std::vector<std::string_view>& words,
           std::deque<std::string>& arena) const;

 private:
  struct Step {
    enum Kind { kSplit, kByteLevel, kMetaspace } kind = kSplit;
    std::shared_ptr<const Regex> regex;  // kSplit; kByteLevel with use_regex
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
    std::string replacement;        // kMetaspace
    int prepend = 0;                // kMetaspace: 0 always, 1 first, 2 never
    bool split = true;              // kMetaspace
  };
  std::vector<Step> steps_;
};

/** The pre-tokenizer llama.cpp uses for a GGUF `tokenizer.ggml.pre` value (llama-vocab.cpp). Known:
 *  default, llama3/llama-bpe/llama-v3 (+dbrx, smaug-bpe, glm4, chatglm-bpe), qwen2 (+stablelm2,
 *  deepseek-r1-qwen, megrez), qwen35, deepseek-llm, deepseek-coder, deepseek-v3, falcon,
 *  gpt-2 (+mpt, olmo, phi-2, jais), starcoder (+refact, command-r, smollm, codeshell, exaone),
 *  gpt-4o (+llama4, minimax-m2), gemma4. Where llama.cpp rewrote a `(?i:...)` group for std::regex,
 *  the original tokenizer.json regex is used (PCRE2 has it). Throws ft::Error(kUnsupported) naming
 *  the value otherwise. */
PreTokenizer gguf_pre_tokenizer(std::string_view pre);

}  // namespace ft
