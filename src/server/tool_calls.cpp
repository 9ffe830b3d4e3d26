#include "server/tool_calls.h"

#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

bool tool_call_markers_are_special(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes:
    case ToolCallFormat::kQwen3Coder:
    case ToolCallFormat::kGlm45: return false;
    default: return true;
  }
}

std::vector<std::string_view> tool_call_format_markers(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kHermes: return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::kLlama3: return {"<|python_tag|>"};
    case ToolCallFormat::kMistral: return {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"};
    case ToolCallFormat::kHarmony: return {"<|channel|>", "<|message|>", "<|call|>", "<|start|>"};
    case ToolCallFormat::kQwen3Coder: return {"<tool_call>", "</tool_call>"};
    case ToolCallFormat::kDeepSeekV3:
    case ToolCallFormat::kDeepSeekV31:
      return {"<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>", "<｜tool▁calls▁end｜>"};
    case ToolCallFormat::kDeepSeekV32: return {"｜DSML｜", "<｜DSML｜function_calls>", "</｜DSML｜function_calls>"};
    case ToolCallFormat::kGlm45: return {"<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"};
    case ToolCallFormat::kMiniMaxM2: return {"<minimax:tool_call>", "</minimax:tool_call>"};
    case ToolCallFormat::kKimiK2:
      return {"<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
              "<|tool_calls_section_end|>"};
    case ToolCallFormat::kGemma4: return {"<|tool_call>", "<tool_call|>", "<|\"|>"};
  }
  return {};
}

bool tool_call_format_structures_every_reply(ToolCallFormat f) { return f == ToolCallFormat::kHarmony; }

ToolCallFormat detect_tool_call_format(std::string_view src) {
  const auto has = [&](std::string_view m) { return src.find(m) != std::string_view::npos; };
  if (has("<|channel|>") || has("to=functions")) return ToolCallFormat::kHarmony;
  if (has("[TOOL_CALLS]")) return ToolCallFormat::kMistral;
  if (has("<minimax:tool_call>")) return ToolCallFormat::kMiniMaxM2;
  if (has("<|tool_calls_section_begin|>")) return ToolCallFormat::kKimiK2;
  if (has("<｜tool▁calls▁begin｜>")) return has("```json") ? ToolCallFormat::kDeepSeekV3 : ToolCallFormat::kDeepSeekV31;
  if (has("｜DSML｜")) return ToolCallFormat::kDeepSeekV32;
  if (has("<|tool_call>")) return ToolCallFormat::kGemma4;
  if (has("<tool_call>") && has("<arg_key>")) return ToolCallFormat::kGlm45;
  if (has("<tool_call>") && has("<function=") && has("<parameter=")) return ToolCallFormat::kQwen3Coder;
  if (has("<tool_call>")) return ToolCallFormat::kHermes;
  if (has("<|python_tag|>") || has("ipython")) return ToolCallFormat::kLlama3;
  return ToolCallFormat::kHermes;
}

namespace {

constexpr ToolCallFormat kAllFormats[] = {
    ToolCallFormat::kHermes,      ToolCallFormat::kLlama3,      ToolCallFormat::kMistral,     ToolCallFormat::kHarmony,
    ToolCallFormat::kQwen3Coder,  ToolCallFormat::kDeepSeekV3,  ToolCallFormat::kDeepSeekV31, ToolCallFormat::kDeepSeekV32,
    ToolCallFormat::kGlm45,       ToolCallFormat::kMiniMaxM2,   ToolCallFormat::kKimiK2,      ToolCallFormat::kGemma4,
};

}  // namespace

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::kLlama3: return "llama3_json";
    case ToolCallFormat::kMistral: return "mistral";
    case ToolCallFormat::kHarmony: return "harmony";
    case ToolCallFormat::kQwen3Coder: return "qwen3_coder";
    case ToolCallFormat::kDeepSeekV3: return "deepseek_v3";
    case ToolCallFormat::kDeepSeekV31: return "deepseek_v31";
    case ToolCallFormat::kDeepSeekV32: return "deepseek_v32";
    case ToolCallFormat::kGlm45: return "glm45";
    case ToolCallFormat::kMiniMaxM2: return "minimax_m2";
    case ToolCallFormat::kKimiK2: return "kimi_k2";
    case ToolCallFormat::kGemma4: return "gemma4";
    case ToolCallFormat::kHermes: break;
  }
  return "hermes";
}

std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name) {
  for (ToolCallFormat f : kAllFormats)
    if (name == tool_call_format_name(f)) return f;
  if (name == "openai") return ToolCallFormat::kHarmony;
  if (name == "qwen3_xml") return ToolCallFormat::kQwen3Coder;
  if (name == "glm47") return ToolCallFormat::kGlm45;
  if (name == "llama3") return ToolCallFormat::kLlama3;
  return std::nullopt;
}

