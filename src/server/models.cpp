// GET /v1/models and /v1/models/{id}: the one served model (trailing slashes accepted; an id may hold '/').
#include "server/routes.h"

namespace ft::server {

namespace {

nlohmann::ordered_json model_card(const ServerContext& ctx) {
  nlohmann::ordered_json m;
  m["id"] = ctx.model.name;
  m["object"] = "model";
  m["created"] = ctx.created;
  m["owned_by"] = "freetoken";
  m["max_model_len"] = ctx.service->context_limit();
  return m;
}

}  // namespace

void add_model_routes(Router& r, ServerContext& ctx) {
  r.get(R"(/v1/models/?)", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(ctx, req, res, true, [&] {
      nlohmann::ordered_json body;
      body["object"] = "list";
      body["data"] = nlohmann::ordered_json::array({model_card(ctx)});
      send_json(res, 200, body);
    });
  });
  r.get(R"(/v1/models/(.+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(ctx, req, res, true, [&] {
      std::string id = req.matches[1];
      if (!id.empty() && id.back() == '/') id.pop_back();
      ctx.check_model(id, /*allow_empty=*/false);
      send_json(res, 200, model_card(ctx));
    });
  });
}

}  // namespace ft::server
