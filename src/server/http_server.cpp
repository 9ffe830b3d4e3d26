#include "server/http_server.h"

#include <malloc.h>
#include <algorithm>
#include <chrono>
#include <thread>

#include "server/routes.h"
#include "util/log.h"

namespace ft::server {

namespace {

/** The request headers a CORS preflight that names none is told are allowed: those of the OpenAI
 *  and Anthropic clients (Anthropic's browser client adds anthropic-dangerous-direct-browser-access). */
constexpr size_t kTrimAfterBytes = 1 << 20;
constexpr size_t kMaxHeaders = 128;  // header fields of one request (browsers and SDKs send ~20)  // request + response bytes after which the heap is trimmed
constexpr const char* kCorsAllowHeaders =
    "Authorization, Content-Type, X-Api-Key, Anthropic-Version, Anthropic-Beta, "
    "Anthropic-Dangerous-Direct-Browser-Access";

}  // namespace

HttpServer::HttpServer(const ServerOptions& options, ServedModel model, EngineService& service)
    : ctx_(std::make_unique<ServerContext>()) {
  ctx_->options = options;
  ctx_->model = std::move(model);
  ctx_->service = &service;
  ctx_->created = unix_time();
  FT_CHECK(ctx_->model.vocab && ctx_->model.chat_template);

  int threads = options.http_threads;
  if (threads <= 0) threads = 64;
  threads = std::clamp(threads, 4, 1024);
  svr_.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr_.set_payload_max_length(static_cast<size_t>(std::max(0.0, options.max_body_mb) * 1024.0 * 1024.0));
  svr_.set_keep_alive_timeout(2);
  svr_.set_read_timeout(30);
  svr_.set_write_timeout(10);
  svr_.set_tcp_nodelay(true);
  // httplib's default socket options add SO_REUSEPORT, with which a second server binds a port that
  // one already listens on and the kernel splits the connections between the two. SO_REUSEADDR only:
  // a restart can still take the port while old connections sit in TIME_WAIT.
  svr_.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<const void*>(&yes), sizeof(yes));
  });

  ServerContext* ctx = ctx_.get();
  if (!options.cors_origin.empty()) {
    svr_.set_default_headers({{"Access-Control-Allow-Origin", options.cors_origin}});
    // A preflight (Fetch standard, "CORS protocol"): no API key (browsers send none), the route's
    // methods, and the request headers the browser asks for (Authorization, Content-Type, ...).
    svr_.Options(R"(.*)", [this](const httplib::Request& req, httplib::Response& res) {
      const std::string allow = router_.allowed_methods(req.path);
      if (allow.empty()) {
        res.status = 404;
        return;
      }
      res.status = 204;
      res.set_header("Access-Control-Allow-Methods", allow + ", OPTIONS");
      const std::string asked = req.get_header_value("Access-Control-Request-Headers");
      res.set_header("Access-Control-Allow-Headers", asked.empty() ? kCorsAllowHeaders : asked);
      res.set_header("Access-Control-Max-Age", "86400");
    });
  }
  svr_.set_error_handler([this, ctx](const httplib::Request& req, httplib::Response& res) {
    ctx->requests_rejected.fetch_add(1);  // httplib calls this for every response with status >= 400
    if (!res.body.empty() || res.content_provider_) return;  // a route already wrote its error
    if (res.status == 404) {  // no route for this method: 405 when the path has routes for others
      const std::string allow = router_.allowed_methods(req.path);
      if (!allow.empty()) {
        res.set_header("Allow", allow);
        send_error(req, res, ApiError{405, fmt::format("Method {} is not allowed for {}; use {}", req.method, req.path, allow),
                                 "invalid_request_error", "", "method_not_allowed"});
        return;
      }
    }
    send_error(req, res, api_error_for_status(res.status, req.path));
  });
  svr_.set_exception_handler([](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("{} {}: {}", req.method, req.path, what);
    send_error(req, res, ApiError{500, "internal error: " + what, "server_error", "", "internal_error"});
  });
  // No route serves a file, so a Range header means nothing here; httplib would still cut any reply
  // (errors included) into one multipart part per range, so thousands of ranges multiplied a small
  // request into megabytes. The ranges are dropped before routing.
  // Past kMaxHeaders header fields a request is refused (431) before any route or body work; httplib
  // reads them all first (each line at most its own limit), so this bounds what a request can make
  // the routes see, not what it can make the reader buffer (issue 40's transport).
  svr_.set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.headers.size() > kMaxHeaders) {
      send_error(req, res,
                 ApiError{431, fmt::format("The request has {} header fields; at most {} are accepted",
                                           req.headers.size(), kMaxHeaders),
                          "invalid_request_error", "", "request_header_fields_too_large"});
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!req.ranges.empty()) const_cast<httplib::Request&>(req).ranges.clear();  // httplib's own, non-const object
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // A large request leaves its parse trees and token lists as free memory inside malloc's arenas, which
  // glibc keeps: after one, the freed pages go back to the system (the logger runs once the response
  // is written).
  svr_.set_logger([](const httplib::Request& req, const httplib::Response& res) {
    if (req.body.size() + res.body.size() >= kTrimAfterBytes) malloc_trim(0);
  });
  add_chat_routes(router_, *ctx);
  add_responses_routes(router_, *ctx);
  add_anthropic_routes(router_, *ctx);
  add_completion_routes(router_, *ctx);
  add_llama_completion_routes(router_, *ctx);
  add_model_routes(router_, *ctx);
  add_stats_routes(router_, *ctx);
  add_health_routes(router_, *ctx);
  add_props_routes(router_, *ctx);
  add_tokenize_routes(router_, *ctx);
}

HttpServer::~HttpServer() { stop(); }

int HttpServer::bind() {
  const ServerOptions& o = ctx_->options;
  int port = o.port;
  if (port == 0) {
    port = svr_.bind_to_any_port(o.host);
    if (port < 0) fail(ErrorCode::kIo, "cannot bind {} on any port", o.host);
  } else if (!svr_.bind_to_port(o.host, port)) {
    fail(ErrorCode::kIo, "cannot bind {}:{} (in use, or not an address of this machine?)", o.host, port);
  }
  ctx_->options.port = port;
  return port;
}

void HttpServer::serve() {
  serving_ = true;  // seq_cst with stop_requested_: either this sees the stop or stop() sees it serving
  if (!stop_requested_) svr_.listen_after_bind();
  serving_ = false;
}

void HttpServer::stop() {
  stop_requested_ = true;
  // httplib's stop() does nothing before the listener runs: a stop that came first (a signal right
  // after start-up) left serve() listening forever. Repeat it until serve() has returned.
  for (svr_.stop(); serving_; svr_.stop()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace ft::server
