#pragma once
// Request bodies -> native structs, with OpenAI-style validation. Every refusal is an ApiException
// (400 invalid_request_error) whose `param` names the field ("messages[2].content", "top_p") and whose
// message says what was expected. Nothing here throws anything else, whatever the body holds.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "server/api_types.h"

namespace ft::server {

/** Most nesting levels a request body may have (deeper bodies are refused before anything recurses). */
inline constexpr int kMaxJsonDepth = 64;

/** Most stop strings a request may carry (OpenAI's `stop`, Anthropic's `stop_sequences`): each is
 *  matched against every generated token's text, so their count bounds a step's cost. */
inline constexpr size_t kMaxStopStrings = 16;

/** Parses a JSON object body. Throws ApiException 400 for malformed JSON, nesting deeper than
 *  kMaxJsonDepth or a top level that is not an object. */
nlohmann::ordered_json parse_json_body(std::string_view body);

/** Validates a /v1/chat/completions body: messages (system, developer, user, assistant, tool; content a
 *  string, null or text parts; image/audio parts refused as the model is text-only), sampling fields
 *  (logit_bias included: keys token-id strings, values in [-100, 100]), response_format (text,
 *  json_object, json_schema: GenerationParams::structured), stop, n (only 1),
 *  logprobs/top_logprobs, stream/stream_options, chat_template_kwargs, tools. */
ChatRequest parse_chat_request(const nlohmann::ordered_json& body);

/** Validates an Anthropic /v1/messages body into the chat pipeline's form (the request a
 *  /v1/chat/completions body with the same conversation would give): `model` (required), `max_tokens`
 *  (required, >= 1, unless `count_only`: a /v1/messages/count_tokens body), `system` (a string or text
 *  blocks: a leading system message), `messages` (user / assistant turns, content a string or blocks:
 *  text; tool_use in assistant turns -> tool_calls with the input as JSON arguments; tool_result in
 *  user turns -> tool messages; thinking blocks -> the assistant's reasoning_content, redacted_thinking
 *  dropped; image / document refused as the model is text-only), `tools` (-> function tools),
 *  `tool_choice` (auto, any, tool with a known name, none: the reply stays text), `stop_sequences`, `temperature` [0, 1], `top_p`, `top_k`, `stream`, `metadata`
 *  (ignored). The OpenAI sampling extensions of parse_chat_request (seed, min_p, penalties, ...) are
 *  read too. Refusals name the field as Anthropic spells it ("messages[1].content[0].type"). */
ChatRequest parse_anthropic_request(const nlohmann::ordered_json& body, bool count_only);

/** The generation fields both OpenAI bodies share (all but logprobs, whose shapes differ): model,
 *  stream / stream_options, max_tokens / max_completion_tokens, sampling (temperature [0, 2], top_p,
 *  top_k, min_p, penalties, seed, min_tokens, logit_bias), response_format, ignore_eos, n, best_of,
 *  stop. */
GenerationParams parse_generation_params(const nlohmann::ordered_json& body);

/** Refuses (400 naming `where`) a content part of `type` (image, audio, document, ...): the model reads
 *  text only. */
[[noreturn]] void refuse_non_text(const std::string& where, const std::string& type);

/** Validates a /v1/completions body: prompt (a string, one-element list of strings, token ids, or a
 *  one-element list of token id lists), echo, logprobs (integer 0..20), sampling fields, logit_bias,
 *  response_format, stop, n. */
CompletionRequest parse_completion_request(const nlohmann::ordered_json& body);

/** max_tokens of a /v1/completions request that gives neither max_tokens nor max_completion_tokens. */
constexpr int32_t kCompletionDefaultMaxTokens = 16;

}  // namespace ft::server
