#pragma once
// Router: registers the API's routes on the cpp-httplib server. POST bodies are read here, raw, whatever
// the Content-Type claims: every POST body of this API is JSON, and curl's `-d` labels it
// application/x-www-form-urlencoded, which httplib would otherwise parse as a form and refuse with 413
// beyond CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH (8 KiB; a macro that cannot be raised from here
// because Debian's httplib is a compiled library). The body size limit (--max-body-mb) still applies.
#include <functional>
#include <string>

#include <httplib.h>

namespace ft::server {

class Router {
 public:
  /** A POST handler: the request (headers, path matches) and its whole body. */
  using BodyHandler = std::function<void(const httplib::Request&, httplib::Response&, const std::string& body)>;

  /** `svr` must outlive the router. */
  explicit Router(httplib::Server& svr) : svr_(svr) {}

  /** GET (and HEAD) `pattern` (an ECMAScript regex over the whole path). */
  void get(const std::string& pattern, httplib::Server::Handler handler);

  /** POST `pattern`: the handler runs once the body was read in full. A body over the server's payload
   *  limit gets 413 and a broken one 400 (the error handler writes the body); a multipart/form-data body
   *  gets 415 asking for application/json. */
  void post(const std::string& pattern, BodyHandler handler);

 private:
  httplib::Server& svr_;
};

}  // namespace ft::server
