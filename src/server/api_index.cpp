// GET /v1 and /v1/: the answer to opening the banner's API base URL (`listening on
// http://HOST:PORT/v1`) in a browser or with curl, which would otherwise be a 404: a small JSON object
// saying what this is, the base URLs an OpenAI or Anthropic client takes, and where the model list and
// the chat page are.
//
// Auth: behind the API key like every other /v1 route. The answer names the served routes only (no
// model name, no settings), so opening it would leak little, but one rule ("/v1/... needs the key,
// /health and the chat page's files do not") is simpler to state and to check than exceptions. Without
// the key the answer is the usual 401 JSON, whose message says how to send it ("Missing or invalid API
// key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'.").
#include <cctype>
#include <string>

#include "server/auth.h"
#include "server/routes.h"

namespace ft::server {

namespace {

/** The request's Host header when it looks like a host[:port] (letters, digits, '.', '-', ':', and
 *  IPv6 brackets), else the server's own address: the host part of the URLs the answer names. */
std::string origin_host(const ServerContext& ctx, const HttpRequest& req) {
  const std::string host = req.get_header_value("Host");
  bool ok = !host.empty() && host.size() <= 255;
  for (char c : host)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']'))
      ok = false;
  if (ok) return host;
  return url_host(ctx.options.host) + ":" + std::to_string(ctx.options.port);
}

}  // namespace

void add_api_index_routes(Router& r, ServerContext& ctx) {
  r.get(R"(/v1/?)", [&ctx](const HttpRequest& req, HttpResponse& res) {
    guarded(ctx, req, res, true, [&] {
      const std::string origin = "http://" + origin_host(ctx, req);
      nlohmann::ordered_json j;
      j["object"] = "api";
      j["name"] = "FreeToken";
      j["openai_base_url"] = origin + "/v1";
      j["anthropic_base_url"] = origin;
      j["models"] = "/v1/models";
      j["chat_page"] = ctx.options.webui ? nlohmann::ordered_json("/") : nlohmann::ordered_json(nullptr);
      j["auth"] = ctx.options.api_key.empty() ? "none" : "api_key";
      j["docs"] =
          "Give an OpenAI client base_url = openai_base_url (POST /v1/chat/completions, /v1/completions, "
          "/v1/responses) or an Anthropic client base_url = anthropic_base_url (POST /v1/messages). With "
          "auth api_key, send 'Authorization: Bearer <key>' or 'x-api-key: <key>'.";
      send_json(res, 200, j);
    });
  });
}

}  // namespace ft::server
