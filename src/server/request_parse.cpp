#include "server/request_parse.h"

#include <cmath>
#include <limits>
#include <string_view>

#include "server/errors.h"
#include "server/json_body.h"
#include "server/json_fields.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

namespace {


void parse_stop(const ojson& body, GenerationParams& g) {
  const ojson* v = field(body, "stop");
  if (!v) return;
  if (v->is_string()) {
    if (!v->get_ref<const std::string&>().empty()) g.stop.push_back(v->get<std::string>());
    return;
  }
  if (!v->is_array()) bad_request("stop", fmt::format("'stop' must be a string or a list of strings, got {}", type_name(*v)));
  if (v->size() > kMaxStopStrings)
    bad_request("stop", fmt::format("'stop' holds {} strings; at most {} are allowed", v->size(), kMaxStopStrings));
  for (size_t i = 0; i < v->size(); ++i) {
    const ojson& s = (*v)[i];
    if (!s.is_string()) bad_request("stop", fmt::format("stop[{}] must be a string, got {}", i, type_name(s)));
    if (!s.get_ref<const std::string&>().empty()) g.stop.push_back(s.get<std::string>());
  }
}

/** One logit_bias entry, `where` naming it in errors: a token id in [0, 2^31) and a bias, a number in
 *  [-100, 100] or, in llama.cpp's list form (`ban_allowed`), false for -inf (a ban). */
void add_logit_bias(SamplingParams& s, const std::string& where, int64_t id, const ojson& b, bool ban_allowed) {
  if (id < 0 || id > std::numeric_limits<int32_t>::max())
    bad_request("logit_bias", fmt::format("'{}' names token {}, not a token id", where, id));
  float bias = 0.0f;
  if (ban_allowed && b.is_boolean() && !b.get<bool>()) {
    bias = -std::numeric_limits<float>::infinity();
  } else if (b.is_number() && std::isfinite(b.get<double>()) && b.get<double>() >= -100.0 && b.get<double>() <= 100.0) {
    bias = static_cast<float>(b.get<double>());
  } else {
    bad_request("logit_bias", fmt::format("the bias of '{}' must be a number in [-100, 100]{}, got {}", where,
                                          ban_allowed ? " or false" : "", b.dump()));
  }
  s.logit_bias.emplace_back(static_cast<int32_t>(id), bias);
}

/** OpenAI logit_bias: {"<token id>": bias in [-100, 100], ...}, or llama.cpp's [[id, bias or false], ...].
 *  Ids are checked against the vocabulary at submission (submit_generation), where it is known. */
void parse_logit_bias(const ojson& body, SamplingParams& s) {
  const ojson* v = field(body, "logit_bias");
  if (!v || v->is_null()) return;
  if (v->is_array()) {
    for (size_t i = 0; i < v->size(); ++i) {
      const ojson& pair = (*v)[i];
      const std::string where = fmt::format("logit_bias[{}]", i);
      if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer())
        bad_request("logit_bias", fmt::format("'{}' must be a pair [token id, bias or false]", where));
      add_logit_bias(s, where, pair[0].get<int64_t>(), pair[1], true);
    }
    return;
  }
  if (!v->is_object())
    bad_request("logit_bias", fmt::format("'logit_bias' must be an object mapping token ids to biases in [-100, 100] "
                                          "(or llama.cpp's list of [id, bias] pairs), got {}", type_name(*v)));
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    if (key.empty() || key.size() > 10 || key.find_first_not_of("0123456789") != std::string::npos)
      bad_request("logit_bias", fmt::format("'logit_bias' keys must be token ids (non-negative integers as strings), "
                                            "got \"{}\"", key));
    add_logit_bias(s, fmt::format("logit_bias[\"{}\"]", key), std::stoll(key), it.value(), false);
  }
}

/** OpenAI response_format: {"type": "text"} (nothing to do), {"type": "json_object"} (the reply is a
 *  JSON object) or {"type": "json_schema", "json_schema": {"name", "schema", "strict", "description"}}
 *  (a value of the schema; `strict` is accepted either way: the output always follows the schema). */
