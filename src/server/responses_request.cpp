// Responses API request bodies -> ChatRequest (responses.h): the items become chat messages and the
// Responses fields their chat equivalents in a chat body, which parse_chat_request then validates as
// it does /v1/chat/completions' (its refusals renamed to the Responses fields, with_responses_names).
#include <cctype>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "server/json_fields.h"
#include "server/request_parse.h"
#include "server/responses.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

namespace {

/** Chat fields spelled differently in the Responses API: (chat name, Responses name). json_schema's
 *  fields sit in text.format itself (text.format.schema), so that prefix goes first. */
constexpr std::pair<const char*, const char*> kRenamed[] = {
    {"max_completion_tokens", "max_output_tokens"},
    {"response_format.json_schema", "text.format"},
    {"response_format", "text.format"},
    {"reasoning_effort", "reasoning.effort"},
    {"messages", "input"},
};

/** Responses fields read here, removed before the rest of the body goes to parse_chat_request. */
constexpr const char* kResponsesFields[] = {
    "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "reasoning", "max_output_tokens", "text",
    "store", "previous_response_id", "metadata", "user", "truncation", "include", "stream_options", "background",
    "conversation", "prompt", "context_management", "top_logprobs", "service_tier", "safety_identifier",
    "prompt_cache_key", "prompt_cache_retention"};

/** Chat Completions fields a Responses body must not use, with what to use instead. */
constexpr std::pair<const char*, const char*> kChatOnly[] = {
    {"messages", "'input'"},
    {"max_tokens", "'max_output_tokens'"},
    {"max_completion_tokens", "'max_output_tokens'"},
    {"n_predict", "'max_output_tokens'"},
    {"response_format", "'text.format'"},
    {"reasoning_effort", "'reasoning.effort'"},
    {"logprobs", "nothing: log-probabilities are not supported on /v1/responses"},
    {"n", "one request per response"},
};

/** Text of a content list's text parts joined by "\n" (refusal parts count as their text); media parts
 *  refused as the model reads text only. A string is itself. */
std::string content_text(const ojson& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    bad_request(where, fmt::format("'{}' must be a string or a list of content parts, got {}", where, type_name(content)));
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const ojson& part = content[j];
    const std::string pw = fmt::format("{}[{}]", where, j);
    if (!part.is_object()) bad_request(pw, fmt::format("'{}' must be an object, got {}", pw, type_name(part)));
    const std::string type = get_string(part, "type");
    const char* key = type == "input_text" || type == "output_text" ? "text" : type == "refusal" ? "refusal" : nullptr;
    if (!key) {
      if (type == "input_image" || type == "input_file" || type == "input_audio") refuse_non_text(pw, type);
      bad_request(pw + ".type",
                  fmt::format("'{}.type' must be \"input_text\", \"output_text\" or \"refusal\", got \"{}\"", pw, type));
    }
    const ojson* t = field(part, key);
    if (!t || !t->is_string()) bad_request(fmt::format("{}.{}", pw, key), fmt::format("'{}.{}' must be a string", pw, key));
    if (j > 0) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

/** A required string field of an item. */
std::string item_string(const ojson& item, const char* key, const std::string& where) {
  const ojson* v = field(item, key);
  if (!v || !v->is_string())
    bad_request(fmt::format("{}.{}", where, key), fmt::format("'{}.{}' is required and must be a string", where, key));
  return v->get<std::string>();
}

/** Builds chat messages from input items, in order. */
class ItemsToMessages {
 public:
  void add(const ojson& item, const std::string& where) {
    if (!item.is_object()) bad_request(where, fmt::format("'{}' must be an object, got {}", where, type_name(item)));
    const ojson* t = field(item, "type");
    if (t && !t->is_string()) bad_request(where + ".type", fmt::format("'{}.type' must be a string", where));
    const std::string type = t ? t->get<std::string>() : (field(item, "role") ? "message" : "");
    if (type == "message") return message(item, where);
    if (type == "function_call") return function_call(item, where);
    if (type == "function_call_output") return function_call_output(item, where);
    if (type == "reasoning") return reasoning(item, where);
    if (type.empty()) bad_request(where + ".type", fmt::format("'{}.type' is required (or a message's 'role')", where));
    bad_request(where + ".type",
                fmt::format("'{}.type' \"{}\" is not supported: input items are \"message\", \"function_call\", "
                            "\"function_call_output\" and \"reasoning\" (hosted tools and item references are not)",
                            where, type));
  }

  /** The messages, with reasoning left at the end as an assistant turn of its own. */
  ojson finish() {
    flush_reasoning();
    return std::move(messages_);
  }

 private:
  void message(const ojson& item, const std::string& where) {
    const std::string role = item_string(item, "role", where);
    if (role != "user" && role != "system" && role != "developer" && role != "assistant")
      bad_request(where + ".role", fmt::format("'{}.role' must be one of user, system, developer, assistant; got \"{}\"",
                                               where, role));
    const ojson* content = field(item, "content");
    if (!content) bad_request(where + ".content", fmt::format("'{}.content' is required", where));
    ojson msg = {{"role", role}, {"content", content_text(*content, where + ".content")}};
    if (role == "assistant") {
      take_reasoning(msg);
      messages_.push_back(std::move(msg));
      open_assistant_ = true;
      return;
    }
    flush_reasoning();
    messages_.push_back(std::move(msg));
    open_assistant_ = false;
  }

  void function_call(const ojson& item, const std::string& where) {
    const std::string call_id = item_string(item, "call_id", where);
    const std::string name = item_string(item, "name", where);
    const std::string arguments = item_string(item, "arguments", where);
    if (!open_assistant_ || has_reasoning_) {  // calls after a turn's text join that turn
      ojson msg = {{"role", "assistant"}, {"content", ""}};
      take_reasoning(msg);
      messages_.push_back(std::move(msg));
      open_assistant_ = true;
    }
    ojson& msg = messages_.back();
    if (!msg.contains("tool_calls")) msg["tool_calls"] = ojson::array();
    msg["tool_calls"].push_back(
        {{"id", call_id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments}}}});
    call_names_[call_id] = name;
  }

