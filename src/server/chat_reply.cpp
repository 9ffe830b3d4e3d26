#include "server/chat_reply.h"

namespace ft::server {

bool template_renders_tools(const ChatTemplate& t) {
  const auto conv = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"}])");
  const auto tools = nlohmann::ordered_json::parse(
      R"([{"type": "function", "function": {"name": "ft_probe", "parameters": {"type": "object"}}}])");
  try {
    return t.render(conv, tools, true) != t.render(conv, nullptr, true);
  } catch (const Error&) {
    return true;
  }
}

std::string render_chat_text(const ServerContext& ctx, const ChatRequest& r) {
  std::string text;
  try {
    text = ctx.model.chat_template->render(r.messages, r.tools, r.add_generation_prompt, r.template_kwargs);
  } catch (const Error& e) {
    throw ApiException(ApiError{400, std::string("The chat template could not render these messages: ") + e.what(),
                                "invalid_request_error", "messages", ""});
  }
  return text + r.assistant_prefill;
}

std::vector<int32_t> render_chat_prompt(const ServerContext& ctx, const ChatRequest& r) {
  return ctx.model.vocab->encode(render_chat_text(ctx, r), EncodeOptions{/*add_special=*/false, /*parse_special=*/true});
}

Submitted submit_chat(ServerContext& ctx, ChatRequest& r) {
  if (tool_call_format_structures_every_reply(ctx.model.tool_call_format)) r.parse_tool_calls = true;
  GenerationParams gen = r.gen;
  gen.keep_special_tokens = r.parse_tool_calls && tool_call_markers_are_special(ctx.model.tool_call_format);
  return submit_generation(ctx, render_chat_prompt(ctx, r), gen, "messages");
}

ChatReply split_chat_reply(const std::string& text, bool with_reasoning, bool with_tool_calls, ToolCallFormat format) {
  ChatReply out;
  out.content = text;
  if (with_reasoning) {
    ReasoningSplit rs = split_reasoning(text);
    if (rs.thought) {
      out.thought = true;
      out.reasoning = std::move(rs.reasoning);
      out.content = std::move(rs.content);
    }
  }
  if (with_tool_calls) {
    ToolCallSplit split = parse_tool_calls(out.content, format);
    if (!split.reasoning.empty()) {  // harmony's analysis channel
      out.thought = true;
      out.reasoning += split.reasoning;
    }
    if (!split.calls.empty() || !split.reasoning.empty() || tool_call_format_structures_every_reply(format)) {
      out.content = std::move(split.content);
      out.calls = std::move(split.calls);
    }
  }
  return out;
}

ChatReplyStream::ChatReplyStream(bool with_reasoning, bool with_tool_calls, ToolCallFormat format) {
  if (with_reasoning) reasoning_.emplace();
  if (with_tool_calls) tools_.emplace(format);
}

ChatReplyPiece ChatReplyStream::push(std::string_view piece) {
  return split(reasoning_ ? reasoning_->push(piece) : ReasoningSplit{"", std::string(piece)}, false);
}

ChatReplyPiece ChatReplyStream::finish() { return split(reasoning_ ? reasoning_->finish() : ReasoningSplit{}, true); }

ChatReplyPiece ChatReplyStream::split(ReasoningSplit r, bool last) {
  ChatReplyPiece out;
  out.reasoning = std::move(r.reasoning);
  ToolCallSplit s = tools_ ? tools_->push(r.content) : ToolCallSplit{std::move(r.content), {}, {}};
  if (last && tools_) s.append(tools_->finish());
  out.reasoning += s.reasoning;  // harmony's analysis channel
  out.content = std::move(s.content);
  out.calls = std::move(s.calls);
  return out;
}

}  // namespace ft::server
