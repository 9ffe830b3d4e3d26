#pragma once
// JSON <-> Value: converting request/conversation JSON into template values (key order kept with
// nlohmann::ordered_json), and Python's json.dumps as Hugging Face's `tojson` filter calls it
// (ensure_ascii=False by default, indent, separators, sort_keys; floats printed like float.__repr__).
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/value.h"

namespace ft::jinja {

/** Converts JSON to a Value (objects keep their key order). Integers stay int, others float. */
Value from_json(const nlohmann::ordered_json& j);
/** Same for an unordered nlohmann::json (its keys come out sorted). */
Value from_json(const nlohmann::json& j);

struct DumpOptions {
  std::optional<std::string> indent;  // nullopt: one line; "" or spaces: pretty-printed
  std::string item_sep = ", ";        // Python's default separators; (",", ": ") when indenting
  std::string key_sep = ": ";
  bool ensure_ascii = false;
  bool sort_keys = false;
};

/** Python json.dumps(value, ...). TypeError for values JSON cannot hold (Undefined, macros, ...). */
std::string dumps(const Value& v, const DumpOptions& options);

}  // namespace ft::jinja
