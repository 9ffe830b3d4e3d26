// POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's Responses API over the chat pipeline
// (responses_request.cpp turns the body into a ChatRequest; template, sampling, stop strings, the
// reasoning split and tool-call parsing are chat's, chat_reply.h). A reply becomes output items: a
// `reasoning` item for its reasoning, a `message` item with one output_text part for its text, and a
// `function_call` item per parsed call. Streams are named SSE events with a sequence_number:
//   response.created, response.in_progress,
//   per item: response.output_item.added, then
//     reasoning: response.content_part.added, response.reasoning_text.delta*, response.reasoning_text.done,
//                response.content_part.done
//     message:   response.content_part.added, response.output_text.delta*, response.output_text.done,
//                response.content_part.done
//     call:      response.function_call_arguments.delta, response.function_call_arguments.done
//   response.output_item.done; finally response.completed, response.incomplete (max_output_tokens) or
//   response.failed, without [DONE].
// Responses with "store" (the default) are kept in ServerContext::responses for GET, DELETE and
// previous_response_id.
#include "server/chat_reply.h"
#include "server/generation.h"
#include "server/request_parse.h"
#include "server/responses.h"
#include "server/routes.h"
#include "server/tag_scan.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

namespace {

/** The response object in OpenAI's field order: `r`'s echoed request fields around the id, status,
 *  output and usage (null while streaming). `incomplete`: incomplete_details {reason:
 *  "max_output_tokens"}; `error`: the failed response's {code, message}. */
ojson response_object(const std::string& id, int64_t created_at, const char* status, const std::string& model,
                      const ResponsesRequest& r, ojson output, ojson usage, ojson error = nullptr) {
  const ojson& e = r.echo;
  ojson o;
  o["id"] = id;
  o["object"] = "response";
  o["created_at"] = created_at;
  o["status"] = status;
  o["background"] = false;
  o["error"] = std::move(error);
  o["incomplete_details"] = std::string_view(status) == "incomplete" ? ojson{{"reason", "max_output_tokens"}} : ojson(nullptr);
  o["instructions"] = e["instructions"];
  o["max_output_tokens"] = e["max_output_tokens"];
  o["model"] = model;
  o["output"] = std::move(output);
  for (const char* k : {"parallel_tool_calls", "previous_response_id", "reasoning", "store", "temperature", "text",
                        "tool_choice", "tools", "top_p", "truncation"})
    o[k] = e[k];
  o["usage"] = std::move(usage);
  if (e.contains("user")) o["user"] = e["user"];
  o["metadata"] = e["metadata"];
  return o;
}

/** "completed", or "incomplete" when max_output_tokens (or the context, a deadline or a shutdown)
 *  cut the reply, as chat's finish_reason "length". */
const char* response_status(FinishReason r) { return r == FinishReason::kStop ? "completed" : "incomplete"; }

/** Responses usage. reasoning_tokens: the reasoning text's tokens, encoded again (the engine counts
 *  sampled tokens, not which part of the reply they fell in), at most output_tokens. */
ojson responses_usage(const ServerContext& ctx, const FinishInfo& f, const std::string& reasoning) {
  int32_t reasoning_tokens = 0;
  if (!reasoning.empty())
    reasoning_tokens = std::min<int32_t>(
        f.completion_tokens,
        static_cast<int32_t>(ctx.model.vocab->encode(reasoning, EncodeOptions{false, false}).size()));
  ojson u;
  u["input_tokens"] = f.prompt_tokens;
  u["input_tokens_details"] = {{"cached_tokens", f.cached_tokens}};
  u["output_tokens"] = f.completion_tokens;
  u["output_tokens_details"] = {{"reasoning_tokens", reasoning_tokens}};
  u["total_tokens"] = f.prompt_tokens + f.completion_tokens;
  return u;
}

ojson output_text_part(std::string text) {
  return {{"type", "output_text"}, {"text", std::move(text)}, {"annotations", ojson::array()}, {"logprobs", ojson::array()}};
}

ojson reasoning_part(std::string text) { return {{"type", "reasoning_text"}, {"text", std::move(text)}}; }

ojson message_item(const std::string& id, const char* status, ojson content) {
  return {{"id", id}, {"type", "message"}, {"status", status}, {"content", std::move(content)}, {"role", "assistant"}};
}

ojson reasoning_item(const std::string& id, const char* status, ojson content) {
  return {{"id", id}, {"type", "reasoning"}, {"summary", ojson::array()}, {"content", std::move(content)}, {"status", status}};
}

ojson function_call_item(const std::string& id, const std::string& call_id, const ToolCall& c, const char* status,
                         const std::string& arguments) {
  return {{"id", id}, {"type", "function_call"}, {"status", status}, {"arguments", arguments},
          {"call_id", call_id}, {"name", c.name}};
}

void store_response(ServerContext& ctx, const ResponsesRequest& r, const ojson& response) {
  if (r.store) ctx.responses.put(response["id"].get<std::string>(), StoredResponse{response, r.input_items});
}

/** A streamed reply as Responses events (see the file comment). Items open one at a time; whitespace
 *  that would open or end a reasoning or message item is held until text follows, so the streamed
 *  items match a whole reply's (split_chat_reply: trimmed reasoning; content trimmed around calls and
 *  after reasoning). Calls go out whole when the reply ends. The split is the chat routes'
 *  (reply_format: the model's reasoning format, a reply that starts in the reasoning, typed calls). */
class ResponsesSse : public SseFormatter {
 public:
  ResponsesSse(ServerContext& ctx, std::string id, int64_t created_at, ResponsesRequest r)
      : ctx_(ctx), id_(std::move(id)), created_at_(created_at), r_(std::move(r)),
        split_(reply_format(ctx, r_.chat)) {}

