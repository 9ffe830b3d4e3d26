// POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API over the chat pipeline
// that /v1/chat/completions uses (anthropic_request.cpp turns the body into a ChatRequest; the
// template, sampling, stop strings, tool-call parsing and the reasoning split are shared,
// chat_reply.h). A reply becomes content blocks: a thinking block for the reasoning (with an opaque
// signature, thinking_signature), a text block, and a tool_use block per parsed call. Streams are named SSE events (message_start,
// content_block_start / _delta / _stop per block, message_delta, message_stop), without [DONE].
// Errors on these routes use Anthropic's error body (errors.h, anthropic_error_body).
#include "server/chat_reply.h"
#include "server/generation.h"
#include "server/request_parse.h"
#include "server/routes.h"
#include "server/sha256.h"
#include "server/tag_scan.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

namespace {

/** Anthropic's usage. input_tokens counts the prompt tokens not read from the prefix cache, as
 *  Anthropic counts them (input_tokens + cache_read_input_tokens + cache_creation_input_tokens is
 *  the whole prompt); nothing is written to a cache on request, so cache_creation is 0. */
ojson messages_usage(const FinishInfo& f) {
  ojson u;
  u["input_tokens"] = f.prompt_tokens - f.cached_tokens;
  u["cache_creation_input_tokens"] = 0;
  u["cache_read_input_tokens"] = f.cached_tokens;
  u["output_tokens"] = f.completion_tokens;
  return u;
}

/** stop_reason: "stop_sequence" when one of `stops` ended the reply, "tool_use" when it ended after
 *  calling tools, "end_turn" at an end token, "max_tokens" when max_tokens cut it (or a server
 *  shutdown did: the output is truncated, as the OpenAI routes report "length"). */
const char* stop_reason(const StreamUpdate& end, bool called_tools) {
  if (end.finish.reason != FinishReason::kStop) return "max_tokens";
  if (end.stop_index >= 0) return "stop_sequence";
  return called_tools ? "tool_use" : "end_turn";
}

/** stop_sequence: the stop string that matched, or null. */
ojson stop_sequence(const StreamUpdate& end, const std::vector<std::string>& stops) {
  if (end.finish.reason != FinishReason::kStop || end.stop_index < 0 ||
      end.stop_index >= static_cast<int>(stops.size()))
    return nullptr;
  return stops[static_cast<size_t>(end.stop_index)];
}

/** A tool_use block's input: the call's arguments as an object ({} when they are not one). */
ojson tool_input(const ToolCall& c) {
  ojson j = ojson::parse(c.arguments, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : ojson::object();
}

ojson tool_use_block(ServerContext& ctx, const ToolCall& c, ojson input) {
  return {{"type", "tool_use"}, {"id", ctx.new_id("toolu_")}, {"name", c.name}, {"input", std::move(input)}};
}

/** A thinking block's `signature`: base64 of the SHA-256 of its text. Opaque, and not verified by
 *  this server (a thinking block sent back in a request is taken as it is); it only lets clients that
 *  require a signature (Anthropic's SDKs, Claude Code) replay the block. Equal for the same text
 *  streamed or whole. */
std::string thinking_signature(std::string_view thinking) { return base64(sha256(thinking)); }

/** The response object with `content`, `stop_reason` and `stop_sequence` (null while streaming) and
 *  `usage`. */
ojson message_json(const std::string& id, const std::string& model, ojson content, ojson reason, ojson seq, ojson usage) {
  ojson m;
  m["id"] = id;
  m["type"] = "message";
  m["role"] = "assistant";
  m["content"] = std::move(content);
  m["model"] = model;
  m["stop_reason"] = std::move(reason);
  m["stop_sequence"] = std::move(seq);
  m["usage"] = std::move(usage);
  return m;
}

/** A streamed reply as Anthropic's events: one block open at a time (thinking, then text, then a
 *  tool_use block, start to stop, for each call, once the reply has ended: the blocks of the whole
 *  reply). Whitespace that would open a text block is held until text follows, so a reply of only
 *  calls has no empty text block. */
class MessagesSse : public SseFormatter {
 public:
  MessagesSse(ServerContext& ctx, std::string id, int32_t prompt_tokens, const ChatRequest& r)
      : ctx_(ctx), id_(std::move(id)), prompt_tokens_(prompt_tokens), stops_(r.gen.stop),
        split_(reply_format(ctx, r)) {}

  std::vector<std::string> begin() override {
    ojson usage = {{"input_tokens", prompt_tokens_}, {"cache_creation_input_tokens", 0},
                   {"cache_read_input_tokens", 0}, {"output_tokens", 0}};
    ojson start = {{"type", "message_start"},
                   {"message", message_json(id_, ctx_.model.name, ojson::array(), nullptr, nullptr, std::move(usage))}};
    return {sse_event("message_start", start), sse_event("ping", {{"type", "ping"}})};
  }

  std::vector<std::string> update(const StreamUpdate& u) override {
    std::vector<std::string> out;
    emit(split_.push(u.text), out);
    return out;
  }

  std::vector<std::string> finish(const StreamUpdate& end) override {
    if (end.finish.reason == FinishReason::kError)
      return {sse_event("error", ojson(anthropic_error_body(generation_error(end.finish))))};
    std::vector<std::string> out;
    emit(split_.finish(end.finish.reason == FinishReason::kLength), out);
    emit_calls(calls_, out);
    close_block(out);
    // The whole usage again: input and cache figures are known only now (the prefix-cache hit).
    ojson delta = {{"type", "message_delta"},
                   {"delta", {{"stop_reason", stop_reason(end, n_calls_ > 0)}, {"stop_sequence", stop_sequence(end, stops_)}}},
                   {"usage", messages_usage(end.finish)}};
    out.push_back(sse_event("message_delta", delta));
    out.push_back(sse_event("message_stop", {{"type", "message_stop"}}));
    return out;
  }

  bool done_marker() const override { return false; }

 private:
  enum class Block { kNone, kThinking, kText, kToolUse };  // the open block's kind

  void emit(ChatReplyPiece p, std::vector<std::string>& out) {
    if (!p.reasoning.empty()) {  // whitespace-only reasoning opens no block (nor does it in a whole reply)
      held_thinking_ += p.reasoning;
      if (open_ == Block::kThinking || !all_space(held_thinking_)) {
        open_block(Block::kThinking, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, out);
        thinking_ += held_thinking_;
        delta({{"type", "thinking_delta"}, {"thinking", std::move(held_thinking_)}}, out);
        held_thinking_.clear();
      }
    }
    if (!p.content.empty()) {
      held_space_ += p.content;
      if (open_ == Block::kText || !all_space(held_space_)) {
        open_block(Block::kText, {{"type", "text"}, {"text", ""}}, out);
        delta({{"type", "text_delta"}, {"text", std::move(held_space_)}}, out);
        held_space_.clear();
      }
    }
    for (ToolCall& c : p.calls) calls_.push_back(std::move(c));
  }

  /** The tool_use blocks, at the end: text the model writes after a call belongs to the one text
   *  block before them, as in the whole reply (the same blocks, whatever pieces the text came in). */
  void emit_calls(const std::vector<ToolCall>& calls, std::vector<std::string>& out) {
    for (const ToolCall& c : calls) {
      open_block(Block::kToolUse, tool_use_block(ctx_, c, ojson::object()), out);
      delta({{"type", "input_json_delta"}, {"partial_json", dump_json(tool_input(c))}}, out);
      close_block(out);
      ++n_calls_;
    }
  }

  void open_block(Block kind, ojson block, std::vector<std::string>& out) {
    if (open_ == kind && kind != Block::kToolUse) return;
    close_block(out);
    out.push_back(sse_event("content_block_start",
                            {{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}}));
    open_ = kind;
  }

  void close_block(std::vector<std::string>& out) {
    if (open_ == Block::kNone) return;
    if (open_ == Block::kThinking)  // a thinking block ends with its signature, as Anthropic streams it
      delta({{"type", "signature_delta"}, {"signature", thinking_signature(thinking_)}}, out);
    out.push_back(sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index_}}));
    ++index_;
    open_ = Block::kNone;
  }

  void delta(ojson d, std::vector<std::string>& out) {
    out.push_back(sse_event("content_block_delta",
                            {{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}}));
  }

  ServerContext& ctx_;
  std::string id_;
  int32_t prompt_tokens_;
  std::vector<std::string> stops_;
  ChatReplyStream split_;
  Block open_ = Block::kNone;
  int index_ = 0;
  int n_calls_ = 0;
  std::string held_space_;
  std::vector<ToolCall> calls_;  // parsed calls, sent as tool_use blocks when the reply ends
  std::string held_thinking_;  // reasoning that is all whitespace so far (no thinking block yet)
  std::string thinking_;       // the thinking block's text so far (its signature's input)
};

