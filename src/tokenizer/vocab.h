#pragma once
// Vocab: a model's tokenizer. Built from GGUF metadata (`tokenizer.ggml.*`, as llama.cpp writes and
// reads it: llama-vocab.cpp) or from a Hugging Face tokenizer.json (+ tokenizer_config.json).
// Encodes text to token ids (special tokens only when allowed; BOS/EOS per the vocabulary's flags)
// and decodes ids back to text. Immutable after construction; encode/decode are thread-safe.
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/token_table.h"
#include "tokenizer/wordpiece.h"

namespace ft {

struct EncodeState;
class Checkpoint;

/** Tokenization algorithm of a vocabulary. */
enum class VocabType {
  kSpm,        // SentencePiece scores, byte fallback (GGUF "llama")
  kBpe,        // merges by rank; byte-level (GGUF "gpt2", HF ByteLevel) or on raw UTF-8 with byte fallback
  kWordPiece,  // greedy longest match (GGUF "bert")
};

struct EncodeOptions {
  bool add_special = true;     // add BOS/EOS (and SEP) as the vocabulary's flags ask
  bool parse_special = false;  // match control tokens ("<|im_start|>") in the text as single tokens
  /** With parse_special: byte ranges [begin, end) of the text (sorted, disjoint) where control tokens are
   *  not matched, so text there that spells one is tokenized as text (a chat prompt's message contents). */
  std::span<const std::pair<size_t, size_t>> literal = {};
};

class Vocab {
 public:
  /** From GGUF metadata: a JSON object of the file's key/values (Checkpoint::metadata()). Reads
   *  tokenizer.ggml.{model, pre, tokens, scores, token_type, merges, bos/eos/unknown/seperator/
   *  padding_token_id, add_bos_token, add_eos_token, add_space_prefix}. Throws ft::Error
   *  (kInvalidFile naming the key for a missing or mistyped field, kUnsupported for an unknown model
   *  or pre-tokenizer). */
  static Vocab from_gguf_metadata(const nlohmann::json& md);

  /** From a parsed Hugging Face tokenizer.json and, optionally, tokenizer_config.json (null when
   *  absent). Supports model BPE; normalizers NFC/NFD/NFKC/NFKD/Lowercase/StripAccents/Prepend/
   *  Replace/Sequence; pre-tokenizers ByteLevel/Split/Metaspace/Digits/Sequence; added tokens with
   *  special/lstrip/rstrip/single_word. Throws ft::Error(kUnsupported) naming the component otherwise,
   *  kInvalidFile for malformed fields. */
  static Vocab from_hf_json(const nlohmann::json& tokenizer, const nlohmann::json& config = nullptr);

  /** Reads `tokenizer_json` and, when it exists, tokenizer_config.json next to it. Throws
   *  ft::Error(kNotFound / kInvalidFile) naming the file. */
  static Vocab from_hf_file(const std::string& tokenizer_json);

  /** The tokenizer of an opened checkpoint: its GGUF metadata, or the tokenizer.json of a Hugging
   *  Face folder. Throws ft::Error(kNotFound) when the folder has no tokenizer.json. */
  static Vocab from_checkpoint(const Checkpoint& checkpoint);

  Vocab(const Vocab&) = delete;
  Vocab& operator=(const Vocab&) = delete;
  Vocab(Vocab&&) noexcept;
  Vocab& operator=(Vocab&&) noexcept;
  ~Vocab();

  /** Token ids of `text` (UTF-8). Throws ft::Error(kInvalidArgument) naming the byte offset when
   *  `text` is not valid UTF-8. */
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& opts = {}) const;

  /** Text of `ids`: the pieces' bytes concatenated, invalid UTF-8 repaired to U+FFFD, the leading
   *  space dropped for SentencePiece/Metaspace-style vocabularies. `skip_special`: control and
   *  unknown tokens give no text. Throws ft::Error(kInvalidArgument) for an id out of range. */
  std::string decode(std::span<const int32_t> ids, bool skip_special = true) const;

  /** Bytes token `id` contributes to decoded text (may be a partial UTF-8 sequence for byte tokens).
   *  Throws ft::Error(kInvalidArgument) for an id out of range. */
  const std::string& piece(int32_t id) const;
  /** True for control/unknown/unused tokens (hidden by decode(skip_special=true)). */
  bool is_special(int32_t id) const;
  /** Whether `text` holds the text of a control token (one encode() with parse_special would match). */
  bool spells_control_token(std::string_view text) const;
  /** True when decoding drops one leading space of the text (SentencePiece add_space_prefix,
   *  Metaspace/Strip decoders, WordPiece). */
  bool strips_leading_space() const { return strip_leading_space_; }
  /** True when `id` ends generation (EOS, EOT and tokens such as <|im_end|>, <|eot_id|>). */
  bool is_eog(int32_t id) const;
  const std::vector<int32_t>& eog_ids() const { return eog_; }

  int32_t n_tokens() const { return table_.size(); }
  /** Token data; throws ft::Error(kInvalidArgument) for an id out of range. */
  const TokenData& token(int32_t id) const;
  /** Id of the token whose stored text is `text`, or -1. */
  int32_t find(std::string_view text) const { return table_.find(text); }

  VocabType type() const { return type_; }
  const std::string& pre() const { return pre_; }
  int32_t bos() const { return bos_; }  // -1 when none
  int32_t eos() const { return eos_; }
  int32_t eot() const { return eot_; }
  int32_t unk() const { return unk_; }
  int32_t pad() const { return pad_; }
  int32_t sep() const { return sep_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }

 private:
  Vocab();
  void finalize();  // builds indexes, pieces, special matcher, EOG set; checks ids
  void encode_text(std::string_view text, bool at_start, std::vector<int32_t>& out, EncodeState& st) const;
  void encode_bpe_word(std::string_view word, std::vector<int32_t>& out, EncodeState& st) const;

  friend struct GgufVocabLoader;
  friend struct HfVocabLoader;

  VocabType type_ = VocabType::kBpe;
  std::string model_, pre_;
  TokenTable table_;
  std::vector<std::string> pieces_;  // decoded bytes per token
  BpeMerges merges_;
  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  SpecialTokenMatcher specials_;
  WordPieceOptions wordpiece_;

  enum class PieceDecode { kRaw, kByteLevel, kSpaceEscape };
  PieceDecode piece_decode_ = PieceDecode::kRaw;  // how a normal token's text becomes bytes
  std::string space_escape_ = "\xE2\x96\x81";  // kSpaceEscape: this string decodes to ' '
  bool byte_level_ = false;        // BPE on GPT-2 byte-level characters
  bool byte_fallback_ = false;     // unknown characters -> <0xXX> tokens
  bool ignore_merges_ = false;     // a word that is a token is taken whole (Llama 3)
  bool whole_newlines_ = false;    // a word of only '\n' that is a token is taken whole (Gemma 4)
  bool fuse_unk_ = false;          // consecutive unknowns -> one unk
  bool add_space_prefix_ = false;  // SPM: " " before the first text (and after special tokens)
  bool spm_split_words_ = false;   // SPM: merge word by word (no token spans a word start)
  bool strip_leading_space_ = false;
  bool add_bos_ = false, add_eos_ = false, add_sep_ = false;
  int32_t bos_ = -1, eos_ = -1, eot_ = -1, unk_ = -1, pad_ = -1, sep_ = -1;
  std::vector<int32_t> byte_tokens_;  // byte-level: token of each byte's character (-1 if none)
  std::vector<int32_t> eog_;
  std::vector<uint8_t> is_eog_;
};

}  // namespace ft
