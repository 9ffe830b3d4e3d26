#pragma once
// HttpServer: cpp-httplib server with every route registered, JSON error bodies for bare HTTP errors
// (unknown route 404, a known route asked with another method 405 + Allow, 413 body too large), a body
// size limit and a thread pool sized for the queue.
#include <atomic>
#include <memory>

#include <httplib.h>

#include "server/context.h"
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
  /** Stops accepting connections (thread-safe, idempotent) and returns once a serve() running on
   *  another thread has returned, whether it had started listening or not. */
  void stop();

  ServerContext& context() { return *ctx_; }

 private:
  std::unique_ptr<ServerContext> ctx_;
  std::atomic<bool> stop_requested_{false}, serving_{false};
  httplib::Server svr_;
  Router router_{svr_};
};

}  // namespace ft::server
