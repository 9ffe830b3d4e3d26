#pragma once
// HttpServer: the API's routes on the Beast transport (http_transport.h), with JSON error bodies for
// bare HTTP errors (unknown route 404, a known route asked with another method 405 + Allow, framing
// errors 400/408/431, a body over --max-body-mb 413), the API key checked from the header before a
// body is read, CORS (--cors-origin) and a handler pool sized for the queue.
#include <memory>

#include "server/context.h"
#include "server/http_transport.h"
#include "server/router.h"

namespace ft::server {

class HttpServer {
 public:
  /** `service` and the model's vocab/template must outlive the server. */
  HttpServer(const ServerOptions& options, ServedModel model, EngineService& service);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /** Binds options.host:options.port (port 0: a free port). Returns the bound port. Throws
   *  ft::Error(kIo) naming the address when it cannot bind. */
  int bind();
  /** Serves until stop(); blocks the calling thread. Returns once in-flight handlers have finished,
   *  or at once when stop() came first. */
  void serve();
  /** Stops accepting connections (thread-safe, idempotent), closes idle and slow connections, cancels
   *  requests still running, and returns once a serve() running on another thread has returned. */
  void stop();

  ServerContext& context() { return *ctx_; }

 private:
  void handle(HttpRequest& req, HttpResponse& res);

  std::unique_ptr<ServerContext> ctx_;
  Router router_;
  std::unique_ptr<HttpTransport> transport_;
};

}  // namespace ft::server
