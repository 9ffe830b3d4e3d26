// POST /v1/admin/cache {"expert_slots": N, "kv_tokens": M}: resizes the running engine's expert cache
// and KV cache (issue 37). Either field may be left out. The change is applied by the serving loop
// between two steps (resize_served_caches): requests queued or streaming go on, those holding KV
// recompute it. 200 with the sizes after and the new memory plan (the `memory` object of /v1/stats,
// which shows them from then on). Refused with 400 for a bad body, sizes the engine cannot take or a
// plan that does not fit --gpu-memory-limit (the server keeps its old sizes), 401 without the API key
// and 403 when the server runs without one (a resize affects every client: it needs --api-key).
#include <cstdint>
#include <limits>

#include "server/request_parse.h"
#include "server/routes.h"

namespace ft::server {

namespace {

/** The body's sizes: only "expert_slots" and "kv_tokens", each an integer >= 1. Throws ApiException
 *  400 naming the field. */
CacheResize parse_cache_resize(const nlohmann::ordered_json& body) {
  CacheResize r;
  for (const auto& [key, value] : body.items()) {
    if (key != "expert_slots" && key != "kv_tokens")
      bad_request(key, fmt::format("Unknown field '{}': the body takes 'expert_slots' and 'kv_tokens'", key));
    if (!value.is_number_integer() ||
        (value.is_number_unsigned() && value.get<uint64_t>() > uint64_t{std::numeric_limits<int64_t>::max()}))
      bad_request(key, fmt::format("'{}' must be a positive integer, got {}", key, value.dump()));
    const auto n = value.get<int64_t>();
    if (n < 1) bad_request(key, fmt::format("'{}' must be a positive integer, got {}", key, n));
    (key == "expert_slots" ? r.expert_slots : r.kv_tokens) = n;
  }
  if (!r.expert_slots && !r.kv_tokens)
    bad_request("", "The body must give 'expert_slots', 'kv_tokens' or both (the sizes to change)");
  return r;
}

}  // namespace

void add_admin_routes(Router& r, ServerContext& ctx) {
  r.post(R"(/v1/admin/cache/?)", [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
    guarded(ctx, req, res, true, [&] {
      if (ctx.options.api_key.empty())
        throw ApiException(ApiError{403,
                                    "POST /v1/admin/cache changes the server for every client, so it needs an API "
                                    "key: start the server with --api-key KEY and send it",
                                    "permission_error", "", "api_key_required"});
      const CacheResize want = parse_cache_resize(parse_json_body(body));
      if (!ctx.model.resize_caches)
        throw ApiException(ApiError{501, "This server has no engine whose caches can be resized", "server_error", "",
                                    "not_implemented"});
      CacheSizes after;
      try {
        after = ctx.model.resize_caches(want);
      } catch (const Error& e) {
        // The field refused: the one the engine names (SizeRefusal), else the only one given.
        const auto* size = dynamic_cast<const SizeRefusal*>(&e);
        std::string param = size ? size->field : "";
        if (param != "expert_slots" && param != "kv_tokens")
          param = want.expert_slots && want.kv_tokens ? "" : want.expert_slots ? "expert_slots" : "kv_tokens";
        // A plan that does not fit is the request's fault, not the server's: 400, saying what would fit.
        if (e.code() == ErrorCode::kOutOfMemory)
          throw ApiException(ApiError{400, e.what(), "invalid_request_error", param, "memory_limit_exceeded"});
        ApiError refused = api_error_from(e);  // the status and type any engine error gets
        if (refused.status == 400) refused.param = param;
        throw ApiException(refused);
      }
      {
        std::lock_guard<std::mutex> lk(ctx.memory_mu);
        ctx.model.memory_rows = after.memory_rows;
        ctx.model.memory_limit = after.memory_limit;
        ctx.model.kv_bytes_total = after.kv_bytes;
      }
      nlohmann::ordered_json j;
      j["object"] = "cache_sizes";
      j["expert_slots"] = after.expert_slots > 0 ? nlohmann::ordered_json(after.expert_slots) : nlohmann::ordered_json();
      j["kv_tokens"] = after.kv_tokens;
      j["kv_pages"] = after.kv_pages;
      j["kv_bytes"] = after.kv_bytes;
      j["context_limit"] = ctx.service ? ctx.service->context_limit() : after.kv_tokens;
      j["memory"] = memory_json(after.memory_rows, after.memory_limit);
      send_json(res, 200, j);
    });
  });
}

}  // namespace ft::server
