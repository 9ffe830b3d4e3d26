#include "server/generation.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "util/error.h"

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

namespace {

/** submit_generation for choice `choice` of a request whose choice 0 is `after` (0 for choice 0). */
Submitted submit_one(ServerContext& ctx, std::vector<int32_t> prompt, const GenerationParams& gen, const char* what,
                     uint64_t after, int32_t choice, std::shared_ptr<StreamWaker> waker) {
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
  if (r.sampling.seed) *r.sampling.seed += static_cast<uint64_t>(choice);
  r.after = after;
  if (waker) s.stream->set_waker(waker);
  s.waker = std::move(waker);
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

}  // namespace

Submitted submit_generation(ServerContext& ctx, std::vector<int32_t> prompt, const GenerationParams& gen,
                            const char* what) {
  return submit_one(ctx, std::move(prompt), gen, what, 0, 0, nullptr);
}

std::vector<Submitted> submit_choices(ServerContext& ctx, std::vector<int32_t> prompt, const GenerationParams& gen,
                                      const char* what) {
  if (gen.n <= 1) return {submit_generation(ctx, std::move(prompt), gen, what)};
  auto waker = std::make_shared<StreamWaker>();
  std::vector<Submitted> subs;
  try {
    for (int32_t i = 0; i < gen.n; ++i)
      subs.push_back(submit_one(ctx, prompt, gen, what, i == 0 ? 0 : subs[0].id, i, waker));
  } catch (...) {
    for (const Submitted& s : subs) ctx.service->cancel(s.id);
    throw;
  }
  return subs;
}

FinishInfo total_usage(const std::vector<StreamUpdate>& choices) {
  FinishInfo t;
  if (choices.empty()) return t;
  t = choices[0].finish;
  t.completion_tokens = 0;
  for (const StreamUpdate& c : choices) t.completion_tokens += c.finish.completion_tokens;
  return t;
}

StreamUpdate collect(ServerContext& ctx, const Submitted& s, const HttpRequest& req) {
  return std::move(collect(ctx, std::vector<Submitted>{s}, req)[0]);
}

std::vector<StreamUpdate> collect(ServerContext& ctx, const std::vector<Submitted>& subs, const HttpRequest& req) {
  constexpr auto kProbe = std::chrono::milliseconds(20);
  std::vector<StreamUpdate> out(subs.size());
  bool cancelled = false;
  StreamUpdate u;
  for (size_t i = 0; i < subs.size(); ++i) {
    StreamUpdate& all = out[i];
    while (!all.finished) {
      const bool got = subs[i].stream->take(u, kProbe);
      if (!cancelled && req.client_gone()) {
        for (const Submitted& s : subs) ctx.service->cancel(s.id);
        cancelled = true;
      }
      if (!got) continue;
      all.text += u.text;
      all.logprobs.insert(all.logprobs.end(), u.logprobs.begin(), u.logprobs.end());
      all.finished = u.finished;
      all.finish = u.finish;
      all.stop_index = u.stop_index;
    }
  }
  trace_generation(*req.trace, ctx.model.name, subs);
  return out;
}

void trace_generation(RequestTrace& trace, const std::string& model, const std::vector<Submitted>& subs) {
  trace.model = model;
  if (subs.empty()) return;
  int64_t tokens = 0;
  std::optional<std::chrono::steady_clock::time_point> first, last;
  std::vector<std::string> reasons;
  for (size_t i = 0; i < subs.size(); ++i) {
    const StreamProgress p = subs[i].stream->progress();
    if (i == 0) {
      trace.prompt_tokens = p.finish ? p.finish->prompt_tokens : subs[0].prompt_tokens;
      // Known once the engine admitted the request (its prefix looked up), so also for one cancelled
      // mid-way, before the engine's finish reached the stream. One cancelled while still queued never
      // had its prefix looked up: its count is truly unknown and its line leaves `cached=` out.
      trace.cached_tokens.reset();
      if (p.cached_tokens)
        trace.cached_tokens = *p.cached_tokens;
      else if (p.finish && p.finish->reason != FinishReason::kCancelled)
        trace.cached_tokens = p.finish->cached_tokens;
    }
    tokens += p.finish ? p.finish->completion_tokens : p.tokens;
    if (p.first_token && (!first || *p.first_token < *first)) first = p.first_token;
    if (p.last_token && (!last || *p.last_token > *last)) last = p.last_token;
    const std::string reason = p.finish ? finish_reason_name(p.finish->reason) : "cancelled";
    if (std::find(reasons.begin(), reasons.end(), reason) == reasons.end()) reasons.push_back(reason);
    if (p.finish && p.finish->reason == FinishReason::kError && trace.error_message.empty())
      trace.error_message = p.finish->error;
  }
  trace.completion_tokens = tokens;
  trace.ttft_ms.reset();
  trace.tokens_per_s.reset();
  if (first) trace.ttft_ms = std::chrono::duration<double, std::milli>(*first - trace.start).count();
  if (first && last && *last > *first && tokens >= 2)
    trace.tokens_per_s = static_cast<double>(tokens - 1) / std::chrono::duration<double>(*last - *first).count();
  trace.finish_reason.clear();
  for (const std::string& r : reasons) trace.finish_reason += (trace.finish_reason.empty() ? "" : ",") + r;
}

namespace {

struct SseState {
  std::vector<Submitted> subs;
  std::vector<std::shared_ptr<SseFormatter>> fmts;
  std::vector<StreamUpdate> ends;  // each choice's finishing update (its finish; text already sent)
  size_t n_done = 0;
  bool started = false;
  bool finished = false;  // the stream's end went out

