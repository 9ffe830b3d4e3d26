// POST /v1/completions (also /completions, as llama.cpp serves it): OpenAI's (legacy) text completion
// API, non-streaming and SSE streaming.
#include "server/generation.h"
#include "server/request_parse.h"
#include "server/routes.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

namespace {

/** {"tokens", "token_logprobs", "top_logprobs": [{token: logprob}], "text_offset"}; offsets start at `offset`.
 *  Each top_logprobs entry holds the sampled token too (up to logprobs + 1 entries), as OpenAI's
 *  completions API documents. */
ojson completion_logprobs(const Vocab& vocab, const std::vector<TokenLogprob>& lps, size_t& offset) {
  ojson tokens = ojson::array(), lp = ojson::array(), top = ojson::array(), off = ojson::array();
  for (const TokenLogprob& t : lps) {
    const std::string& piece = vocab.piece(t.id);
    tokens.push_back(piece);
    lp.push_back(json_logprob(t.logprob));
    ojson alt = ojson::object();
    for (const auto& [id, l] : t.top) alt[vocab.piece(id)] = json_logprob(l);
    if (!alt.contains(piece)) alt[piece] = json_logprob(t.logprob);
    top.push_back(alt);
    off.push_back(offset);
    offset += piece.size();
  }
  ojson j;
  j["tokens"] = tokens;
  j["token_logprobs"] = lp;
  j["top_logprobs"] = top;
  j["text_offset"] = off;
  return j;
}

ojson choice_json(int index, std::string text, ojson logprobs, const char* finish_reason) {
  ojson c;
  c["index"] = index;
  c["text"] = std::move(text);
  c["logprobs"] = std::move(logprobs);
  c["finish_reason"] = finish_reason ? ojson(finish_reason) : ojson(nullptr);
  return c;
}

class CompletionSse : public SseFormatter {
 public:
  /** Formats choice `index` (of gen.n). */
  CompletionSse(ServerContext& ctx, std::string id, int64_t created, const GenerationParams& gen, std::string echo,
                int index)
      : ctx_(ctx), id_(std::move(id)), created_(created), gen_(gen), echo_(std::move(echo)), offset_(echo_.size()),
        index_(index) {}

  std::vector<std::string> begin() override {
    if (echo_.empty()) return {};
    return {sse_data(chunk(choice_json(index_, echo_, nullptr, nullptr)))};
  }
  std::vector<std::string> update(const StreamUpdate& u) override {
    ojson lp = gen_.logprobs ? completion_logprobs(*ctx_.model.vocab, u.logprobs, offset_) : ojson(nullptr);
    return {sse_data(chunk(choice_json(index_, u.text, lp, nullptr)))};
  }
  std::vector<std::string> finish(const StreamUpdate& end) override {
    const FinishInfo& f = end.finish;
    if (f.reason == FinishReason::kError) return {sse_data(error_body(generation_error(f)))};
    return {sse_data(chunk(choice_json(index_, "", nullptr, finish_reason_text(f.reason))))};
  }
  std::vector<std::string> usage(const FinishInfo& total) override {
    if (!gen_.include_usage) return {};
    return {sse_usage_chunk(base(), total)};
  }

 private:
  ojson base() const { return response_head(id_, "text_completion", created_, ctx_.model.name); }
  ojson chunk(ojson choice) const {
    ojson c = base();
    c["choices"] = ojson::array({std::move(choice)});
    if (gen_.include_usage) c["usage"] = nullptr;
    return c;
  }

  ServerContext& ctx_;
  std::string id_;
  int64_t created_;
  GenerationParams gen_;
  std::string echo_;
  size_t offset_;
  int index_;  // the choice
};

void completions(ServerContext& ctx, const HttpRequest& req, const std::string& body_text,
                 HttpResponse& res) {
  CompletionRequest r = parse_completion_request(parse_json_body(body_text));
  ctx.check_model(r.gen.model);
  const Vocab& vocab = *ctx.model.vocab;
  std::vector<int32_t> ids = completion_prompt_ids(vocab, r);
  std::string echo;  // token ids: control tokens (BOS) left out, as in the reply's own text and vLLM's echo
  if (r.echo) echo = r.prompt_is_ids ? vocab.decode(ids, /*skip_special=*/true) : r.prompt_text;
  std::vector<Submitted> subs = submit_choices(ctx, std::move(ids), r.gen, "prompt");
  const std::string id = ctx.new_id("cmpl-");
  const int64_t created = unix_time();
  if (r.gen.stream) {
    std::vector<std::shared_ptr<SseFormatter>> fmts;
    for (size_t i = 0; i < subs.size(); ++i)
      fmts.push_back(std::make_shared<CompletionSse>(ctx, id, created, r.gen, echo, static_cast<int>(i)));
    start_sse(ctx, req, res, std::move(subs), std::move(fmts));
    return;
  }
  std::vector<StreamUpdate> all = collect(ctx, subs, req);
  ojson choices = ojson::array();
  for (size_t i = 0; i < all.size(); ++i) {
    const StreamUpdate& u = all[i];
    if (u.finish.reason == FinishReason::kError) throw ApiException(generation_error(u.finish));
    size_t offset = echo.size();
    ojson lp = r.gen.logprobs ? completion_logprobs(vocab, u.logprobs, offset) : ojson(nullptr);
    choices.push_back(choice_json(static_cast<int>(i), echo + u.text, lp, finish_reason_text(u.finish.reason)));
  }
  ojson body = response_head(id, "text_completion", created, ctx.model.name);
  body["choices"] = std::move(choices);
  body["usage"] = usage_json(total_usage(all));
  send_json(res, 200, body);
}

}  // namespace

void add_completion_routes(Router& r, ServerContext& ctx) {
  r.post(R"((?:/v1)?/completions/?)", [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
    guarded(ctx, req, res, true, [&] { completions(ctx, req, body, res); });
  });
}

}  // namespace ft::server
