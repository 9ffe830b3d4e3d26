#pragma once
// Detokenizer: incremental decoding for streaming. Feeding ids one at a time returns exactly the
// text Vocab::decode gives for the whole sequence, split into chunks: bytes of an unfinished UTF-8
// character (byte-fallback or byte-level tokens) are held back until the character completes, and
// a sequence that cannot complete becomes U+FFFD exactly where decode puts it. The first piece's
// leading space is dropped for vocabularies that strip it (SentencePiece "▁Hello" -> "Hello") when
// the ids start a text; generated ids that continue a prompt keep it ("Once" + " upon"), those after
// a BOS-only prompt start the text ("Once upon a time").
#include <cstdint>
#include <span>
#include <string>

#include "tokenizer/vocab.h"

namespace ft {

/** True when `prompt` holds text (a token decode shows; control tokens such as BOS do not): tokens
 *  generated after it continue that text, so their Detokenizer takes starts_text = false. */
bool prompt_has_text(const Vocab& vocab, std::span<const int32_t> prompt);

class Detokenizer {
 public:
  /** `vocab` must outlive the detokenizer. `skip_special`: control tokens give no text.
   *  `starts_text`: the ids begin a text (decode's leading-space rule applies to the first piece);
   *  false for tokens generated after a prompt, whose text is appended to the prompt's. */
  explicit Detokenizer(const Vocab& vocab, bool skip_special = true, bool starts_text = true)
      : vocab_(&vocab), skip_special_(skip_special), starts_text_(starts_text), first_(starts_text) {}

  /** Feeds one token id; returns the newly complete text (valid UTF-8, possibly empty).
   *  Throws ft::Error(kInvalidArgument) for an id out of range (state unchanged). */
  std::string feed(int32_t id);

  /** Ends the stream: returns the held-back bytes, an unfinished sequence repaired to U+FFFD. The
   *  detokenizer is then ready for a new sequence (of the same kind: starting a text or not). */
  std::string flush();

  /** Bytes held back (an unfinished UTF-8 sequence), at most 3. */
  size_t pending_bytes() const { return pending_.size(); }

 private:
  const Vocab* vocab_;
  bool skip_special_;
  bool starts_text_;
  bool first_;
  std::string pending_;
};

}  // namespace ft
