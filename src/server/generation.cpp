#include "server/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "server/client_probe.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

std::vector<int32_t> completion_prompt_ids(const Vocab& vocab, const CompletionRequest& r) {
  if (!r.prompt_is_ids) return vocab.encode(r.prompt_text, EncodeOptions{/*add_special=*/true, /*parse_special=*/true});
  for (size_t i = 0; i < r.prompt_ids.size(); ++i)
    if (r.prompt_ids[i] >= vocab.n_tokens())
      bad_request("prompt", fmt::format("prompt[{}] = {} is outside the vocabulary (0..{})", i, r.prompt_ids[i],
                                        vocab.n_tokens() - 1));
  return r.prompt_ids;
}

Submitted submit_generation(ServerContext& ctx, std::vector<int32_t> prompt, const GenerationParams& gen,
                            const char* what) {
  const int64_t limit = ctx.service->context_limit();
  const int64_t p = static_cast<int64_t>(prompt.size());
  if (prompt.empty()) bad_request(what, fmt::format("The {} produced no tokens", what));
  std::optional<int32_t> max_tokens = gen.max_tokens;
  if (gen.from_n_predict && max_tokens && p < limit && p + *max_tokens > limit)
    max_tokens = static_cast<int32_t>(limit - p);
  if (max_tokens ? p + *max_tokens > limit : p >= limit) {
    std::string msg = gen.max_tokens
                          ? fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                        "tokens ({} in the {}, {} in the completion). Please reduce the length of the "
                                        "{} or completion.",
                                        limit, p + *gen.max_tokens, p, what, *gen.max_tokens, what)
                          : fmt::format("This model's maximum context length is {} tokens. However, your {} resulted "
                                        "in {} tokens. Please reduce the length of the {}.",
                                        limit, what, p, what);
    throw ApiException(ApiError{400, msg, "invalid_request_error", what, "context_length_exceeded"});
  }
  const int32_t n_vocab = ctx.model.vocab->n_tokens();
  for (const auto& [id, bias] : gen.sampling.logit_bias)
    if (id >= n_vocab)
      bad_request("logit_bias", fmt::format("logit_bias key \"{}\" is outside the vocabulary (token ids 0..{})", id,
                                            n_vocab - 1));
  for (int32_t id : gen.stop_token_ids)
    if (id >= n_vocab)
      bad_request("stop_token_ids", fmt::format("stop_token_ids holds {}, outside the vocabulary (token ids 0..{})", id,
                                                n_vocab - 1));
  Submitted s;
  s.prompt_tokens = static_cast<int32_t>(p);
  s.stream = std::make_shared<RequestStream>(*ctx.model.vocab, gen.stop, gen.logprobs,
                                            !prompt_has_text(*ctx.model.vocab, prompt), gen.keep_special_tokens,
                                            gen.stop_token_ids, gen.include_stop_str, gen.sampling.min_tokens);
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens ? *max_tokens : static_cast<int32_t>(limit - p);
  r.sampling = gen.sampling;
  if (!r.sampling.seed) r.sampling.seed = ctx.options.default_seed;
  r.sampling.top_logprobs = gen.logprobs ? gen.top_logprobs : 0;
  r.eog_ids = ctx.model.vocab->eog_ids();
  r.ignore_eos = gen.ignore_eos;
  r.constraint = ctx.structured.constraint(*ctx.model.vocab, gen);
  if (!gen.reply_prefix.empty() || !gen.reply_suffix.empty())
    s.stream->frame(gen.reply_prefix, gen.reply_suffix, r.constraint);
  r.stop_ids = gen.stop_token_ids;
  double timeout = ctx.options.request_timeout_s;
  if (gen.timeout_s && (timeout <= 0 || *gen.timeout_s < timeout)) timeout = *gen.timeout_s;
  if (timeout > 0)
    r.deadline = std::chrono::steady_clock::now() +
                 std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(timeout));
  r.sink = s.stream;
  s.id = ctx.service->submit(std::move(r));
  return s;
}

