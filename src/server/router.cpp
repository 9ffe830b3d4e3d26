#include "server/router.h"

#include "server/context.h"

namespace ft::server {

void Router::get(const std::string& pattern, Handler handler) {
  routes_.push_back(Route{std::regex(pattern), "GET, HEAD", std::move(handler)});
}

void Router::post(const std::string& pattern, BodyHandler handler) {
  routes_.push_back(Route{std::regex(pattern), "POST", [handler = std::move(handler)](const HttpRequest& req, HttpResponse& res) {
                            if (req.is_multipart_form_data()) {
                              send_error(req, res,
                                         ApiError{415,
                                                  "The request body must be JSON sent with 'Content-Type: "
                                                  "application/json', not multipart/form-data.",
                                                  "invalid_request_error", "", "unsupported_media_type"});
                              return;
                            }
                            handler(req, res, req.body);
                          }});
}

void Router::del(const std::string& pattern, Handler handler) {
  routes_.push_back(Route{std::regex(pattern), "DELETE", std::move(handler)});
}

bool Router::dispatch(HttpRequest& req, HttpResponse& res) const {
  const std::string& m = req.method;
  bool path_known = false;
  for (const Route& r : routes_) {
    std::smatch match;
    if (!std::regex_match(req.path, match, r.pattern)) continue;
    path_known = true;
    const std::string_view methods = r.methods;
    const bool ok = methods == "GET, HEAD" ? (m == "GET" || m == "HEAD") : methods == m;
    if (!ok) continue;
    req.matches.clear();
    for (const auto& g : match) req.matches.push_back(g.str());
    r.handler(req, res);
    return true;
  }
  res.status = path_known ? 405 : 404;
  return false;
}

std::string Router::allowed_methods(const std::string& path) const {
  std::string out;
  for (const Route& r : routes_) {
    if (!std::regex_match(path, r.pattern) || out.find(r.methods) != std::string::npos) continue;
    if (!out.empty()) out += ", ";
    out += r.methods;
  }
  return out;
}

}  // namespace ft::server
