#pragma once
// CLI11 validators for numeric flags, so a bad value is refused while parsing with the flag's name
// ("--top-k: must be >= 0, got -1", exit 2) instead of failing later with engine wording.
#include <CLI/CLI.hpp>
#include <limits>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "util/error.h"

namespace ft::cli {

/** Refuses an integer value outside [min, max] (`hint`, when given, is added to the message: what to
 *  give instead). A value that is not an integer passes here and is reported by CLI11's own conversion. */
inline CLI::Validator in_range(long long min, long long max, std::string hint = "") {
  return CLI::Validator(
      [min, max, hint](std::string& value) -> std::string {
        size_t used = 0;
        long long x = 0;
        try {
          x = std::stoll(value, &used);
        } catch (const std::exception&) {
          return {};
        }
        if (used != value.size() || (x >= min && x <= max)) return {};
        return (x < min ? fmt::format("must be >= {}, got {}", min, value)
                        : fmt::format("must be <= {}, got {}", max, value)) +
               (hint.empty() ? "" : " (" + hint + ")");
      },
      "");  // no type decoration in --help (it would read "INT:>= 0=0")
}

/** Refuses an integer value below `min` (in_range up to the largest long long). */
inline CLI::Validator at_least(long long min, std::string hint = "") {
  return in_range(min, std::numeric_limits<long long>::max(), std::move(hint));
}

/** Refuses an empty string value with `message` (the flag's name is put before it), e.g. an unset
 *  variable in `--api-key "$KEY"`. `name` is the value's placeholder in --help. */
inline CLI::Validator non_empty(std::string message, std::string name) {
  return CLI::Validator([message](std::string& value) { return value.empty() ? message : std::string(); },
                        std::move(name), "non-empty");
}

/** Runs `parse` (a flag's callback that maps its text onto a typed option and throws ft::Error for a
 *  value it cannot map), turning an ft::Error into the usage error CLI11 reports while parsing: exit 2,
 *  the message as written ("--moe-strategy turbo: expected ..."), before anything loads. */
template <typename F>
void as_usage_error(F&& parse) {
  try {
    parse();
  } catch (const Error& e) {
    throw CLI::ValidationError(std::string(e.what()));
  }
}

/** A usage error (as_usage_error's) with `message`, formatted as fmt::format does. */
template <typename... Args>
[[noreturn]] void refuse_flag_value(fmt::format_string<Args...> message, Args&&... args) {
  throw CLI::ValidationError(fmt::format(message, std::forward<Args>(args)...));
}

}  // namespace ft::cli
