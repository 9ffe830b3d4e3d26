#pragma once
// What the chat endpoints (OpenAI's /v1/chat/completions, Anthropic's /v1/messages) share around the
// engine: rendering a validated ChatRequest through the model's chat template into prompt tokens, and
// splitting the reply into reasoning (--reasoning-format deepseek, reasoning.h), content and tool
// calls (tool_calls.h), for a whole reply or as it streams in.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_types.h"
#include "server/context.h"
#include "server/generation.h"
#include "server/reasoning.h"
#include "server/tag_scan.h"
#include "server/tool_calls.h"

namespace ft::server {

/** Whether `t` puts a request's tools into the prompt (a one-turn conversation rendered with and
 *  without a tool differs). Many templates (the ChatML fallback, base models') drop them; `ft serve`
 *  says so at start-up. A template that fails to render counts as rendering them (no claim made). */
bool template_renders_tools(const ChatTemplate& t);

/** Whether `t` is given a tool call's `function.arguments` as the JSON value (an object) rather than
 *  the JSON text OpenAI clients send: true unless a call with object arguments fails to render where
 *  one with text renders (the templates that concatenate the text: some DeepSeek-R1 distills,
 *  functionary v3.2). Templates `tojson` the arguments (Hermes, Qwen2.5, Llama 3.x, gpt-oss,
 *  DeepSeek-V3.1, Kimi-K2: text would be quoted, the model was trained on the object), iterate them
 *  (Qwen3-Coder, Qwen3.5, GLM, MiniMax: text fails) or test `is string` (Qwen3: the object's JSON is
 *  what transformers renders); vLLM hands every template objects. */
bool template_takes_object_arguments(const ChatTemplate& t);

/** `messages` with each assistant tool call's `function.arguments` text replaced by the JSON value it
 *  spells ({} when empty or null), as vLLM hands them to templates; text that is not JSON, or nests
 *  deeper than a request body may (kMaxJsonDepth), stays text. */
nlohmann::ordered_json with_object_tool_arguments(const nlohmann::ordered_json& messages);

/** Throws ApiException 400 (param "tools") when `r` has tools the model is to use (tool_choice other
 *  than "none") but the served template does not render tools (ServedModel::renders_tools): the
 *  reply would be plain text from a model that never saw them. */
void check_tools_rendered(const ServerContext& ctx, const ChatRequest& r);

/** The template variables of `r`: its chat_template_kwargs (with reasoning_effort, Anthropic's
 *  thinking as enable_thinking), and enable_thinking from ServerOptions::enable_thinking (`ft serve
 *  --reasoning on|off`) when the request sets none. */
nlohmann::ordered_json chat_template_kwargs(const ServerContext& ctx, const ChatRequest& r);

/** The prompt text of `r`: its messages and tools rendered by the served chat template (tool-call
 *  arguments as objects, with_object_tool_arguments, where ServedModel::object_tool_arguments says
 *  so; variables chat_template_kwargs), followed by its assistant_prefill. Throws ApiException 400: check_tools_rendered's, and
 *  (param "messages") when the template cannot render them. */
std::string render_chat_text(const ServerContext& ctx, const ChatRequest& r);

/** The prompt tokens of `r`: render_chat_text, encoded (special tokens parsed). Throws ApiException 400 (param "messages") when the template
 *  cannot render them. */
std::vector<int32_t> render_chat_prompt(const ServerContext& ctx, const ChatRequest& r);

/** How a chat reply is split (ChatReplyStream, split_chat_reply). */
struct ReplyFormat {
  ReasoningFormat reasoning = ReasoningFormat::kNone;  // kNone: no reasoning is split off
  bool reasoning_open = false;  // the prompt ends inside an open block: the reply starts in the reasoning
  bool tool_calls = false;      // calls are split out, in `tool_format`
  ToolCallFormat tool_format = ToolCallFormat::kHermes;
  ToolSchemas tool_schemas;     // the request's tools (the XML-like formats type values by them)
  /** Non-empty: the only function whose calls the reply returns (a named tool_choice); calls of
   *  other functions are dropped. */
  std::string only_function;
};

/** The split of `r`'s reply: reasoning in the served model's format (ServedModel::reasoning_format;
 *  <think> when the request asks for it and the model names none) when r.split_reasoning, or else the
 *  server's default (ServerOptions::split_reasoning), says so, starting inside the block when the
 *  prompt opened it (r.reply_starts_in_reasoning, set by submit_chat); tool calls when
 *  r.parse_tool_calls, in the served model's format, typed by r.tools, only of the named function
 *  when r.tool_choice names one. */
ReplyFormat reply_format(const ServerContext& ctx, const ChatRequest& r);

/** Renders `r` (render_chat_text) and submits it (submit_generation, "messages" naming the prompt
 *  in a context-length error). A gpt-oss (harmony) reply is always split, tools or not (sets
 *  r.parse_tool_calls): its channels (analysis: reasoning, final: content) would otherwise run
 *  together. Sets r.reply_starts_in_reasoning when the rendered prompt ends inside an open reasoning
 *  block (prompt_opens_reasoning). When the reply is parsed for a tool-call format whose markers are
 *  control tokens (tool_call_markers_are_special, or the served vocabulary makes one of
 *  tool_call_format_markers a control token), or reasoning is split and its tags are control tokens
 *  (reasoning_tags_are_special, or the vocabulary makes them so), its text keeps control tokens, so
 *  the parser sees them. A required or named tool_choice makes the reply one call: the prompt ends with
 *  the call's opening and the reply is constrained to the rest (force_tool_call, tool_call_grammar.h); a forced call or
 *  a structured output (response_format) closes a reasoning block the prompt opened first. Throws what those
 *  throw. Returns the r.gen.n choices (submit_choices). */
std::vector<Submitted> submit_chat(ServerContext& ctx, ChatRequest& r);

/** A whole reply, split. */
struct ChatReply {
  bool thought = false;         // reasoning was split and the reply opened a block (or started in one)
  std::string reasoning;        // the block's text, trimmed (when thought)
  std::string content;          // the rest, trimmed when anything is split; as written otherwise
  std::vector<ToolCall> calls;  // empty unless tool calls were parsed
};

/** Splits a whole reply as `f` says: the leading reasoning block, then tool calls in what follows
 *  (tool_calls.h; kHarmony's analysis channel is reasoning too). Exactly what ChatReplyStream gives
 *  for the same text in any pieces, whitespace included. `cut`: the reply was cut by max_tokens or
 *  the context (finish_reason "length"), so a call it left open is dropped (ToolCallStream::finish). */
ChatReply split_chat_reply(const std::string& text, const ReplyFormat& f, bool cut = false);

/** split_chat_reply with <think> reasoning when `with_reasoning` (the reply starting outside the
 *  block) and tool calls in `format` without schemas when `with_tool_calls`. */
ChatReply split_chat_reply(const std::string& text, bool with_reasoning, bool with_tool_calls,
                           ToolCallFormat format = ToolCallFormat::kHermes);

/** A piece of a streamed reply, split: reasoning text, content text and the calls completed in it. */
struct ChatReplyPiece {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> calls;
};

/** split_chat_reply as the reply streams in: push() returns what is known so far (text that may
 *  open or close a tag, and an open call, are held; so is whitespace that may turn out to end the
 *  content or the reasoning, which are trimmed); finish() returns what is held at the end. With
 *  neither splitting asked for, every piece is content as it came. */
class ChatReplyStream {
 public:
  explicit ChatReplyStream(const ReplyFormat& f);
  /** <think> reasoning when `with_reasoning`, tool calls in `format` when `with_tool_calls`. */
  ChatReplyStream(bool with_reasoning, bool with_tool_calls, ToolCallFormat format = ToolCallFormat::kHermes);
  ChatReplyPiece push(std::string_view piece);
  /** `cut`: as split_chat_reply's. */
  ChatReplyPiece finish(bool cut = false);
  /** Whether any splitting happens (otherwise push() returns its input as content). */
  bool splits() const { return reasoning_.has_value() || tools_.has_value(); }
  /** Whether reasoning came: a block opened (or the reply started in one), or harmony's analysis. */
  bool thought() const { return (reasoning_ && reasoning_->opened()) || channel_reasoning_; }

 private:
  ChatReplyPiece split(ReasoningSplit r, bool last, bool cut = false);
  std::optional<ReasoningStream> reasoning_;
  std::optional<ToolCallStream> tools_;
  std::string only_function_;  // ReplyFormat::only_function
  TrimmedText content_trim_, reasoning_trim_;
  bool channel_reasoning_ = false;
};

}  // namespace ft::server
