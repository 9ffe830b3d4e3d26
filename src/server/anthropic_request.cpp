// Anthropic Messages API request bodies -> ChatRequest (the form /v1/chat/completions produces), so
// /v1/messages shares the chat pipeline: the conversation becomes OpenAI-style messages for the chat
// template (system first; tool_use blocks -> an assistant's tool_calls; tool_result blocks -> tool
// messages), tools become function tools, stop_sequences the stop strings.
#include <cctype>

#include "server/errors.h"
#include "server/json_fields.h"
#include "server/request_parse.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

namespace {

/** The blocks of `content` (a string is one text block), each checked to be an object with a string
 *  "type". `where` names the field in refusals. */
ojson content_blocks(const ojson& content, const std::string& where) {
  if (content.is_string()) return ojson::array({{{"type", "text"}, {"text", content}}});
  if (!content.is_array())
    bad_request(where, fmt::format("'{}' must be a string or a list of content blocks, got {}", where, type_name(content)));
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string bw = fmt::format("{}[{}]", where, j);
    if (!content[j].is_object()) bad_request(bw, fmt::format("'{}' must be an object, got {}", bw, type_name(content[j])));
    const ojson* t = field(content[j], "type");
    if (!t || !t->is_string()) bad_request(bw + ".type", fmt::format("'{}.type' is required and must be a string", bw));
  }
  return content;
}

/** A text block's text (refuses a block without a string "text"). */
std::string block_text(const ojson& block, const std::string& where) {
  const ojson* t = field(block, "text");
  if (!t || !t->is_string()) bad_request(where + ".text", fmt::format("'{}.text' must be a string", where));
  return t->get<std::string>();
}

bool is_media(const std::string& type) {
  return type == "image" || type == "document" || type == "search_result" || type == "container_upload";
}

[[noreturn]] void unknown_block(const std::string& where, const std::string& type, const char* allowed) {
  bad_request(where + ".type", fmt::format("'{}.type' must be {}, got \"{}\"", where, allowed, type));
}

/** A turn's text blocks joined with newlines. */
struct TextJoin {
  std::string text;
  bool any = false;
  void add(const std::string& t) {
    if (any) text += "\n";
    text += t;
    any = true;
  }
};

/** Calls f(block, its place in the request ("messages[2].content[0]"), its type) for each content
 *  block, in order. */
template <class F>
void each_block(const ojson& blocks, const std::string& where, F&& f) {
  for (size_t j = 0; j < blocks.size(); ++j)
    f(blocks[j], fmt::format("{}[{}]", where, j), blocks[j]["type"].get<std::string>());
}

/** Text blocks joined by "\n" (system prompts, tool results); anything else is refused. */
std::string join_text(const ojson& blocks, const std::string& where) {
  TextJoin text;
  each_block(blocks, where, [&](const ojson& b, const std::string& bw, const std::string& type) {
    if (is_media(type)) refuse_non_text(bw, type);
    if (type != "text") unknown_block(bw, type, "\"text\"");
    text.add(block_text(b, bw));
  });
  return text.text;
}

/** A user turn: its tool_result blocks as tool messages (Anthropic puts them first), then its text. */
void user_turn(const ojson& blocks, const std::string& where, ojson& out) {
  TextJoin text;
  int n_results = 0;
  each_block(blocks, where, [&](const ojson& b, const std::string& bw, const std::string& type) {
    if (type == "text") {
      text.add(block_text(b, bw));
    } else if (type == "tool_result") {
      ++n_results;
      const ojson* id = field(b, "tool_use_id");
      if (!id || !id->is_string())
        bad_request(bw + ".tool_use_id", fmt::format("'{}.tool_use_id' is required and must be a string", bw));
      const ojson* c = field(b, "content");
      const std::string result = c ? join_text(content_blocks(*c, bw + ".content"), bw + ".content") : "";
      out.push_back({{"role", "tool"}, {"tool_call_id", *id}, {"content", result}});
    } else if (is_media(type)) {
      refuse_non_text(bw, type);
    } else {
      unknown_block(bw, type, "\"text\" or \"tool_result\" in a user turn");
    }
  });
  if (text.any || n_results == 0) out.push_back({{"role", "user"}, {"content", text.text}});
}