  std::vector<std::string> begin() override {
    std::vector<std::string> out;
    const ojson head = response_object(id_, created_at_, "in_progress", ctx_.model.name, r_, ojson::array(), nullptr);
    event("response.created", {{"response", head}}, out);
    event("response.in_progress", {{"response", head}}, out);
    return out;
  }

  std::vector<std::string> update(const StreamUpdate& u) override {
    std::vector<std::string> out;
    emit(split_.push(u.text), out);
    return out;
  }

  std::vector<std::string> finish(const StreamUpdate& end) override {
    std::vector<std::string> out;
    const FinishInfo& f = end.finish;
    if (f.reason == FinishReason::kError) {
      const ApiError e = generation_error(f);
      ojson failed = response_object(id_, created_at_, "failed", ctx_.model.name, r_, output_, nullptr,
                                     {{"code", "server_error"}, {"message", e.message}});
      event("response.failed", {{"response", std::move(failed)}}, out);
      return out;
    }
    emit(split_.finish(f.reason == FinishReason::kLength), out);
    emit_calls(out);
    // Whitespace at the end of the text stays only where a whole reply keeps it (no calls, no reasoning).
    if (n_calls_ == 0 && !saw_reasoning_ && !held_content_.empty()) {
      std::string rest = std::move(held_content_);
      if (open_ != Item::kMessage) open(Item::kMessage, out);
      text_delta(rest, out);
    }
    if (n_calls_ == 0 && !opened_message_) open(Item::kMessage, out);  // a reply of no text: one empty message
    const char* status = response_status(f.reason);
    close(out, status);
    ojson done = response_object(id_, created_at_, status, ctx_.model.name, r_, output_,
                                 responses_usage(ctx_, f, reasoning_text_));
    store_response(ctx_, r_, done);
    event(std::string_view(status) == "completed" ? "response.completed" : "response.incomplete",
          {{"response", std::move(done)}}, out);
    return out;
  }

  bool done_marker() const override { return false; }

 private:
  enum class Item { kNone, kReasoning, kMessage };

  void emit(ChatReplyPiece p, std::vector<std::string>& out) {
    if (!p.reasoning.empty()) {
      saw_reasoning_ = true;
      std::string text = release(held_reasoning_, p.reasoning);
      if (!text.empty()) {
        if (open_ != Item::kReasoning) {
          open(Item::kReasoning, out);
          text.erase(0, text.find_first_not_of(" \t\r\n"));  // leading whitespace: trimmed, as a whole reply's
        }
        text_delta(text, out);
      }
    }
    if (!p.content.empty()) {
      std::string text = release(held_content_, p.content);
      if (!text.empty()) {
        if (open_ != Item::kMessage) open(Item::kMessage, out);
        text_delta(text, out);
      }
    }
    for (ToolCall& c : p.calls) calls_.push_back(std::move(c));
  }

