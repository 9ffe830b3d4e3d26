#pragma once
// HttpTransport: HTTP/1.1 over TCP with Boost.Beast on an Asio io_context (issue 40, "The HTTP edge").
// Connections are asynchronous: an idle or slow client holds a socket and a small buffer, never a
// thread. A request's header is read first, bounded in bytes and in fields (431 past either), then
// `admit` may refuse it from the header alone (the API key) before any of the body is read; the body
// is bounded while it is read, chunked or not (413). Every framing error gets a 4xx and the connection
// closes. Routes run on a pool of handler threads; while one runs, the socket is watched, and a client
// that hangs up marks the request (HttpRequest::client_gone) so its generation can be cancelled.
// There is no Range support: a Range header is ignored. Keep-alive as HTTP/1.1 says.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "server/http_types.h"

namespace ft::server {

struct TransportLimits {
  size_t max_header_bytes = 64 * 1024;  // request line + header fields
  size_t max_header_fields = 128;       // browsers and SDKs send ~20
  uint64_t max_body_bytes = 32ull << 20;
  std::chrono::milliseconds header_timeout{10000};  // from the first byte awaited to the header's end (idle keep-alive included)
  std::chrono::milliseconds body_timeout{30000};    // to read the whole body
  std::chrono::milliseconds write_timeout{10000};   // per write (a response, or one chunk of a stream)
  int io_threads = 2;
  int handler_threads = 64;  // routes running at once (a non-streaming generation holds one while it waits)
};

struct TransportHooks {
  /** Runs the route for `req` (on a handler thread) and fills `res`. Exceptions become 500. */
  std::function<void(HttpRequest& req, HttpResponse& res)> handle;
  /** Called with the header only (body empty) of a request that carries a body; false refuses it with
   *  `res` as the answer, and the body is never read. Unset: all admitted. */
  std::function<bool(const HttpRequest& req, HttpResponse& res)> admit;
  /** Fills `res` with the error body for a transport-level refusal (400, 408, 411, 413, 431, 500). */
  std::function<void(const HttpRequest& req, HttpResponse& res, int status, const std::string& message)> error;
  /** Once per answered request (whether its response could be written or not): counting, logging. On
   *  the handler thread just before a whole response is written, after a stream's last chunk or once
   *  its client went away; on an I/O thread for a transport-level refusal. */
  std::function<void(const HttpRequest& req, const HttpResponse& res)> finished;
};

class HttpTransport {
 public:
  HttpTransport(TransportLimits limits, TransportHooks hooks);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  /** Binds host:port (port 0: a free port; SO_REUSEADDR, never SO_REUSEPORT) and listens. Returns the
   *  bound port. Throws ft::Error(kIo) naming the address when it cannot. */
  int bind(const std::string& host, int port);
  /** Serves until stop(); blocks the calling thread. Returns at once when stop() came first. */
  void serve();
  /** Thread-safe, idempotent. Stops accepting, closes connections that are not in a request (idle or
   *  slow clients), marks running requests' clients gone (they cancel), waits for the handlers, and
   *  returns once a serve() on another thread has returned. */
  void stop();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ft::server