/** An assistant turn: text blocks joined as content, tool_use blocks as tool_calls (arguments: the
 *  input as JSON text), thinking blocks' text (joined by "\n") as reasoning_content and thinking, as
 *  the OpenAI form gives them to the template (request_parse.cpp); their signatures are not checked.
 *  redacted_thinking blocks (encrypted text) are dropped. */
void assistant_turn(const ojson& blocks, const std::string& where, ojson& out) {
  TextJoin text, thinking;
  ojson calls = ojson::array();
  each_block(blocks, where, [&](const ojson& b, const std::string& bw, const std::string& type) {
    if (type == "text") {
      text.add(block_text(b, bw));
    } else if (type == "tool_use") {
      const ojson* id = field(b, "id");
      const ojson* name = field(b, "name");
      const ojson* input = field(b, "input");
      if (!id || !id->is_string()) bad_request(bw + ".id", fmt::format("'{}.id' is required and must be a string", bw));
      if (!name || !name->is_string())
        bad_request(bw + ".name", fmt::format("'{}.name' is required and must be a string", bw));
      if (input && !input->is_object())
        bad_request(bw + ".input", fmt::format("'{}.input' must be an object, got {}", bw, type_name(*input)));
      const std::string args = input ? dump_json(*input) : "{}";
      calls.push_back({{"id", *id}, {"type", "function"}, {"function", {{"name", *name}, {"arguments", args}}}});
    } else if (type == "thinking") {
      const ojson* t = field(b, "thinking");
      if (!t || !t->is_string()) bad_request(bw + ".thinking", fmt::format("'{}.thinking' must be a string", bw));
      thinking.add(t->get<std::string>());
    } else if (type == "redacted_thinking") {
      // dropped: its text is encrypted by the service that wrote it
    } else if (is_media(type)) {
      refuse_non_text(bw, type);
    } else {
      unknown_block(bw, type, "\"text\", \"tool_use\" or \"thinking\" in an assistant turn");
    }
  });
  ojson msg = {{"role", "assistant"}, {"content", text.text}};
  if (thinking.any) msg["reasoning_content"] = thinking.text;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  if (thinking.any) msg["thinking"] = thinking.text;
  out.push_back(std::move(msg));
}

ojson parse_conversation(const ojson& body) {
  ojson out = ojson::array();
  if (const ojson* sys = field(body, "system")) {
    const std::string text = join_text(content_blocks(*sys, "system"), "system");
    if (!text.empty()) out.push_back({{"role", "system"}, {"content", text}});
  }
  const ojson* msgs = field(body, "messages");
  if (!msgs) bad_request("messages", "'messages' is required");
  if (!msgs->is_array()) bad_request("messages", fmt::format("'messages' must be a list, got {}", type_name(*msgs)));
  if (msgs->empty()) bad_request("messages", "'messages' must hold at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ojson& m = (*msgs)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad_request(where, fmt::format("'{}' must be an object, got {}", where, type_name(m)));
    const std::string role = get_string(m, "role");
    if (role != "user" && role != "assistant")
      bad_request(where + ".role", fmt::format("'{}.role' must be \"user\" or \"assistant\", got \"{}\"", where, role));
    const ojson* content = field(m, "content");
    if (!content) bad_request(where + ".content", fmt::format("'{}.content' is required", where));
    const ojson blocks = content_blocks(*content, where + ".content");
    const bool last = i + 1 == msgs->size();
    const bool empty = blocks.empty() || (content->is_string() && content->get_ref<const std::string&>().empty());
    if (empty && !(last && role == "assistant"))
      bad_request(where + ".content", fmt::format("'{}.content' must not be empty (only the final assistant turn may be)", where));
    for (size_t j = 0; j < blocks.size() && !(last && role == "assistant"); ++j) {
      const ojson* text = field(blocks[j], "text");
      if (blocks[j]["type"] == "text" && text && text->is_string() && text->get_ref<const std::string&>().empty())
        bad_request(fmt::format("{}.content[{}].text", where, j),
                    fmt::format("'{}.content[{}].text' must not be empty (text content blocks must be non-empty)", where, j));
    }
    if (role == "user") user_turn(blocks, where + ".content", out);
    else assistant_turn(blocks, where + ".content", out);
  }
  return out;
}

