// GET /v1/stats (JSON) and GET /metrics (Prometheus text exposition format 0.0.4, names prefixed
// freetoken_; its body is server/metrics.cpp's): the same figures from EngineService::stats() (requests
// rejected: every error response the server sent, ServerContext::requests_rejected), plus the MoE
// counters (`moe`, null for fused and dense models; freetoken_moe_*, absent then) from
// ServedModel::moe_report, and with a rank group each rank's (`ranks`; rank="R" on /metrics).
#include "server/metrics.h"
#include "server/routes.h"

namespace ft::server {

namespace {

/** The counters of one layer or of all (hit rate = hits / lookups, MoeLayerStats::lookups). */
void put_counters(nlohmann::ordered_json& j, const MoeLayerStats& s) {
  j["hits"] = s.hits;
  j["misses"] = s.misses;
  j["hit_rate"] = s.lookups() > 0 ? nlohmann::ordered_json(moe_hit_rate(s)) : nlohmann::ordered_json();
  j["bytes_copied"] = s.bytes;
  j["cpu_experts"] = s.cpu_experts;
  j["prefetched"] = s.prefetched;
  j["cpu_misses"] = s.cpu_misses;
  j["cpu_seconds"] = static_cast<double>(s.cpu_ns) / 1e9;
  j["cpu_bytes_read"] = s.cpu_bytes;
}

nlohmann::ordered_json moe_json(const MoeReport& r) {
  using oj = nlohmann::ordered_json;
  oj j;
  j["strategy"] = moe_strategy_name(r.strategy);
  j["cache_slots"] = r.cache_slots;
  j["slot_bytes"] = r.slot_bytes;
  // one entry per slot size (mixed-type files have several): its layers, slots and bytes a slot
  oj classes = oj::array();
  for (const SlotClass& c : r.slot_classes)
    classes.push_back({{"layers", c.layer_list()}, {"slots", c.n_slots}, {"slot_bytes", c.slot_bytes()}});
  j["slot_classes"] = classes;
  j["fetch_cap"] = r.fetch_cap >= 0 ? oj(r.fetch_cap) : oj();  // hybrid only
  // hybrid's planned split: an expert's CPU time and each further token's, in fetches of one expert
  j["cpu_cost_fetches"] = r.cpu_cost > 0 ? oj(static_cast<double>(r.cpu_cost) / kFetchCostUnit) : oj();
  j["cpu_token_cost_fetches"] = r.cpu_cost > 0 ? oj(static_cast<double>(r.cpu_token_cost) / kFetchCostUnit) : oj();
  // the start-up calibration in use: its choice, each candidate's decode step (ms), whether it was read
  // from its file (timed at an earlier start) and the file; null when none ran
  if (r.calibration) {
    oj cal;
    cal["choice"] = r.calibration->choice;
    oj steps = oj::object();
    for (const auto& [name, ms] : r.calibration->ms_per_step) steps[name] = ms;
    cal["ms_per_step"] = steps;
    cal["measured_at"] = r.calibration->measured_at;
    cal["cached"] = r.calibration_cached;
    cal["file"] = r.calibration_file.empty() ? oj() : oj(r.calibration_file);
    j["calibration"] = cal;
  } else {
    j["calibration"] = oj();
  }
  // the planner's predicted decode step (the calibration's time of its choice, at the batch it was
  // timed at; null with the reason without one) against the measured decode steps by batch size
  {
    const StepTimeReport& t = r.step_time;
    oj st;
    st["predicted"] = t.predicted_ms ? oj(*t.predicted_ms) : oj();
    st["predicted_batch"] = t.predicted_ms ? oj(t.predicted_batch) : oj();
    st["predicted_from"] = t.predicted_ms ? oj(t.predicted_from) : oj();
    st["no_prediction"] = t.predicted_ms ? oj() : oj(t.no_prediction);
    oj measured = oj::object();
    for (const auto& [batch, m] : t.measured) measured[std::to_string(batch)] = {{"steps", m.steps}, {"mean", m.mean_ms()}};
    st["measured"] = measured;
    j["step_ms"] = st;
  }
  j["prefetch"] = r.prefetch;
  j["prefetch_depth"] = r.prefetch_depth;
  j["cpu_threads"] = r.cpu_threads;
  j["bank_format"] = bank_format_name(r.bank_format);
  put_counters(j, r.total);
  oj layers = oj::array();
  for (const MoeLayerReport& l : r.layers) {
    oj e;
    e["layer"] = l.layer;
    e["mode"] = moe_layer_mode_name(l.mode);
    put_counters(e, l.stats);
    layers.push_back(e);
  }
  j["layers"] = layers;
  return j;
}

}  // namespace

nlohmann::ordered_json memory_json(const std::vector<MemoryRow>& memory_rows, int64_t limit) {
  using oj = nlohmann::ordered_json;
  oj mem;
  oj rows = oj::array();
  int64_t device = 0, host = 0;
  for (const MemoryRow& r : memory_rows) {
    rows.push_back({{"name", r.name}, {"device_bytes", r.device}, {"host_bytes", r.host}, {"detail", r.detail}});
    device += r.device, host += r.host;
  }
  mem["rows"] = rows;
  mem["device_bytes"] = device;
  mem["host_bytes"] = host;
  mem["limit_bytes"] = limit > 0 ? oj(limit) : oj();
  return mem;
}

namespace {

nlohmann::ordered_json stats_json(const ServerContext& ctx, const EngineStats& s,
                                  const std::optional<MoeReport>& moe) {
  using oj = nlohmann::ordered_json;
  std::lock_guard<std::mutex> lk(ctx.memory_mu);  // the memory figures POST /v1/admin/cache changes
  oj j;
  j["model"] = ctx.model.name;
  j["demo"] = ctx.model.demo;
  j["context_limit"] = s.context_limit;
  j["model_context_length"] = ctx.model.n_ctx_train;
  oj kv;
  kv["page_size"] = s.page_size;
  kv["pages_total"] = s.kv_pages_total;
  kv["pages_used"] = s.kv_pages_used;
  kv["pages_cached"] = s.kv_pages_cached;
  kv["pages_free"] = s.kv_pages_free;
  kv["tokens_total"] = static_cast<int64_t>(s.kv_pages_total) * s.page_size;
  kv["bytes_per_token"] = ctx.model.kv_bytes_per_token;  // every layer's K and V (MLA: latent + RoPE key)
  kv["bytes_total"] = ctx.model.kv_bytes_total > 0
                          ? ctx.model.kv_bytes_total
                          : static_cast<int64_t>(s.kv_pages_total) * s.page_size * ctx.model.kv_bytes_per_token;
  if (s.state_slots_total > 0) {  // linear-attention layers: one recurrent state per request or snapshot
    kv["state_slots_total"] = s.state_slots_total;
    kv["state_slots_used"] = s.state_slots_used;
    kv["state_snapshots"] = s.state_snapshots;
  }
  if (s.kv_swa_pages_total > 0) {  // sliding-window layers: their own, smaller pool
    kv["swa_pages_total"] = s.kv_swa_pages_total;
    kv["swa_pages_used"] = s.kv_swa_pages_used;
  }
  {  // the prefix cache's tiers (issue 39): the device pages, the host tier and the prompt cache on disk
    oj tiers;
    const int64_t page_bytes = static_cast<int64_t>(s.page_size) * ctx.model.kv_bytes_per_token;
    tiers["device"] = {{"pages", s.kv_pages_cached},
                       {"bytes", static_cast<int64_t>(s.kv_pages_cached) * page_bytes},
                       {"hit_pages", s.kv_hit_pages_device}};
    auto tier = [](bool on, const PageStoreStats& t, int64_t hits) {
      if (!on) return oj(nullptr);
      return oj{{"pages", t.entries},          {"bytes", t.bytes},           {"capacity_bytes", t.capacity_bytes},
                {"hit_pages", hits},           {"bytes_written", t.bytes_written}, {"bytes_read", t.bytes_read},
                {"dropped_pages", t.dropped}};
    };
    tiers["host"] = tier(s.kv_host_tier, s.kv_host, s.kv_hit_pages_host);
    tiers["disk"] = tier(s.kv_disk_tier, s.kv_disk, s.kv_hit_pages_disk);
    if (s.kv_disk_tier) tiers["disk"]["read_ahead_hit_pages"] = s.kv_disk.read_ahead_hits;  // of hit_pages
    kv["tiers"] = tiers;
  }
  j["kv"] = kv;
  if (!ctx.model.memory_rows.empty())  // the start-up banner's memory table
    j["memory"] = memory_json(ctx.model.memory_rows, ctx.model.memory_limit);
  oj req;
  req["running"] = s.running;
  req["waiting"] = s.waiting;
  req["total"] = s.requests_total;
  req["finished"] = s.requests_finished;
  req["cancelled"] = s.requests_cancelled;
  req["rejected"] = ctx.requests_rejected.load();  // every error response, not only the engine's refusals
  j["requests"] = req;
  oj tp;
  tp["window_s"] = s.window_s;
  tp["prompt_tokens_per_s"] = s.prompt_tokens_per_s;
  tp["generation_tokens_per_s"] = s.generation_tokens_per_s;
  j["throughput"] = tp;
  j["mean_ttft_s"] = s.mean_ttft_s;
  oj tot;
  tot["prompt_tokens"] = s.prompt_tokens_total;
  tot["prompt_tokens_computed"] = s.prompt_tokens_computed_total;
  tot["cached_prompt_tokens"] = s.cached_tokens_total;
  tot["generation_tokens"] = s.generation_tokens_total;
  tot["steps"] = s.steps_total;
  j["totals"] = tot;
  j["uptime_s"] = s.uptime_s;
  j["moe"] = moe ? moe_json(*moe) : oj(nullptr);
  if (!ctx.model.ranks.empty()) {  // a rank group: each rank's plan and experts (rank 0's are above too)
    oj ranks = oj::array();
    for (size_t r = 0; r < ctx.model.ranks.size(); ++r) {
      const ServedModel::Rank& rk = ctx.model.ranks[r];
      const std::optional<MoeReport> m = rk.moe_report ? rk.moe_report() : std::nullopt;
      ranks.push_back(oj{{"rank", static_cast<int64_t>(r)},
                         {"memory", memory_json(rk.memory_rows, rk.memory_limit)},
                         {"moe", m ? moe_json(*m) : oj(nullptr)}});
    }
    j["ranks"] = ranks;
  }
  return j;
}

std::optional<MoeReport> moe_of(const ServerContext& ctx) {
  return ctx.model.moe_report ? ctx.model.moe_report() : std::nullopt;
}

}  // namespace

void add_stats_routes(Router& r, ServerContext& ctx) {
  r.get(R"(/v1/stats/?)", [&ctx](const HttpRequest& req, HttpResponse& res) {
    guarded(ctx, req, res, true, [&] { send_json(res, 200, stats_json(ctx, ctx.service->stats(), moe_of(ctx))); });
  });
  r.get(R"(/metrics/?)", [&ctx](const HttpRequest& req, HttpResponse& res) {
    guarded(ctx, req, res, true, [&] {
      res.status = 200;
      res.set_content(metrics_text(ctx, ctx.service->stats()), "text/plain; version=0.0.4; charset=utf-8");
    });
  });
}

}  // namespace ft::server