  void function_call_output(const ojson& item, const std::string& where) {
    const std::string call_id = item_string(item, "call_id", where);
    const ojson* out = field(item, "output");
    if (!out) bad_request(where + ".output", fmt::format("'{}.output' is required", where));
    flush_reasoning();
    ojson msg = {{"role", "tool"}, {"tool_call_id", call_id}, {"content", content_text(*out, where + ".output")}};
    if (auto it = call_names_.find(call_id); it != call_names_.end()) msg["name"] = it->second;
    messages_.push_back(std::move(msg));
    open_assistant_ = false;
  }

  void reasoning(const ojson& item, const std::string& where) {
    const ojson* content = field(item, "content");
    if (!content) return;  // a summary or encrypted_content only: no reasoning text to give the template
    if (!content->is_array()) bad_request(where + ".content", fmt::format("'{}.content' must be a list", where));
    for (size_t j = 0; j < content->size(); ++j) {
      const std::string pw = fmt::format("{}.content[{}]", where, j);
      const ojson& part = (*content)[j];
      if (!part.is_object() || get_string(part, "type") != "reasoning_text")
        bad_request(pw, fmt::format("'{}' must be {{\"type\": \"reasoning_text\", \"text\": ...}}", pw));
      if (has_reasoning_) reasoning_ += "\n";
      reasoning_ += item_string(part, "text", pw);
      has_reasoning_ = true;
    }
  }

  /** The pending reasoning goes onto `msg` (an assistant turn) as reasoning_content. */
  void take_reasoning(ojson& msg) {
    if (!has_reasoning_) return;
    msg["reasoning_content"] = std::move(reasoning_);
    reasoning_.clear();
    has_reasoning_ = false;
  }

  /** Reasoning no assistant text or call followed: an assistant turn of its own, as the model left it. */
  void flush_reasoning() {
    if (!has_reasoning_) return;
    ojson msg = {{"role", "assistant"}, {"content", ""}};
    take_reasoning(msg);
    messages_.push_back(std::move(msg));
    open_assistant_ = false;
  }

  ojson messages_ = ojson::array();
  std::string reasoning_;
  bool has_reasoning_ = false;
  bool open_assistant_ = false;  // the last message is an assistant turn that later calls may join
  std::unordered_map<std::string, std::string> call_names_;
};

