#pragma once
// Parsing request bodies into nlohmann::ordered_json in linear time. The library's own parser inserts
// each key into an ordered object with a linear search for duplicates, so one object of n keys costs
// O(n^2) (a 4.8 MB body of 400k keys took 168 s of a core); this builder keeps a hash index per open
// object instead. Same result as ordered_json::parse: key order kept, a repeated key's last value wins.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ft::server {

/** Thrown by parse_json_linear for a body nested deeper than its max_depth containers. */
struct JsonTooDeep {};

/** Thrown by parse_json_linear for malformed JSON; `what` is the library's message without its
 *  "[json.exception...] " tag ("parse error at line 1, column 3: ..."). */
struct JsonSyntaxError {
  std::string what;
};

/** `text` parsed as JSON with at most `max_depth` nested arrays and objects (the top level counts).
 *  Throws JsonTooDeep or JsonSyntaxError. Time and memory linear in the text. */
nlohmann::ordered_json parse_json_linear(std::string_view text, int max_depth);

}  // namespace ft::server
