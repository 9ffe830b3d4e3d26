#pragma once
// Tool calls in a chat reply, in the form the served model's chat template teaches it. One format is
// chosen per served model from its template text (detect_tool_call_format, as llama.cpp's server
// picks its chat format); every format yields the same ToolCall (name, arguments as JSON text):
//   kHermes   <tool_call>{"name": ..., "arguments": {...}}</tool_call>  (tool_calls_hermes.cpp)
//   kLlama3   {"name": ..., "parameters": {...}}, optionally after <|python_tag|>, `;`-separated (tool_calls_llama3.cpp)
//   kMistral  [TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or [TOOL_CALLS]name[ARGS]{...} (tool_calls_mistral.cpp)
//   kHarmony  gpt-oss: <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}<|call|>,
//             with the `analysis` channel as reasoning and `final` as content (tool_calls_harmony.cpp)
//   kQwen3Coder  <tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>
//             (Qwen3-Coder, Qwen3.5; values typed by the tool's JSON Schema: tool_calls_qwen3_coder.cpp)
//   kDeepSeekV3 / kDeepSeekV31  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```
//             <｜tool▁call▁end｜>...<｜tool▁calls▁end｜> (V3, R1), or ...<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
//             <｜tool▁call▁end｜>... (V3.1); either is read in both (tool_calls_deepseek.cpp)
//   kDeepSeekV32  <｜DSML｜function_calls>\n<｜DSML｜invoke name="NAME">\n<｜DSML｜parameter name="K" string="true">V
//             </｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜function_calls> (tool_calls_minimax_m2.cpp)
//   kGlm45    <tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>...</tool_call> (GLM-4.5/4.6/4.7;
//             values typed as kQwen3Coder's: tool_calls_glm45.cpp)
//   kMiniMaxM2  <minimax:tool_call>\n<invoke name="NAME">\n<parameter name="K">V</parameter>\n</invoke>\n
//             </minimax:tool_call> (tool_calls_minimax_m2.cpp)
//   kKimiK2   <|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{...}
//             <|tool_call_end|>...<|tool_calls_section_end|> (tool_calls_kimi_k2.cpp)
//   kGemma4   <|tool_call>call:NAME{key:<|"|>text<|"|>,n:1,...}<tool_call|> (tool_calls_gemma4.cpp)
// Text outside calls is the reply's content. A call whose JSON does not parse, or has no name, stays
// in the content as the text it was.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft::server {

enum class ToolCallFormat {
  kHermes, kLlama3, kMistral, kHarmony, kQwen3Coder, kDeepSeekV3, kDeepSeekV31, kDeepSeekV32, kGlm45, kMiniMaxM2,
  kKimiK2, kGemma4
};

/** The format a chat template teaches, from markers in its Jinja source (as llama.cpp's
 *  common_chat_templates_apply picks one), most specific first: `<|channel|>` or `to=functions` →
 *  kHarmony (gpt-oss); `[TOOL_CALLS]` → kMistral; `<minimax:tool_call>` → kMiniMaxM2;
 *  `<|tool_calls_section_begin|>` → kKimiK2; `<｜tool▁calls▁begin｜>` → kDeepSeekV3 when its calls
 *  carry a ```json block, else kDeepSeekV31; `｜DSML｜` → kDeepSeekV32; `<|tool_call>` → kGemma4; `<arg_key>` → kGlm45;
 *  `<function=` → kQwen3Coder (its template also holds `<tool_call>`); `<tool_call>` → kHermes
 *  (Qwen2.5/3, QwQ, Hermes 2 Pro/3); `<|python_tag|>` or `ipython` → kLlama3 (Llama 3.1/3.2/3.3);
 *  anything else → kHermes. */
ToolCallFormat detect_tool_call_format(std::string_view template_source);

/** Whether the format's markers are control tokens in its models' vocabularies (Llama 3's
 *  <|python_tag|>, Mistral's [TOOL_CALLS], gpt-oss's <|channel|>, DeepSeek's <｜tool▁calls▁begin｜>,
 *  DeepSeek-V3.2's ｜DSML｜, Kimi's <|tool_call_begin|>, MiniMax's <minimax:tool_call>, Gemma 4's <|tool_call> and <|"|>), which a
 *  reply's text drops unless asked to keep them (GenerationParams::keep_special_tokens); Hermes',
 *  Qwen3-Coder's and GLM's <tool_call> are text in their vocabularies (a vocabulary that makes them
 *  control tokens is caught by the caller through tool_call_format_markers). */
bool tool_call_markers_are_special(ToolCallFormat f);

/** The format's markers (the strings that open and close its calls), for asking a vocabulary
 *  whether they are control tokens. */
