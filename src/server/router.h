#pragma once
// Router: registers the API's routes on the cpp-httplib server and remembers each path pattern's methods,
// so a known path asked with another method gets 405 and an Allow header (HttpServer's error handler
// asks allowed_methods), not 404. POST bodies are read here, raw, whatever
// the Content-Type claims: every POST body of this API is JSON, and curl's `-d` labels it
// application/x-www-form-urlencoded, which httplib would otherwise parse as a form and refuse with 413
// beyond CPPHTTPLIB_FORM_URL_ENCODED_PAYLOAD_MAX_LENGTH (8 KiB; a macro that cannot be raised from here
// because Debian's httplib is a compiled library). The body size limit (--max-body-mb) still applies.
#include <functional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

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

  /** DELETE `pattern` (a body, if any, is read and ignored). */
  void del(const std::string& pattern, httplib::Server::Handler handler);

  /** The methods of the routes whose pattern matches `path` ("GET, HEAD", "POST"); empty when no route
   *  does (an unknown path: 404). */
  std::string allowed_methods(const std::string& path) const;

 private:
  httplib::Server& svr_;
  std::vector<std::pair<std::regex, const char*>> routes_;  // pattern, methods
};

}  // namespace ft::server
