#pragma once
// TokenTable: the id <-> text table of a vocabulary with per-token scores and attributes. Shared by
// the BPE, SentencePiece and WordPiece encoders. Attribute bits follow llama.cpp's llama_token_attr
// (GGUF tokenizer.ggml.token_type: 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte).
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace ft {

namespace token_attr {
inline constexpr uint32_t kNormal = 1u << 0;
inline constexpr uint32_t kUnknown = 1u << 1;
inline constexpr uint32_t kControl = 1u << 2;       // special: matched in text only with parse_special
inline constexpr uint32_t kUserDefined = 1u << 3;   // added token: always matched as a whole
inline constexpr uint32_t kUnused = 1u << 4;
inline constexpr uint32_t kByte = 1u << 5;          // <0xXX> byte-fallback token
inline constexpr uint32_t kLstrip = 1u << 6;        // absorbs whitespace on its left when matched
inline constexpr uint32_t kRstrip = 1u << 7;        // absorbs whitespace on its right when matched
inline constexpr uint32_t kSingleWord = 1u << 8;    // matched only when not inside a word
}  // namespace token_attr

struct TokenData {
  std::string text;   // as stored in the vocabulary (byte-level or U+2581-escaped form)
  float score = 0.0f;  // SentencePiece log-probability; 0 for BPE
  uint32_t attr = token_attr::kNormal;
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

/** Dense table of tokens, ids 0..size()-1, plus a text -> id index. */
struct TokenTable {
  std::vector<TokenData> tokens;
  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> index;

  int32_t size() const { return static_cast<int32_t>(tokens.size()); }
  /** Id of the token whose stored text is exactly `text`, or -1. */
  int32_t find(std::string_view text) const {
    auto it = index.find(text);
    return it == index.end() ? -1 : it->second;
  }
};

}  // namespace ft