std::vector<std::string_view> tool_call_format_markers(ToolCallFormat f);

/** Whether every reply in the format is structured, so it is split with or without tools: gpt-oss's
 *  harmony channels (analysis is reasoning, final is content, even in a reply without calls). Other
 *  formats' replies without calls are text as written. */
bool tool_call_format_structures_every_reply(ToolCallFormat f);

/** "hermes", "llama3_json", "mistral", "harmony", "qwen3_coder", "deepseek_v3", "deepseek_v31",
 *  "deepseek_v32", "glm45", "minimax_m2", "kimi_k2", "gemma4" (the names of vLLM's tool parsers; vLLM calls harmony
 *  "openai"). */
const char* tool_call_format_name(ToolCallFormat f);

/** The format named `name` (tool_call_format_name, or an alias vLLM uses: "openai" for harmony,
 *  "qwen3_xml" for qwen3_coder, "glm47" for glm45, "llama3" for llama3_json), or nothing. */
std::optional<ToolCallFormat> tool_call_format_from_name(std::string_view name);

/** Every format's name, comma-separated (for an error that lists the valid names). */
std::string tool_call_format_names();

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text of the arguments object (OpenAI sends it as a string)
};

/** What a piece of reply text holds: content to show, reasoning (kHarmony's analysis channel only),
 *  and the calls it completed. */
struct ToolCallSplit {
  std::string content;
  std::vector<ToolCall> calls;
  std::string reasoning;
  /** Adds a later piece of the same reply: its content, reasoning and calls after these. */
  void append(ToolCallSplit&& more) {
    content += more.content;
    reasoning += more.reasoning;
    for (ToolCall& c : more.calls) calls.push_back(std::move(c));
  }
};

/** Each tool's JSON Schema for its arguments ("parameters"), by function name, from a request's
 *  `tools`: the XML-like formats (kQwen3Coder, kGlm45, kMiniMaxM2) write every value as text and
 *  type it by this schema (tool_call_scan.h, typed_argument). */
using ToolSchemas = std::map<std::string, nlohmann::ordered_json, std::less<>>;

/** The schemas of a request's `tools` (OpenAI's [{"type": "function", "function": {"name",
 *  "parameters"}}], or Anthropic's converted to that form); entries without a name are skipped, and
 *  anything that is not an array gives none. */
ToolSchemas tool_schemas(const nlohmann::ordered_json& tools);

/** One format's scanner (tool_call_scan.h); ToolCallStream runs the one its format names. */
class ToolCallScanner {
 public:
  virtual ~ToolCallScanner() = default;
  virtual void push(std::string_view piece, ToolCallSplit& out) = 0;
  virtual void finish(ToolCallSplit& out) = 0;
  /** The reply was cut (max_tokens, the context's end): what is held is dropped, never content (an
   *  open call's text, or text held because it may start a marker), and calls already complete in an
   *  open block are kept. finish() follows. */
  virtual void drop_open_call(ToolCallSplit& out) = 0;
};

/** Splits text as it streams in. push() returns the content that can be shown now and the calls
 *  completed so far; text that may start a call, and an open call, are held until known. finish()
 *  returns what is held: when the reply ended on its own, an unterminated call comes back as text
 *  (kHarmony's call message, whose <|call|> end token the reply usually stops before, is a call at the
 *  end); when it was `cut` (finish_reason "length"), an unterminated call is dropped (its markup and
 *  partial arguments never reach the content), keeping calls complete before it. */
class ToolCallStream {
 public:
  /** `schemas`: the request's tools (tool_schemas), which type the values of the XML-like formats;
   *  without them every value is a string. */
  explicit ToolCallStream(ToolCallFormat format = ToolCallFormat::kHermes, ToolSchemas schemas = {});
  ToolCallSplit push(std::string_view piece);
  ToolCallSplit finish(bool cut = false);

 private:
  std::unique_ptr<ToolCallScanner> scanner_;
};

/** A whole reply: ToolCallStream over it, with the content's (and reasoning's) surrounding whitespace
 *  trimmed. `cut`: the reply was cut by max_tokens (ToolCallStream::finish). */
ToolCallSplit parse_tool_calls(std::string_view text, ToolCallFormat format = ToolCallFormat::kHermes,
                               const ToolSchemas& schemas = {}, bool cut = false);

/** One entry of OpenAI's `tool_calls`: {"id", "type": "function", "function": {"name", "arguments"}};
 *  with `index` >= 0 also "index" (the streaming delta form). */
nlohmann::ordered_json tool_call_json(const ToolCall& call, const std::string& id, int index = -1);

}  // namespace ft::server