StreamUpdate collect(ServerContext& ctx, const Submitted& s, const httplib::Request& req) {
  constexpr auto kProbe = std::chrono::milliseconds(100);
  StreamUpdate all, u;
  int fd = -2;  // -2: not looked up yet; -1: not found (the request then runs to its end)
  bool cancelled = false;
  auto next_probe = std::chrono::steady_clock::now() + kProbe;
  while (!all.finished) {
    const bool got = s.stream->take(u, kProbe);
    if (!cancelled && std::chrono::steady_clock::now() >= next_probe) {
      next_probe = std::chrono::steady_clock::now() + kProbe;
      if (fd == -2) fd = client_socket(req.remote_addr, req.remote_port);
      if (fd >= 0 && client_gone(fd)) {
        ctx.service->cancel(s.id);
        cancelled = true;
      }
    }
    if (!got) continue;
    all.text += u.text;
    all.logprobs.insert(all.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
    all.finished = u.finished;
    all.finish = u.finish;
    all.stop_index = u.stop_index;
  }
  return all;
}

namespace {

struct SseState {
  Submitted sub;
  std::shared_ptr<SseFormatter> fmt;
  bool started = false;
  bool finished = false;
};

}  // namespace

void start_sse(ServerContext& ctx, httplib::Response& res, Submitted s, std::shared_ptr<SseFormatter> fmt) {
  auto st = std::make_shared<SseState>();
  st->sub = std::move(s);
  st->fmt = std::move(fmt);
  EngineService* svc = ctx.service;
  std::atomic<int>* open_streams = &ctx.open_streams;
  open_streams->fetch_add(1);
  const auto keepalive = std::chrono::milliseconds(std::max(10, ctx.options.keepalive_ms));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, svc, keepalive](size_t, httplib::DataSink& sink) -> bool {
        auto send = [&](const std::vector<std::string>& chunks) {
          for (const std::string& c : chunks)
            if (!sink.write(c.data(), c.size())) return false;
          return true;
        };
        if (!st->started) {
          st->started = true;
          if (!send(st->fmt->begin())) {
            svc->cancel(st->sub.id);
            return false;
          }
        }
        StreamUpdate u;
        if (!st->sub.stream->take(u, keepalive)) {
          static const std::string kPing = ": keep-alive\n\n";
          if (!send({kPing})) {
            svc->cancel(st->sub.id);
            return false;
          }
          return true;
        }
        bool ok = true;
        if (!u.text.empty() || !u.logprobs.empty()) ok = send(st->fmt->update(u));
        if (ok && u.finished) {
          st->finished = true;
          std::vector<std::string> tail = st->fmt->finish(u);
          if (st->fmt->done_marker()) tail.emplace_back("data: [DONE]\n\n");
          ok = send(tail);
          if (ok) sink.done();
        }
        if (!ok) svc->cancel(st->sub.id);
        return ok;
      },
      [st, svc, open_streams](bool success) {
        if (!success || !st->finished) svc->cancel(st->sub.id);
        open_streams->fetch_sub(1);
      });
}

std::string sse_data(const ojson& j) { return "data: " + dump_json(j) + "\n\n"; }
std::string sse_data(const nlohmann::json& j) { return "data: " + dump_json(j) + "\n\n"; }
std::string sse_event(const char* name, const ojson& j) {
  return std::string("event: ") + name + "\ndata: " + dump_json(j) + "\n\n";
}

ojson usage_json(const FinishInfo& f) {
  ojson u;
  u["prompt_tokens"] = f.prompt_tokens;
  u["completion_tokens"] = f.completion_tokens;
  u["total_tokens"] = f.prompt_tokens + f.completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", f.cached_tokens}};
  return u;
}

ojson response_head(const std::string& id, const char* object, int64_t created, const std::string& model) {
  ojson c;
  c["id"] = id;
  c["object"] = object;
  c["created"] = created;
  c["model"] = model;
  c["system_fingerprint"] = nullptr;
  return c;
}

std::string sse_usage_chunk(ojson head, const FinishInfo& f) {
  head["choices"] = ojson::array();
  head["usage"] = usage_json(f);
  return sse_data(head);
}

const char* finish_reason_text(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    // A client that went away sees nothing; the one who can see it is a client whose request the
    // server cut short when shutting down: its output is truncated, which OpenAI calls "length".
    case FinishReason::kCancelled: return "length";
    case FinishReason::kError: return "error";
  }
  return "error";
}

float json_logprob(float lp) { return std::isfinite(lp) ? lp : -9999.0f; }

ApiError generation_error(const FinishInfo& f) {
  return ApiError{500, "generation failed: " + f.error, "server_error", "", "internal_error"};
}

nlohmann::ordered_json llama_generation_settings(const GenerationParams& gen) {
  nlohmann::ordered_json s;
  s["n_predict"] = gen.max_tokens ? *gen.max_tokens : -1;
  s["temperature"] = gen.sampling.temperature;
  s["top_k"] = gen.sampling.top_k;
  s["top_p"] = gen.sampling.top_p;
  s["min_p"] = gen.sampling.min_p;
  s["seed"] = gen.sampling.seed ? nlohmann::ordered_json(*gen.sampling.seed) : nlohmann::ordered_json(-1);
  s["stop"] = gen.stop;
  s["ignore_eos"] = gen.ignore_eos;
  return s;
}

}  // namespace ft::server
