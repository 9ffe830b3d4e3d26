#include "tokenizer/chat_template.h"

#include <cstdio>
#include <filesystem>

#include "formats/hf_config.h"
#include "tokenizer/jinja/json.h"
#include "util/read_file.h"

namespace ft {

const char* const kChatMLTemplate =
    "{%- for message in messages -%}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' -}}\n"
    "{%- if message['content'] is string -%}\n"
    "{{- message['content'] -}}\n"
    "{%- elif message['content'] is iterable -%}\n"
    "{%- for part in message['content'] -%}\n"
    "{%- if part['type'] == 'text' -%}{{- part['text'] -}}{%- endif -%}\n"
    "{%- endfor -%}\n"
    "{%- endif -%}\n"
    "{{- '<|im_end|>\\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}\n";

ChatTemplate::ChatTemplate(std::string_view source, std::optional<std::string> bos_token,
                           std::optional<std::string> eos_token)
    : source_(source), template_(source), bos_token_(std::move(bos_token)), eos_token_(std::move(eos_token)) {}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& extra,
                                 const jinja::RenderOptions& options) const {
  using jinja::Value;
  if (!messages.is_array()) fail(ErrorCode::kInvalidArgument, "chat template: messages must be an array");
  if (!extra.is_null() && !extra.is_object())
    fail(ErrorCode::kInvalidArgument, "chat template: extra template variables must be an object");
  // transformers: render(messages=, tools=, documents=, add_generation_prompt=, **special_tokens, **kwargs)
  jinja::Dict vars;
  vars.items.reserve(8 + (extra.is_object() ? extra.size() : 0));
  vars.items.emplace_back(Value("messages"), jinja::from_json(messages));
  vars.items.emplace_back(Value("tools"), tools.is_null() ? Value::none() : jinja::from_json(tools));
  vars.items.emplace_back(Value("documents"), Value::none());
  vars.items.emplace_back(Value("add_generation_prompt"), Value(add_generation_prompt));
  if (bos_token_) vars.items.emplace_back(Value("bos_token"), Value(*bos_token_));
  if (eos_token_) vars.items.emplace_back(Value("eos_token"), Value(*eos_token_));
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) vars.set(Value(it.key()), jinja::from_json(it.value()));
  return template_.render(vars, options);
}

std::string ChatTemplate::render_conversation(const nlohmann::ordered_json& conversation,
                                              const jinja::RenderOptions& options) const {
  if (!conversation.is_object() || !conversation.contains("messages"))
    fail(ErrorCode::kInvalidArgument, "chat template: a conversation is an object with a 'messages' array");
  nlohmann::ordered_json tools = nullptr, extra = nlohmann::ordered_json::object();
  bool add_generation_prompt = false;
  for (auto it = conversation.begin(); it != conversation.end(); ++it) {
    if (it.key() == "messages") continue;
    if (it.key() == "tools") tools = it.value();
    else if (it.key() == "add_generation_prompt") add_generation_prompt = it.value().is_boolean() ? it.value().get<bool>() : !it.value().is_null();
    else extra[it.key()] = it.value();
  }
  return render(conversation["messages"], tools, add_generation_prompt, extra, options);
}

std::optional<std::string> chat_template_from_tokenizer_config(const nlohmann::json& config, std::string_view name) {
  if (!config.is_object() || !config.contains("chat_template")) return std::nullopt;
  const auto& t = config["chat_template"];
  if (t.is_string()) return t.get<std::string>();
  if (t.is_null()) return std::nullopt;
  if (!t.is_array()) fail(ErrorCode::kInvalidFile, "tokenizer_config.json: chat_template must be a string or a list");
  std::optional<std::string> fallback;
  for (const auto& entry : t) {
    if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
        !entry["template"].is_string())
      fail(ErrorCode::kInvalidFile, "tokenizer_config.json: chat_template list entries need string 'name' and 'template'");
    if (entry["name"] == name) return entry["template"].get<std::string>();
    if (entry["name"] == "default") fallback = entry["template"].get<std::string>();
  }
  return fallback;
}


std::optional<std::string> find_chat_template(const std::string& model_dir) {
  namespace fs = std::filesystem;
  fs::path dir(model_dir);
  if (fs::exists(dir / "chat_template.jinja")) return read_text_file((dir / "chat_template.jinja").string());
  if (fs::exists(dir / "chat_template.json")) {
    nlohmann::json j = read_json_file((dir / "chat_template.json").string());
    if (auto t = chat_template_from_tokenizer_config(j)) return t;
  }
  if (fs::exists(dir / "tokenizer_config.json"))
    return chat_template_from_tokenizer_config(read_json_file((dir / "tokenizer_config.json").string()));
  return std::nullopt;
}

std::string special_token_text(const nlohmann::json& entry) {
  if (entry.is_string()) return entry.get<std::string>();
  if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) return entry["content"].get<std::string>();
  return "";
}

std::tm parse_clock(std::string_view text) {
  std::tm tm{};
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  std::string t(text);
  int n = std::sscanf(t.c_str(), "%4d-%2d-%2d%*[T ]%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &s);
  if (!(n == 3 || n == 6) || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60)
    fail(ErrorCode::kInvalidArgument, "clock '{}': expected YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS", text);
  tm.tm_year = y - 1900;
  tm.tm_mon = mo - 1;
  tm.tm_mday = d;
  tm.tm_hour = h;
  tm.tm_min = mi;
  tm.tm_sec = s;
  std::tm norm = tm;
  timegm(&norm);  // fills weekday and day of year
  tm.tm_wday = norm.tm_wday;
  tm.tm_yday = norm.tm_yday;
  tm.tm_isdst = 0;
  return tm;
}

}  // namespace ft