std::string tool_call_format_names() {
  std::string out;
  for (ToolCallFormat f : kAllFormats) out += (out.empty() ? "" : ", ") + std::string(tool_call_format_name(f));
  return out;
}

ToolSchemas tool_schemas(const nlohmann::ordered_json& tools) {
  ToolSchemas out;
  if (!tools.is_array()) return out;
  for (const auto& t : tools) {
    if (!t.is_object()) continue;
    const auto fn = t.find("function");
    const nlohmann::ordered_json& f = fn != t.end() && fn->is_object() ? *fn : t;
    const auto name = f.find("name");
    if (name == f.end() || !name->is_string()) continue;
    const auto params = f.find("parameters");
    out[name->get<std::string>()] = params != f.end() ? *params : nlohmann::ordered_json::object();
  }
  return out;
}

std::optional<ToolCall> call_from_json(const nlohmann::ordered_json& j) {
  if (!j.is_object()) return std::nullopt;
  const auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) return std::nullopt;
  ToolCall c;
  c.name = name->get<std::string>();
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");  // Llama 3.x's name, seen in Hermes-format output too
  if (args == j.end() || args->is_null()) c.arguments = "{}";
  else if (args->is_string()) {  // JSON text: a call only if it is an object or array
    const auto parsed = nlohmann::ordered_json::parse(args->get_ref<const std::string&>(), nullptr, false);
    if (!parsed.is_object() && !parsed.is_array()) return std::nullopt;
    c.arguments = args->get<std::string>();  // as written
  } else {
    c.arguments = args->dump();
  }
  return c;
}

size_t json_value_end(std::string_view s) { return JsonValueScan{}.end(s); }

size_t JsonValueScan::end(std::string_view s) {
  for (; pos_ < s.size(); ++pos_) {
    const char ch = s[pos_];
    if (in_string_) {
      if (escaped_) escaped_ = false;
      else if (ch == '\\') escaped_ = true;
      else if (ch == '"') in_string_ = false;
    } else if (ch == '"') {
      in_string_ = true;
    } else if (ch == '{' || ch == '[') {
      ++depth_;
    } else if ((ch == '}' || ch == ']') && --depth_ == 0) {
      return ++pos_;
    }
  }
  return std::string_view::npos;
}

size_t skip_space(std::string& s) {
  const size_t n = std::min(s.size(), s.find_first_not_of(" \t\r\n"));
  s.erase(0, n);
  return n;
}

ToolCallStream::ToolCallStream(ToolCallFormat format, ToolSchemas schemas) {
  switch (format) {
    case ToolCallFormat::kLlama3: scanner_ = make_llama3_scanner(); break;
    case ToolCallFormat::kMistral: scanner_ = make_mistral_scanner(); break;
    case ToolCallFormat::kHarmony: scanner_ = make_harmony_scanner(); break;
    case ToolCallFormat::kQwen3Coder: scanner_ = make_qwen3_coder_scanner(std::move(schemas)); break;
    case ToolCallFormat::kDeepSeekV3:
    case ToolCallFormat::kDeepSeekV31: scanner_ = make_deepseek_scanner(); break;
    case ToolCallFormat::kDeepSeekV32: scanner_ = make_deepseek_v32_scanner(std::move(schemas)); break;
    case ToolCallFormat::kGlm45: scanner_ = make_glm45_scanner(std::move(schemas)); break;
    case ToolCallFormat::kMiniMaxM2: scanner_ = make_minimax_m2_scanner(std::move(schemas)); break;
    case ToolCallFormat::kKimiK2: scanner_ = make_kimi_k2_scanner(); break;
    case ToolCallFormat::kGemma4: scanner_ = make_gemma4_scanner(); break;
    case ToolCallFormat::kHermes: scanner_ = make_hermes_scanner(); break;
  }
}

ToolCallSplit ToolCallStream::push(std::string_view piece) {
  ToolCallSplit out;
  scanner_->push(piece, out);
  return out;
}

ToolCallSplit ToolCallStream::finish(bool cut) {
  ToolCallSplit out;
  if (cut) scanner_->drop_open_call(out);
  scanner_->finish(out);
  return out;
}

ToolCallSplit parse_tool_calls(std::string_view text, ToolCallFormat format, const ToolSchemas& schemas, bool cut) {
  ToolCallStream s(format, schemas);
  ToolCallSplit out = s.push(text);
  out.append(s.finish(cut));
  trim_space(out.content);
  trim_space(out.reasoning);
  return out;
}

nlohmann::ordered_json tool_call_json(const ToolCall& call, const std::string& id, int index) {
  nlohmann::ordered_json j;
  if (index >= 0) j["index"] = index;
  j["id"] = id;
  j["type"] = "function";
  j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
  return j;
}

}  // namespace ft::server
