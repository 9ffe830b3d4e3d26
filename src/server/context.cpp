#include "server/context.h"

#include <cctype>
#include <chrono>
#include <filesystem>
#include <random>
#include <system_error>

#include "server/auth.h"
#include "util/error.h"
#include "util/log.h"

namespace ft::server {

void ServerOptions::validate() const {
  if (port < 0 || port > 65535) fail(ErrorCode::kInvalidArgument, "--port must be in 0..65535 (got {})", port);
  if (max_body_mb <= 0) fail(ErrorCode::kInvalidArgument, "--max-body-mb must be > 0 (got {})", max_body_mb);
  if (api_key.empty() && !is_loopback_host(host) && !allow_unauthenticated)
    fail(ErrorCode::kInvalidArgument,
         "--host {} is reachable from other machines and no --api-key is set: anyone could use this server. Set "
         "--api-key KEY, or pass --allow-unauthenticated to serve without one",
         host);
}

std::string default_served_name(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p = fs::path(path).lexically_normal();  // "a/b/" -> "a/b/" with an empty filename; "a/./b" -> "a/b"
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  if (p.empty() || p.filename() == "." || p.filename() == "..") {
    std::error_code ec;
    const fs::path abs = fs::weakly_canonical(fs::absolute(p.empty() ? fs::path(".") : p), ec);
    if (!ec) p = abs;
  }
  std::error_code ec;
  if (fs::is_directory(p, ec)) return p.filename().string();
  return p.filename().replace_extension().string();
}

std::string ServerContext::new_id(const char* prefix) {
  static const uint64_t salt = std::random_device{}() * 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(created);
  const uint64_t n = ++counter;
  uint64_t a = salt ^ (n * 0xbf58476d1ce4e5b9ull);
  a ^= a >> 31;
  return fmt::format("{}{:016x}{:08x}", prefix, a, static_cast<uint32_t>(n));
}

std::string ServerContext::tool_call_id() {
  std::string id = new_id("call_");
  if (model.tool_call_format != ToolCallFormat::kMistral) return id;
  // The last 9 hex digits: 8 of the counter (unique for 4e9 calls) and one of the salted hash.
  return id.substr(id.size() - 9);
}

bool is_cors_simple_body(std::string_view content_type) {
  std::string t(content_type.substr(0, content_type.find(';')));
  while (!t.empty() && (t.back() == ' ' || t.back() == '\t')) t.pop_back();
  while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.erase(t.begin());
  for (char& c : t) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return t == "text/plain" || t == "application/x-www-form-urlencoded" || t == "multipart/form-data";
}

bool ServerContext::authorized(const HttpRequest& req) const {
  return api_key_ok(options.api_key, req.get_header_value("Authorization"), req.get_header_value("x-api-key"));
}

void ServerContext::check_model(const std::string& requested, bool allow_empty) const {
  if ((allow_empty && requested.empty()) || requested == model.name) return;
  throw ApiException(ApiError{404,
                              fmt::format("The model '{}' does not exist. This server serves '{}'.", requested, model.name),
                              "invalid_request_error", "model", "model_not_found"});
}

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_json(HttpResponse& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_json(HttpResponse& res, int status, const nlohmann::ordered_json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(const HttpRequest& req, HttpResponse& res, const ApiError& e) {
  if (e.status == 503) res.set_header("Retry-After", "1");  // overloaded or draining: seconds to wait
  const nlohmann::json body = is_anthropic_path(req.path) ? anthropic_error_body(e) : error_body(e);
  // For the request's log line (request_log.h): the type the client was sent (Anthropic's own).
  req.trace->error_type = body["error"].value("type", e.type);
  req.trace->error_code = e.code;
  req.trace->error_message = e.message;
  send_json(res, e.status, body);
}

void guarded(ServerContext& ctx, const HttpRequest& req, HttpResponse& res, bool auth,
             const std::function<void()>& fn) {
  try {
    if (auth && !ctx.authorized(req)) {
      ApiError e = api_error_for_status(401, req.path);
      send_error(req, res, e);
      return;
    }
    if (!ctx.options.cors_origin.empty() && req.method == "POST" && is_cors_simple_body(req.get_header_value("Content-Type"))) {
      // A page on another origin may POST these content types without a preflight (Fetch standard,
      // "CORS-safelisted request-header"), so with CORS on a JSON body must say application/json.
      send_error(req, res,
                 ApiError{415,
                          fmt::format("Content-Type '{}' is refused while CORS is on (--cors-origin): send the JSON "
                                      "body as application/json",
                                      req.get_header_value("Content-Type")),
                          "invalid_request_error", "", "unsupported_media_type"});
      return;
    }
    fn();
  } catch (const ApiException& e) {
    send_error(req, res, e.error);
  } catch (const Error& e) {
    send_error(req, res, api_error_from(e));
  } catch (const std::exception& e) {
    spdlog::error("{} {}: {}", req.method, req.path, e.what());
    send_error(req, res, ApiError{500, std::string("internal error: ") + e.what(), "server_error", "", "internal_error"});
  }
}

}  // namespace ft::server
