// Kimi-K2 tool calls (the moonshotai Kimi-K2 Instruct / Thinking chat templates; vLLM's "kimi_k2" tool
// parser): one section holds every call of the turn, each named by an id `functions.NAME:INDEX`,
//   <|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>
//   {"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>
// (all on one line). A section that is not of this form, or whose arguments are not a JSON object,
// stays content as it was; a section the reply ends inside gives the calls whose <|tool_call_end|>
// came, when nothing else follows them.
#include "server/tag_scan.h"
#include "server/tool_call_scan.h"

namespace ft::server {

namespace {

constexpr std::string_view kCall = "<|tool_call_begin|>", kArgs = "<|tool_call_argument_begin|>",
                           kCallEnd = "<|tool_call_end|>";

/** The function's name in a call id: `functions.NAME:INDEX` → NAME (an id without the namespace or
 *  the index is the name as far as it goes). */
std::string_view name_of_id(std::string_view id) {
  id = trim_view(id);
  if (const size_t colon = id.rfind(':'); colon != std::string_view::npos) id = id.substr(0, colon);
  if (id.substr(0, 10) == "functions.") id.remove_prefix(10);
  return id;
}

class KimiK2Scanner : public BlockScanner {
 public:
  KimiK2Scanner() : BlockScanner("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>") {}

 protected:
  std::optional<std::vector<ToolCall>> parse(std::string_view body, bool /*closed*/) override {
    std::vector<ToolCall> calls;
    while (!all_space(body)) {
      body = body.substr(body.find_first_not_of(" \t\r\n"));
      if (body.substr(0, kCall.size()) != kCall) return std::nullopt;
      body.remove_prefix(kCall.size());
      const size_t args = body.find(kArgs), end = body.find(kCallEnd);
      if (args == std::string_view::npos || end == std::string_view::npos || args > end) return std::nullopt;
      const std::string_view name = name_of_id(body.substr(0, args));
      const auto j = nlohmann::ordered_json::parse(body.substr(args + kArgs.size(), end - args - kArgs.size()), nullptr,
                                                   /*allow_exceptions=*/false);
      if (!plausible_tool_name(name) || !j.is_object()) return std::nullopt;
      calls.push_back(ToolCall{std::string(name), j.dump()});
      body.remove_prefix(end + kCallEnd.size());
    }
    if (calls.empty()) return std::nullopt;
    return calls;
  }
};

}  // namespace

std::unique_ptr<ToolCallScanner> make_kimi_k2_scanner() { return std::make_unique<KimiK2Scanner>(); }

}  // namespace ft::server