void messages(ServerContext& ctx, const HttpRequest& req, const std::string& body_text,
              HttpResponse& res) {
  ChatRequest r = parse_anthropic_request(parse_json_body(body_text), /*count_only=*/false);
  ctx.check_model(r.gen.model, /*allow_empty=*/false);
  Submitted s = submit_chat(ctx, r).front();  // n is 1 (anthropic_request)
  const std::string id = ctx.new_id("msg_");
  if (r.gen.stream) {
    const int32_t prompt_tokens = s.prompt_tokens;
    start_sse(ctx, req, res, std::move(s), std::make_shared<MessagesSse>(ctx, id, prompt_tokens, r));
    return;
  }
  StreamUpdate all = collect(ctx, s, req);
  if (all.finish.reason == FinishReason::kError) throw ApiException(generation_error(all.finish));
  ChatReply reply = split_chat_reply(all.text, reply_format(ctx, r), all.finish.reason == FinishReason::kLength);
  ojson content = ojson::array();
  if (reply.thought && !reply.reasoning.empty())  // empty (trimmed) reasoning: no block, as streamed
    content.push_back({{"type", "thinking"}, {"thinking", reply.reasoning}, {"signature", thinking_signature(reply.reasoning)}});
  if (!all_space(reply.content)) content.push_back({{"type", "text"}, {"text", reply.content}});
  for (const ToolCall& c : reply.calls) content.push_back(tool_use_block(ctx, c, tool_input(c)));
  send_json(res, 200,
            message_json(id, ctx.model.name, std::move(content), stop_reason(all, !reply.calls.empty()),
                         stop_sequence(all, r.gen.stop), messages_usage(all.finish)));
}

void count_tokens(ServerContext& ctx, const std::string& body_text, HttpResponse& res) {
  ChatRequest r = parse_anthropic_request(parse_json_body(body_text), /*count_only=*/true);
  ctx.check_model(r.gen.model, /*allow_empty=*/false);
  send_json(res, 200, ojson{{"input_tokens", render_chat_prompt(ctx, r).size()}});
}

}  // namespace

void add_anthropic_routes(Router& r, ServerContext& ctx) {
  r.post(R"(/v1/messages/?)", [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
    guarded(ctx, req, res, true, [&] { messages(ctx, req, body, res); });
  });
  r.post(R"(/v1/messages/count_tokens/?)",
         [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
           guarded(ctx, req, res, true, [&] { count_tokens(ctx, body, res); });
         });
}

}  // namespace ft::server