  /** The function_call items, at the end: text the model writes after a call belongs to the one
   *  message item before them, as in the whole reply (the same items, whatever pieces the text came
   *  in). */
  void emit_calls(std::vector<std::string>& out) {
    for (const ToolCall& c : calls_) {
      if (!r_.parallel_tool_calls && n_calls_ > 0) break;  // at most one call
      close(out, "completed");
      held_content_.clear();  // whitespace around calls is not text
      const std::string item_id = ctx_.new_id("fc_"), call_id = ctx_.tool_call_id();
      const int index = static_cast<int>(output_.size());
      event("response.output_item.added",
            {{"output_index", index}, {"item", function_call_item(item_id, call_id, c, "in_progress", "")}}, out);
      event("response.function_call_arguments.delta",
            {{"item_id", item_id}, {"output_index", index}, {"delta", c.arguments}}, out);
      event("response.function_call_arguments.done",
            {{"item_id", item_id}, {"output_index", index}, {"name", c.name}, {"arguments", c.arguments}}, out);
      ojson item = function_call_item(item_id, call_id, c, "completed", c.arguments);
      event("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
      output_.push_back(std::move(item));
      ++n_calls_;
    }
  }

  /** Appends `piece` to `held` and returns all of it up to its last non-whitespace character (held
   *  whitespace included), keeping the whitespace after that; "" while it is all whitespace. */
  static std::string release(std::string& held, const std::string& piece) {
    held += piece;
    const size_t last = held.find_last_not_of(" \t\r\n");
    if (last == std::string::npos) return "";
    std::string out = held.substr(0, last + 1);
    held.erase(0, last + 1);
    return out;
  }

  void open(Item kind, std::vector<std::string>& out) {
    close(out, "completed");
    open_ = kind;
    open_text_.clear();
    const int index = static_cast<int>(output_.size());
    if (kind == Item::kReasoning) {
      open_id_ = ctx_.new_id("rs_");
      event("response.output_item.added",
            {{"output_index", index}, {"item", reasoning_item(open_id_, "in_progress", ojson::array())}}, out);
      event("response.content_part.added",
            {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"part", reasoning_part("")}}, out);
    } else {
      opened_message_ = true;
      open_id_ = ctx_.new_id("msg_");
      event("response.output_item.added",
            {{"output_index", index}, {"item", message_item(open_id_, "in_progress", ojson::array())}}, out);
      event("response.content_part.added",
            {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"part", output_text_part("")}}, out);
    }
  }

  void text_delta(const std::string& text, std::vector<std::string>& out) {
    open_text_ += text;
    const int index = static_cast<int>(output_.size());
    if (open_ == Item::kReasoning) {
      reasoning_text_ += text;
      event("response.reasoning_text.delta",
            {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"delta", text}}, out);
    } else {
      event("response.output_text.delta", {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0},
                                           {"delta", text}, {"logprobs", ojson::array()}},
            out);
    }
  }

  /** Ends the open item with `status` (its held trailing whitespace dropped). */
  void close(std::vector<std::string>& out, const char* status) {
    if (open_ == Item::kNone) return;
    const int index = static_cast<int>(output_.size());
    ojson item;
    if (open_ == Item::kReasoning) {
      held_reasoning_.clear();
      event("response.reasoning_text.done",
            {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"text", open_text_}}, out);
      event("response.content_part.done",
            {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"part", reasoning_part(open_text_)}},
            out);
      item = reasoning_item(open_id_, status, ojson::array({reasoning_part(open_text_)}));
    } else {
      event("response.output_text.done", {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0},
                                          {"text", open_text_}, {"logprobs", ojson::array()}},
            out);
      event("response.content_part.done",
            {{"item_id", open_id_}, {"output_index", index}, {"content_index", 0}, {"part", output_text_part(open_text_)}},
            out);
      item = message_item(open_id_, status, ojson::array({output_text_part(open_text_)}));
    }
    event("response.output_item.done", {{"output_index", index}, {"item", item}}, out);
    output_.push_back(std::move(item));
    open_ = Item::kNone;
  }

  void event(std::string_view type, ojson fields, std::vector<std::string>& out) {
    ojson j = {{"type", std::string(type)}};
    for (auto it = fields.begin(); it != fields.end(); ++it) j[it.key()] = std::move(it.value());
    j["sequence_number"] = seq_++;
    out.push_back(sse_event(std::string(type).c_str(), j));
  }

  ServerContext& ctx_;
  std::string id_;
  int64_t created_at_;
  ResponsesRequest r_;
  ChatReplyStream split_;
  ojson output_ = ojson::array();  // the items closed so far
  Item open_ = Item::kNone;
  std::string open_id_, open_text_;
  std::string held_reasoning_, held_content_;
  std::vector<ToolCall> calls_;  // parsed calls, sent as function_call items when the reply ends
  std::string reasoning_text_;  // all reasoning sent (for usage)
  bool saw_reasoning_ = false, opened_message_ = false;
  int n_calls_ = 0;
  int64_t seq_ = 0;
};

