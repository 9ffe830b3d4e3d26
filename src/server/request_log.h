#pragma once
// The request log: one line per HTTP request once it is over (its response written, its stream's last
// byte sent, or its client gone), from one record so the text and JSON renderings (--log-format) say
// the same: method, path, status, time, client address, and for a generation the model, prompt /
// cached / generated tokens, time to first token, decode tokens/s and finish reason; for an error
// response its type, code and message. At info level, except the routes that are polled (see
// request_log_level), which are at debug so the log is not flooded.
#include <chrono>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "server/http_types.h"

namespace ft::server {

struct RequestRecord {
  spdlog::level::level_enum level = spdlog::level::info;
  std::string method;  // "-" when the request line never arrived whole
  std::string path;    // percent-decoded, without the query ("-" as method)
  int status = 0;
  double duration_ms = 0;  // from the header's end to the response's end
  std::string client;      // the peer's IP address ("" when unknown)
  std::string model;       // the model that generated ("" when none did)
  std::optional<int64_t> prompt_tokens, cached_tokens, completion_tokens;
  std::optional<double> ttft_ms, tokens_per_s;
  std::string finish_reason;
  std::string error_type, error_code, error_message;  // error_message cut to kMaxLoggedErrorBytes
};

/** Bytes of an error message a log line keeps (a parse error may quote a large body). */
constexpr size_t kMaxLoggedErrorBytes = 300;

/** The level of a request's line: debug for a successful (status < 400) GET or HEAD of what is
 *  polled or fetched by the page and not by a user's action: /health (load balancers, `make serve`'s
 *  wait), /v1/stats (the chat page polls it every few seconds), /metrics (Prometheus scrapes) and the
 *  chat page's own files (its icon and /favicon.ico included); warn for 5xx; info for the rest (4xx included). */
spdlog::level::level_enum request_log_level(const std::string& method, const std::string& path, int status);

/** The record of `req` answered by `res`, over at `end` (steady clock). */
RequestRecord request_record(const HttpRequest& req, const HttpResponse& res,
                             std::chrono::steady_clock::time_point end);

/** The text line: `POST /v1/chat/completions 200 model=qwen3 prompt=812 cached=768 gen=64 ttft=35ms
 *  52.1 tok/s finish=stop 1.27s client=127.0.0.1`, parts without a value left out; an error adds
 *  ` error=<type> code=<code>: <message>` (the message's control characters as spaces). */
std::string request_text(const RequestRecord& r);

/** The typed keys of the JSON line: method, path, status, model, prompt_tokens, cached_tokens,
 *  completion_tokens, ttft_ms, tokens_per_s, finish_reason, duration_ms, client, error_type,
 *  error_code, error (the message); keys without a value left out. */
nlohmann::ordered_json request_fields(const RequestRecord& r);

/** Logs `r` at r.level: request_text as the message, request_fields as the JSON line's keys. */
void log_request(const RequestRecord& r);

}  // namespace ft::server
