#pragma once
// Logging: spdlog's default logger (stderr). The only mutable global FreeToken keeps.
// Two renderings of the same lines (--log-format): "text", spdlog's default pattern
// ("[2026-12-06 11:09:38.123] [info] message"), and "json", one object a line for machines:
// {"ts": ISO 8601 UTC with milliseconds, "level" (as --log-level spells it: trace, debug, info, warn,
// error, critical), "msg"} plus the typed fields of log_fields().
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

namespace ft {

/** Sets the log level from a name ("trace", "debug", "info", "warn", "error", "off"). Throws ft::Error on an unknown name. */
void set_log_level(const std::string& name);

/** Sets how every registered logger's lines are written (the default logger's included, and loggers
 *  registered later): "text" (spdlog's default pattern) or "json" (one JSON object a line, see the
 *  file comment). Throws ft::Error(kInvalidArgument) on another name. */
void set_log_format(const std::string& name);

/** Whether set_log_format("json") is in effect (writers of their own stderr lines, such as the load
 *  progress, then log them as JSON lines instead). */
bool log_format_is_json();

/** Logs `message` at `level` through the default logger. In the JSON format the members of `fields`
 *  (a JSON object; anything else is ignored) are added to the line's object as typed keys after ts,
 *  level and msg; the text format writes `message` alone, so it should say what the fields say.
 *  Nothing is formatted when `level` is below the logger's. The fields reach sinks that format on the
 *  logging thread as the message is logged (spdlog's stderr, file and ostream sinks; not an async
 *  logger or the ringbuffer sink, which format later and would write the line without them). */
void log_fields(spdlog::level::level_enum level, std::string_view message, const nlohmann::ordered_json& fields);

/** Labels the lines this thread logs from now on with `rank` (a rank group's rank, engine/rank_group.h):
 *  "[rank R] " before the message in the text format, "rank": R in the JSON format; -1 removes it. */
void set_log_rank(int rank);

/** The text format's formatter (what "text" selects): spdlog's default line, "[2026-12-06 11:09:38.123]
 *  [info] message", with the thread's rank label (set_log_rank) before the message. */
std::unique_ptr<spdlog::formatter> make_text_log_formatter();

/** An spdlog formatter that writes each message as one JSON object and a newline (what "json" selects;
 *  exposed for tests and for loggers made outside the registry). Invalid UTF-8 in a message becomes
 *  U+FFFD, so every line parses. */
std::unique_ptr<spdlog::formatter> make_json_log_formatter();

}  // namespace ft
