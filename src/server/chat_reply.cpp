#include "server/chat_reply.h"

#include "server/prompt_literals.h"
#include "server/request_parse.h"
#include "server/tool_call_grammar.h"

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

bool template_takes_object_arguments(const ChatTemplate& t) {
  auto conv = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "x"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "ft_probe", "arguments": "{\"ft_needle\": 1}"}}]},
    {"role": "user", "content": "y"}])");
  auto renders = [&t](const nlohmann::ordered_json& c) {
    try {
      t.render(c, nullptr, true);
      return true;
    } catch (const Error&) {
      return false;
    }
  };
  // Content null (some templates write the calls only then: DeepSeek-R1 distills) and "" (the
  // server's form of a null content, which other templates need).
  for (const char* content : {"null", "\"\""}) {
    conv[1]["content"] = nlohmann::ordered_json::parse(content);
    if (!renders(with_object_tool_arguments(conv)) && renders(conv)) return false;
  }
  return true;
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

void check_tools_rendered(const ServerContext& ctx, const ChatRequest& r) {
  if (ctx.model.renders_tools || r.tools.is_null() || r.tool_choice == ChatRequest::ToolChoice::kNone) return;
  const bool required = r.tool_choice == ChatRequest::ToolChoice::kRequired || r.tool_choice == ChatRequest::ToolChoice::kNamed;
  throw ApiException(ApiError{400,
                              std::string(required ? "'tool_choice' asks for a tool call, but" : "'tools' were given, but") +
                                  " the served model's chat template does not render tools, so the model would never "
                                  "see them. Send the request without 'tools' (or with tool_choice \"none\"), or serve "
                                  "a template that renders tools (ft serve --chat-template)",
                              "invalid_request_error", "tools", ""});
}

nlohmann::ordered_json chat_template_kwargs(const ServerContext& ctx, const ChatRequest& r) {
  nlohmann::ordered_json kwargs = r.template_kwargs;
  if (ctx.options.enable_thinking && !kwargs.contains("enable_thinking"))
    kwargs["enable_thinking"] = *ctx.options.enable_thinking;
  return kwargs;
}

std::string render_chat_text(const ServerContext& ctx, const ChatRequest& r) {
  check_tools_rendered(ctx, r);
  const nlohmann::ordered_json kwargs = chat_template_kwargs(ctx, r);
  std::string text;
  try {
    text = ctx.model.object_tool_arguments
               ? ctx.model.chat_template->render(with_object_tool_arguments(r.messages), r.tools,
                                                 r.add_generation_prompt, kwargs)
               : ctx.model.chat_template->render(r.messages, r.tools, r.add_generation_prompt, kwargs);
  } catch (const Error& e) {
    throw ApiException(ApiError{400, std::string("The chat template could not render these messages: ") + e.what(),
                                "invalid_request_error", "messages", ""});
  }
  return text + r.assistant_prefill;
}

std::vector<int32_t> render_chat_prompt(const ServerContext& ctx, const ChatRequest& r) {
  return encode_chat_prompt(*ctx.model.vocab, render_chat_text(ctx, r), r.messages);
}

ReplyFormat reply_format(const ServerContext& ctx, const ChatRequest& r) {
  ReplyFormat f;
  if (r.split_reasoning.value_or(ctx.options.split_reasoning)) {
    f.reasoning = ctx.model.reasoning_format != ReasoningFormat::kNone ? ctx.model.reasoning_format : ReasoningFormat::kThink;
    f.reasoning_open = r.reply_starts_in_reasoning;
  }
  f.tool_calls = r.parse_tool_calls;
  f.tool_format = ctx.model.tool_call_format;
  if (f.tool_calls) f.tool_schemas = tool_schemas(r.tools);
  if (f.tool_calls && r.tool_choice == ChatRequest::ToolChoice::kNamed) f.only_function = r.tool_choice_name;
  return f;
}

namespace {

/** Whether the vocabulary has any of `markers` as a control token (one a reply's text drops). */
bool any_control_token(const Vocab& vocab, const std::vector<std::string_view>& markers) {
  for (std::string_view m : markers) {
    const int32_t id = vocab.find(m);
    if (id >= 0 && vocab.is_special(id)) return true;
  }
  return false;
}

}  // namespace