/** Responses function tools (flat: {type, name, description, parameters, strict}) -> chat tools
 *  ({type, function: {...}}); null when there are none. */
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
    if (type != "function")
      bad_request(where + ".type", fmt::format("'{}.type' \"{}\" is not supported: only function tools "
                                               "({{\"type\": \"function\", \"name\", \"parameters\"}}) are; this "
                                               "server runs no hosted tools",
                                               where, type));
    const std::string name = get_string(tool, "name");
    if (name.empty()) bad_request(where + ".name", fmt::format("'{}.name' is required", where));
    ojson fn = {{"name", name}};
    if (const ojson* d = field(tool, "description")) {
      if (!d->is_string()) bad_request(where + ".description", fmt::format("'{}.description' must be a string", where));
      fn["description"] = *d;
    }
    if (const ojson* p = field(tool, "parameters")) {
      if (!p->is_object())
        bad_request(where + ".parameters", fmt::format("'{}.parameters' must be an object (a JSON Schema)", where));
      fn["parameters"] = *p;
    }
    if (const ojson* s = field(tool, "strict")) {
      if (!s->is_boolean()) bad_request(where + ".strict", fmt::format("'{}.strict' must be a boolean", where));
      fn["strict"] = *s;
    }
    out.push_back({{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

/** Responses tool_choice -> chat's: the options as they are, {type: "function", name} -> {type:
 *  "function", function: {name}}. */
ojson parse_tool_choice(const ojson& tc) {
  if (tc.is_string()) return tc;  // chat's parse checks the value
  if (!tc.is_object())
    bad_request("tool_choice", fmt::format("'tool_choice' must be a string or an object, got {}", type_name(tc)));
  const std::string type = get_string(tc, "type");
  if (type != "function")
    bad_request("tool_choice.type", fmt::format("'tool_choice.type' \"{}\" is not supported: use \"auto\", \"none\", "
                                                "\"required\" or {{\"type\": \"function\", \"name\"}}",
                                                type));
  return {{"type", "function"}, {"function", {{"name", get_string(tc, "name")}}}};
}

/** text.format -> chat's response_format: {type: text | json_object} as they are, json_schema's
 *  name / schema / strict / description under json_schema. */
ojson response_format_of(const ojson& format) {
  if (!format.is_object())
    bad_request("text.format", fmt::format("'text.format' must be an object such as {{\"type\": \"text\"}}, got {}",
                                           type_name(format)));
  if (get_string(format, "type") != "json_schema") return format;
  ojson schema = ojson::object();
  for (const char* k : {"name", "schema", "strict", "description"})
    if (const ojson* v = field(format, k)) schema[k] = *v;
  return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

void parse_metadata(const ojson& body) {
  const ojson* md = field(body, "metadata");
  if (!md) return;
  if (!md->is_object()) bad_request("metadata", fmt::format("'metadata' must be an object, got {}", type_name(*md)));
  if (md->size() > 16) bad_request("metadata", fmt::format("'metadata' holds {} pairs; at most 16 are allowed", md->size()));
  for (auto it = md->begin(); it != md->end(); ++it) {
    if (it.key().size() > 64) bad_request("metadata", fmt::format("'metadata' key \"{}\" is longer than 64 characters", it.key()));
    if (!it.value().is_string() || it.value().get_ref<const std::string&>().size() > 512)
      bad_request("metadata", fmt::format("'metadata[\"{}\"]' must be a string of at most 512 characters", it.key()));
  }
}

/** Accepted `include` values (ResponseIncludable); all but logprobs concern items this server never
 *  returns, or add nothing (reasoning text is always in the reasoning item's content). */
void parse_include(const ojson& body) {
  const ojson* inc = field(body, "include");
  if (!inc) return;
  if (!inc->is_array()) bad_request("include", fmt::format("'include' must be a list, got {}", type_name(*inc)));
  static constexpr std::string_view kKnown[] = {
      "file_search_call.results",      "web_search_call.results",  "web_search_call.action.sources",
      "message.input_image.image_url", "computer_call_output.output.image_url", "code_interpreter_call.outputs",
      "reasoning.encrypted_content"};
  for (size_t i = 0; i < inc->size(); ++i) {
    const ojson& v = (*inc)[i];
    const std::string s = v.is_string() ? v.get<std::string>() : "";
    if (s == "message.output_text.logprobs")
      bad_request("include", "'include' \"message.output_text.logprobs\" is not supported by this server");
    bool known = false;
    for (std::string_view k : kKnown) known = known || s == k;
    if (!known) bad_request("include", fmt::format("include[{}] is not a known includable, got {}", i, dump_json(v)));
  }
}

/** Fields that ask for what this server does not do, refused unless absent, null or empty. */
void refuse_unsupported(const ojson& body) {
  if (get_bool(body, "background", false))
    bad_request("background", "'background' responses are not supported by this server; send the request without it");
  for (const char* name : {"conversation", "prompt", "context_management"}) {
    const ojson* v = field(body, name);
    if (v && !(v->is_array() && v->empty()))
      bad_request(name, fmt::format("'{}' is not supported by this server", name));
  }
  if (get_int(body, "top_logprobs", 0, 20).value_or(0) > 0)
    bad_request("top_logprobs", "'top_logprobs' is not supported on /v1/responses (no log-probabilities)");
  for (const auto& [chat, instead] : kChatOnly)
    if (body.contains(chat))
      bad_request(chat, fmt::format("'{}' is a Chat Completions field; the Responses API uses {}", chat, instead));
  for (const char* name : {"service_tier", "safety_identifier", "prompt_cache_key", "prompt_cache_retention", "user"})
    if (const ojson* v = field(body, name); v && !v->is_string())
      bad_request(name, fmt::format("'{}' must be a string, got {}", name, type_name(*v)));
  if (const ojson* so = field(body, "stream_options"); so && !so->is_object())
    bad_request("stream_options", fmt::format("'stream_options' must be an object, got {}", type_name(*so)));
}

/** The previous response's items (input, then output), or 400 when it is not stored. */
ojson previous_items(const std::string& id, ResponseStore& store) {
  std::optional<StoredResponse> prev = store.get(id);
  if (!prev)
    throw ApiException(ApiError{400, fmt::format("Previous response with id '{}' not found.", id),
                                "invalid_request_error", "previous_response_id", "previous_response_not_found"});
  ojson items = std::move(prev->input_items);
  for (const ojson& o : prev->response["output"]) items.push_back(o);
  return items;
}

/** A number field's value as sent, or `def`. */
ojson number_or(const ojson& body, const char* key, double def) {
  const ojson* v = field(body, key);
  return v && v->is_number() ? *v : ojson(def);
}

}  // namespace

ApiError with_responses_names(ApiError e) {
  for (const auto& [chat, resp] : kRenamed) {
    const std::string_view c(chat);
    if (e.param.rfind(c, 0) == 0 && (e.param.size() == c.size() || e.param[c.size()] == '[' || e.param[c.size()] == '.'))
      e.param = resp + e.param.substr(c.size());
    for (size_t at = 0; (at = e.message.find(c, at)) != std::string::npos;) {
      const bool word_start = at == 0 || !(std::isalnum(static_cast<unsigned char>(e.message[at - 1])) || e.message[at - 1] == '_');
      const size_t end = at + c.size();
      const bool word_end = end == e.message.size() || !(std::isalnum(static_cast<unsigned char>(e.message[end])) || e.message[end] == '_');
      if (word_start && word_end) {
        e.message.replace(at, c.size(), resp);
        at += std::string_view(resp).size();
      } else {
        at = end;
      }
    }
  }
  return e;
}

ResponsesRequest parse_responses_request(const ojson& body, ResponseStore& store) {
  refuse_unsupported(body);
  parse_metadata(body);
  parse_include(body);
  ResponsesRequest r;
  r.store = get_bool(body, "store", true);
  r.parallel_tool_calls = get_bool(body, "parallel_tool_calls", true);

  const ojson* prev = field(body, "previous_response_id");
  if (prev && !prev->is_string())
    bad_request("previous_response_id", fmt::format("'previous_response_id' must be a string, got {}", type_name(*prev)));
  if (prev) r.input_items = previous_items(prev->get<std::string>(), store);
  const size_t n_prev = r.input_items.size();  // refusals name stored items apart from input[i]
  if (const ojson* input = field(body, "input")) {
    if (input->is_string()) {
      r.input_items.push_back({{"type", "message"}, {"role", "user"}, {"content", *input}});
    } else if (input->is_array()) {
      for (const ojson& item : *input) r.input_items.push_back(item);
    } else {
      bad_request("input", fmt::format("'input' must be a string or a list of items, got {}", type_name(*input)));
    }
  }
  ItemsToMessages conv;
  const ojson* instructions = field(body, "instructions");
  if (instructions && !instructions->is_string())
    bad_request("instructions", fmt::format("'instructions' must be a string, got {}", type_name(*instructions)));
  ojson messages = ojson::array();
  if (instructions && !instructions->get_ref<const std::string&>().empty())
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  for (size_t i = 0; i < r.input_items.size(); ++i)
    conv.add(r.input_items[i], i < n_prev ? fmt::format("previous_response_id (item {})", i)
                                          : fmt::format("input[{}]", i - n_prev));
  for (ojson& m : conv.finish()) messages.push_back(std::move(m));
  bool has_turn = false;
  for (const ojson& m : messages) has_turn = has_turn || m["role"] != "system";
  if (!has_turn) bad_request("input", "'input' is required: a string or a list of items with at least one message");

  ojson chat = body;  // the fields both APIs share (model, stream, temperature, top_p) and chat's extensions
  for (const char* k : kResponsesFields) chat.erase(k);
  chat["messages"] = std::move(messages);
  const ojson tools = parse_tools(body);
  if (!tools.is_null()) chat["tools"] = tools;
  if (const ojson* tc = field(body, "tool_choice")) chat["tool_choice"] = parse_tool_choice(*tc);
  if (const ojson* m = field(body, "max_output_tokens")) chat["max_completion_tokens"] = *m;
  ojson reasoning_echo = {{"effort", nullptr}, {"summary", nullptr}};
  if (const ojson* rs = field(body, "reasoning")) {
    if (!rs->is_object()) bad_request("reasoning", fmt::format("'reasoning' must be an object, got {}", type_name(*rs)));
    if (const ojson* e = field(*rs, "effort")) {
      chat["reasoning_effort"] = *e;
      reasoning_echo["effort"] = *e;
    }
    for (const char* k : {"summary", "generate_summary"}) {
      const ojson* s = field(*rs, k);
      if (!s) continue;
      const std::string v = s->is_string() ? s->get<std::string>() : "";
      if (v != "auto" && v != "concise" && v != "detailed")
        bad_request(fmt::format("reasoning.{}", k),
                    fmt::format("'reasoning.{}' must be \"auto\", \"concise\" or \"detailed\", got {}", k, dump_json(*s)));
      reasoning_echo["summary"] = v;
    }
  }
  ojson text_echo = {{"format", {{"type", "text"}}}};
  if (const ojson* t = field(body, "text")) {
    if (!t->is_object()) bad_request("text", fmt::format("'text' must be an object, got {}", type_name(*t)));
    if (const ojson* f = field(*t, "format")) {
      chat["response_format"] = response_format_of(*f);
      text_echo["format"] = *f;
    }
    if (const ojson* v = field(*t, "verbosity")) {
      if (!v->is_string() || v->get<std::string>() != "medium")
        bad_request("text.verbosity",
                    fmt::format("'text.verbosity' {} is not supported by this model; only \"medium\" is", dump_json(*v)));
      text_echo["verbosity"] = *v;
    }
  }
  if (const ojson* tr = field(body, "truncation")) {
    const std::string v = tr->is_string() ? tr->get<std::string>() : "";
    if (v != "disabled" && v != "auto")
      bad_request("truncation", fmt::format("'truncation' must be \"disabled\" or \"auto\", got {}", dump_json(*tr)));
  }
  try {
    r.chat = parse_chat_request(chat);
  } catch (const ApiException& e) {
    throw ApiException(with_responses_names(e.error));
  }

  ojson& echo = r.echo;
  echo["instructions"] = instructions ? *instructions : ojson(nullptr);
  echo["max_output_tokens"] = field(body, "max_output_tokens") ? body["max_output_tokens"] : ojson(nullptr);
  echo["parallel_tool_calls"] = r.parallel_tool_calls;
  echo["previous_response_id"] = prev ? *prev : ojson(nullptr);
  echo["reasoning"] = std::move(reasoning_echo);
  echo["store"] = r.store;
  echo["temperature"] = number_or(body, "temperature", 1.0);
  echo["text"] = std::move(text_echo);
  echo["tool_choice"] = field(body, "tool_choice") ? body["tool_choice"] : ojson("auto");
  echo["tools"] = tools.is_null() ? ojson::array() : body["tools"];
  echo["top_p"] = number_or(body, "top_p", 1.0);
  echo["truncation"] = "disabled";  // "auto" is accepted and works as "disabled"
  if (const ojson* u = field(body, "user")) echo["user"] = *u;
  echo["metadata"] = field(body, "metadata") ? body["metadata"] : ojson::object();
  return r;
}

}  // namespace ft::server
