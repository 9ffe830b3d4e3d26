#pragma once
// Forced tool calls (tool_choice "required" or a named function; issue 38): the reply is one call in
// the served model's tool-call format (tool_calls.h), made by constrained decoding. The server writes
// the call's opening itself after the prompt (tokenized with control tokens, as the model would have
// written them: [TOOL_CALLS], <｜tool▁calls▁begin｜>, <|tool_calls_section_begin|>, ...), the model
// writes the rest under a grammar (the function's name among the allowed ones, then its arguments as
// the tool's `parameters` JSON Schema allows them: server/json_schema_grammar.h), and once the grammar
// completes the server appends the call's closing. The reply's text the parser reads is opening +
// generated text + closing, so it gives exactly one call (ToolCallForcing's grammar is built so that it
// does, for every text it accepts).
//
// Per format (the opening | what the grammar generates | the closing):
//   hermes       <tool_call>\n | {"name": "NAME", "arguments": JSON} | \n</tool_call>
//   llama3_json  (none) | {"name": "NAME", "parameters": JSON} | (none)
//   mistral      [TOOL_CALLS] | [{"name": "NAME", "arguments": JSON}] | (none); templates that teach
//                the v11 form (their source holds [ARGS]): [TOOL_CALLS] | NAME[ARGS]JSON | (none)
//   harmony      <|channel|>commentary to=functions. | NAME <|constrain|>json<|message|>JSON | <|call|>
//   qwen3_coder  <tool_call>\n | <function=NAME>\n(<parameter=K>\nVALUE\n</parameter>\n)*</function>\n | </tool_call>
//   deepseek_v3  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜> | NAME\n```json\nJSON\n```
//                | <｜tool▁call▁end｜><｜tool▁calls▁end｜>
//   deepseek_v31 <｜tool▁calls▁begin｜><｜tool▁call▁begin｜> | NAME<｜tool▁sep｜>JSON | <｜tool▁call▁end｜><｜tool▁calls▁end｜>
//   deepseek_v32 <｜DSML｜function_calls>\n | <｜DSML｜invoke name="NAME">\n(<｜DSML｜parameter name="K"
//                string="true|false">VALUE</｜DSML｜parameter>\n)*</｜DSML｜invoke>\n | </｜DSML｜function_calls>
//   glm45        <tool_call> | NAME\n(<arg_key>K</arg_key>\n<arg_value>VALUE</arg_value>\n)* | </tool_call>
//   minimax_m2   <minimax:tool_call>\n | <invoke name="NAME">\n(<parameter name="K">VALUE</parameter>\n)*</invoke>\n
//                | </minimax:tool_call>
//   kimi_k2      <|tool_calls_section_begin|><|tool_call_begin|>functions. | NAME:0<|tool_call_argument_begin|>JSON
//                | <|tool_call_end|><|tool_calls_section_end|>
//   gemma4       <|tool_call>call: | NAME{key:VALUE,...} in Gemma's notation (strings between <|"|>) | <tool_call|>
// JSON is compact JSON of the tool's schema. The markers inside the grammar (<|constrain|>, <|message|>,
// [ARGS], <｜tool▁sep｜>, <|tool_call_argument_begin|>, GLM's <arg_key> tags, Gemma's <|"|>, DSML's ｜DSML｜)
// are listed in control_tokens: where the served vocabulary has one as a control token, the constraint
// lets the model write that token (a vocabulary's trie otherwise never allows control tokens); where it
// is text, it is text. So every format names the function in the grammar and "required" may choose
// among any number of tools, one call per reply (parallel calls are not generated).
//
// VALUE in the XML-like formats: the parsers of qwen3_coder, glm45 and minimax_m2 read a value as text
// and type it by the tool's schema (typed_argument), so a property whose schema allows strings is raw
// text (its enum / const strings, or min/maxLength code points of text without '<'), never holding the
// markers that would end the value or the call; other properties are compact JSON of their schema. A
// property schema the parser cannot type (no `type` where its value could be other than a string, a
// top-level $ref, a string `pattern` or exact `format`) is a 400 naming it. deepseek_v32 says per value
// whether it is a string (string="true": raw text, only for plain string schemas; else JSON).
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"
#include "server/api_types.h"
#include "server/tool_calls.h"

namespace ft::server {

struct ToolCallForcing {
  std::string opening;  // written after the prompt by the server (control tokens parsed)
  std::shared_ptr<const grammar::Grammar> grammar;  // what the model generates after `opening`
  std::string closing;  // appended to the reply by the server once the grammar is complete
  std::vector<std::string> control_tokens;  // marker texts in the grammar a vocabulary may hold as control tokens
  std::string key;      // identifies the grammar (format, choice, tools) for a compiled-grammar cache
};

/** The forced call of `format` for a request's `tools` (validated OpenAI function tools), calling the
 *  function `name`, or any of the tools when `name` is empty (tool_choice "required"). `template_source`:
 *  the served chat template (picks Mistral's form). Throws ApiException 400 (param naming the tool:
 *  "tools[i].function.name" / "tools[i].function.parameters...") for a function name outside
 *  [A-Za-z0-9_.-] (OpenAI's names; the formats' parsers end a name at other characters), a parameters
 *  schema json_schema_rule refuses, or a property the format cannot carry (see above). */
ToolCallForcing tool_call_forcing(ToolCallFormat format, const nlohmann::ordered_json& tools, std::string_view name,
                                  std::string_view template_source = {});

/** Sets up `gen` (a copy of r.gen) for `r`'s forced call when r.tool_choice is kRequired or kNamed and
 *  it has tools: the grammar (Structured::kGrammar, with its control tokens and cache key), the reply's
 *  prefix (the opening, after `reasoning_close` + "\n\n" when the prompt left a reasoning block open:
 *  the forced call closes it first) and suffix (the closing). Returns the text to append to the
 *  rendered prompt (the prefix; "" when nothing is forced). Throws ApiException 400 (param
 *  "response_format") when r.gen already asks for structured output (one grammar per request), and
 *  what tool_call_forcing throws. */
std::string force_tool_call(const ChatRequest& r, ToolCallFormat format, std::string_view template_source,
                            std::string_view reasoning_close, GenerationParams& gen);

/** Adds a rule for raw text (any code points but U+0000 and '\r') that contains none of `forbidden`
 *  (UTF-8 strings; an Aho-Corasick-style automaton over their prefixes, one rule per state) and may end
 *  only where `follow` (the text written after it) starts no occurrence of them inside the text: so in
 *  text + follow, the first occurrence of any forbidden string starts in `follow`. */
grammar::RuleId raw_text_rule(grammar::GrammarBuilder& b, const std::vector<std::string>& forbidden,
                              const std::string& follow);

/** Gemma 4's notation of a tool's arguments (tool_calls_gemma4.cpp): an object `{key:value,...}` with the
 *  properties of `params` in order (required always, optional ones may be skipped), keys bare
 *  ([A-Za-z0-9_]+) or between <|"|>, strings <|"|>raw text<|"|>, numbers, true / false / null bare, lists
 *  [v,...]. Supports type (one or a list), enum, const, properties, required, items, minItems,
 *  maxItems, anyOf / oneOf, local $ref, minLength / maxLength, integer bounds and whole-number number
 *  bounds from 0; an object without properties is {}; a schema without constraints is any scalar.
 *  Other keywords: ApiException 400 naming `param` and the keyword's JSON pointer. */
grammar::Expr gemma4_arguments(grammar::GrammarBuilder& b, const nlohmann::ordered_json& params,
                               const std::string& param);

}  // namespace ft::server