std::vector<Submitted> submit_chat(ServerContext& ctx, ChatRequest& r) {
  const ToolCallFormat tf = ctx.model.tool_call_format;
  if (tool_call_format_structures_every_reply(tf)) r.parse_tool_calls = true;
  const std::string text = render_chat_text(ctx, r);
  const ReasoningFormat rf = reply_format(ctx, r).reasoning;
  r.reply_starts_in_reasoning = prompt_opens_reasoning(text, rf);
  GenerationParams gen = r.gen;
  const Vocab& vocab = *ctx.model.vocab;
  const ReasoningTags tags = reasoning_tags(rf);
  gen.keep_special_tokens =
      (r.parse_tool_calls && (tool_call_markers_are_special(tf) || any_control_token(vocab, tool_call_format_markers(tf)))) ||
      (rf != ReasoningFormat::kNone &&
       (reasoning_tags_are_special(rf) || any_control_token(vocab, {tags.open, tags.close})));
  // A required or named tool_choice: the server writes the call's opening, a grammar the rest.
  std::string forced = force_tool_call(r, tf, ctx.model.chat_template->source(),
                                       r.reply_starts_in_reasoning ? tags.close : "", gen);
  // Structured output on a prompt that opened a reasoning block: the block is closed the same way, so
  // the grammar shapes the reply's content, not its reasoning (the model does not think first).
  if (forced.empty() && r.reply_starts_in_reasoning && gen.structured != GenerationParams::Structured::kNone) {
    gen.reply_prefix = std::string(tags.close) + "\n\n";
    forced = gen.reply_prefix;
  }
  return submit_choices(ctx, encode_chat_prompt(vocab, text + forced, r.messages), gen, "messages");
}

ChatReply split_chat_reply(const std::string& text, const ReplyFormat& f, bool cut) {
  ChatReplyStream s(f);
  ChatReplyPiece p = s.push(text);
  ChatReplyPiece rest = s.finish(cut);
  ChatReply out;
  out.thought = s.thought();
  out.reasoning = std::move(p.reasoning) + rest.reasoning;
  out.content = std::move(p.content) + rest.content;
  out.calls = std::move(p.calls);
  for (ToolCall& c : rest.calls) out.calls.push_back(std::move(c));
  return out;
}

namespace {

ReplyFormat simple_format(bool with_reasoning, bool with_tool_calls, ToolCallFormat format) {
  ReplyFormat f;
  f.reasoning = with_reasoning ? ReasoningFormat::kThink : ReasoningFormat::kNone;
  f.tool_calls = with_tool_calls;
  f.tool_format = format;
  return f;
}

}  // namespace

ChatReply split_chat_reply(const std::string& text, bool with_reasoning, bool with_tool_calls, ToolCallFormat format) {
  return split_chat_reply(text, simple_format(with_reasoning, with_tool_calls, format));
}

ChatReplyStream::ChatReplyStream(const ReplyFormat& f) : only_function_(f.only_function) {
  if (f.reasoning != ReasoningFormat::kNone) reasoning_.emplace(f.reasoning, f.reasoning_open);
  if (f.tool_calls) tools_.emplace(f.tool_format, f.tool_schemas);
}

ChatReplyStream::ChatReplyStream(bool with_reasoning, bool with_tool_calls, ToolCallFormat format)
    : ChatReplyStream(simple_format(with_reasoning, with_tool_calls, format)) {}

ChatReplyPiece ChatReplyStream::push(std::string_view piece) {
  if (!splits()) return ChatReplyPiece{"", std::string(piece), {}};
  return split(reasoning_ ? reasoning_->push(piece) : ReasoningSplit{"", std::string(piece)}, false);
}

ChatReplyPiece ChatReplyStream::finish(bool cut) {
  if (!splits()) return {};
  return split(reasoning_ ? reasoning_->finish() : ReasoningSplit{}, true, cut);
}

ChatReplyPiece ChatReplyStream::split(ReasoningSplit r, bool last, bool cut) {
  ToolCallSplit s = tools_ ? tools_->push(r.content) : ToolCallSplit{std::move(r.content), {}, {}};
  if (last && tools_) s.append(tools_->finish(cut));
  if (!all_space(s.reasoning)) channel_reasoning_ = true;  // harmony's analysis channel
  ChatReplyPiece out;
  out.reasoning = reasoning_trim_.push(r.reasoning + s.reasoning);
  out.content = content_trim_.push(s.content);
  out.calls = std::move(s.calls);
  if (!only_function_.empty())
    std::erase_if(out.calls, [this](const ToolCall& c) { return c.name != only_function_; });
  return out;
}

}  // namespace ft::server
