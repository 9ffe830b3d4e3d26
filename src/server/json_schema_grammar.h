#pragma once
// JSON Schema -> grammar for constrained decoding (response_format json_schema / json_object, tool-call
// arguments). The grammar generates compact JSON: no whitespace outside strings, so a sampled value
// cannot wander into endless spaces, and every text it accepts parses and validates against the schema.
//
// Supported (draft 2020-12 names, with the draft-7 spellings definitions / items-array / additionalItems):
//   type (one or an array), enum, const, properties (emitted in the schema's order; required ones
//   always, optional ones may be skipped), required, additionalProperties, items, prefixItems,
//   minItems, maxItems, anyOf, oneOf (generated as anyOf: its branches should not overlap), allOf
//   (only when its subschemas merge keyword by keyword), $ref to local JSON pointers (#, #/$defs/...,
//   #/definitions/..., recursion allowed), minLength / maxLength (in code points), format (date, time,
//   date-time and uuid generated exactly; other formats as plain strings), true / false schemas,
//   minimum / maximum / exclusiveMinimum / exclusiveMaximum on integers (exact ranges), and minimum /
//   maximum on numbers when both are whole numbers and minimum >= 0.
// Generation choices, as OpenAI's strict mode makes them: an object with `properties` never gets
//   other properties (additionalProperties is read as false for generation whatever it says, which
//   every value of it allows); an object without properties and not closed by additionalProperties:
//   false gets any keys, with values of additionalProperties' schema or any value. Numbers have at
//   most 16 integer digits, 15 fraction digits and a 1-2 digit exponent; integers at most 16 digits.
//   enum / const values are filtered by `type` only.
// Refused with a 400 naming the keyword and its JSON pointer: pattern, patternProperties, other
//   bounds on numbers, multipleOf, minProperties, maxProperties,
//   uniqueItems: true, contains, not, if / then / else, dependent*, propertyNames, unevaluated*,
//   remote $ref, and any other keyword not listed here. Annotations (title, description, examples,
//   default, $schema, $id, $comment, deprecated, readOnly, writeOnly, x-*) are ignored.
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/grammar/grammar.h"

namespace ft::server {

/** Adds to `builder` the rules for compact JSON texts valid against `schema` (a whole JSON Schema
 *  document: local $refs resolve against it) and returns the value's rule, to embed in a larger
 *  grammar (e.g. a tool call's arguments). `param`: the request field the schema came from, named by
 *  the error. Throws ApiException 400 (invalid_request_error, param `param`) naming an unsupported
 *  keyword and its JSON pointer, an unresolvable $ref, or a schema no value satisfies. */
grammar::RuleId json_schema_rule(grammar::GrammarBuilder& builder, const nlohmann::ordered_json& schema,
                                 const std::string& param);

/** Adds a rule for any compact JSON value (objects, arrays, strings, numbers, true, false, null). */
grammar::RuleId json_value_rule(grammar::GrammarBuilder& builder);

/** Adds a rule for any compact JSON object (response_format {"type": "json_object"}). */
grammar::RuleId json_object_rule(grammar::GrammarBuilder& builder);

/** The grammar of `schema` alone (json_schema_rule as the root). Throws ApiException 400 as above,
 *  also when the schema allows no finite value (a required property that recurses forever). */
std::shared_ptr<const grammar::Grammar> json_schema_grammar(const nlohmann::ordered_json& schema,
                                                            const std::string& param);

}  // namespace ft::server
