// GET / and the chat page's files (web/, built in: server/web_assets.h), open without an API key (the
// page sends the key on its own API calls). Each answer is the file with its Content-Type and
// Cache-Control: no-cache (the browser revalidates, so a new binary's page is seen at once). A path
// that is not a file of web/ stays unknown to the router (404), as every other unknown path.
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

}  // namespace ft::server