void parse_response_format(const ojson& body, GenerationParams& g) {
  const ojson* v = field(body, "response_format");
  if (!v || v->is_null()) return;
  if (!v->is_object())
    bad_request("response_format", fmt::format("'response_format' must be an object such as {{\"type\": \"text\"}}, got {}",
                                               type_name(*v)));
  const ojson* t = field(*v, "type");
  if (!t || !t->is_string())
    bad_request("response_format.type", "'response_format.type' is required and must be a string (\"text\", "
                                        "\"json_object\" or \"json_schema\")");
  const std::string& type = t->get_ref<const std::string&>();
  if (type == "text") return;
  if (type == "json_object") {
    // llama.cpp's server also takes a schema here ({"type": "json_object", "schema": {...}}).
    if (const ojson* schema = field(*v, "schema"); schema && !schema->is_null()) {
      if (!(schema->is_object() || schema->is_boolean()))
        bad_request("response_format.schema",
                    fmt::format("'response_format.schema' must be a JSON Schema object, got {}", type_name(*schema)));
      g.structured = GenerationParams::Structured::kJsonSchema;
      g.json_schema = *schema;
      g.json_schema_param = "response_format.schema";
      return;
    }
    g.structured = GenerationParams::Structured::kJsonObject;
    return;
  }
  if (type != "json_schema")
    bad_request("response_format.type",
                fmt::format("'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"{}\"", type));
  const ojson* js = field(*v, "json_schema");
  if (!js || !js->is_object())
    bad_request("response_format.json_schema",
                "'response_format.json_schema' is required with type \"json_schema\" and must be an object "
                "{\"name\": ..., \"schema\": {...}}");
  if (const ojson* name = field(*js, "name"); name && !name->is_null() && !name->is_string())
    bad_request("response_format.json_schema.name",
                fmt::format("'response_format.json_schema.name' must be a string, got {}", type_name(*name)));
  if (const ojson* strict = field(*js, "strict"); strict && !strict->is_null() && !strict->is_boolean())
    bad_request("response_format.json_schema.strict",
                fmt::format("'response_format.json_schema.strict' must be a boolean, got {}", type_name(*strict)));
  const ojson* schema = field(*js, "schema");
  if (!schema || !(schema->is_object() || schema->is_boolean()))
    bad_request("response_format.json_schema.schema",
                "'response_format.json_schema.schema' is required and must be a JSON Schema object");
  g.structured = GenerationParams::Structured::kJsonSchema;
  g.json_schema = *schema;
  g.json_schema_param = "response_format.json_schema.schema";
}

/** The other engines' spellings of a JSON Schema constraint: llama.cpp's `json_schema`, vLLM's
 *  `guided_json` and `structured_outputs: {"json": schema}`. Null, absent and (llama.cpp's web UI)
 *  empty-string values ask for nothing. One constraint a request: two are refused. */
void parse_schema_aliases(const ojson& body, GenerationParams& g) {
  const auto take = [&](const ojson& schema, const std::string& param) {
    if (!(schema.is_object() || schema.is_boolean()))
      bad_request(param, fmt::format("'{}' must be a JSON Schema object, got {}", param, type_name(schema)));
    if (g.structured != GenerationParams::Structured::kNone)
      bad_request(param, fmt::format("'{}' and another structured-output field (response_format, json_schema, "
                                     "guided_json, structured_outputs) are both given; send one", param));
    g.structured = GenerationParams::Structured::kJsonSchema;
    g.json_schema = schema;
    g.json_schema_param = param;
  };
  for (const char* name : {"json_schema", "guided_json"}) {
    const ojson* v = field(body, name);
    if (!v || v->is_null() || (v->is_string() && v->get_ref<const std::string&>().empty())) continue;
    if (v->is_string()) {  // vLLM takes the schema as JSON text too
      const ojson parsed = ojson::parse(v->get_ref<const std::string&>(), nullptr, false);
      if (parsed.is_discarded()) bad_request(name, fmt::format("'{}' is a string that is not JSON", name));
      take(parsed, name);
    } else {
      take(*v, name);
    }
  }
  if (const ojson* so = field(body, "structured_outputs"); so && !so->is_null()) {
    if (!so->is_object())
      bad_request("structured_outputs", fmt::format("'structured_outputs' must be an object, got {}", type_name(*so)));
    for (auto it = so->begin(); it != so->end(); ++it) {
      if (it.value().is_null()) continue;
      if (it.key() == "json") take(it.value(), "structured_outputs.json");
      else if (it.key() != "disable_any_whitespace" && it.key() != "disable_fallback" &&
               it.key() != "disable_additional_properties" && it.key() != "whitespace_pattern" &&
               it.key() != "backend")
        bad_request("structured_outputs." + it.key(),
                    fmt::format("'structured_outputs.{}' is not supported by this server (only 'json')", it.key()));
    }
  }
}

