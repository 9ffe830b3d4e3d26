// POST /completion: llama.cpp server's native completion endpoint, non-streaming and SSE streaming,
// for the scripts and clients written against it (llama.cpp tools/server/README.md, "POST /completion").
// The request takes the same fields as /v1/completions (prompt as text or token ids, n_predict,
// temperature, top_k, top_p, min_p, stop, seed, ...); without n_predict or max_tokens it runs to the
// end of the context, as llama.cpp's default n_predict of -1 does. The reply has llama.cpp's shape:
// {"content", "stop", "stop_type" ("eos", "word", "limit"), "stopping_word", "tokens_predicted",
// "tokens_evaluated", "tokens_cached", ...}; a stream is "data: {"content": ..., "stop": false}" events
// ending with one whose "stop" is true and which carries those totals (no [DONE] line, as in llama.cpp).
// As in llama.cpp, a negative temperature samples greedily and temperatures above 2 are taken (up to
// 100). Not supported here, so refused rather than ignored: n_probs (token probabilities), and the
// OpenAI route's echo and logprobs.
#include "server/generation.h"
#include "server/json_fields.h"
#include "server/request_parse.h"
#include "server/routes.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

namespace {

/** llama.cpp's stop_type: "word" (a stop string), "eos" (an end-of-generation token), "limit"
 *  (n_predict, the context's end, or a request ended by a shutdown). */
const char* stop_type(const StreamUpdate& end) {
  if (end.finish.reason != FinishReason::kStop) return "limit";
  return end.stop_index >= 0 ? "word" : "eos";
}

class LlamaCompletion {
 public:
  LlamaCompletion(const ServerContext& ctx, const GenerationParams& gen, std::string prompt)
      : ctx_(ctx), gen_(gen), prompt_(std::move(prompt)) {}

  /** One piece of content: {"index", "content", "tokens", "id_slot", "stop"}. */
  ojson piece(const std::string& text, bool stop) const {
    ojson j;
    j["index"] = 0;
    j["content"] = text;
    j["tokens"] = ojson::array();
    j["id_slot"] = 0;
    j["stop"] = stop;
    return j;
  }

  /** The last object: `piece(text, true)` plus the request's totals and settings. */
  ojson last(const std::string& text, const StreamUpdate& end) const {
    ojson j = piece(text, true);
    j["model"] = ctx_.model.name;
    j["tokens_predicted"] = end.finish.completion_tokens;
    j["tokens_evaluated"] = end.finish.prompt_tokens;
    j["tokens_cached"] = end.finish.cached_tokens;
    j["truncated"] = false;
    j["stop_type"] = stop_type(end);
    j["stopping_word"] = end.stop_index >= 0 ? gen_.stop[static_cast<size_t>(end.stop_index)] : std::string();
    j["prompt"] = prompt_;
    j["has_new_line"] = text.find('\n') != std::string::npos;
    j["generation_settings"] = llama_generation_settings(gen_);
    return j;
  }

 private:
  const ServerContext& ctx_;
  GenerationParams gen_;
  std::string prompt_;
};

class LlamaCompletionSse : public SseFormatter {
 public:
  explicit LlamaCompletionSse(LlamaCompletion shape) : shape_(std::move(shape)) {}
  std::vector<std::string> begin() override { return {}; }
  std::vector<std::string> update(const StreamUpdate& u) override {
    streamed_ += u.text;
    return {sse_data(shape_.piece(u.text, false))};
  }
  std::vector<std::string> finish(const StreamUpdate& end) override {
    if (end.finish.reason == FinishReason::kError) return {sse_data(error_body(generation_error(end.finish)))};
    ojson j = shape_.last("", end);
    j["has_new_line"] = streamed_.find('\n') != std::string::npos;
    return {sse_data(j)};
  }
  bool done_marker() const override { return false; }

 private:
  LlamaCompletion shape_;
  std::string streamed_;
};

void llama_completion(ServerContext& ctx, const HttpRequest& req, const std::string& body_text,
                      HttpResponse& res) {
  ojson body = parse_json_body(body_text);
  // llama.cpp's temperature: below 0 samples greedily, and there is no upper bound of 2 (OpenAI's,
  // which the other routes keep); the sampler takes up to 100.
  std::optional<float> temperature;
  if (const ojson* t = field(body, "temperature"); t && t->is_number()) {
    const double x = t->get<double>();
    if (!(x <= 100.0)) bad_request("temperature", fmt::format("'temperature' must be at most 100, got {}", x));
    temperature = static_cast<float>(std::max(x, 0.0));
    body.erase("temperature");
  }
  for (const char* name : {"echo", "logprobs"})
    if (const ojson* v = field(body, name); v && !v->is_null())
      bad_request(name, fmt::format("'{}' is not supported on /completion; /v1/completions takes it", name));
  if (const ojson* v = field(body, "suffix"); v && !v->is_null())  // as on /v1/completions (no fill-in-the-middle)
    bad_request("suffix", "'suffix' is not supported by this server");
  if (auto n_probs = get_int(body, "n_probs", 0, 1024); n_probs && *n_probs > 0)
    bad_request("n_probs", "'n_probs' (token probabilities) is not supported by this server");
  CompletionRequest r = parse_completion_request(body);
  if (r.gen.n != 1) bad_request("n", "'n' (several choices) is not supported on /completion; /v1/completions takes it");
  if (temperature) r.gen.sampling.temperature = *temperature;
  // llama.cpp's default n_predict is -1 (up to the context's end), not the OpenAI route's 16 tokens.
  if (!field(body, "n_predict") && !field(body, "max_tokens") && !field(body, "max_completion_tokens"))
    r.gen.max_tokens.reset();
  const Vocab& vocab = *ctx.model.vocab;
  std::vector<int32_t> ids = completion_prompt_ids(vocab, r);
  std::string prompt = r.prompt_is_ids ? vocab.decode(ids, /*skip_special=*/false) : r.prompt_text;
  Submitted s = submit_generation(ctx, std::move(ids), r.gen, "prompt");
  LlamaCompletion shape(ctx, r.gen, std::move(prompt));
  if (r.gen.stream) {
    start_sse(ctx, req, res, std::move(s), std::make_shared<LlamaCompletionSse>(std::move(shape)));
    return;
  }
  StreamUpdate all = collect(ctx, s, req);
  if (all.finish.reason == FinishReason::kError) throw ApiException(generation_error(all.finish));
  send_json(res, 200, shape.last(all.text, all));
}

}  // namespace

void add_llama_completion_routes(Router& r, ServerContext& ctx) {
  r.post(R"(/completion/?)", [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
    guarded(ctx, req, res, true, [&] { llama_completion(ctx, req, body, res); });
  });
}

}  // namespace ft::server
