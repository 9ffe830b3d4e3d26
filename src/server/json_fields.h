#pragma once
// Typed reads of request-body fields, shared by the request parsers (request_parse.cpp for OpenAI's
// bodies, anthropic_request.cpp for Anthropic's). A missing or null field reads as absent; a field of
// the wrong type or out of range is refused with ApiException 400 invalid_request_error naming it.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ft::server {

/** "null", "a boolean", "a string", "an array", "an object", "a number", "an integer" (for messages). */
const char* type_name(const nlohmann::ordered_json& v);

/** The field `key` of `obj` if present and not null, else nullptr. */
const nlohmann::ordered_json* field(const nlohmann::ordered_json& obj, const char* key);

/** A boolean field; `def` when absent. */
bool get_bool(const nlohmann::ordered_json& obj, const char* key, bool def);

/** A finite number in [lo, hi]; `def` when absent. */
double get_number(const nlohmann::ordered_json& obj, const char* key, double def, double lo, double hi);

/** `v` as an integer in [lo, hi] (an integral float such as 3.0 counts); otherwise a 400 naming
 *  `param` whose message calls the value `what` (e.g. "stop_token_ids[2]"). */
int64_t as_int(const nlohmann::ordered_json& v, const std::string& param, const std::string& what, int64_t lo, int64_t hi);

/** An integer in [lo, hi] (an integral float such as 3.0 counts); nullopt when absent. */
std::optional<int64_t> get_int(const nlohmann::ordered_json& obj, const char* key, int64_t lo, int64_t hi);

/** A string field; "" when absent. */
std::string get_string(const nlohmann::ordered_json& obj, const char* key);

}  // namespace ft::server
