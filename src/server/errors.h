#pragma once
// API errors in OpenAI's shape: HTTP status + {"error": {"message", "type", "param", "code"}}, or in
// Anthropic's ({"type": "error", "error": {"type", "message"}}) on the /v1/messages routes.
// ft::Error codes are mapped to a status here, at the one boundary where errors leave the engine.
#include <string>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ft::server {

/** One error response. `param` and `code` are null in the body when empty. */
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // invalid_request_error | authentication_error | server_error ...
  std::string param;
  std::string code;
};

/** The exception route handlers throw for a request they refuse. */
class ApiException : public std::runtime_error {
 public:
  explicit ApiException(ApiError e) : std::runtime_error(e.message), error(std::move(e)) {}
  ApiError error;
};

/** 400 invalid_request_error naming `param`. */
[[noreturn]] void bad_request(const std::string& param, const std::string& message);

/** Maps an ft::Error to its response: kInvalidArgument/kUnsupported/kInvalidFile -> 400
 *  invalid_request_error, kContextLength -> 400 code context_length_exceeded, kNotFound -> 404,
 *  kOverloaded/kOutOfMemory -> 503 server_error, others -> 500 server_error. */
ApiError api_error_from(const Error& e, const std::string& param = {});

/** {"error": {...}} for `e`. */
nlohmann::json error_body(const ApiError& e);

/** Anthropic's error body for `e`: {"type": "error", "error": {"type", "message"}}, the type from the
 *  status: 400/405/415 invalid_request_error, 401 authentication_error, 403 permission_error, 404
 *  not_found_error, 413 request_too_large, 429 rate_limit_error, an overload (code "overloaded", 503)
 *  or 529 overloaded_error, other 5xx api_error. */
nlohmann::json anthropic_error_body(const ApiError& e);

/** True for the Anthropic routes (/v1/messages and below), whose errors use anthropic_error_body. */
bool is_anthropic_path(const std::string& path);

/** Default error for a bare HTTP status (404 unknown route, 413 body too large, ...). */
ApiError api_error_for_status(int status, const std::string& path);

/** json.dump() that never throws: invalid UTF-8 is replaced by U+FFFD. */
std::string dump_json(const nlohmann::json& j);
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace ft::server