/** llama.cpp server sampling fields this server does not implement, with the value that leaves the
 *  output unchanged (clients such as llama.cpp's web UI send every field at its default). Not listed:
 *  fields that change nothing on their own (repeat_last_n, the window of repeat_penalty). */
struct ForeignSampler {
  const char* name;
  double neutral;
  const char* instead;  // what to use here, or ""
  bool below_too = false;  // values below `neutral` are off too
};
constexpr ForeignSampler kForeignSamplers[] = {
    {"repeat_penalty", 1.0, "; use 'repetition_penalty' (over the prompt and the generated tokens)"},
    {"mirostat", 0.0, ""},
    {"typical_p", 1.0, ""},
    {"tfs_z", 1.0, ""},
    {"dry_multiplier", 0.0, ""},
    {"xtc_probability", 0.0, ""},
    {"top_n_sigma", 0.0, "", true},
    {"dynatemp_range", 0.0, ""},
};

/** A foreign sampler field at a value other than its neutral one changes the output and is refused
 *  (400 naming the field) rather than ignored; at the neutral value it is accepted. */
void refuse_foreign_samplers(const ojson& body) {
  for (const ForeignSampler& f : kForeignSamplers) {
    const ojson* v = field(body, f.name);
    if (!v || v->is_null()) continue;
    if (!v->is_number()) bad_request(f.name, fmt::format("'{}' must be a number, got {}", f.name, type_name(*v)));
    if (v->get<double>() != f.neutral && !(f.below_too && v->get<double>() < f.neutral))
      bad_request(f.name, fmt::format("'{}' (llama.cpp's sampler) is not supported by this server, except at {}{}{}",
                                      f.name, f.neutral, f.below_too ? " or below" : "", f.instead));
  }
}

/** vLLM request fields this server does not implement, refused (400 naming the field) unless they ask
 *  for nothing: absent, null, false, 0 or an empty list. (allowed_token_ids and bad_words restrict the
 *  vocabulary, prompt_logprobs asks for the prompt's, use_beam_search for another search,
 *  truncate_prompt_tokens cuts the prompt; top_a is another engines' sampler.) */
void refuse_unimplemented_fields(const ojson& body) {
  // OpenAI's deprecated `functions` / `function_call` (the `tools` form is taken), audio output and
  // predicted outputs are not implemented either.
  for (const char* name : {"allowed_token_ids", "bad_words", "prompt_logprobs", "use_beam_search",
                           "truncate_prompt_tokens", "top_a", "functions", "function_call", "audio", "prediction"}) {
    const ojson* v = field(body, name);
    if (!v || v->is_null() || (v->is_boolean() && !v->get<bool>()) || (v->is_number() && v->get<double>() == 0.0) ||
        (v->is_array() && v->empty()))
      continue;
    bad_request(name, fmt::format("'{}' is not supported by this server", name));
  }
}

/** The constrained decoding this server does not do (llama.cpp's GBNF grammar, vLLM's guided regex,
 *  choice and grammar) is refused (400 naming the field) rather than ignored. Empty strings and lists
 *  (llama.cpp's web UI sends "grammar": "") ask for nothing and are accepted. */
void refuse_constrained_decoding(const ojson& body) {
  for (const char* name : {"grammar", "guided_regex", "guided_choice", "guided_grammar"}) {
    const ojson* v = field(body, name);
    if (!v || v->is_null() || (v->is_string() && v->get_ref<const std::string&>().empty()) ||
        (v->is_array() && v->empty()))
      continue;
    bad_request(name, fmt::format("'{}' is not supported by this server (constrained decoding takes a JSON Schema: "
                                  "response_format json_schema)",
                                  name));
  }
}

/** vLLM's stop fields beyond `stop`: stop_token_ids (token ids that end generation, checked against the
 *  vocabulary at submission) and include_stop_str_in_output. */
