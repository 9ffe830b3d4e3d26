#pragma once
// The reasoning of a thinking model's reply, split from its content (`--reasoning-format deepseek`):
// a reply that starts with `<think>` (optionally after whitespace) has reasoning up to `</think>`,
// and content after it (DeepSeek-R1 and Qwen3 / QwQ emit this form; the field is DeepSeek's
// `reasoning_content`, as vLLM's reasoning parsers and llama.cpp's `--reasoning-format deepseek`
// return it). A reply that does not start with the tag is all content. Templates that write `<think>`
// into the prompt themselves (so the reply starts inside the block) are not split.
#include <string>
#include <string_view>

namespace ft::server {

/** A piece of reply text, split. */
struct ReasoningSplit {
  std::string reasoning;
  std::string content;
  bool thought = false;  // the reply opened a <think> block (split_reasoning only)
};

/** Splits text as it streams in. push() returns what is known so far; text that may be the start of
 *  `<think>` or of `</think>` is held until known. finish() returns what is held (an unterminated
 *  block's text as reasoning). */
class ReasoningStream {
 public:
  ReasoningSplit push(std::string_view piece);
  ReasoningSplit finish();
  /** Whether the reply opened a <think> block. */
  bool opened() const { return opened_; }

 private:
  enum class State { kStart, kThinking, kContent };
  State state_ = State::kStart;
  std::string held_;
  bool strip_ = false;  // whitespace right after </think> is dropped until the content starts
  bool opened_ = false;
};

/** A whole reply. When it opened a <think> block, the reasoning and content have their surrounding
 *  whitespace trimmed; otherwise content is the text as it is. */
ReasoningSplit split_reasoning(std::string_view text);

}  // namespace ft::server