/** A final assistant turn of text only is a prefill: it leaves the conversation and the reply
 *  continues it (Anthropic's Messages API). Its text may not end in whitespace, as there. */
std::string take_prefill(ojson& conversation) {
  if (conversation.empty()) return "";
  const ojson& last = conversation.back();
  if (last["role"] != "assistant" || last.contains("tool_calls")) return "";
  std::string text = last["content"].is_string() ? last["content"].get<std::string>() : "";
  if (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    bad_request("messages", "the final assistant turn (a prefill the reply continues) must not end in whitespace");
  conversation.erase(conversation.size() - 1);
  return text;
}

/** thinking {type: "enabled", budget_tokens (>= 1024, < max_tokens)} or {type: "disabled"}: the
 *  template's enable_thinking, and with "enabled" the reply's <think> block becomes a thinking block.
 *  The budget is checked, not enforced: the model stops thinking when it does. */
void parse_thinking(const ojson& body, bool count_only, ChatRequest& r) {
  const ojson* t = field(body, "thinking");
  if (!t) return;
  if (!t->is_object())
    bad_request("thinking", fmt::format("'thinking' must be an object such as {{\"type\": \"enabled\", "
                                        "\"budget_tokens\": 2048}}, got {}", type_name(*t)));
  const std::string type = get_string(*t, "type");
  if (type == "disabled") {
    r.template_kwargs["enable_thinking"] = false;
    return;
  }
  if (type != "enabled")
    bad_request("thinking.type", fmt::format("'thinking.type' must be \"enabled\" or \"disabled\", got \"{}\"", type));
  const ojson* b = field(*t, "budget_tokens");
  if (!b || !b->is_number_integer())
    bad_request("thinking.budget_tokens", "'thinking.budget_tokens' is required and must be an integer");
  const int64_t budget = b->get<int64_t>();
  if (budget < 1024) bad_request("thinking.budget_tokens", fmt::format("'thinking.budget_tokens' must be >= 1024, got {}", budget));
  if (!count_only && r.gen.max_tokens && budget >= *r.gen.max_tokens)
    bad_request("thinking.budget_tokens", fmt::format("'thinking.budget_tokens' ({}) must be less than 'max_tokens' ({})",
                                                      budget, *r.gen.max_tokens));
  r.template_kwargs["enable_thinking"] = true;
  r.split_reasoning = true;
}

/** Anthropic tools [{name, description, input_schema}] -> OpenAI function tools (null when none). */
ojson parse_tools(const ojson& body) {
  const ojson* t = field(body, "tools");
  if (!t) return nullptr;
  if (!t->is_array()) bad_request("tools", fmt::format("'tools' must be a list, got {}", type_name(*t)));
  if (t->empty()) return nullptr;
  ojson out = ojson::array();
  for (size_t i = 0; i < t->size(); ++i) {
    const ojson& tool = (*t)[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!tool.is_object()) bad_request(where, fmt::format("'{}' must be an object, got {}", where, type_name(tool)));
    const std::string type = get_string(tool, "type");
    if (!type.empty() && type != "custom")
      bad_request(where + ".type", fmt::format("'{}.type' \"{}\" is a server tool, which this server does not run; only "
                                               "client tools (name, description, input_schema) are supported",
                                               where, type));
    const std::string name = get_string(tool, "name");
    if (name.empty()) bad_request(where + ".name", fmt::format("'{}.name' is required", where));
    const ojson* schema = field(tool, "input_schema");
    if (!schema || !schema->is_object())
      bad_request(where + ".input_schema", fmt::format("'{}.input_schema' is required and must be an object", where));
    ojson fn = {{"name", name}};
    if (const ojson* d = field(tool, "description")) {
      if (!d->is_string()) bad_request(where + ".description", fmt::format("'{}.description' must be a string", where));
      fn["description"] = *d;
    }
    fn["parameters"] = *schema;
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

/** tool_choice {type: auto | any | tool (with a name among the tools) | none} -> r.tool_choice (and
 *  r.tool_choice_name); true for "none". */
bool tool_choice_none(const ojson& body, const ojson& tools, ChatRequest& r) {
  const ojson* tc = field(body, "tool_choice");
  if (!tc) return false;
  if (!tc->is_object())
    bad_request("tool_choice", fmt::format("'tool_choice' must be an object such as {{\"type\": \"auto\"}}, got {}",
                                           type_name(*tc)));
  const std::string type = get_string(*tc, "type");
  get_bool(*tc, "disable_parallel_tool_use", false);
  if (type == "none") r.tool_choice = ChatRequest::ToolChoice::kNone;
  if (type == "auto" || type == "none") return type == "none";
  if (type != "any" && type != "tool")
    bad_request("tool_choice.type",
                fmt::format("'tool_choice.type' must be \"auto\", \"any\", \"tool\" or \"none\", got \"{}\"", type));
  if (tools.is_null()) bad_request("tool_choice", fmt::format("'tool_choice' of type \"{}\" requires 'tools'", type));
  if (type == "tool") {
    const std::string name = get_string(*tc, "name");
    if (name.empty()) bad_request("tool_choice.name", "'tool_choice.name' is required for type \"tool\"");
    bool known = false;
    for (const ojson& t : tools) known = known || t["function"]["name"] == name;
    if (!known) bad_request("tool_choice.name", fmt::format("'tool_choice.name' \"{}\" is not one of the tools", name));
    r.tool_choice = ChatRequest::ToolChoice::kNamed;
    r.tool_choice_name = name;
  } else {
    r.tool_choice = ChatRequest::ToolChoice::kRequired;
  }
  return false;
}

void parse_stop_sequences(const ojson& body, GenerationParams& g) {
  const ojson* v = field(body, "stop_sequences");
  if (!v) return;
  if (!v->is_array())
    bad_request("stop_sequences", fmt::format("'stop_sequences' must be a list of strings, got {}", type_name(*v)));
  if (v->size() > kMaxStopStrings)
    bad_request("stop_sequences", fmt::format("'stop_sequences' holds {} strings; at most {} are allowed", v->size(),
                                              kMaxStopStrings));
  for (size_t i = 0; i < v->size(); ++i) {
    const ojson& s = (*v)[i];
    if (!s.is_string()) bad_request("stop_sequences", fmt::format("stop_sequences[{}] must be a string, got {}", i, type_name(s)));
    if (!s.get_ref<const std::string&>().empty()) g.stop.push_back(s.get<std::string>());
  }
}

}  // namespace

ChatRequest parse_anthropic_request(const ojson& body, bool count_only) {
  ChatRequest r;
  const ojson* model = field(body, "model");
  if (!model || !model->is_string() || model->get_ref<const std::string&>().empty())
    bad_request("model", "'model' is required and must be a string");
  if (!count_only && !field(body, "max_tokens")) bad_request("max_tokens", "'max_tokens' is required");
  r.messages = parse_conversation(body);
  r.assistant_prefill = take_prefill(r.messages);
  if (r.messages.empty() || (r.messages.size() == 1 && r.messages[0]["role"] == "system"))
    bad_request("messages", "'messages' must hold a user turn (a lone assistant turn is a prefill with nothing before it)");
  r.tools = parse_tools(body);
  const bool none = tool_choice_none(body, r.tools, r);
  r.parse_tool_calls = !r.tools.is_null() && !none;
  get_number(body, "temperature", 1.0, 0.0, 1.0);  // Anthropic's range, checked first (the OpenAI parse allows 2)
  if (field(body, "n_predict")) bad_request("n_predict", "'n_predict' is not a Messages API field; use 'max_tokens'");
  r.gen = parse_generation_params(body);
  if (r.gen.n != 1) bad_request("n", "'n' is not a Messages API field (one reply per request)");
  parse_stop_sequences(body, r.gen);
  parse_thinking(body, count_only, r);
  if (const ojson* md = field(body, "metadata"); md && !md->is_object())
    bad_request("metadata", fmt::format("'metadata' must be an object, got {}", type_name(*md)));
  return r;
}

}  // namespace ft::server
