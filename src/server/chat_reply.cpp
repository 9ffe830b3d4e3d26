#include "server/chat_reply.h"

#include "server/request_parse.h"

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

bool template_requires_object_arguments(const ChatTemplate& t) {
  auto conv = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "ft_probe", "arguments": "{\"ft_needle\": 1}"}}]},
    {"role": "user", "content": "y"}])");
  auto renders_keys = [&t](const nlohmann::ordered_json& c) {
    try {
      const std::string out = t.render(c, nullptr, true);
      return out.find("\"ft_needle\":") != std::string::npos || out.find("'ft_needle':") != std::string::npos;
    } catch (const Error&) {
      return false;
    }
  };
  if (renders_keys(conv)) return false;
  return renders_keys(with_object_tool_arguments(conv));
}

nlohmann::ordered_json with_object_tool_arguments(const nlohmann::ordered_json& messages) {
  using ojson = nlohmann::ordered_json;
  struct TooDeep {};
  ojson out = messages;
  for (ojson& m : out) {
    auto tc = m.find("tool_calls");
    if (tc == m.end() || !tc->is_array()) continue;
    for (ojson& call : *tc) {
      auto fn = call.is_object() ? call.find("function") : call.end();
      if (fn == call.end() || !fn->is_object()) continue;
      auto args = fn->find("arguments");
      if (args == fn->end() || args->is_null() || (args->is_string() && args->get_ref<const std::string&>().empty())) {
        (*fn)["arguments"] = ojson::object();
        continue;
      }
      if (!args->is_string()) continue;
      try {
        ojson parsed = ojson::parse(args->get_ref<const std::string&>(), [](int depth, ojson::parse_event_t, ojson&) {
          if (depth > kMaxJsonDepth) throw TooDeep{};
          return true;
        }, false);
        if (!parsed.is_discarded()) *args = std::move(parsed);
      } catch (const TooDeep&) {
      }
    }
  }
  return out;
}

std::string render_chat_text(const ServerContext& ctx, const ChatRequest& r) {
  std::string text;
  try {
    text = ctx.model.object_tool_arguments
               ? ctx.model.chat_template->render(with_object_tool_arguments(r.messages), r.tools,
                                                 r.add_generation_prompt, r.template_kwargs)
               : ctx.model.chat_template->render(r.messages, r.tools, r.add_generation_prompt, r.template_kwargs);
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
