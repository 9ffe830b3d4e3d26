#include "server/errors.h"

namespace ft::server {

void bad_request(const std::string& param, const std::string& message) {
  throw ApiException(ApiError{400, message, "invalid_request_error", param, ""});
}

ApiError api_error_from(const Error& e, const std::string& param) {
  ApiError a;
  a.message = e.what();
  a.param = param;
  switch (e.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsupported:
    case ErrorCode::kInvalidFile:
      a.status = 400;
      break;
    case ErrorCode::kContextLength:
      a.status = 400;
      a.code = "context_length_exceeded";
      break;
    case ErrorCode::kNotFound:
      a.status = 404;
      a.code = "not_found";
      break;
    case ErrorCode::kOverloaded:
    case ErrorCode::kOutOfMemory:
      a.status = 503;
      a.type = "server_error";
      a.code = "overloaded";
      break;
    default:
      a.status = 500;
      a.type = "server_error";
      a.code = "internal_error";
      break;
  }
  return a;
}

nlohmann::json error_body(const ApiError& e) {
  nlohmann::json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return {{"error", err}};
}

nlohmann::json anthropic_error_body(const ApiError& e) {
  const char* type = "invalid_request_error";
  switch (e.status) {
    case 401: type = "authentication_error"; break;
    case 403: type = "permission_error"; break;
    case 404: type = "not_found_error"; break;
    case 413: type = "request_too_large"; break;
    case 429: type = "rate_limit_error"; break;
    case 529: type = "overloaded_error"; break;
    default:
      if (e.status >= 500) type = e.code == "overloaded" ? "overloaded_error" : "api_error";
  }
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

bool is_anthropic_path(const std::string& path) {
  constexpr std::string_view kPrefix = "/v1/messages";
  return path.compare(0, kPrefix.size(), kPrefix) == 0 && (path.size() == kPrefix.size() || path[kPrefix.size()] == '/');
}

ApiError api_error_for_status(int status, const std::string& path) {
  ApiError a;
  a.status = status;
  switch (status) {
    case 400: a.message = "The request could not be parsed."; break;
    case 401:
      a.message = "Missing or invalid API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'.";
      a.code = "invalid_api_key";
      break;
    case 404:
      a.message = "Unknown route: " + path;
      a.code = "not_found";
      break;
    case 405: a.message = "Method not allowed for " + path; break;
    case 413:
      a.message = "The request body is larger than the server's limit (--max-body-mb).";
      a.code = "request_too_large";
      break;
    default:
      a.type = status >= 500 ? "server_error" : "invalid_request_error";
      a.message = "HTTP error " + std::to_string(status);
  }
  return a;
}

std::string dump_json(const nlohmann::json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace ft::server
