// GET /health: liveness, open without an API key.
#include "server/routes.h"

namespace ft::server {

void add_health_routes(Router& r, ServerContext& ctx) {
  auto handler = [&ctx](const httplib::Request& req, httplib::Response& res) {
    guarded(ctx, req, res, false, [&] { send_json(res, 200, nlohmann::json{{"status", "ok"}}); });
  };
  r.get(R"(/health/?)", handler);
  r.get(R"(/v1/health/?)", handler);
}

}  // namespace ft::server
