#include "server/http_server.h"

#include <malloc.h>
#include <algorithm>

#include "server/request_log.h"
#include "server/routes.h"
#include "util/log.h"

namespace ft::server {

namespace {

constexpr size_t kTrimAfterBytes = 1 << 20;  // request + response bytes after which the heap is trimmed
/** The request headers a CORS preflight that names none is told are allowed: those of the OpenAI
 *  and Anthropic clients (Anthropic's browser client adds anthropic-dangerous-direct-browser-access). */
constexpr const char* kCorsAllowHeaders =
    "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta, "
    "Anthropic-Dangerous-Direct-Browser-Access";

bool is_health_path(const std::string& path) {
  return path == "/health" || path == "/health/" || path == "/v1/health" || path == "/v1/health/";
}

/** The error of a transport-level refusal: status, message, and the code clients key on. */
ApiError transport_error(int status, const std::string& path, const std::string& message) {
  ApiError e = api_error_for_status(status, path);
  if (!message.empty()) e.message = message;
  e.type = status >= 500 ? "server_error" : "invalid_request_error";
  switch (status) {
    case 408: e.code = "request_timeout"; break;
    case 411: e.code = "length_required"; break;
    case 413: e.code = "request_too_large"; break;
    case 431: e.code = "request_header_fields_too_large"; break;
    case 500: e.code = "internal_error"; break;
    default: break;
  }
  return e;
}

}  // namespace

HttpServer::HttpServer(const ServerOptions& options, ServedModel model, EngineService& service)
    : ctx_(std::make_unique<ServerContext>()) {
  ctx_->options = options;
  ctx_->model = std::move(model);
  ctx_->service = &service;
  ctx_->created = unix_time();
  FT_CHECK(ctx_->model.vocab && ctx_->model.chat_template);

  ServerContext& ctx = *ctx_;
  add_chat_routes(router_, ctx);
  add_responses_routes(router_, ctx);
  add_anthropic_routes(router_, ctx);
  add_completion_routes(router_, ctx);
  add_llama_completion_routes(router_, ctx);
  add_model_routes(router_, ctx);
  add_stats_routes(router_, ctx);
  add_admin_routes(router_, ctx);
  add_health_routes(router_, ctx);
  add_props_routes(router_, ctx);
  add_tokenize_routes(router_, ctx);
  add_api_index_routes(router_, ctx);
  add_favicon_route(router_);
  if (options.webui) add_webui_routes(router_, ctx);

  TransportLimits limits;
  limits.max_body_bytes = static_cast<uint64_t>(std::max(0.0, options.max_body_mb) * 1024.0 * 1024.0);
  int threads = options.http_threads;
  if (threads <= 0) threads = 64;
  limits.handler_threads = std::clamp(threads, 4, 1024);

  TransportHooks hooks;
  hooks.handle = [this](HttpRequest& req, HttpResponse& res) { handle(req, res); };
  // The API key is checked from the header alone, before any body is read (every route but /health
  // needs it; a CORS preflight carries none; nor do the chat page's files, whose page sends the key,
  // nor /favicon.ico, which browsers fetch on their own).
  hooks.admit = [&ctx](const HttpRequest& req, HttpResponse& res) {
    if (ctx.options.api_key.empty() || is_health_path(req.path) || req.method == "OPTIONS" || ctx.authorized(req))
      return true;
    const bool get = req.method == "GET" || req.method == "HEAD";
    if (get && (is_favicon_path(req.path) || (ctx.options.webui && is_web_page_path(req.path)))) return true;
    if (!ctx.options.cors_origin.empty()) res.set_header("Access-Control-Allow-Origin", ctx.options.cors_origin);
    send_error(req, res, api_error_for_status(401, req.path));
    return false;
  };
  hooks.error = [&ctx](const HttpRequest& req, HttpResponse& res, int status, const std::string& message) {
    if (!ctx.options.cors_origin.empty()) res.set_header("Access-Control-Allow-Origin", ctx.options.cors_origin);
    send_error(req, res, transport_error(status, req.path, message));
  };
  // Every response with an error status is counted here (/v1/stats requests.rejected), and every
  // request gets its one log line (request_log.h). A large request leaves its parse trees and token
  // lists as free memory inside malloc's arenas, which glibc keeps: after one, the freed pages go back
  // to the system.
  hooks.finished = [&ctx](const HttpRequest& req, const HttpResponse& res) {
    if (res.status >= 400) ctx.requests_rejected.fetch_add(1);
    log_request(request_record(req, res, std::chrono::steady_clock::now()));
    if (req.body.size() + res.body.size() >= kTrimAfterBytes) malloc_trim(0);
  };
  transport_ = std::make_unique<HttpTransport>(limits, std::move(hooks));
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::handle(HttpRequest& req, HttpResponse& res) {
  const ServerOptions& o = ctx_->options;
  if (!o.cors_origin.empty()) res.set_header("Access-Control-Allow-Origin", o.cors_origin);
  if (!o.cors_origin.empty() && req.method == "OPTIONS") {
    // A preflight (Fetch standard, "CORS protocol"): no API key (browsers send none), the route's
    // methods, and the request headers the browser asks for (Authorization, Content-Type, ...).
    const std::string allow = router_.allowed_methods(req.path);
    if (allow.empty()) {
      send_error(req, res, api_error_for_status(404, req.path));
      return;
    }
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", allow + ", OPTIONS");
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers", asked.empty() ? kCorsAllowHeaders : asked);
    res.set_header("Access-Control-Max-Age", "86400");
    return;
  }
  if (router_.dispatch(req, res)) return;
  if (res.status == 405) {
    const std::string allow = router_.allowed_methods(req.path);
    res.set_header("Allow", allow);
    send_error(req, res, ApiError{405, fmt::format("Method {} is not allowed for {}; use {}", req.method, req.path, allow),
                                  "invalid_request_error", "", "method_not_allowed"});
    return;
  }
  send_error(req, res, api_error_for_status(res.status, req.path));
}

int HttpServer::bind() {
  const int port = transport_->bind(ctx_->options.host, ctx_->options.port);
  ctx_->options.port = port;
  return port;
}

void HttpServer::serve() { transport_->serve(); }

void HttpServer::stop() { transport_->stop(); }

}  // namespace ft::server
