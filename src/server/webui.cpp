// GET / and the chat page's files (web/, built in: server/web_assets.h), open without an API key (the
// page sends the key on its own API calls). Each answer is the file with its Content-Type and
// Cache-Control: no-cache (the browser revalidates, so a new binary's page is seen at once). A path
// that is not a file of web/ stays unknown to the router (404), as every other unknown path.
// GET /favicon.ico, which browsers ask for on any page without a <link rel="icon"> (a JSON answer such
// as /v1's opened in a tab), is web/favicon.svg (image/svg+xml, which browsers take whatever the
// URL's extension), open without an API key and served with --no-webui too, so no visit logs a 404.
#include <string>

#include "server/routes.h"
#include "server/web_assets.h"

namespace ft::server {

namespace {

/** `s` with the ECMAScript regex's special characters escaped. */
std::string regex_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (std::string_view(R"(\^$.|?*+()[]{}/)").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

}  // namespace

bool is_web_page_path(std::string_view path) { return find_web_asset(path) != nullptr; }

bool is_favicon_path(std::string_view path) { return path == "/favicon.ico"; }

void add_webui_routes(Router& r, ServerContext& ctx) {
  (void)ctx;
  std::string pattern = "/";
  for (const WebAsset& a : web_assets()) pattern += "|" + regex_escape(a.path);
  r.get(pattern, [](const HttpRequest& req, HttpResponse& res) {
    const WebAsset* a = find_web_asset(req.path);
    if (!a) {  // the pattern is made of web_assets()' paths: cannot happen
      res.status = 404;
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(std::string(a->body), std::string(a->content_type));
  });
}

void add_favicon_route(Router& r) {
  r.get("/favicon\\.ico", [](const HttpRequest&, HttpResponse& res) {
    const WebAsset* icon = find_web_asset("/favicon.svg");
    if (!icon) {  // web/ without favicon.svg: "no icon", still not an error
      res.status = 204;
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Content-Type-Options", "nosniff");
    res.set_content(std::string(icon->body), std::string(icon->content_type));
  });
}

}  // namespace ft::server
