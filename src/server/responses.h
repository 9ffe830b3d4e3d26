#pragma once
// OpenAI's Responses API (POST /v1/responses) over the chat pipeline: a Responses body becomes the
// ChatRequest a /v1/chat/completions body with the same conversation would give, so the template,
// sampling, tool-call parsing and reasoning split are chat's (chat_reply.h). Input items map onto
// chat messages: message items by role, `function_call` items onto the assistant's tool_calls,
// `function_call_output` items onto tool messages, `reasoning` items onto the next assistant turn's
// reasoning_content; `instructions` is a leading system message.
#include <string>

#include <nlohmann/json.hpp>

#include "server/api_types.h"
#include "server/errors.h"
#include "server/response_store.h"

namespace ft::server {

/** A validated Responses request. */
struct ResponsesRequest {
  ChatRequest chat;
  /** The whole conversation as Responses input items (the previous response's input and output items
   *  first, then this request's `input`; a string input is one user message item), without
   *  `instructions`: what a stored response keeps for a later previous_response_id. */
  nlohmann::ordered_json input_items = nlohmann::ordered_json::array();
  /** The request fields every response object repeats, in OpenAI's order and with its defaults:
   *  instructions, max_output_tokens, parallel_tool_calls, previous_response_id, reasoning {effort,
   *  summary}, store, temperature, text {format}, tool_choice, tools (as sent), top_p, truncation,
   *  user (when given), metadata. */
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
  bool store = true;
  /** false: at most one function call is returned (the first the reply makes; decoding is not
   *  constrained, so later ones are dropped). */
  bool parallel_tool_calls = true;
};

/** Validates a /v1/responses body (OpenAI's Responses API reference; field names as there):
 *  - `input`: a string (one user message) or a list of items: messages (role user, system, developer
 *    or assistant; content a string or input_text / output_text / refusal parts; image, file and
 *    audio parts refused as the model is text-only), `function_call` {call_id, name, arguments},
 *    `function_call_output` {call_id, output: a string or input_text parts}, `reasoning` (its
 *    `content` reasoning_text, as this server returns it; a summary or encrypted_content alone
 *    carries no text and is dropped). Other item types (hosted tools' calls, item_reference) are
 *    refused.
 *  - `instructions`; `previous_response_id` (a response kept in `store`: its input and output items
 *    come first; unknown: 400 code previous_response_not_found); `store` (default true).
 *  - `tools` (function tools {type: "function", name, description, parameters, strict}; hosted tools
 *    refused), `tool_choice` ("auto", "none", "required", {type: "function", name}),
 *    `parallel_tool_calls`.
 *  - `max_output_tokens`, `temperature`, `top_p`, `reasoning` {effort (chat's reasoning_effort),
 *    summary (accepted; no summaries are written)}, `text` {format: text | json_object |
 *    json_schema {name, schema, strict, description} (chat's response_format, so what chat supports
 *    Responses supports), verbosity (only "medium", the one every model has)}.
 *  - `stream`, `stream_options` (include_obfuscation: accepted, no obfuscation is added),
 *    `metadata` (up to 16 string pairs), `user`, `service_tier`, `safety_identifier`,
 *    `prompt_cache_key`, `prompt_cache_retention` (accepted; prefix caching is automatic),
 *    `truncation` ("disabled"; "auto" is accepted and works as "disabled": an input over the context
 *    gets a 400), `include` (accepted except "message.output_text.logprobs": reasoning items carry
 *    their text in `content`, so "reasoning.encrypted_content" adds nothing).
 *  - Refused: `background`, `conversation`, `prompt`, `context_management`, `top_logprobs` > 0, and
 *    Chat Completions spellings (messages, max_tokens, response_format, reasoning_effort, ...) with
 *    the Responses field to use.
 *  Other fields are read as parse_chat_request reads them (its sampling extensions: top_k, min_p,
 *  seed, stop, chat_template_kwargs, ...). Refusals are ApiException 400 naming the field as the
 *  Responses API spells it ("input[2].call_id", "text.format", "max_output_tokens"). */
ResponsesRequest parse_responses_request(const nlohmann::ordered_json& body, ResponseStore& store);

/** `e` with the chat field names that have another name in the Responses API (messages -> input,
 *  max_completion_tokens -> max_output_tokens, response_format -> text.format, reasoning_effort ->
 *  reasoning.effort) renamed in its param and message: for refusals of the chat pipeline (the
 *  chat parse, the template, the context-length check) reaching a Responses client. */
ApiError with_responses_names(ApiError e);

}  // namespace ft::server
