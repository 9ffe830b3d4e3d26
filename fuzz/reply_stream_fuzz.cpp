// libFuzzer harness: a model's reply text through the server's reply parsers: every tool-call format's
// ToolCallStream (server/tool_calls*.cpp) and the reasoning splitter (server/reasoning.cpp), fed the
// text whole and split at arbitrary points. Input: byte 0 picks the tool-call format and the reasoning
// format (and whether the reply starts inside a reasoning block), byte 1 seeds the split points, the
// rest is the reply. Invariants checked: a stream fed the text in pieces gives the same content,
// reasoning and calls as one fed it whole (both streams promise it: text that may start a tag is held
// until known); parse_tool_calls gives the whole stream's calls and its content trimmed;
// split_reasoning gives the whole stream's reasoning and content (trimmed when a block opened). Built
// and run by `make fuzz`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/reasoning.h"
#include "server/tool_calls.h"

namespace {

constexpr ft::server::ToolCallFormat kFormats[] = {
    ft::server::ToolCallFormat::kHermes,     ft::server::ToolCallFormat::kLlama3,
    ft::server::ToolCallFormat::kMistral,    ft::server::ToolCallFormat::kHarmony,
    ft::server::ToolCallFormat::kQwen3Coder, ft::server::ToolCallFormat::kDeepSeekV3,
    ft::server::ToolCallFormat::kDeepSeekV31, ft::server::ToolCallFormat::kDeepSeekV32,
    ft::server::ToolCallFormat::kGlm45,      ft::server::ToolCallFormat::kMiniMaxM2,
    ft::server::ToolCallFormat::kKimiK2,     ft::server::ToolCallFormat::kGemma4};
constexpr size_t kNumFormats = sizeof(kFormats) / sizeof(kFormats[0]);

// The tools the XML-like formats type their values by.
const ft::server::ToolSchemas& schemas() {
  static const ft::server::ToolSchemas s = ft::server::tool_schemas(nlohmann::ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"},
      "hours": {"type": "array", "items": {"type": "number"}}, "where": {"type": "object"}}}}}])"));
  return s;
}

// Pieces of `text`: lengths 0-8 from a small generator seeded by `seed` (0 gives empty pieces too).
std::vector<std::string_view> pieces(std::string_view text, uint8_t seed) {
  std::vector<std::string_view> out;
  uint32_t x = seed * 2654435761u + 1;
  for (size_t at = 0; at < text.size();) {
    x = x * 1103515245u + 12345u;
    const size_t n = std::min<size_t>((x >> 16) % 9, text.size() - at);
    out.push_back(text.substr(at, n));
    at += n;
  }
  return out;
}

bool same_calls(const std::vector<ft::server::ToolCall>& a, const std::vector<ft::server::ToolCall>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].arguments != b[i].arguments) return false;
  return true;
}

std::string trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\n\r");
  if (b == std::string_view::npos) return "";
  return std::string(s.substr(b, s.find_last_not_of(" \t\n\r") - b + 1));
}

void check_tool_calls(ft::server::ToolCallFormat f, std::string_view text, uint8_t seed) {
  ft::server::ToolCallStream whole(f, schemas()), split(f, schemas());
  ft::server::ToolCallSplit a = whole.push(text);
  a.append(whole.finish());
  ft::server::ToolCallSplit b;
  for (std::string_view p : pieces(text, seed)) b.append(split.push(p));
  b.append(split.finish());
  if (a.content != b.content || a.reasoning != b.reasoning || !same_calls(a.calls, b.calls)) std::abort();
  for (const ft::server::ToolCall& c : a.calls)  // arguments are JSON text of an object
    if (!nlohmann::json::accept(c.arguments)) std::abort();
  const ft::server::ToolCallSplit p = ft::server::parse_tool_calls(text, f, schemas());
  if (!same_calls(p.calls, a.calls) || p.content != trimmed(a.content)) std::abort();
}

void check_reasoning(ft::server::ReasoningFormat f, bool in_reasoning, std::string_view text, uint8_t seed) {
  ft::server::ReasoningStream whole(f, in_reasoning), split(f, in_reasoning);
  ft::server::ReasoningSplit a = whole.push(text), a2 = whole.finish();
  a.reasoning += a2.reasoning, a.content += a2.content;
  ft::server::ReasoningSplit b;
  for (std::string_view p : pieces(text, seed)) {
    ft::server::ReasoningSplit r = split.push(p);
    b.reasoning += r.reasoning, b.content += r.content;
  }
  ft::server::ReasoningSplit b2 = split.finish();
  b.reasoning += b2.reasoning, b.content += b2.content;
  if (a.reasoning != b.reasoning || a.content != b.content || whole.opened() != split.opened()) std::abort();
  const ft::server::ReasoningSplit s = ft::server::split_reasoning(text, f, in_reasoning);
  if (s.thought != whole.opened()) std::abort();
  if (s.thought ? (s.reasoning != trimmed(a.reasoning) || s.content != trimmed(a.content))
                : (s.content != a.content || !s.reasoning.empty()))
    std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 2, size - 2);
  check_tool_calls(kFormats[data[0] % kNumFormats], text, data[1]);
  const ft::server::ReasoningFormat rf =
      (data[0] >> 4) & 1 ? ft::server::ReasoningFormat::kGemma4 : ft::server::ReasoningFormat::kThink;
  check_reasoning(rf, (data[0] >> 5) & 1, text, data[1]);
  return 0;
}
