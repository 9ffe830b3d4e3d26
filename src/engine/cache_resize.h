#pragma once
// Resizing a served engine's caches (POST /v1/admin/cache, issue 37): the sizes asked for, the sizes
// and memory plan after, and the glue that applies Engine::resize_caches between two steps of the
// serving loop (EngineService::change), with the KV pools handed to its scheduler.
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/memory_plan.h"

namespace ft {

class Engine;
class EngineService;

/** A change of the cache sizes of a loaded engine (Engine::resize_caches). */
struct CacheResize {
  std::optional<int64_t> expert_slots;  // the expert cache's slots (as --moe-cache-slots); unset: as now
  std::optional<int64_t> kv_tokens;     // the KV pool's tokens (as -c/--kv-tokens, in whole pages); unset: as now
};

/** A served engine's cache sizes and memory plan, as /v1/stats prints them. */
struct CacheSizes {
  int64_t kv_tokens = 0;       // the KV pool's tokens (whole pages)
  int32_t kv_pages = 0;
  int64_t kv_bytes = 0;        // MemoryPlan::kv_bytes
  int64_t expert_slots = 0;    // the expert cache's slots (0: none)
  std::vector<MemoryRow> memory_rows;  // memory_rows(plan)
  int64_t memory_limit = 0;            // memory_limit(plan)
};

/** `engine`'s sizes now. */
CacheSizes cache_sizes(const Engine& engine);

/** Applies `r` to `engine` between two steps of `service` (which serves it): refused first, nothing
 *  changed, by Engine::check_resize against the requests queued or running; then, for kv_tokens,
 *  the running requests go back to the queue (they recompute their KV; none is dropped), the prefix
 *  cache empties and the scheduler takes the new pools. Returns the sizes after. Throws what
 *  check_resize and resize_caches throw (the engine then keeps its old sizes), kOverloaded once the
 *  service is shutting down. */
CacheSizes resize_served_caches(EngineService& service, Engine& engine, const CacheResize& r);

}  // namespace ft
