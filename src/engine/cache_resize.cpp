#include "engine/cache_resize.h"

#include "engine/engine.h"
#include "engine/service.h"

namespace ft {

CacheSizes cache_sizes(const Engine& engine) {
  const MemoryPlan& p = engine.memory_plan();
  CacheSizes s;
  s.kv_tokens = p.kv_tokens;
  s.kv_pages = p.kv_pages;
  s.kv_bytes = p.kv_bytes;
  if (p.moe && p.moe->count(MoeLayerMode::kCache) > 0) s.expert_slots = p.moe->cache.n_slots;
  s.memory_rows = memory_rows(p);
  s.memory_limit = memory_limit(p);
  return s;
}

CacheSizes resize_served_caches(EngineService& service, Engine& engine, const CacheResize& r) {
  CacheSizes after;
  ServiceChange c;
  c.check = [&](int64_t longest) { engine.check_resize(r, longest); };
  c.apply = [&] {
    engine.resize_caches(r);
    after = cache_sizes(engine);  // on the loop's thread: no other resize runs now
  };
  if (r.kv_tokens) c.pools = [&] { return engine.kv().pools(); };
  service.change(c);
  return after;
}

}  // namespace ft
