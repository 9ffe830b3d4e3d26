#pragma once
// Regex: a compiled PCRE2 pattern (UTF + UCP, JIT when available) used by pre-tokenizers to find
// every match in a piece of text. Unicode classes (\p{L}, \p{N}, \s with UCP) come from PCRE2's
// own tables. `$`/`^` are line anchors (PCRE2_MULTILINE), as in Oniguruma's Ruby syntax that
// Hugging Face tokenizers uses. Thread-safe: the compiled code is shared, match data is per thread.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ft {

class Regex {
 public:
  /** Compiles `pattern` (UTF-8). `literal`: match the pattern text itself (PCRE2_LITERAL).
   *  Throws ft::Error(kInvalidArgument) with PCRE2's message and the offset in the pattern. */
  explicit Regex(std::string_view pattern, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /** Appends the byte ranges [begin, end) of successive non-overlapping matches in `text` (valid
   *  UTF-8) to `out`. Empty matches are reported too (the search then moves on by one character).
   *  Throws ft::Error(kInvalidArgument) when PCRE2 fails (e.g. JIT stack or match limit exceeded). */
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;
};

}  // namespace ft
