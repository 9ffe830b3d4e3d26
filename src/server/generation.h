#pragma once
// What the two generation endpoints share: the context-length check and submission to the engine, the
// blocking wait of a non-streaming response, and the SSE pump of a streaming one (a disconnected
// client cancels its request), plus the usage block and finish reasons.
#include <memory>
#include <string>
#include <vector>

#include "server/http_types.h"
#include <nlohmann/json.hpp>

#include "server/api_types.h"
#include "server/context.h"
#include "server/request_stream.h"

namespace ft::server {

struct Submitted {
  uint64_t id = 0;
  std::shared_ptr<RequestStream> stream;
  int32_t prompt_tokens = 0;
  std::shared_ptr<StreamWaker> waker;  // shared by the choices of one request (n > 1); null for one
};

/** The token ids of a completions prompt: token ids as given (400 naming the first one outside the
 *  vocabulary), or the text encoded with the model's special tokens (BOS) and control-token parsing. */
std::vector<int32_t> completion_prompt_ids(const Vocab& vocab, const CompletionRequest& r);

/** Checks prompt + max_tokens against the context limit (400 context_length_exceeded naming the
 *  numbers; `what` is "messages" or "prompt" for the wording and param) and logit_bias ids against the
 *  vocabulary (400 naming logit_bias), fills the default max_tokens (the rest of the context), and
 *  submits. Throws ApiException / ft::Error (overload -> 503). */
Submitted submit_generation(ServerContext& ctx, std::vector<int32_t> prompt, const GenerationParams& gen,
                            const char* what);

/** Submits gen.n choices of `prompt` with submit_generation's checks, each its own engine request:
 *  choice i > 0 starts once choice 0 has computed the prompt and shares its pages
 *  (GenerationRequest::after), and samples with seed + i when a seed is set (the request's or the
 *  server's default), so seeded choices differ and repeat. With n > 1 the choices' streams share one
 *  StreamWaker. If a choice is refused (overload), those already submitted are cancelled and the error
 *  is rethrown. */
std::vector<Submitted> submit_choices(ServerContext& ctx, std::vector<int32_t> prompt, const GenerationParams& gen,
                                      const char* what);

/** llama.cpp's generation_settings object for `gen`: n_predict (-1: to the context's end), temperature,
 *  top_k, top_p, min_p, seed (-1: none), stop, ignore_eos (POST /completion's reply; GET /props'
 *  default_generation_settings.params). */
nlohmann::ordered_json llama_generation_settings(const GenerationParams& gen);

/** Blocks until the request finishes; returns all of its text and log-probabilities and the finish.
 *  When the client hangs up meanwhile (HttpRequest::client_gone, set by the transport, looked at every
 *  20 ms), the request is cancelled, as a streaming one is, and finishes within a step. The generation
 *  goes into req's trace (trace_generation). */
StreamUpdate collect(ServerContext& ctx, const Submitted& s, const HttpRequest& req);
/** collect() for the choices of one request: one update each, in order; a client that hung up cancels
 *  them all. */
std::vector<StreamUpdate> collect(ServerContext& ctx, const std::vector<Submitted>& subs, const HttpRequest& req);

/** Writes the generation of a request's choices into `trace` for its log line: `model`; choice 0's
 *  prompt and cached tokens (cached only once the engine finished it); all choices' sampled tokens; the
 *  time from trace.start to the first token of any choice; the decode rate, tokens after the first over
 *  the time from the first token to the last; and the finish reasons ("stop", "length", "error",
 *  "cancelled"; distinct ones joined by ','). A choice the engine has not finished yet (the client went
 *  away and its cancel is on the way) counts what its stream saw and finished "cancelled". */
void trace_generation(RequestTrace& trace, const std::string& model, const std::vector<Submitted>& subs);

/** The usage of n choices: choice 0's prompt and cached tokens (the prompt is counted once, as OpenAI
 *  does), the completion tokens of all. */
FinishInfo total_usage(const std::vector<StreamUpdate>& choices);

/** Builds one endpoint's SSE chunks ("data: {...}\n\n" strings). */
class SseFormatter {
 public:
  virtual ~SseFormatter() = default;
  /** Chunks sent as soon as the stream opens (e.g. the assistant role). */
  virtual std::vector<std::string> begin() = 0;
  /** Chunks for new text / log-probabilities (called only when there is some). */
  virtual std::vector<std::string> update(const StreamUpdate& u) = 0;
  /** Final chunks (finish reason, or an error event) for the update that ended the request
   *  (`end.finish`, `end.stop_index`; its text and log-probabilities went to update() already). */
  virtual std::vector<std::string> finish(const StreamUpdate& end) = 0;
  /** A chunk of its own that carries the usage, sent after every choice finished (OpenAI's
   *  stream_options.include_usage; `total`: total_usage of the choices); none by default. */
  virtual std::vector<std::string> usage(const FinishInfo& total) { (void)total; return {}; }
  /** Whether "data: [DONE]" follows finish()'s chunks (OpenAI's end marker; an Anthropic stream ends
   *  with its message_stop event instead). */
  virtual bool done_marker() const { return true; }
};

/** Turns `res` into an SSE stream fed by the request's updates. When the client goes away (a write
 *  fails; an SSE comment is written after keepalive_ms of silence to find out) the request is cancelled.
 *  When the stream is over, the generation goes into req's trace (trace_generation). */
void start_sse(ServerContext& ctx, const HttpRequest& req, HttpResponse& res, Submitted s,
               std::shared_ptr<SseFormatter> fmt);
/** One SSE stream for the choices of a request (n > 1): `fmts[i]` formats choice i (its chunks carry
 *  index i); chunks go out as each choice has news, then fmts[0]'s usage() of the total and [DONE].
 *  A choice that fails sends its error event and ends the stream (the others are cancelled); a client
 *  that went away cancels them all. */
void start_sse(ServerContext& ctx, const HttpRequest& req, HttpResponse& res, std::vector<Submitted> subs,
               std::vector<std::shared_ptr<SseFormatter>> fmts);

/** "data: <json>\n\n". */
std::string sse_data(const nlohmann::ordered_json& j);
std::string sse_data(const nlohmann::json& j);
/** "event: <name>\ndata: <json>\n\n" (a named event, as Anthropic's streams send them). */
std::string sse_event(const char* name, const nlohmann::ordered_json& j);

/** {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details": {"cached_tokens"}}. */
nlohmann::ordered_json usage_json(const FinishInfo& f);

/** The fields every response object and chunk of a generation endpoint starts with: {"id", "object"
 *  (e.g. "chat.completion.chunk"), "created" (unix seconds), "model", "system_fingerprint": null}. */
nlohmann::ordered_json response_head(const std::string& id, const char* object, int64_t created,
                                     const std::string& model);

/** The usage chunk that ends a stream with stream_options.include_usage: `head` (response_head) with
 *  "choices": [] and "usage" (usage_json), as an SSE event. */
std::string sse_usage_chunk(nlohmann::ordered_json head, const FinishInfo& f);

/** OpenAI finish_reason: "stop"; "length" for max_tokens, the context limit and requests cancelled
 *  by a server shutdown (truncated output; OpenAI has no "abort"); "error" (never sent: errors become an
 *  error body or event, see generation_error). */
const char* finish_reason_text(FinishReason r);

/** Log-probabilities are finite in JSON: -inf becomes -9999. */
float json_logprob(float lp);

/** Error response of a request that failed after it was accepted (finish reason kError). */
ApiError generation_error(const FinishInfo& f);

}  // namespace ft::server
