// GET /health: open without an API key. 200 {"status": "ok"} while the server takes requests; 503
// {"status": "shutting down"} once a shutdown began (running requests drain, new ones get 503), so a
// load balancer's health check stops sending traffic during the grace period.
#include "server/routes.h"

namespace ft::server {

void add_health_routes(Router& r, ServerContext& ctx) {
  auto handler = [&ctx](const HttpRequest& req, HttpResponse& res) {
    guarded(ctx, req, res, false, [&] {
      if (ctx.service && !ctx.service->accepting())
        return send_json(res, 503, nlohmann::json{{"status", "shutting down"}});
      send_json(res, 200, nlohmann::json{{"status", "ok"}});
    });
  };
  r.get(R"(/health/?)", handler);
  r.get(R"(/v1/health/?)", handler);
}

}  // namespace ft::server