/** A whole reply's output items (reasoning, message, calls), as the stream sends them. */
ojson output_items(ServerContext& ctx, const ChatReply& reply, const ResponsesRequest& r, bool incomplete) {
  ojson out = ojson::array();
  if (reply.thought && !reply.reasoning.empty())
    out.push_back(reasoning_item(ctx.new_id("rs_"), "completed", ojson::array({reasoning_part(reply.reasoning)})));
  if (!reply.content.empty() || reply.calls.empty())
    out.push_back(message_item(ctx.new_id("msg_"), "completed", ojson::array({output_text_part(reply.content)})));
  // the item the cut-off ended (a call is whole, so never one)
  if (incomplete && reply.calls.empty() && !out.empty()) out.back()["status"] = "incomplete";
  for (const ToolCall& c : reply.calls) {
    out.push_back(function_call_item(ctx.new_id("fc_"), ctx.tool_call_id(), c, "completed", c.arguments));
    if (!r.parallel_tool_calls) break;  // at most one call
  }
  return out;
}

void create_response(ServerContext& ctx, const HttpRequest& req, const std::string& body_text, HttpResponse& res) {
  ResponsesRequest r = parse_responses_request(parse_json_body(body_text), ctx.responses);
  ctx.check_model(r.chat.gen.model);
  Submitted s;
  try {
    s = submit_chat(ctx, r.chat).front();  // the Responses API has no n
  } catch (const ApiException& e) {  // the template's and the context check's refusals name "messages"
    throw ApiException(with_responses_names(e.error));
  }
  const std::string id = ctx.new_id("resp_");
  const int64_t created_at = unix_time();
  if (r.chat.gen.stream) {
    start_sse(ctx, req, res, std::move(s), std::make_shared<ResponsesSse>(ctx, id, created_at, std::move(r)));
    return;
  }
  StreamUpdate all = collect(ctx, s, req);
  if (all.finish.reason == FinishReason::kError) throw ApiException(generation_error(all.finish));
  const ChatReply reply = split_chat_reply(all.text, reply_format(ctx, r.chat), all.finish.reason == FinishReason::kLength);
  const char* status = response_status(all.finish.reason);
  ojson output = output_items(ctx, reply, r, std::string_view(status) == "incomplete");
  ojson body = response_object(id, created_at, status, ctx.model.name, r, std::move(output),
                               responses_usage(ctx, all.finish, reply.thought ? reply.reasoning : ""));
  store_response(ctx, r, body);
  send_json(res, 200, body);
}

[[noreturn]] void response_not_found(const std::string& id) {
  throw ApiException(ApiError{404, fmt::format("Response with id '{}' not found.", id), "invalid_request_error", "", ""});
}

}  // namespace

void add_responses_routes(Router& r, ServerContext& ctx) {
  r.post(R"(/v1/responses/?)", [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
    guarded(ctx, req, res, true, [&] { create_response(ctx, req, body, res); });
  });
  r.get(R"(/v1/responses/([^/]+)/?)", [&ctx](const HttpRequest& req, HttpResponse& res) {
    guarded(ctx, req, res, true, [&] {
      if (req.get_param_value("stream") == "true")
        bad_request("stream", "streaming a stored response again is not supported; retrieve it without 'stream'");
      std::optional<StoredResponse> s = ctx.responses.get(req.matches[1]);
      if (!s) response_not_found(req.matches[1]);
      send_json(res, 200, s->response);
    });
  });
  r.del(R"(/v1/responses/([^/]+)/?)", [&ctx](const HttpRequest& req, HttpResponse& res) {
    guarded(ctx, req, res, true, [&] {
      const std::string id = req.matches[1];
      if (!ctx.responses.erase(id)) response_not_found(id);
      send_json(res, 200, ojson{{"id", id}, {"object", "response"}, {"deleted", true}});
    });
  });
}

}  // namespace ft::server
