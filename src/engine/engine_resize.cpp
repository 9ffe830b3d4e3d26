// Engine::check_resize, resize_caches: the KV cache and the expert cache resized on a loaded engine
// (POST /v1/admin/cache, issue 37). The serving loop calls them between steps, with no page held.
#include <limits>

#include "engine/engine.h"
#include "engine/memory_plan.h"
#include "util/error.h"
#include "util/format.h"
#include "util/log.h"

namespace ft {

namespace {

/** Throws SizeRefusal(code, the message, `field`): a refusal of the request's field. */
template <typename... Args>
[[noreturn]] void refuse(ErrorCode code, const char* field, fmt::format_string<Args...> f, Args&&... args) {
  throw SizeRefusal(code, fmt::format(f, std::forward<Args>(args)...), field);
}

}  // namespace

void Engine::check_resize(const CacheResize& r, int64_t longest) const {
  if (!r.expert_slots && !r.kv_tokens)
    fail(ErrorCode::kInvalidArgument, "give expert_slots, kv_tokens or both (the sizes to change)");
  if (comm_)
    fail(ErrorCode::kUnsupported, "resizing the caches of a server on {} ranks (--tensor-parallel-size) is not "
         "supported yet: restart it with the sizes wanted", comm_->group_size());
  if (r.kv_tokens) {
    const int64_t m = *r.kv_tokens, page = options_.page_size;
    // PagePool counts pages in int32 (and a spare page is added).
    const int64_t most = (int64_t{std::numeric_limits<int32_t>::max()} - 2) * page;
    if (m < 1 || m > most)
      refuse(ErrorCode::kInvalidArgument, "kv_tokens", "kv_tokens must be between 1 and {} (got {})", most, m);
    const int64_t held = (m + page - 1) / page * page;
    if (held < longest)
      refuse(ErrorCode::kInvalidArgument, "kv_tokens",
             "kv_tokens {} ({} in whole pages of {}) cannot hold a request queued or running now, which may need {} "
           "tokens (its prompt and max_tokens); give at least {}",
           m, held, page, longest, longest);
    if (options_.kv_host_gib > 0 || !options_.prompt_cache_dir.empty())
      refuse(ErrorCode::kUnsupported, "kv_tokens",
           "resizing the KV cache with the KV tiers on (--kv-host-gib, --prompt-cache-dir) is not supported yet: "
           "their page copies are bound to the KV cache allocated at start");
  }
  if (r.expert_slots) {
    if (!moe_)
      refuse(ErrorCode::kInvalidArgument, "expert_slots",
             "expert_slots: {} has no routed experts, so there is no expert cache to size", model_->config().arch);
    if (plan_.moe->count(MoeLayerMode::kCache) == 0)
      refuse(ErrorCode::kInvalidArgument, "expert_slots",
           "expert_slots: the {} strategy has no expert cache (start the server with --moe-strategy offload or hybrid "
           "for one)", moe_strategy_name(plan_.moe->strategy));
    // The least cache: 2 x a layer's experts in every slot class of a mixed-type file, the cache layers'
    // (as cache_sizing refuses, there in --moe-cache-slots' terms).
    int64_t least = 2 * int64_t{plan_.budget ? plan_.budget->experts_per_layer : 1};
    const std::vector<SlotClass>& classes = plan_.moe->cache.classes;
    if (!classes.empty()) {
      least = 0;
      for (const SlotClass& c : classes) least += c.min_slots();
    }
    if (*r.expert_slots < least)
      refuse(ErrorCode::kInvalidArgument, "expert_slots",
             "expert_slots {} is below the minimum of {} (2 x the experts of a MoE layer{}: prefill streams two "
             "layers)",
             *r.expert_slots, least,
             classes.size() > 1 ? fmt::format(" in each of the {} slot sizes", classes.size()) : std::string());
    if (ckpt_->releases_memory())
      refuse(ErrorCode::kUnsupported, "expert_slots",
           "expert_slots: this checkpoint gave its experts' memory to the expert banks at load, and rebuilding the "
           "expert cache reads them again; resizing it is not supported for such checkpoints yet");
  }
}

void Engine::resize_caches(const CacheResize& r) {
  std::unique_lock<std::mutex> lock(step_mu_);  // moe_report() waits
  check_resize(r, 0);
  const EngineOptions old = options_;
  EngineOptions want = options_;
  if (r.kv_tokens) want.kv_tokens = *r.kv_tokens;
  if (r.expert_slots) want.moe.cache = {CacheSizeMode::kSlots, *r.expert_slots, 0.0};
  // The plan's refusals name the sizes as the request does (memory_plan.cpp resize_refusal).
  want.kv_tokens_flag = "kv_tokens";
  want.expert_slots_flag = "expert_slots";
  want.validate();
  options_ = want;
  bool calibrate = false;
  try {
    calibrate = rebuild_caches(false);
  } catch (const std::exception& e) {  // ft::Error, or an allocation failing (std::bad_alloc)
    options_ = old;
    try {
      // The KV cache is rebuilt only where the attempt replaced it (a change of the expert slots alone
      // keeps it, and the running sequences' pages in it).
      if (rebuild_caches(/*force_kv=*/!kv_)) {
        lock.unlock();
        calibrate_fetch_cap();
        lock.lock();
        plan_.moe = moe_->plan();
      }
    } catch (const std::exception& again) {
      spdlog::critical("engine: rebuilding the caches at their old sizes failed too: {}", again.what());
      throw Error(ErrorCode::kInternal, fmt::format("the resize failed ({}) and so did restoring the old sizes ({}); "
                                                    "restart the server", e.what(), again.what()));
    }
    const auto* error = dynamic_cast<const Error*>(&e);
    if (!error || error->code() != ErrorCode::kOutOfMemory) throw;
    // The plan names the request's fields (resize_refusal) where one size is to blame; elsewhere the
    // planner's start-up flags.
    const auto* size = dynamic_cast<const SizeRefusal*>(&e);
    if (size && !size->field.empty())
      throw SizeRefusal(ErrorCode::kOutOfMemory,
                        fmt::format("the caches asked for do not fit, the old sizes stay: {}", e.what()), size->field);
    throw Error(ErrorCode::kOutOfMemory,
                fmt::format("the caches asked for do not fit, the old sizes stay (kv_tokens is -c/--kv-tokens and the "
                            "KV reserve below, expert_slots is --moe-cache-slots): {}",
                            e.what()));
  }
  options_.kv_tokens_flag = old.kv_tokens_flag;  // outside a resize, refusals name the start's flags
  options_.expert_slots_flag = old.expert_slots_flag;
  if (calibrate) {  // hybrid: as at start (the calibration file when it has this plan's); its steps lock
    lock.unlock();
    calibrate_fetch_cap();
    lock.lock();
    plan_.moe = moe_->plan();
  }
  spdlog::info("engine: caches resized: KV {} tokens in {} pages{}", plan_.kv_tokens, plan_.kv_pages,
               plan_.moe && plan_.moe->cache.n_slots > 0 ? fmt::format(", {} expert slots", plan_.moe->cache.n_slots)
                                                         : std::string());
}

bool Engine::rebuild_caches(bool force_kv) {
  const ModelConfig& c = model_->config();
  bool calibrate = false;
  ops_->synchronize();  // a replay or a queued copy may still read the old buffers
  graphs_ = GraphRunner();  // recorded over the old buffers; recorded again as decode steps come
  const bool graphs = ops_->supports_graphs() && options_.cuda_graph_max_bs > 0;
  const int64_t page = options_.page_size;
  const int64_t pages = (options_.kv_tokens + page - 1) / page;
  if (force_kv || !kv_ || pages != kv_->pool().n_pages()) {
    kv_.reset();  // before the new one: the device may not hold both
    storage_.clear();
    make_kv_cache(plan_kv_cache(options_, c, *ops_, /*spare_page=*/graphs));
    make_step_buffers();  // the block tables' width is the pool's pages
  }
  reserve_graph_inputs(graphs);
  MemoryPlanInputs in = plan_inputs();
  in.previous = &plan_;  // the limits the start measured, not what is free with the old banks and slots held
  MemoryPlan p = plan_memory(in);
  if (p.moe_inputs) {
    const bool same = moe_ && plan_.moe && p.moe->cache.n_slots == plan_.moe->cache.n_slots &&
                      p.moe->layers == plan_.moe->layers;
    if (same) {  // the runtime stays: its experts and slots are as planned
      p.moe = plan_.moe;
      p.budget = plan_.budget;
      plan_ = std::move(p);
    } else {
      moe_.reset();  // its banks and slots first: host and device may not hold two
      plan_ = std::move(p);
      build_moe();
      calibrate = true;
    }
    plan_.moe_inputs->progress = nullptr;
  } else {
    plan_ = std::move(p);
  }
  if (graphs)
    graphs_.plan(*ops_, *kv_, options_.page_size, d_logits_,
                 [this](const BatchInfo& b, const BatchInfo* swa, const Tensor& ids, const Tensor& rows,
                        const Tensor& logits) { forward(b, swa, ids, rows, logits); });
  return calibrate;
}

}  // namespace ft
