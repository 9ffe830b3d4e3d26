#include "server/request_log.h"

#include <cmath>

#include "server/routes.h"
#include "util/log.h"

namespace ft::server {

namespace {

/** "0.4ms", "35ms", "1.27s". */
std::string format_ms(double ms) {
  if (ms < 10) return fmt::format("{:.1f}ms", ms);
  if (ms < 1000) return fmt::format("{:.0f}ms", ms);
  return fmt::format("{:.2f}s", ms / 1000.0);
}

/** `s` cut to at most `max` bytes, not inside a UTF-8 sequence. */
std::string cut_utf8(const std::string& s, size_t max) {
  if (s.size() <= max) return s;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n) + "...";
}

/** Rounded to `digits` decimals, for JSON numbers that do not print 17 of them. */
double rounded(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}

}  // namespace

spdlog::level::level_enum request_log_level(const std::string& method, const std::string& path, int status) {
  if (status >= 500) return spdlog::level::warn;
  if (status >= 400 || (method != "GET" && method != "HEAD")) return spdlog::level::info;
  // Polled or fetched without a user's action: a line each would flood the log at info.
  const bool polled = path == "/health" || path == "/health/" || path == "/v1/health" || path == "/v1/health/" ||
                      path == "/v1/stats" || path == "/v1/stats/" || path == "/metrics" || path == "/metrics/" ||
                      is_web_page_path(path) || is_favicon_path(path);
  return polled ? spdlog::level::debug : spdlog::level::info;
}

RequestRecord request_record(const HttpRequest& req, const HttpResponse& res,
                             std::chrono::steady_clock::time_point end) {
  const RequestTrace& t = *req.trace;
  RequestRecord r;
  const bool known = !req.target.empty();  // a framing error before the request line was whole
  r.method = known ? req.method : "-";
  r.path = known ? req.path : "-";
  r.status = res.status;
  r.level = request_log_level(r.method, r.path, r.status);
  r.duration_ms = std::chrono::duration<double, std::milli>(end - t.start).count();
  r.client = req.remote_addr;
  r.model = t.model;
  r.prompt_tokens = t.prompt_tokens;
  r.cached_tokens = t.cached_tokens;
  r.completion_tokens = t.completion_tokens;
  r.ttft_ms = t.ttft_ms;
  r.tokens_per_s = t.tokens_per_s;
  r.finish_reason = t.finish_reason;
  r.error_type = t.error_type;
  r.error_code = t.error_code;
  r.error_message = cut_utf8(t.error_message, kMaxLoggedErrorBytes);
  return r;
}

std::string request_text(const RequestRecord& r) {
  std::string s = fmt::format("{} {} {}", r.method, r.path, r.status);
  // (fmt::format, not " x=" + y: GCC 12 warns falsely about memcpy overlap (-Wrestrict) there)
  if (!r.model.empty()) s += fmt::format(" model={}", r.model);
  if (r.prompt_tokens) s += fmt::format(" prompt={}", *r.prompt_tokens);
  if (r.cached_tokens) s += fmt::format(" cached={}", *r.cached_tokens);
  if (r.completion_tokens) s += fmt::format(" gen={}", *r.completion_tokens);
  if (r.ttft_ms) s += fmt::format(" ttft={}", format_ms(*r.ttft_ms));
  if (r.tokens_per_s) s += fmt::format(" {:.1f} tok/s", *r.tokens_per_s);
  if (!r.finish_reason.empty()) s += fmt::format(" finish={}", r.finish_reason);
  s += fmt::format(" {}", format_ms(r.duration_ms));
  if (!r.client.empty()) s += fmt::format(" client={}", r.client);
  if (!r.error_type.empty()) s += fmt::format(" error={}", r.error_type);
  if (!r.error_code.empty()) s += fmt::format(" code={}", r.error_code);
  if (!r.error_message.empty()) {
    std::string m = r.error_message;
    for (char& c : m)
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
    s += fmt::format("{}{}", r.error_type.empty() && r.error_code.empty() ? " error: " : ": ", m);
  }
  return s;
}

nlohmann::ordered_json request_fields(const RequestRecord& r) {
  nlohmann::ordered_json j;
  j["method"] = r.method;
  j["path"] = r.path;
  j["status"] = r.status;
  if (!r.model.empty()) j["model"] = r.model;
  if (r.prompt_tokens) j["prompt_tokens"] = *r.prompt_tokens;
  if (r.cached_tokens) j["cached_tokens"] = *r.cached_tokens;
  if (r.completion_tokens) j["completion_tokens"] = *r.completion_tokens;
  if (r.ttft_ms) j["ttft_ms"] = rounded(*r.ttft_ms, 3);
  if (r.tokens_per_s) j["tokens_per_s"] = rounded(*r.tokens_per_s, 2);
  if (!r.finish_reason.empty()) j["finish_reason"] = r.finish_reason;
  j["duration_ms"] = rounded(r.duration_ms, 3);
  if (!r.client.empty()) j["client"] = r.client;
  if (!r.error_type.empty()) j["error_type"] = r.error_type;
  if (!r.error_code.empty()) j["error_code"] = r.error_code;
  if (!r.error_message.empty()) j["error"] = r.error_message;
  return j;
}

void log_request(const RequestRecord& r) {
  if (!spdlog::default_logger_raw()->should_log(r.level)) return;
  log_fields(r.level, request_text(r), request_fields(r));
}

}  // namespace ft::server
