#pragma once
// The reasoning of a thinking model's reply, split from its content (DeepSeek's `reasoning_content`,
// as vLLM's reasoning parsers and llama.cpp's `--reasoning-format deepseek` return it). A format names
// the block's tags:
//   kThink   <think> ... </think>  (DeepSeek-R1 / V3.1, Qwen3 / QwQ / Qwen3.5, GLM-4.5+, MiniMax-M2,
//            Kimi-K2-Thinking: vLLM's "deepseek_r1", "qwen3", "glm45", "minimax_m2", "kimi_k2" parsers)
//   kGemma4  <|channel>thought ... <channel|>  (Gemma 4's thought channel: vLLM's "gemma4")
// A reply that starts with the open tag (optionally after whitespace) has reasoning up to the close
// tag and content after it; one that does not is all content. When the prompt itself ends inside an
// open block (the template wrote the open tag: Qwen3.5, DeepSeek-R1, DeepSeek-V3.1 and GLM-4.7 with
// thinking on, MiniMax-M2), the reply starts in the reasoning and the close tag switches to content
// (prompt_opens_reasoning picks that start). gpt-oss's harmony channels are split by its tool-call
// scanner (tool_calls.h, kHarmony), not here.
#include <optional>
#include <string>
#include <string_view>

namespace ft::server {

enum class ReasoningFormat { kNone, kThink, kGemma4 };

/** The reasoning format a chat template's model writes, from markers in its Jinja source: gpt-oss's
 *  `<|channel|>` → kNone (its channels are the tool-call scanner's); `<|channel>` → kGemma4; `<think>`
 *  or `</think>` → kThink; anything else → kNone. */
ReasoningFormat detect_reasoning_format(std::string_view template_source);

/** "none", "deepseek_r1" (kThink), "gemma4". */
const char* reasoning_format_name(ReasoningFormat f);

/** The format named `name`: reasoning_format_name, or a vLLM reasoning parser whose block is
 *  <think> ("qwen3", "deepseek_v3", "glm45", "minimax_m2", "kimi_k2", and llama.cpp's "deepseek"):
 *  nothing for another name. */
std::optional<ReasoningFormat> reasoning_format_from_name(std::string_view name);

/** Every accepted name, comma-separated (for an error that lists the valid names). */
std::string reasoning_format_names();

/** The tags that open and close the format's block ("" for kNone). */
struct ReasoningTags {
  std::string_view open, close;
};
ReasoningTags reasoning_tags(ReasoningFormat f);

/** Whether the format's tags are control tokens in its models' vocabularies (Gemma 4's <|channel> and
 *  <channel|>), which a reply's text drops unless asked to keep them (keep_special_tokens); <think> is
 *  text in DeepSeek's, Qwen's, GLM's, MiniMax's and Kimi's (a vocabulary that makes it a control token
 *  is caught by the caller, which asks the vocabulary about the tags). */
bool reasoning_tags_are_special(ReasoningFormat f);

/** Whether `prompt` (the rendered prompt text, the assistant's prefill included) ends inside an open
 *  block of format `f`: it ends with the open tag, trailing whitespace aside (`...<think>\n`); a
 *  closed empty block (`<think></think>`, thinking off) does not. */
bool prompt_opens_reasoning(std::string_view prompt, ReasoningFormat f);

/** A piece of reply text, split. */
struct ReasoningSplit {
  std::string reasoning;
  std::string content;
  bool thought = false;  // the reply opened a block, or started in one (split_reasoning only)
};

/** Splits text as it streams in. push() returns what is known so far; text that may be the start of
 *  the open or the close tag is held until known. finish() returns what is held (an unterminated
 *  block's text as reasoning). */
class ReasoningStream {
 public:
  /** `in_reasoning`: the prompt ended inside an open block (prompt_opens_reasoning), so the reply
   *  starts in the reasoning (an open tag the model writes again at its start is dropped). */
  explicit ReasoningStream(ReasoningFormat format = ReasoningFormat::kThink, bool in_reasoning = false);
  ReasoningSplit push(std::string_view piece);
  ReasoningSplit finish();
  /** Whether the reply opened a block (or started in one). */
  bool opened() const { return opened_; }

 private:
  enum class State { kStart, kStartInside, kThinking, kContent };
  ReasoningTags tags_;
  State state_ = State::kStart;
  std::string held_;
  bool strip_ = false;  // whitespace right after the close tag is dropped until the content starts
  bool opened_ = false;
};

/** A whole reply. When it opened a block (or started in one), the reasoning and content have their
 *  surrounding whitespace trimmed; otherwise content is the text as it is. */
ReasoningSplit split_reasoning(std::string_view text, ReasoningFormat format = ReasoningFormat::kThink,
                               bool in_reasoning = false);

}  // namespace ft::server
