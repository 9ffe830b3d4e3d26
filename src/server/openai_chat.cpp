// POST /v1/chat/completions (also /chat/completions, as llama.cpp serves it): OpenAI's chat
// completion API, non-streaming and SSE streaming. With
// `tools`, replies are split into content and `tool_calls` (tool_calls.h), and a reply that ends
// with calls finishes with "tool_calls"; with reasoning split (reply_format) the reasoning block
// becomes `reasoning_content` (reasoning.h), and only the rest is searched for calls.
#include "server/chat_reply.h"
#include "server/generation.h"
#include "server/request_parse.h"
#include "server/routes.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

namespace {

ojson bytes_of(const std::string& s) {
  ojson b = ojson::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

/** {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]} */
ojson chat_logprobs(const Vocab& vocab, const std::vector<TokenLogprob>& lps) {
  ojson content = ojson::array();
  for (const TokenLogprob& t : lps) {
    const std::string& piece = vocab.piece(t.id);
    ojson top = ojson::array();
    for (const auto& [id, lp] : t.top) {
      const std::string& p = vocab.piece(id);
      top.push_back({{"token", p}, {"logprob", json_logprob(lp)}, {"bytes", bytes_of(p)}});
    }
    content.push_back({{"token", piece}, {"logprob", json_logprob(t.logprob)}, {"bytes", bytes_of(piece)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

/** "tool_calls" for a reply that stopped after calling tools, else the usual reason; "stop" when the
 *  request named the function (`named`: tool_choice {type: "function", ...}), as OpenAI reports a
 *  forced call. */
const char* chat_finish_reason(FinishReason r, bool called_tools, bool named) {
  return called_tools && !named && r == FinishReason::kStop ? "tool_calls" : finish_reason_text(r);
}

class ChatSse : public SseFormatter {
 public:
  /** Formats choice `index` (of gen.n). */
  ChatSse(ServerContext& ctx, std::string id, int64_t created, const GenerationParams& gen, const ReplyFormat& format,
          int index)
      : ctx_(ctx), id_(std::move(id)), created_(created), include_usage_(gen.include_usage), logprobs_(gen.logprobs),
        named_(!format.only_function.empty()), index_(index), split_(format) {}

  std::vector<std::string> begin() override {
    return {sse_data(chunk(ojson{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr))};
  }
  std::vector<std::string> update(const StreamUpdate& u) override {
    ojson lp = logprobs_ && !u.logprobs.empty() ? chat_logprobs(*ctx_.model.vocab, u.logprobs) : ojson(nullptr);
    if (!split_.splits()) {
      ojson delta = ojson::object();
      if (!u.text.empty()) delta["content"] = u.text;
      return {sse_data(chunk(delta, lp, nullptr))};
    }
    ojson delta = piece_delta(split_.push(u.text));
    if (delta.empty() && lp.is_null()) return {};
    return {sse_data(chunk(delta, lp, nullptr))};
  }
  std::vector<std::string> finish(const StreamUpdate& end) override {
    const FinishInfo& f = end.finish;
    if (f.reason == FinishReason::kError) return {sse_data(error_body(generation_error(f)))};
    std::vector<std::string> out;
    if (split_.splits()) {  // what was held back: partial tags, an unterminated block or call
      const ojson delta = piece_delta(split_.finish(f.reason == FinishReason::kLength));
      if (!delta.empty()) out.push_back(sse_data(chunk(delta, nullptr, nullptr)));
    }
    out.push_back(sse_data(chunk(ojson::object(), nullptr, chat_finish_reason(f.reason, n_calls_ > 0, named_))));
    return out;
  }
  std::vector<std::string> usage(const FinishInfo& total) override {
    if (!include_usage_) return {};
    return {sse_usage_chunk(base(), total)};
  }

 private:
  ojson base() const { return response_head(id_, "chat.completion.chunk", created_, ctx_.model.name); }
  ojson chunk(ojson delta, ojson logprobs, const char* finish_reason) const {
    ojson c = base();
    ojson choice;
    choice["index"] = index_;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = finish_reason ? ojson(finish_reason) : ojson(nullptr);
    c["choices"] = ojson::array({choice});
    if (include_usage_) c["usage"] = nullptr;
    return c;
  }

  /** The delta for a split piece (a call goes out whole, in one delta). */
  ojson piece_delta(ChatReplyPiece p) {
    ojson delta = ojson::object();
    if (!p.reasoning.empty()) delta["reasoning_content"] = std::move(p.reasoning);
    if (!p.content.empty()) delta["content"] = std::move(p.content);
    if (!p.calls.empty()) {
      ojson a = ojson::array();
      for (const ToolCall& c : p.calls) a.push_back(tool_call_json(c, ctx_.tool_call_id(), n_calls_++));
      delta["tool_calls"] = std::move(a);
    }
    return delta;
  }

  ServerContext& ctx_;
  std::string id_;
  int64_t created_;
  bool include_usage_, logprobs_;
  bool named_;  // a named tool_choice
  int index_;   // the choice
  ChatReplyStream split_;
  int n_calls_ = 0;
};

void chat_completions(ServerContext& ctx, const HttpRequest& req, const std::string& body_text,
                      HttpResponse& res) {
  ChatRequest r = parse_chat_request(parse_json_body(body_text));
  ctx.check_model(r.gen.model);
  std::vector<Submitted> subs = submit_chat(ctx, r);
  const std::string id = ctx.new_id("chatcmpl-");
  const int64_t created = unix_time();
  const ReplyFormat format = reply_format(ctx, r);
  if (r.gen.stream) {
    std::vector<std::shared_ptr<SseFormatter>> fmts;
    for (size_t i = 0; i < subs.size(); ++i)
      fmts.push_back(std::make_shared<ChatSse>(ctx, id, created, r.gen, format, static_cast<int>(i)));
    start_sse(ctx, req, res, std::move(subs), std::move(fmts));
    return;
  }
  std::vector<StreamUpdate> all = collect(ctx, subs, req);
  ojson choices = ojson::array();
  for (size_t i = 0; i < all.size(); ++i) {
    const StreamUpdate& u = all[i];
    if (u.finish.reason == FinishReason::kError) throw ApiException(generation_error(u.finish));
    ChatReply reply = split_chat_reply(u.text, format, u.finish.reason == FinishReason::kLength);
    ojson message = {{"role", "assistant"}, {"content", reply.content}};
    if (reply.thought) message["reasoning_content"] = reply.reasoning;
    if (!reply.calls.empty()) {  // content: the text around the calls, null when there is none (as OpenAI)
      if (reply.content.empty()) message["content"] = nullptr;
      ojson calls = ojson::array();
      for (const ToolCall& c : reply.calls) calls.push_back(tool_call_json(c, ctx.tool_call_id()));
      message["tool_calls"] = std::move(calls);
    }
    ojson choice;
    choice["index"] = i;
    choice["message"] = std::move(message);
    choice["logprobs"] = r.gen.logprobs ? chat_logprobs(*ctx.model.vocab, u.logprobs) : ojson(nullptr);
    choice["finish_reason"] = chat_finish_reason(u.finish.reason, !reply.calls.empty(), !format.only_function.empty());
    choices.push_back(std::move(choice));
  }
  ojson body = response_head(id, "chat.completion", created, ctx.model.name);
  body["choices"] = std::move(choices);
  body["usage"] = usage_json(total_usage(all));
  send_json(res, 200, body);
}

}  // namespace

void add_chat_routes(Router& r, ServerContext& ctx) {
  r.post(R"((?:/v1)?/chat/completions/?)", [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
    guarded(ctx, req, res, true, [&] { chat_completions(ctx, req, body, res); });
  });
}

}  // namespace ft::server