void parse_vllm_stop_fields(const ojson& body, GenerationParams& g) {
  if (const ojson* v = field(body, "stop_token_ids"); v && !v->is_null()) {
    if (!v->is_array())
      bad_request("stop_token_ids", fmt::format("'stop_token_ids' must be a list of token ids, got {}", type_name(*v)));
    if (v->size() > 64) bad_request("stop_token_ids", fmt::format("'stop_token_ids' holds {} ids; at most 64 are allowed", v->size()));
    for (size_t i = 0; i < v->size(); ++i)  // ids past the vocabulary are refused at submission, which knows it
      g.stop_token_ids.push_back(static_cast<int32_t>(
          as_int((*v)[i], "stop_token_ids", fmt::format("stop_token_ids[{}]", i), 0, std::numeric_limits<int32_t>::max())));
  }
  g.include_stop_str = get_bool(body, "include_stop_str_in_output", false);
}

}  // namespace

GenerationParams parse_generation_params(const ojson& body) {
  GenerationParams g;
  g.model = get_string(body, "model");
  g.stream = get_bool(body, "stream", false);
  if (const ojson* t = field(body, "timeout"); t && !t->is_null())
    g.timeout_s = get_number(body, "timeout", 0.0, 0.001, 7 * 86400.0);
  if (const ojson* so = field(body, "stream_options"); so && !so->is_null()) {
    if (!so->is_object()) bad_request("stream_options", fmt::format("'stream_options' must be an object, got {}", type_name(*so)));
    if (!g.stream) bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
    g.include_usage = get_bool(*so, "include_usage", false);
  }
  const int64_t kMaxTok = std::numeric_limits<int32_t>::max();
  std::optional<int64_t> mt = get_int(body, "max_tokens", 1, kMaxTok);
  if (auto mct = get_int(body, "max_completion_tokens", 1, kMaxTok)) mt = mct;
  // llama.cpp's n_predict, which takes precedence there too: -1 (or -2) runs to the context limit.
  if (auto np = get_int(body, "n_predict", -2, kMaxTok)) {
    if (*np == 0) bad_request("n_predict", "'n_predict' must be -1 or -2 (up to the context limit) or at least 1, got 0");
    mt = *np > 0 ? np : std::nullopt;
    g.from_n_predict = true;
  }
  if (mt) g.max_tokens = static_cast<int32_t>(*mt);
  SamplingParams& s = g.sampling;
  s.temperature = static_cast<float>(get_number(body, "temperature", 1.0, 0.0, 2.0));
  if (const ojson* tp = field(body, "top_p"); tp && tp->is_number() && !(tp->get<double>() > 0.0 && tp->get<double>() <= 1.0))
    bad_request("top_p", fmt::format("'top_p' must be in (0, 1], got {}", tp->get<double>()));
  s.top_p = static_cast<float>(get_number(body, "top_p", 1.0, 0.0, 1.0));
  s.top_k = static_cast<int>(get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max()).value_or(0));
  s.min_p = static_cast<float>(get_number(body, "min_p", 0.0, 0.0, 1.0));
  s.presence_penalty = static_cast<float>(get_number(body, "presence_penalty", 0.0, -2.0, 2.0));
  s.frequency_penalty = static_cast<float>(get_number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  s.repetition_penalty = static_cast<float>(get_number(body, "repetition_penalty", 1.0, 1e-6, 100.0));
  // -1 asks for a random seed, as in llama.cpp's server (whose clients send it by default); seeds past
  // 2^63 - 1 (any uint64, as GET /props may report one) are taken as given
  if (const ojson* big = field(body, "seed"); big && big->is_number_unsigned() &&
      big->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    s.seed = big->get<uint64_t>();
  else if (auto seed = get_int(body, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max());
           seed && *seed != -1)
    s.seed = static_cast<uint64_t>(*seed);
  s.min_tokens = static_cast<int>(get_int(body, "min_tokens", 0, kMaxTok).value_or(0));
  if (g.max_tokens && s.min_tokens > *g.max_tokens)
    bad_request("min_tokens", fmt::format("'min_tokens' ({}) must not exceed max_tokens ({})", s.min_tokens, *g.max_tokens));
  parse_logit_bias(body, s);
  parse_response_format(body, g);
  parse_schema_aliases(body, g);
  refuse_foreign_samplers(body);
  refuse_unimplemented_fields(body);
  refuse_constrained_decoding(body);
  parse_vllm_stop_fields(body, g);
  g.ignore_eos = get_bool(body, "ignore_eos", false);
  g.n = static_cast<int32_t>(get_int(body, "n", 1, kMaxChoices).value_or(1));
  // best_of > n ranks extra choices by log-probability and returns the best n (OpenAI's legacy
  // completions, vLLM's v0): not implemented, so only best_of == n is taken.
  if (auto b = get_int(body, "best_of", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()); b && *b != g.n)
    bad_request("best_of", fmt::format("'best_of' must equal n ({}): generating extra choices to keep the best is not "
                                       "supported, got {}", g.n, *b));
  parse_stop(body, g);
  return g;
}

namespace {

/** Message content -> a string (text parts joined by "\n") or null. */
ojson normalize_content(const ojson& content, size_t index, const std::string& role) {
  const std::string where = fmt::format("messages[{}].content", index);
  if (content.is_null() || content.is_string()) return content;
  if (!content.is_array())
    bad_request(where, fmt::format("'{}' must be a string or a list of content parts, got {}", where, type_name(content)));
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const ojson& part = content[j];
    const std::string pw = fmt::format("{}[{}]", where, j);
    if (!part.is_object()) bad_request(pw, fmt::format("'{}' must be an object, got {}", pw, type_name(part)));
    const std::string type = get_string(part, "type");
    if (type == "text" || type == "input_text") {
      const ojson* t = field(part, "text");
      if (!t || !t->is_string()) bad_request(pw + ".text", fmt::format("'{}.text' must be a string", pw));
      if (j > 0) text += "\n";
      text += t->get<std::string>();
    } else if (type == "image_url" || type == "image" || type == "input_image" || type == "input_audio" ||
               type == "audio" || type == "video" || type == "video_url" || type == "file") {
      refuse_non_text(pw, type);
    } else {
      bad_request(pw + ".type", fmt::format("'{}.type' must be \"text\", got \"{}\"", pw, type));
    }
  }
  (void)role;
  return text;
}

/** An assistant message's `reasoning_content` is also given to the template as `thinking`, the field
 *  gpt-oss's template renders as the analysis channel of a turn that called tools (llama.cpp's
 *  server does the same); other templates read reasoning_content or neither. */
void reasoning_as_thinking(ojson& msg) {
  if (auto rc = msg.find("reasoning_content"); rc != msg.end() && rc->is_string() && !msg.contains("thinking"))
    msg["thinking"] = *rc;
}

ojson parse_messages(const ojson& body) {
  const ojson* msgs = field(body, "messages");
  if (!msgs) bad_request("messages", "'messages' is required");
  if (!msgs->is_array()) bad_request("messages", fmt::format("'messages' must be a list, got {}", type_name(*msgs)));
  if (msgs->empty()) bad_request("messages", "'messages' must hold at least one message");
  ojson out = ojson::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    const ojson& m = (*msgs)[i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad_request(where, fmt::format("'{}' must be an object, got {}", where, type_name(m)));
    const ojson* role = field(m, "role");
    if (!role || !role->is_string()) bad_request(where + ".role", fmt::format("'{}.role' must be a string", where));
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      bad_request(where + ".role",
                  fmt::format("'{}.role' must be one of system, developer, user, assistant, tool; got \"{}\"", where, r));
    ojson msg = m;
    auto it = m.find("content");
    if (it == m.end() || it->is_null()) {
      if (r != "assistant") bad_request(where + ".content", fmt::format("'{}.content' is required for role {}", where, r));
      // An assistant turn that only calls tools comes with "content": null (the OpenAI SDK's agent
      // loop) or none; templates such as Qwen3's test substrings of it, which None fails. As
      // llama.cpp's server does, it becomes "" (a template's `if message.content` reads both alike).
      msg["content"] = "";
    } else {
      msg["content"] = normalize_content(*it, i, r);
    }
    if (const ojson* tc = field(m, "tool_calls"); tc && !tc->is_array())
      bad_request(where + ".tool_calls", fmt::format("'{}.tool_calls' must be a list", where));
    if (r == "assistant") reasoning_as_thinking(msg);
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

void refuse_non_text(const std::string& where, const std::string& type) {
  const bool vowel = !type.empty() && std::string_view("aeiou").find(type[0]) != std::string_view::npos;
  bad_request(where, fmt::format("'{}' is {} {} part, but this model is text-only: send text content only", where,
                                 vowel ? "an" : "a", type));
}

ojson parse_json_body(std::string_view body) {
  ojson j;
  try {
    j = parse_json_linear(body, kMaxJsonDepth);
  } catch (const JsonTooDeep&) {
    bad_request("", fmt::format("The request body nests deeper than {} levels", kMaxJsonDepth));
  } catch (const JsonSyntaxError& e) {
    bad_request("", fmt::format("The request body is not valid JSON: {}", e.what));
  }
  if (!j.is_object()) bad_request("", fmt::format("The request body must be a JSON object, got {}", type_name(j)));
  return j;
}

ChatRequest parse_chat_request(const ojson& body) {
  ChatRequest r;
  r.messages = parse_messages(body);
  r.gen = parse_generation_params(body);
  r.gen.logprobs = get_bool(body, "logprobs", false);
  r.gen.top_logprobs = static_cast<int32_t>(get_int(body, "top_logprobs", 0, 20).value_or(0));
  if (r.gen.top_logprobs > 0 && !r.gen.logprobs)
    bad_request("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  if (const ojson* k = field(body, "chat_template_kwargs")) {
    if (!k->is_object())
      bad_request("chat_template_kwargs", fmt::format("'chat_template_kwargs' must be an object, got {}", type_name(*k)));
    // The template's own inputs come from the validated request and the model, never from here.
    for (const char* reserved : {"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})
      if (k->contains(reserved))
        bad_request("chat_template_kwargs",
                    fmt::format("'chat_template_kwargs' cannot set '{}': the server sets it from the request and the "
                                "model",
                                reserved));
    r.template_kwargs = *k;
  }
  // OpenAI's reasoning_effort reaches the template as the variable of that name (gpt-oss's
  // "Reasoning: low|medium|high", as vLLM passes it); chat_template_kwargs' own value wins.
  if (const ojson* e = field(body, "reasoning_effort"); e && !e->is_null()) {
    const std::string v = e->is_string() ? e->get<std::string>() : std::string();
    if (v != "minimal" && v != "low" && v != "medium" && v != "high")
      bad_request("reasoning_effort", fmt::format("'reasoning_effort' must be \"minimal\", \"low\", \"medium\" or "
                                                  "\"high\", got {}", e->dump()));
    if (!r.template_kwargs.contains("reasoning_effort")) r.template_kwargs["reasoning_effort"] = v;
  }
  if (const ojson* t = field(body, "tools")) {
    if (!t->is_array()) bad_request("tools", fmt::format("'tools' must be a list, got {}", type_name(*t)));
    for (size_t i = 0; i < t->size(); ++i) {  // {"type": "function", "function": {"name", "parameters"?}}
      const ojson& tool = (*t)[i];
      const std::string where = fmt::format("tools[{}]", i);
      const ojson* fn = tool.is_object() ? field(tool, "function") : nullptr;
      if (!tool.is_object() || get_string(tool, "type") != "function" || !fn || !fn->is_object())
        bad_request(where, fmt::format("'{}' must be {{\"type\": \"function\", \"function\": {{\"name\", ...}}}}", where));
      if (get_string(*fn, "name").empty())
        bad_request(where + ".function.name", fmt::format("'{}.function.name' is required", where));
      if (const ojson* params = field(*fn, "parameters"); params && !params->is_object())
        bad_request(where + ".function.parameters",
                    fmt::format("'{}.function.parameters' must be an object (a JSON Schema)", where));
    }
    if (!t->empty()) r.tools = *t;
  }
  // tool_choice: "auto" (the default), "none", "required" or {"type": "function", "function": {"name"}}.
  // "required" and a named function make the reply one call by constrained decoding (submit_chat,
  // tool_call_grammar.h); "none" keeps the reply as text.
  bool none = false;
  if (const ojson* tc = field(body, "tool_choice")) {
    if (tc->is_string()) {
      const std::string& c = tc->get_ref<const std::string&>();
      if (c != "auto" && c != "none" && c != "required")
        bad_request("tool_choice", fmt::format("'tool_choice' must be \"auto\", \"none\", \"required\" or a function, got \"{}\"", c));
      none = c == "none";
      if (c == "required" && r.tools.is_null())  // as OpenAI: nothing to require
        bad_request("tool_choice", "'tool_choice' \"required\" requires 'tools'");
      if (none) r.tool_choice = ChatRequest::ToolChoice::kNone;
      if (c == "required") r.tool_choice = ChatRequest::ToolChoice::kRequired;
    } else if (!tc->is_object()) {
      bad_request("tool_choice", fmt::format("'tool_choice' must be a string or an object, got {}", type_name(*tc)));
    } else {  // a named function: one of the tools
      const ojson* fn = field(*tc, "function");
      const std::string name = fn && fn->is_object() ? get_string(*fn, "name") : "";
      bool known = false;
      for (const ojson& t : r.tools.is_null() ? ojson::array() : r.tools) known = known || t["function"]["name"] == name;
      if (!known)
        bad_request("tool_choice", fmt::format("'tool_choice' names function \"{}\", which is not one of the tools", name));
      r.tool_choice = ChatRequest::ToolChoice::kNamed;
      r.tool_choice_name = name;
    }
  }
  r.parse_tool_calls = !r.tools.is_null() && !none;
  r.add_generation_prompt = get_bool(body, "add_generation_prompt", true);
  // continue_final_message (vLLM): the reply continues the final assistant message instead of opening
  // a new turn; like Anthropic's prefill, that message's text follows the generation prompt and the
  // reply holds only what comes after it. As in vLLM, add_generation_prompt must not be true with it.
  if (get_bool(body, "continue_final_message", false)) {
    if (field(body, "add_generation_prompt") && r.add_generation_prompt)
      bad_request("continue_final_message",
                  "'continue_final_message' and 'add_generation_prompt' cannot both be true");
    const ojson& last = r.messages.back();
    const bool calls = last.contains("tool_calls") && !last["tool_calls"].empty();
    if (last["role"] != "assistant" || calls || !last["content"].is_string())
      bad_request("continue_final_message",
                  "'continue_final_message' needs a final assistant message of text to continue");
    r.assistant_prefill = last["content"].get<std::string>();
    r.messages.erase(r.messages.size() - 1);
    if (r.messages.empty())
      bad_request("messages", "'continue_final_message' needs a message before the assistant message it continues");
    r.add_generation_prompt = true;  // the assistant turn opens, then the prefill follows
  }
  return r;
}

CompletionRequest parse_completion_request(const ojson& body) {
  CompletionRequest r;
  const ojson* p = field(body, "prompt");
  if (!p) bad_request("prompt", "'prompt' is required");
  auto ids_from = [&](const ojson& arr) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < arr.size(); ++i) {
      const ojson& t = arr[i];
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
        bad_request("prompt", fmt::format("prompt[{}] must be a non-negative token id, got {}", i, dump_json(t)));
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    return ids;
  };
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_string()) {
    if (p->size() != 1 || !(*p)[0].is_string())
      bad_request("prompt", "'prompt' as a list must hold exactly one string (batched prompts are not supported)");
    r.prompt_text = (*p)[0].get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
    if (p->size() != 1) bad_request("prompt", "'prompt' as a list of token lists must hold exactly one list");
    r.prompt_is_ids = true;
    r.prompt_ids = ids_from((*p)[0]);
  } else if (p->is_array()) {
    r.prompt_is_ids = true;
    r.prompt_ids = ids_from(*p);
  } else {
    bad_request("prompt", fmt::format("'prompt' must be a string or a list of token ids, got {}", type_name(*p)));
  }
  if (r.prompt_is_ids && r.prompt_ids.empty()) bad_request("prompt", "'prompt' must hold at least one token");
  r.gen = parse_generation_params(body);
  // The legacy completions endpoint generates 16 tokens unless told otherwise (OpenAI's documented
  // default, which vLLM keeps); chat completions run to the end of the context.
  if (!r.gen.max_tokens && !r.gen.from_n_predict) r.gen.max_tokens = kCompletionDefaultMaxTokens;
  r.echo = get_bool(body, "echo", false);
  if (auto lp = get_int(body, "logprobs", 0, 20)) {
    r.gen.logprobs = true;
    r.gen.top_logprobs = static_cast<int32_t>(*lp);
  }
  if (r.echo && r.gen.logprobs)
    bad_request("echo", "'echo' together with 'logprobs' is not supported (prompt log-probabilities are not computed)");
  if (const ojson* s = field(body, "suffix"); s && !(s->is_string() && s->get_ref<const std::string&>().empty()))
    bad_request("suffix", "'suffix' is not supported");
  return r;
}

}  // namespace ft::server
