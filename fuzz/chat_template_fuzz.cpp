// libFuzzer harness: the Jinja template engine (tokenizer/jinja) through ChatTemplate. Input: the
// template source up to the first NUL byte, then a conversation JSON object (messages, tools,
// add_generation_prompt and further variables, as `ft template --conversation` reads it). An empty
// template stands for the ChatML fallback. Refusals (jinja::TemplateError and other ft::Error) are the
// expected outcome; any other exception, a crash, a leak, UB or a render that runs away fails.
// Invariants checked: a render stays within the limits the harness sets (RenderOptions max_steps,
// max_bytes: a template that loops or grows strings without end is refused, never left to run);
// rendering twice gives the same text (the clock is pinned); and the ChatML fallback renders a
// conversation of string roles and contents to exactly <|im_start|>role\ncontent<|im_end|>\n per
// message. Built and run by `make fuzz`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokenizer/chat_template.h"
#include "util/error.h"

namespace {

// ChatML's text for a conversation whose messages all have string role and content, else nullopt.
std::optional<std::string> chatml_expected(const nlohmann::ordered_json& conv) {
  const auto& msgs = conv["messages"];
  if (!msgs.is_array()) return std::nullopt;
  std::string out;
  for (const auto& m : msgs) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      return std::nullopt;
    out += "<|im_start|>" + m["role"].get<std::string>() + "\n" + m["content"].get<std::string>() + "<|im_end|>\n";
  }
  auto g = conv.find("add_generation_prompt");
  if (g != conv.end() && (g->is_boolean() ? g->get<bool>() : !g->is_null())) {
    if (!g->is_boolean()) return std::nullopt;  // a non-bool value's truth is the template's to decide
    out += "<|im_start|>assistant\n";
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t cut = input.find('\0');
  if (cut == std::string_view::npos) return 0;
  const std::string_view source = input.substr(0, cut);
  const auto conv = nlohmann::ordered_json::parse(input.substr(cut + 1), nullptr, false);
  if (conv.is_discarded() || !conv.is_object() || !conv.contains("messages")) return 0;
  ft::jinja::RenderOptions options;
  options.now = ft::parse_clock("2026-11-30T00:00:00");
  options.max_steps = 200000;
  options.max_bytes = 1 << 20;
  try {
    const ft::ChatTemplate t(source.empty() ? std::string_view(ft::kChatMLTemplate) : source, "<s>", "</s>");
    std::string first;
    try {
      first = t.render_conversation(conv, options);
    } catch (const ft::Error&) {
      return 0;
    }
    if (first.size() > options.max_bytes) std::abort();
    if (t.render_conversation(conv, options) != first) std::abort();  // deterministic
    if (source.empty())
      if (const auto want = chatml_expected(conv); want && *want != first) std::abort();
  } catch (const ft::Error&) {
  }
  return 0;
}