  void cancel_all(EngineService* svc) const {
    for (const Submitted& s : subs) svc->cancel(s.id);
  }
};

}  // namespace

void start_sse(ServerContext& ctx, const HttpRequest& req, HttpResponse& res, Submitted s,
               std::shared_ptr<SseFormatter> fmt) {
  std::vector<Submitted> subs;
  subs.push_back(std::move(s));
  start_sse(ctx, req, res, std::move(subs), {std::move(fmt)});
}

void start_sse(ServerContext& ctx, const HttpRequest& req, HttpResponse& res, std::vector<Submitted> subs,
               std::vector<std::shared_ptr<SseFormatter>> fmts) {
  FT_CHECK(!subs.empty() && subs.size() == fmts.size());
  auto st = std::make_shared<SseState>();
  st->subs = std::move(subs);
  st->fmts = std::move(fmts);
  st->ends.resize(st->subs.size());
  EngineService* svc = ctx.service;
  std::atomic<int>* open_streams = &ctx.open_streams;
  open_streams->fetch_add(1);
  const auto keepalive = std::chrono::milliseconds(std::max(10, ctx.options.keepalive_ms));
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_stream(
      "text/event-stream",
      [st, svc, keepalive](StreamSink& sink) -> bool {
        auto send = [&](const std::vector<std::string>& chunks) {
          for (const std::string& c : chunks)
            if (!sink.write(c)) return false;
          return true;
        };
        auto fail = [&] {
          st->cancel_all(svc);
          return false;
        };
        const size_t n = st->subs.size();
        if (!st->started) {
          st->started = true;
          for (const auto& f : st->fmts)
            if (!send(f->begin())) return fail();
        }
        // One choice waits on its own stream; several poll theirs and wait on the shared waker.
        StreamWaker* waker = st->subs[0].waker.get();
        const uint64_t seen = waker ? waker->count() : 0;
        bool news = false;
        for (size_t i = 0; i < n; ++i) {
          if (st->ends[i].finished) continue;
          StreamUpdate u;
          if (!st->subs[i].stream->take(u, waker ? std::chrono::milliseconds(0) : keepalive)) continue;
          news = true;
          if ((!u.text.empty() || !u.logprobs.empty()) && !send(st->fmts[i]->update(u))) return fail();
          if (!u.finished) continue;
          std::vector<std::string> tail = st->fmts[i]->finish(u);
          u.text.clear();
          u.logprobs.clear();
          st->ends[i] = std::move(u);
          const bool failed = st->ends[i].finish.reason == FinishReason::kError;
          if (!failed && ++st->n_done < n) {
            if (!send(tail)) return fail();
            continue;
          }
          // The stream ends: every choice finished, or one failed (the others are cancelled).
          if (!failed)
            for (std::string& c : st->fmts[0]->usage(total_usage(st->ends))) tail.push_back(std::move(c));
          if (st->fmts[0]->done_marker()) tail.emplace_back("data: [DONE]\n\n");
          if (failed) st->cancel_all(svc);
          if (!send(tail)) return fail();
          st->finished = true;
          sink.done();
          return true;
        }
        if (news || (waker && waker->wait(seen, keepalive))) return true;
        static const std::string kPing = ": keep-alive\n\n";
        if (!send({kPing})) return fail();
        return true;
      },
      [st, svc, open_streams, trace = req.trace, model = ctx.model.name](bool success) {
        if (!success || !st->finished) st->cancel_all(svc);
        trace_generation(*trace, model, st->subs);
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
