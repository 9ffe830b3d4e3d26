#pragma once
// Native forms of the OpenAI request bodies, produced by request_parse.h. Route handlers work on these;
// JSON stays at the edge. Message lists stay JSON (ordered) because they go to the chat template as is,
// but only after validation and with text parts joined into plain strings.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/sampler.h"

namespace ft::grammar {
struct Grammar;
}

namespace ft::server {

/** Fields shared by /v1/chat/completions and /v1/completions. */
/** The most choices one request may ask for (`n`; OpenAI's own limit). */
inline constexpr int32_t kMaxChoices = 128;

struct GenerationParams {
  std::string model;                  // requested model name; empty: the served model
  std::optional<int32_t> max_tokens;  // max_tokens / max_completion_tokens / n_predict; none: up to the context limit
  /** The limit is llama.cpp's n_predict (none: -1, the context's end): no route default (completions'
   *  16) applies, and a limit past the context's end stops there instead of being refused. */
  bool from_n_predict = false;
  SamplingParams sampling;            // temperature (default 1), top_p, top_k, min_p, penalties, seed, min_tokens
  std::vector<std::string> stop;      // stop strings (excluded from the output unless include_stop_str)
  std::vector<int32_t> stop_token_ids;  // vLLM's: end generation (their text only with include_stop_str)
  bool include_stop_str = false;      // vLLM's include_stop_str_in_output
  bool stream = false;
  /** OpenAI's `n` (chat and completions, 1..kMaxChoices): choices generated from the prompt, each its own
   *  request in the engine; the later ones start once the first has computed the prompt and share its
   *  KV pages (GenerationRequest::after). With a seed, choice i samples with seed + i. */
  int32_t n = 1;
  /** `timeout` (seconds, FreeToken's): past it the request ends with finish_reason "length" (a queued
   *  one with no text); at most the server's --request-timeout when that is set. */
  std::optional<double> timeout_s;
  bool include_usage = false;         // stream_options.include_usage
  bool logprobs = false;              // chat: logprobs; completions: logprobs != null
  int32_t top_logprobs = 0;           // chat: top_logprobs; completions: the logprobs integer
  bool ignore_eos = false;
  /** The reply's text keeps control tokens (set by the chat routes when a tool-call format's markers
   *  are control tokens, e.g. <|python_tag|>, [TOOL_CALLS], gpt-oss's <|channel|>); false: they are
   *  dropped, as in any other reply. */
  bool keep_special_tokens = false;
  /** Structured output (constrained decoding): kJsonObject (response_format json_object) makes the reply
   *  a JSON object, kJsonSchema (response_format json_schema, llama.cpp's json_schema, vLLM's
   *  guided_json or structured_outputs.json) a value of `json_schema`. */
  enum class Structured { kNone, kJsonObject, kJsonSchema, kGrammar };
  Structured structured = Structured::kNone;
  nlohmann::ordered_json json_schema;  // kJsonSchema: the schema
  std::string json_schema_param;       // where the schema came from ("response_format.json_schema.schema")
  /** kGrammar: a grammar the route built (a forced tool call's, server/tool_call_grammar.h), kept in the
   *  compiled-grammar cache under `grammar_key`; the vocabulary's control tokens whose text is one of
   *  `grammar_control_tokens` may be generated where the grammar spells them. */
  std::shared_ptr<const grammar::Grammar> grammar;
  std::string grammar_key;
  std::vector<std::string> grammar_control_tokens;
  /** Text the server writes into the reply itself (a forced tool call's opening and closing): the
   *  reply's text starts with `reply_prefix` (written after the prompt, not generated), and
   *  `reply_suffix` follows the generated text when the request's constraint ended complete. */
  std::string reply_prefix, reply_suffix;
};

struct ChatRequest {
  GenerationParams gen;
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // validated; content strings or null
  nlohmann::ordered_json tools;                                     // null or array
  bool parse_tool_calls = false;  // tools given and tool_choice not "none": replies are split (tool_calls.h)
  /** tool_choice: kAuto (OpenAI "auto" or none given; Anthropic {type: "auto"}), kNone, kRequired
   *  (OpenAI "required", Anthropic {type: "any"}) or kNamed: one function, `tool_choice_name` (OpenAI
   *  {type: "function", function: {name}}, Anthropic {type: "tool", name}), whose calls alone the reply
   *  returns. */
  enum class ToolChoice { kAuto, kNone, kRequired, kNamed };
  ToolChoice tool_choice = ToolChoice::kAuto;
  std::string tool_choice_name;  // kNamed: the function (one of `tools`)
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;
  /** Text after the generation prompt that the reply continues (Anthropic: a final assistant turn;
   *  OpenAI route: the final assistant message with vLLM's continue_final_message); the reply holds
   *  only what follows it. */
  std::string assistant_prefill;
  /** Whether the reply's leading <think> block is split off (Anthropic's `thinking` enabled); unset:
   *  the server's --reasoning-format decides. */
  std::optional<bool> split_reasoning;
  /** Set by submit_chat: the rendered prompt ends inside an open reasoning block (the template wrote
   *  `<think>`), so the reply starts in the reasoning (reasoning.h, prompt_opens_reasoning). */
  bool reply_starts_in_reasoning = false;
};

struct CompletionRequest {
  GenerationParams gen;
  bool prompt_is_ids = false;
  std::string prompt_text;          // when !prompt_is_ids
  std::vector<int32_t> prompt_ids;  // when prompt_is_ids
  bool echo = false;
};

}  // namespace ft::server
