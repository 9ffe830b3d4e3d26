#pragma once
// UTF-8 helpers for the tokenizer: decoding one code point, validation, the longest prefix that
// is safe to stream, and lossy repair (invalid bytes -> U+FFFD). Byte sequences follow RFC 3629;
// the repair replaces each "maximal subpart" of an ill-formed sequence with one U+FFFD, as the
// Unicode standard (ch. 3, "U+FFFD Substitution of Maximal Subparts") and Rust's from_utf8_lossy do.
// Also the byte-wise replace_all the normalizer and the vocab share.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ft {

/** U+FFFD REPLACEMENT CHARACTER in UTF-8. */
inline constexpr std::string_view kUtf8Replacement = "\xEF\xBF\xBD";

/** Result of looking at the bytes starting at one position. */
struct Utf8Char {
  enum Status { kValid, kIncomplete, kInvalid } status = kInvalid;
  uint32_t cp = 0;  // the code point when kValid
  size_t len = 0;   // kValid: bytes of the character; kIncomplete: bytes present (a valid prefix
                    // that ran into the end of input); kInvalid: bytes of the maximal subpart (>= 1)
};

/** Decodes the character at the start of `s` (must be non-empty). Overlong forms, surrogates and
 *  code points above U+10FFFF are invalid. */
Utf8Char utf8_decode(std::string_view s);

/** Number of bytes in the sequence a lead byte announces (1 for ASCII and for stray bytes). */
inline size_t utf8_seq_len(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

/** Appends the UTF-8 encoding of code point `cp` (<= U+10FFFF) to `out`. */
void utf8_append(std::string& out, uint32_t cp);

/** Byte offset of the first invalid or incomplete sequence in `s`, or npos when `s` is valid UTF-8. */
size_t utf8_first_invalid(std::string_view s);

/** Lossy repair of `s` into `out` (appended): valid characters are copied, each maximal ill-formed
 *  subpart becomes U+FFFD. When `final` is false a trailing incomplete-but-valid prefix is left
 *  unconsumed. Returns the number of bytes of `s` consumed (== s.size() when `final`). */
size_t utf8_repair(std::string_view s, std::string& out, bool final);

/** Whole-string lossy repair (final). */
inline std::string utf8_repaired(std::string_view s) {
  std::string out;
  utf8_repair(s, out, true);
  return out;
}

/** Replaces every non-overlapping occurrence of `from` in `s` with `to`, left to right, byte-wise
 *  (a no-op when `from` is empty). */
void replace_all(std::string& s, std::string_view from, std::string_view to);

}  // namespace ft
