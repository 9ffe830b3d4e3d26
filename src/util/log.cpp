#include "util/log.h"

#include <time.h>

#include <atomic>
#include <chrono>

#include <spdlog/pattern_formatter.h>

#include "util/error.h"

namespace ft {

namespace {

/** The fields of the log_fields() call running on this thread, read by the JSON formatter: spdlog's
 *  sinks format synchronously on the calling thread (the default logger is not asynchronous), so the
 *  fields reach the line without passing through spdlog's message, which is a string only. */
thread_local const nlohmann::ordered_json* t_fields = nullptr;
/** set_log_rank's label for this thread's lines (-1: none). */
thread_local int t_rank = -1;

/** The text pattern's %* flag: "[rank R] " on a labelled thread, nothing elsewhere. */
class RankFlag : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&, spdlog::memory_buf_t& dest) override {
    if (t_rank < 0) return;
    const std::string s = fmt::format("[rank {}] ", t_rank);
    dest.append(s.data(), s.data() + s.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<RankFlag>(); }
};

/** "2026-12-06T11:09:38.123Z" (UTC). */
std::string iso8601(spdlog::log_clock::time_point t) {
  const auto since = t.time_since_epoch();
  const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(since - secs).count();
  const time_t tt = static_cast<time_t>(secs.count());
  struct tm tm{};
  gmtime_r(&tt, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

/** The level's name as --log-level spells it ("warn", not spdlog's "warning"), so a JSON line's level
 *  is one the flag takes. */
const char* level_name(spdlog::level::level_enum level) {
  switch (level) {
    case spdlog::level::trace: return "trace";
    case spdlog::level::debug: return "debug";
    case spdlog::level::info: return "info";
    case spdlog::level::warn: return "warn";
    case spdlog::level::err: return "error";
    case spdlog::level::critical: return "critical";
    default: return "off";
  }
}

class JsonLogFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    nlohmann::ordered_json j;
    j["ts"] = iso8601(msg.time);
    j["level"] = level_name(msg.level);
    if (t_rank >= 0) j["rank"] = t_rank;
    j["msg"] = std::string(msg.payload.data(), msg.payload.size());
    if (t_fields && t_fields->is_object())
      for (const auto& [key, value] : t_fields->items()) j[key] = value;
    const std::string line = j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    dest.append(line.data(), line.data() + line.size());
    dest.push_back('\n');
  }
  std::unique_ptr<spdlog::formatter> clone() const override { return std::make_unique<JsonLogFormatter>(); }
};

}  // namespace

void set_log_level(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  if (level == spdlog::level::off && name != "off")
    fail(ErrorCode::kInvalidArgument, "unknown log level '{}' (use trace, debug, info, warn, error, off)", name);
  spdlog::set_level(level);
}

namespace {
std::atomic<bool> g_json_format{false};
}  // namespace

void set_log_format(const std::string& name) {
  if (name == "text")
    spdlog::set_formatter(make_text_log_formatter());
  else if (name == "json")
    spdlog::set_formatter(make_json_log_formatter());
  else
    fail(ErrorCode::kInvalidArgument, "unknown log format '{}' (use text or json)", name);
  g_json_format = name == "json";
}

bool log_format_is_json() { return g_json_format; }

void log_fields(spdlog::level::level_enum level, std::string_view message, const nlohmann::ordered_json& fields) {
  spdlog::logger* logger = spdlog::default_logger_raw();
  if (!logger->should_log(level)) return;
  const nlohmann::ordered_json* outer = t_fields;
  t_fields = &fields;
  logger->log(level, spdlog::string_view_t(message.data(), message.size()));
  t_fields = outer;
}

std::unique_ptr<spdlog::formatter> make_json_log_formatter() { return std::make_unique<JsonLogFormatter>(); }

void set_log_rank(int rank) { t_rank = rank < 0 ? -1 : rank; }

std::unique_ptr<spdlog::formatter> make_text_log_formatter() {
  auto f = std::make_unique<spdlog::pattern_formatter>();
  f->add_flag<RankFlag>('*').set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %*%v");  // spdlog's default, plus %*
  return f;
}

}  // namespace ft
