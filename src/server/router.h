#pragma once
// Router: the API's routes (method + path pattern → handler), independent of the transport. A known
// path asked with another method gets 405 and an Allow header, an unknown one 404 (HttpServer writes
// their bodies). POST bodies are handed over raw, whatever the Content-Type claims: every POST body of
// this API is JSON (curl's `-d` labels it application/x-www-form-urlencoded); a multipart/form-data
// body gets 415. The body size limit (--max-body-mb) is the transport's, applied while reading.
#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "server/http_types.h"

namespace ft::server {

class Router {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  /** A POST handler: the request (headers, path matches) and its whole body. */
  using BodyHandler = std::function<void(const HttpRequest&, HttpResponse&, const std::string& body)>;

  /** GET (and HEAD) `pattern` (an ECMAScript regex over the whole path). */
  void get(const std::string& pattern, Handler handler);
  /** POST `pattern`. */
  void post(const std::string& pattern, BodyHandler handler);
  /** DELETE `pattern` (a body, if any, is ignored). */
  void del(const std::string& pattern, Handler handler);

  /** Runs the route for req.method and req.path, filling req.matches. Returns false, with res.status
   *  404 (no route for the path) or 405 (routes for other methods: see allowed_methods), when none. */
  bool dispatch(HttpRequest& req, HttpResponse& res) const;

  /** The methods of the routes whose pattern matches `path` ("GET, HEAD", "POST"); empty when no route
   *  does (an unknown path: 404). */
  std::string allowed_methods(const std::string& path) const;

 private:
  struct Route {
    std::regex pattern;
    const char* methods;  // "GET, HEAD", "POST", "DELETE"
    Handler handler;
  };
  std::vector<Route> routes_;
};

}  // namespace ft::server
