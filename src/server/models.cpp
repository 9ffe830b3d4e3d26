// GET /v1/models and /v1/models/{id} (also without /v1, as llama.cpp serves them): the one served
// model (trailing slashes accepted; an id may hold '/').
// The objects carry both APIs' fields: OpenAI's (object, created, owned_by) and Anthropic's (type,
// display_name, created_at; a list's has_more, first_id, last_id), so either client reads them.
#include <ctime>

#include "server/routes.h"

namespace ft::server {

namespace {

/** Unix seconds as RFC 3339 UTC ("2026-12-01T13:05:00Z"), Anthropic's created_at. */
std::string rfc3339(int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::ordered_json model_card(const ServerContext& ctx) {
  nlohmann::ordered_json m;
  m["id"] = ctx.model.name;
  m["object"] = "model";
  m["created"] = ctx.created;
  m["owned_by"] = "freetoken";
  m["max_model_len"] = ctx.service->context_limit();
  m["type"] = "model";
  m["display_name"] = ctx.model.name;
  m["created_at"] = rfc3339(ctx.created);
  return m;
}

}  // namespace

void add_model_routes(Router& r, ServerContext& ctx) {
  r.get(R"((?:/v1)?/models/?)", [&ctx](const HttpRequest& req, HttpResponse& res) {
    guarded(ctx, req, res, true, [&] {
      nlohmann::ordered_json body;
      body["object"] = "list";
      body["data"] = nlohmann::ordered_json::array({model_card(ctx)});
      body["has_more"] = false;
      body["first_id"] = ctx.model.name;
      body["last_id"] = ctx.model.name;
      send_json(res, 200, body);
    });
  });
  r.get(R"((?:/v1)?/models/(.+))", [&ctx](const HttpRequest& req, HttpResponse& res) {
    guarded(ctx, req, res, true, [&] {
      std::string id = req.matches[1];
      if (!id.empty() && id.back() == '/') id.pop_back();
      ctx.check_model(id, /*allow_empty=*/false);
      send_json(res, 200, model_card(ctx));
    });
  });
}

}  // namespace ft::server
