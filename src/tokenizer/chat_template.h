#pragma once
// Chat templates: turn a conversation (OpenAI-style messages, tools, flags) into the prompt text a
// model was trained on, by rendering the model's Jinja template exactly as Hugging Face transformers'
// apply_chat_template(tokenize=False) does. The template is parsed once at construction.
//
// Where the template comes from (first found wins): an explicit file (--chat-template), GGUF metadata
// `tokenizer.chat_template`, a Hugging Face folder's chat_template.jinja, chat_template.json, or
// tokenizer_config.json `chat_template` (a string, or a list of {name, template} where "default" is
// used); ChatML when the model has none.
#include <ctime>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/template.h"

namespace ft {

/** The ChatML template used when a model ships none (<|im_start|>role\ncontent<|im_end|>\n ...). */
extern const char* const kChatMLTemplate;

class ChatTemplate {
 public:
  /** Parses `source`. bos_token/eos_token become the template variables of those names; nullopt
   *  leaves the variable undefined, as transformers does for a tokenizer without that token.
   *  Throws jinja::TemplateError (an ft::Error) naming the line when the template does not parse. */
  explicit ChatTemplate(std::string_view source, std::optional<std::string> bos_token = std::nullopt,
                        std::optional<std::string> eos_token = std::nullopt);

  /** Renders a conversation.
   *  messages: array of {role: system|developer|user|assistant|tool, content: string | null |
   *            [{type: "text", text}], tool_calls?, reasoning_content?, ...} (passed through as is);
   *  tools: array of tool definitions, or null (the template sees None);
   *  extra: object of further template variables (enable_thinking, reasoning_effort, ...; may
   *         override bos_token/eos_token).
   *  Use nlohmann::ordered_json so key order survives into tojson and items().
   *  Throws jinja::TemplateError: for raise_exception(msg) in the template, what() == msg. */
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools = nullptr,
                     bool add_generation_prompt = false,
                     const nlohmann::ordered_json& extra = nlohmann::ordered_json::object(),
                     const jinja::RenderOptions& options = {}) const;

  /** Renders a conversation file's object: `messages`, optional `tools` and `add_generation_prompt`;
   *  every other top-level key (bos_token, enable_thinking, ...) becomes a template variable
   *  (the shape of shared/fixtures/chat/conversations/ *.json and `ft template --conversation`). */
  std::string render_conversation(const nlohmann::ordered_json& conversation,
                                  const jinja::RenderOptions& options = {}) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  jinja::Template template_;
  std::optional<std::string> bos_token_, eos_token_;
};

/** The template in a tokenizer_config.json object: `chat_template` as a string, or a list of
 *  {name, template} (picks `name`, else "default"). nullopt when absent. */
std::optional<std::string> chat_template_from_tokenizer_config(const nlohmann::json& config,
                                                               std::string_view name = "default");

/** The template of a Hugging Face model folder: chat_template.jinja, else chat_template.json's
 *  `chat_template`, else tokenizer_config.json's. nullopt when none. Throws ft::Error for unreadable
 *  or malformed files. */
std::optional<std::string> find_chat_template(const std::string& model_dir);

/** A special-token entry of tokenizer_config.json ("<s>" or {"content": "<s>", ...}) as text. */
std::string special_token_text(const nlohmann::json& entry);

/** Parses "2026-11-30" or "2026-11-30T12:34:56" into a local broken-down time (for pinning the
 *  clock strftime_now() reads). Throws ft::Error(kInvalidArgument) when malformed. */
std::tm parse_clock(std::string_view text);

}  // namespace ft
