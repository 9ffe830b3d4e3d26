#include "server/router.h"

#include "server/context.h"

namespace ft::server {

namespace {

/** The reader sets 413 (over the payload limit) or 400 (broken chunking, short body); the error handler
 *  writes the body. */
void read_failed(httplib::Response& res) {
  if (res.status < 400) res.status = 400;
}

/** HTTP/1.1 (RFC 9112, 6.3): a request with neither Content-Length nor Transfer-Encoding has no
 *  body. httplib would wait for one until its read timeout (30 s). */
bool has_body(const httplib::Request& req) {
  return req.has_header("Content-Length") || req.has_header("Transfer-Encoding");
}

}  // namespace

void Router::get(const std::string& pattern, httplib::Server::Handler handler) {
  routes_.emplace_back(std::regex(pattern), "GET, HEAD");
  svr_.Get(pattern, std::move(handler));
  // POST on a GET route: consume what body there is and answer at once (the error handler turns the
  // 404 into a 405 with Allow), instead of httplib reading a body that never comes.
  svr_.Post(pattern, [](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read) {
    if (has_body(req) && !read([](const char*, size_t) { return true; })) return read_failed(res);
    res.status = 404;
  });
}

void Router::post(const std::string& pattern, BodyHandler handler) {
  routes_.emplace_back(std::regex(pattern), "POST");
  // A content-reader handler is dispatched before httplib reads the body itself, so its form parsing
  // (and form size cap) never runs; the payload limit is enforced by the reader.
  svr_.Post(pattern, [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res,
                                                     const httplib::ContentReader& read) {
    std::string body;
    if (!has_body(req)) return handler(req, res, body);
    if (req.is_multipart_form_data()) {
      const bool ok = read([](const httplib::MultipartFormData&) { return true; },
                           [](const char*, size_t) { return true; });
      if (!ok) return read_failed(res);
      send_error(req, res, ApiError{415,
                               "The request body must be JSON sent with 'Content-Type: application/json', not "
                               "multipart/form-data.",
                               "invalid_request_error", "", "unsupported_media_type"});
      return;
    }
    if (!read([&](const char* data, size_t n) {
          body.append(data, n);
          return true;
        }))
      return read_failed(res);
    handler(req, res, body);
  });
}

void Router::del(const std::string& pattern, httplib::Server::Handler handler) {
  routes_.emplace_back(std::regex(pattern), "DELETE");
  svr_.Delete(pattern, std::move(handler));
}

std::string Router::allowed_methods(const std::string& path) const {
  std::string out;
  for (const auto& [re, methods] : routes_) {
    if (!std::regex_match(path, re) || out.find(methods) != std::string::npos) continue;
    if (!out.empty()) out += ", ";
    out += methods;
  }
  return out;
}

}  // namespace ft::server
