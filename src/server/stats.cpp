// GET /v1/stats (JSON) and GET /metrics (Prometheus text exposition format 0.0.4, names prefixed
// freetoken_): the same figures from EngineService::stats() (requests rejected: every error response the
// server sent, ServerContext::requests_rejected), plus the MoE counters (`moe`, null
// for fused and dense models; freetoken_moe_*, absent then) from ServedModel::moe_report.
#include <sstream>

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

std::string escape_label(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

std::string metrics_text(const ServerContext& ctx, const EngineStats& s, const std::optional<MoeReport>& moe) {
  std::ostringstream o;
  auto metric = [&](const char* name, const char* type, const char* help, double value) {
    o << "# HELP freetoken_" << name << ' ' << help << "\n# TYPE freetoken_" << name << ' ' << type << "\nfreetoken_"
      << name << ' ' << fmt::format("{}", value) << '\n';
  };
  o << "# HELP freetoken_info The served model.\n# TYPE freetoken_info gauge\nfreetoken_info{model=\""
    << escape_label(ctx.model.name) << "\"} 1\n";
  metric("context_limit_tokens", "gauge", "Effective context limit: min(model limit, KV capacity).", static_cast<double>(s.context_limit));
  metric("kv_pages_total", "gauge", "KV cache pages in the pool.", s.kv_pages_total);
  metric("kv_pages_used", "gauge", "KV cache pages held by requests, prefix-cache pages they share included.",
         s.kv_pages_used);
  metric("kv_pages_cached", "gauge",
         "KV cache pages held by the prefix cache; those a request shares count in kv_pages_used too.",
         s.kv_pages_cached);
  metric("kv_pages_free", "gauge", "KV cache pages free.", s.kv_pages_free);
  metric("kv_page_size_tokens", "gauge", "Tokens per KV page.", s.page_size);
  metric("kv_bytes_per_token", "gauge", "KV cache bytes of one token in every layer (MLA: latent and RoPE key).",
         static_cast<double>(ctx.model.kv_bytes_per_token));
  if (s.state_slots_total > 0) {  // linear-attention models
    metric("kv_state_slots_total", "gauge", "Recurrent-state slots (one per running request, the rest prefix-cache snapshots).",
           s.state_slots_total);
    metric("kv_state_slots_used", "gauge", "Recurrent-state slots held by running requests.", s.state_slots_used);
    metric("kv_state_snapshots", "gauge", "Recurrent-state snapshots held by the prefix cache.", s.state_snapshots);
  }
  {  // the prefix cache's tiers, labelled tier="device" | "host" | "disk" (the last two when on)
    struct Tier {
      const char* name;
      double pages, bytes, hits, written, read;
    };
    std::vector<Tier> tiers{{"device", double(s.kv_pages_cached),
                             double(s.kv_pages_cached) * s.page_size * double(ctx.model.kv_bytes_per_token),
                             double(s.kv_hit_pages_device), 0, 0}};
    if (s.kv_host_tier)
      tiers.push_back({"host", double(s.kv_host.entries), double(s.kv_host.bytes), double(s.kv_hit_pages_host),
                       double(s.kv_host.bytes_written), double(s.kv_host.bytes_read)});
    if (s.kv_disk_tier)
      tiers.push_back({"disk", double(s.kv_disk.entries), double(s.kv_disk.bytes), double(s.kv_hit_pages_disk),
                       double(s.kv_disk.bytes_written), double(s.kv_disk.bytes_read)});
    auto labelled = [&](const char* name, const char* type, const char* help, double Tier::*field, bool lower_only) {
      o << "# HELP freetoken_" << name << ' ' << help << "\n# TYPE freetoken_" << name << ' ' << type << '\n';
      for (const Tier& t : tiers)
        if (!lower_only || std::string(t.name) != "device")
          o << "freetoken_" << name << "{tier=\"" << t.name << "\"} " << fmt::format("{}", t.*field) << '\n';
    };
    labelled("kv_tier_pages", "gauge", "Prefix-cache pages held per tier (device: the KV cache's cached pages).",
             &Tier::pages, false);
    labelled("kv_tier_bytes", "gauge", "Prefix-cache bytes held per tier.", &Tier::bytes, false);
    labelled("kv_tier_hit_pages_total", "counter", "Prefix-cache pages hit per tier (host, disk: copied back).",
             &Tier::hits, false);
    if (tiers.size() > 1) {
      labelled("kv_tier_bytes_written_total", "counter", "Bytes written into the host tier and the prompt cache.",
               &Tier::written, true);
      labelled("kv_tier_bytes_read_total", "counter", "Bytes read back from the host tier and the prompt cache.",
               &Tier::read, true);
    }
  }
  if (s.kv_disk_tier)
    metric("kv_disk_read_ahead_hit_pages_total", "counter",
           "Prompt-cache pages a request found read ahead in memory (read while it was queued).",
           static_cast<double>(s.kv_disk.read_ahead_hits));
  metric("requests_running", "gauge", "Requests holding KV and generating.", s.running);
  metric("requests_waiting", "gauge", "Requests queued for a running slot.", s.waiting);
  metric("prompt_tokens_per_second", "gauge", "Prompt tokens computed per second over the stats window.", s.prompt_tokens_per_s);
  metric("generation_tokens_per_second", "gauge", "Tokens generated per second over the stats window.", s.generation_tokens_per_s);
  metric("time_to_first_token_seconds_mean", "gauge", "Mean time from submission to the first token.", s.mean_ttft_s);
  metric("requests_total", "counter", "Requests accepted.", static_cast<double>(s.requests_total));
  metric("requests_finished_total", "counter", "Requests finished for any reason.", static_cast<double>(s.requests_finished));
  metric("requests_cancelled_total", "counter", "Requests cancelled (client gone or shutdown).", static_cast<double>(s.requests_cancelled));
  metric("requests_rejected_total", "counter",
         "Requests answered with an error status (4xx/5xx: bad input, auth, unknown route, context length, overload).",
         static_cast<double>(ctx.requests_rejected.load()));
  metric("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", static_cast<double>(s.prompt_tokens_total));
  metric("prompt_tokens_computed_total", "counter", "Prompt tokens prefilled (prefix-cache hits excluded).", static_cast<double>(s.prompt_tokens_computed_total));
  metric("cached_prompt_tokens_total", "counter", "Prompt tokens served from the prefix cache.", static_cast<double>(s.cached_tokens_total));
  metric("generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.generation_tokens_total));
  metric("steps_total", "counter", "Engine steps run.", static_cast<double>(s.steps_total));
  metric("uptime_seconds", "gauge", "Seconds since the engine started.", s.uptime_s);
  if (moe) {  // absent for fused and dense models
    // The plan as an info metric (Prometheus convention: the labels carry it, the value is 1).
    o << "# HELP freetoken_moe_info The MoE placement: strategy, expert-bank format, prefetch depth in use (0: none), "
         "fetch cap (hybrid; -1: none).\n# TYPE freetoken_moe_info gauge\nfreetoken_moe_info{strategy=\""
      << moe_strategy_name(moe->strategy) << "\",bank_format=\"" << bank_format_name(moe->bank_format)
      << "\",prefetch_depth=\"" << moe->prefetch_depth << "\",fetch_cap=\"" << moe->fetch_cap << "\"} 1\n";
    metric("moe_cache_slots", "gauge", "Expert-cache slots (0: experts on the CPU only).", static_cast<double>(moe->cache_slots));
    metric("moe_hits_total", "counter", "Routed experts found in the expert cache.", static_cast<double>(moe->total.hits));
    metric("moe_misses_total", "counter", "Routed experts fetched into the expert cache by their own layer (see moe_prefetched_total).", static_cast<double>(moe->total.misses));
    if (moe->total.lookups() > 0)  // no lookups (cpu strategy, or nothing run yet): no rate
      metric("moe_hit_rate", "gauge", "Expert-cache hits / lookups since start (a lookup that missed is fetched, or computed on the CPU over hybrid's fetch cap).", moe_hit_rate(moe->total));
    metric("moe_cpu_misses_total", "counter", "Cache lookups that missed and ran on the CPU over hybrid's fetch cap.", static_cast<double>(moe->total.cpu_misses));
    metric("moe_bytes_copied_total", "counter", "Bytes copied from host expert banks into the cache.", static_cast<double>(moe->total.bytes));
    metric("moe_cpu_experts_total", "counter", "Routed experts computed on the CPU.", static_cast<double>(moe->total.cpu_experts));
    metric("moe_prefetched_total", "counter", "Routed experts fetched ahead of their layer (--moe-prefetch).",
           static_cast<double>(moe->total.prefetched));
    metric("moe_cpu_seconds_total", "counter", "Seconds the CPU expert executor worked (wall clock, all layers).",
           static_cast<double>(moe->total.cpu_ns) / 1e9);
    metric("moe_cpu_bytes_read_total", "counter", "Bytes of expert weights the CPU expert executor read from the banks.",
           static_cast<double>(moe->total.cpu_bytes));
    const StepTimeReport& t = moe->step_time;
    if (t.predicted_ms)  // absent without a prediction (/v1/stats says why)
      o << "# HELP freetoken_moe_predicted_step_seconds The planner's predicted decode step (the start-up calibration's "
           "time of the candidate in use), at the batch size it was timed at.\n# TYPE freetoken_moe_predicted_step_seconds "
           "gauge\nfreetoken_moe_predicted_step_seconds{batch=\""
        << t.predicted_batch << "\"} " << fmt::format("{}", *t.predicted_ms / 1e3) << '\n';
    o << "# HELP freetoken_moe_decode_step_seconds Wall time of decode steps (every sequence one token), by batch size "
         "(sequences in the step).\n# TYPE freetoken_moe_decode_step_seconds summary\n";
    for (const auto& [batch, m] : t.measured)
      o << "freetoken_moe_decode_step_seconds_sum{batch=\"" << batch << "\"} " << fmt::format("{}", m.seconds)
        << "\nfreetoken_moe_decode_step_seconds_count{batch=\"" << batch << "\"} " << m.steps << '\n';
    auto per_layer = [&](const char* name, const char* help, auto value) {
      o << "# HELP freetoken_" << name << ' ' << help << "\n# TYPE freetoken_" << name << " counter\n";
      for (const MoeLayerReport& l : moe->layers)
        o << "freetoken_" << name << "{layer=\"" << l.layer << "\"} " << value(l.stats) << '\n';
    };
    per_layer("moe_layer_hits_total", "Expert-cache hits per MoE layer.", [](const MoeLayerStats& x) { return x.hits; });
    per_layer("moe_layer_misses_total", "Expert-cache misses per MoE layer.", [](const MoeLayerStats& x) { return x.misses; });
    per_layer("moe_layer_bytes_copied_total", "Bytes fetched into the expert cache per MoE layer.",
              [](const MoeLayerStats& x) { return x.bytes; });
    per_layer("moe_layer_cpu_experts_total", "Routed experts computed on the CPU per MoE layer.",
              [](const MoeLayerStats& x) { return x.cpu_experts; });
    per_layer("moe_layer_prefetched_total", "Routed experts fetched ahead of their layer per MoE layer.",
              [](const MoeLayerStats& x) { return x.prefetched; });
    per_layer("moe_layer_cpu_misses_total", "Cache lookups that missed and ran on the CPU per MoE layer.",
              [](const MoeLayerStats& x) { return x.cpu_misses; });
    per_layer("moe_layer_cpu_seconds_total", "Seconds the CPU expert executor worked per MoE layer.",
              [](const MoeLayerStats& x) { return static_cast<double>(x.cpu_ns) / 1e9; });
    per_layer("moe_layer_cpu_bytes_read_total", "Bytes of expert weights the CPU expert executor read per MoE layer.",
              [](const MoeLayerStats& x) { return x.cpu_bytes; });
  }
  return o.str();
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
      res.set_content(metrics_text(ctx, ctx.service->stats(), moe_of(ctx)), "text/plain; version=0.0.4; charset=utf-8");
    });
  });
}

}  // namespace ft::server
