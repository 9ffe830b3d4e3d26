// GET /metrics' body (metrics.h): the server's series unlabelled, then each engine's MoE counters and
// memory plan, labelled rank="R" in a rank group (every rank's samples of a family together under its
// one HELP and TYPE line), unlabelled with one engine.
#include "server/metrics.h"

#include <fmt/format.h>

#include <optional>
#include <sstream>
#include <string_view>
#include <vector>

namespace ft::server {

namespace {

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

/** "{a,b}" of the parts that are not empty ("rank=\"1\"", "layer=\"3\""); "" when all are. */
std::string labels(std::initializer_list<std::string_view> parts) {
  std::string o;
  for (std::string_view p : parts)
    if (!p.empty()) o.append(o.empty() ? "{" : ",").append(p);
  return o.empty() ? o : o + "}";
}

/** The exposition being written: a family's HELP and TYPE lines once, then its samples. */
class Exposition {
 public:
  void family(std::string_view name, std::string_view type, std::string_view help) {
    o_ << "# HELP freetoken_" << name << ' ' << help << "\n# TYPE freetoken_" << name << ' ' << type << '\n';
  }
  /** A sample of `name` (the family's, or a summary's _sum / _count) with `label_set` ("" or "{...}"). */
  template <class V>
  void sample(std::string_view name, const std::string& label_set, V value) {
    o_ << "freetoken_" << name << label_set << ' ' << fmt::format("{}", value) << '\n';
  }
  /** An unlabelled gauge or counter of one sample. */
  void metric(std::string_view name, std::string_view type, std::string_view help, double value) {
    family(name, type, help);
    sample(name, "", value);
  }
  std::string str() const { return o_.str(); }

 private:
  std::ostringstream o_;
};

/** One engine's own figures: rank="R" in a rank group, no rank label for the only engine. */
struct EngineFigures {
  std::string rank;  // the label ("rank=\"1\""), "" for the only engine
  std::vector<MemoryRow> memory_rows;
  int64_t memory_limit = 0;
  std::optional<MoeReport> moe;
};

/** Every engine's figures: each rank's in a rank group, in rank order; else the only engine's. */
std::vector<EngineFigures> engines_of(const ServerContext& ctx) {
  std::vector<EngineFigures> out;
  {
    std::lock_guard<std::mutex> lk(ctx.memory_mu);  // the memory figures POST /v1/admin/cache changes
    if (ctx.model.ranks.empty())
      out.push_back({"", ctx.model.memory_rows, ctx.model.memory_limit, std::nullopt});
    for (size_t r = 0; r < ctx.model.ranks.size(); ++r)
      out.push_back({fmt::format("rank=\"{}\"", r), ctx.model.ranks[r].memory_rows, ctx.model.ranks[r].memory_limit,
                     std::nullopt});
  }
  for (size_t i = 0; i < out.size(); ++i) {
    const auto& report = ctx.model.ranks.empty() ? ctx.model.moe_report : ctx.model.ranks[i].moe_report;
    if (report) out[i].moe = report();
  }
  return out;
}

void put_server(Exposition& x, const ServerContext& ctx, const EngineStats& s) {
  x.family("info", "gauge", "The served model.");
  x.sample("info", "{model=\"" + escape_label(ctx.model.name) + "\"}", 1);
  x.metric("context_limit_tokens", "gauge", "Effective context limit: min(model limit, KV capacity).", static_cast<double>(s.context_limit));
  x.metric("kv_pages_total", "gauge", "KV cache pages in the pool.", s.kv_pages_total);
  x.metric("kv_pages_used", "gauge", "KV cache pages held by requests, prefix-cache pages they share included.",
           s.kv_pages_used);
  x.metric("kv_pages_cached", "gauge",
           "KV cache pages held by the prefix cache; those a request shares count in kv_pages_used too.",
           s.kv_pages_cached);
  x.metric("kv_pages_free", "gauge", "KV cache pages free.", s.kv_pages_free);
  x.metric("kv_page_size_tokens", "gauge", "Tokens per KV page.", s.page_size);
  x.metric("kv_bytes_per_token", "gauge", "KV cache bytes of one token in every layer (MLA: latent and RoPE key).",
           static_cast<double>(ctx.model.kv_bytes_per_token));
  if (s.state_slots_total > 0) {  // linear-attention models
    x.metric("kv_state_slots_total", "gauge", "Recurrent-state slots (one per running request, the rest prefix-cache snapshots).",
             s.state_slots_total);
    x.metric("kv_state_slots_used", "gauge", "Recurrent-state slots held by running requests.", s.state_slots_used);
    x.metric("kv_state_snapshots", "gauge", "Recurrent-state snapshots held by the prefix cache.", s.state_snapshots);
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
      x.family(name, type, help);
      for (const Tier& t : tiers)
        if (!lower_only || std::string(t.name) != "device")
          x.sample(name, labels({fmt::format("tier=\"{}\"", t.name)}), t.*field);
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
    x.metric("kv_disk_read_ahead_hit_pages_total", "counter",
             "Prompt-cache pages a request found read ahead in memory (read while it was queued).",
             static_cast<double>(s.kv_disk.read_ahead_hits));
  x.metric("requests_running", "gauge", "Requests holding KV and generating.", s.running);
  x.metric("requests_waiting", "gauge", "Requests queued for a running slot.", s.waiting);
  x.metric("prompt_tokens_per_second", "gauge", "Prompt tokens computed per second over the stats window.", s.prompt_tokens_per_s);
  x.metric("generation_tokens_per_second", "gauge", "Tokens generated per second over the stats window.", s.generation_tokens_per_s);
  x.metric("time_to_first_token_seconds_mean", "gauge", "Mean time from submission to the first token.", s.mean_ttft_s);
  x.metric("requests_total", "counter", "Requests accepted.", static_cast<double>(s.requests_total));
  x.metric("requests_finished_total", "counter", "Requests finished for any reason.", static_cast<double>(s.requests_finished));
  x.metric("requests_cancelled_total", "counter", "Requests cancelled (client gone or shutdown).", static_cast<double>(s.requests_cancelled));
  x.metric("requests_rejected_total", "counter",
           "Requests answered with an error status (4xx/5xx: bad input, auth, unknown route, context length, overload).",
           static_cast<double>(ctx.requests_rejected.load()));
  x.metric("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", static_cast<double>(s.prompt_tokens_total));
  x.metric("prompt_tokens_computed_total", "counter", "Prompt tokens prefilled (prefix-cache hits excluded).", static_cast<double>(s.prompt_tokens_computed_total));
  x.metric("cached_prompt_tokens_total", "counter", "Prompt tokens served from the prefix cache.", static_cast<double>(s.cached_tokens_total));
  x.metric("generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.generation_tokens_total));
  x.metric("steps_total", "counter", "Engine steps run.", static_cast<double>(s.steps_total));
  x.metric("uptime_seconds", "gauge", "Seconds since the engine started.", s.uptime_s);
}

/** The freetoken_moe_* families over the engines with a MoE report (none: nothing). */
void put_moe(Exposition& x, const std::vector<EngineFigures>& engines) {
  std::vector<const EngineFigures*> moe;
  for (const EngineFigures& e : engines)
    if (e.moe) moe.push_back(&e);
  if (moe.empty()) return;  // fused and dense models
  // The plan as an info metric (Prometheus convention: the labels carry it, the value is 1).
  x.family("moe_info", "gauge",
           "The MoE placement: strategy, expert-bank format, prefetch depth in use (0: none), fetch cap (hybrid; -1: none).");
  for (const EngineFigures* e : moe)
    x.sample("moe_info",
             labels({e->rank, fmt::format("strategy=\"{}\",bank_format=\"{}\",prefetch_depth=\"{}\",fetch_cap=\"{}\"",
                                          moe_strategy_name(e->moe->strategy), bank_format_name(e->moe->bank_format),
                                          e->moe->prefetch_depth, e->moe->fetch_cap)}),
             1);
  // A family of one sample per engine (those for which `has` holds; the family is left out when none does).
  auto per_engine = [&](const char* name, const char* type, const char* help, auto value,
                        bool (*has)(const MoeReport&) = nullptr) {
    bool any = false;
    for (const EngineFigures* e : moe) any = any || !has || has(*e->moe);
    if (!any) return;
    x.family(name, type, help);
    for (const EngineFigures* e : moe)
      if (!has || has(*e->moe)) x.sample(name, labels({e->rank}), static_cast<double>(value(*e->moe)));
  };
  per_engine("moe_cache_slots", "gauge", "Expert-cache slots (0: experts on the CPU only).",
             [](const MoeReport& m) { return m.cache_slots; });
  per_engine("moe_hits_total", "counter", "Routed experts found in the expert cache.",
             [](const MoeReport& m) { return m.total.hits; });
  per_engine("moe_misses_total", "counter",
             "Routed experts fetched into the expert cache by their own layer (see moe_prefetched_total).",
             [](const MoeReport& m) { return m.total.misses; });
  per_engine(  // no lookups (cpu strategy, or nothing run yet): no rate
      "moe_hit_rate", "gauge",
      "Expert-cache hits / lookups since start (a lookup that missed is fetched, or computed on the CPU over hybrid's fetch cap).",
      [](const MoeReport& m) { return moe_hit_rate(m.total); },
      [](const MoeReport& m) { return m.total.lookups() > 0; });
  per_engine("moe_cpu_misses_total", "counter", "Cache lookups that missed and ran on the CPU over hybrid's fetch cap.",
             [](const MoeReport& m) { return m.total.cpu_misses; });
  per_engine("moe_bytes_copied_total", "counter", "Bytes copied from host expert banks into the cache.",
             [](const MoeReport& m) { return m.total.bytes; });
  per_engine("moe_cpu_experts_total", "counter", "Routed experts computed on the CPU.",
             [](const MoeReport& m) { return m.total.cpu_experts; });
  per_engine("moe_prefetched_total", "counter", "Routed experts fetched ahead of their layer (--moe-prefetch) or at start (--moe-preload).",
             [](const MoeReport& m) { return m.total.prefetched; });
  per_engine("moe_cpu_seconds_total", "counter", "Seconds the CPU expert executor worked (wall clock, all layers).",
             [](const MoeReport& m) { return static_cast<double>(m.total.cpu_ns) / 1e9; });
  per_engine("moe_cpu_bytes_read_total", "counter", "Bytes of expert weights the CPU expert executor read from the banks.",
             [](const MoeReport& m) { return m.total.cpu_bytes; });
  bool predicted = false;  // absent without a prediction (/v1/stats says why)
  for (const EngineFigures* e : moe) predicted = predicted || e->moe->step_time.predicted_ms.has_value();
  if (predicted) {
    x.family("moe_predicted_step_seconds", "gauge",
             "The planner's predicted decode step (the start-up calibration's time of the candidate in use), at the "
             "batch size it was timed at.");
    for (const EngineFigures* e : moe)
      if (const StepTimeReport& t = e->moe->step_time; t.predicted_ms)
        x.sample("moe_predicted_step_seconds", labels({e->rank, fmt::format("batch=\"{}\"", t.predicted_batch)}),
                 *t.predicted_ms / 1e3);
  }
  x.family("moe_decode_step_seconds", "summary",
           "Wall time of decode steps (every sequence one token), by batch size (sequences in the step).");
  for (const EngineFigures* e : moe)
    for (const auto& [batch, m] : e->moe->step_time.measured) {
      const std::string l = labels({e->rank, fmt::format("batch=\"{}\"", batch)});
      x.sample("moe_decode_step_seconds_sum", l, m.seconds);
      x.sample("moe_decode_step_seconds_count", l, m.steps);
    }
  auto per_layer = [&](const char* name, const char* help, auto value) {
    x.family(name, "counter", help);
    for (const EngineFigures* e : moe)
      for (const MoeLayerReport& l : e->moe->layers)
        x.sample(name, labels({e->rank, fmt::format("layer=\"{}\"", l.layer)}), value(l.stats));
  };
  per_layer("moe_layer_hits_total", "Expert-cache hits per MoE layer.", [](const MoeLayerStats& s) { return s.hits; });
  per_layer("moe_layer_misses_total", "Expert-cache misses per MoE layer.", [](const MoeLayerStats& s) { return s.misses; });
  per_layer("moe_layer_bytes_copied_total", "Bytes fetched into the expert cache per MoE layer.",
            [](const MoeLayerStats& s) { return s.bytes; });
  per_layer("moe_layer_cpu_experts_total", "Routed experts computed on the CPU per MoE layer.",
            [](const MoeLayerStats& s) { return s.cpu_experts; });
  per_layer("moe_layer_prefetched_total", "Routed experts fetched ahead of their layer (--moe-prefetch) or at start (--moe-preload) per MoE layer.",
            [](const MoeLayerStats& s) { return s.prefetched; });
  per_layer("moe_layer_cpu_misses_total", "Cache lookups that missed and ran on the CPU per MoE layer.",
            [](const MoeLayerStats& s) { return s.cpu_misses; });
  per_layer("moe_layer_cpu_seconds_total", "Seconds the CPU expert executor worked per MoE layer.",
            [](const MoeLayerStats& s) { return static_cast<double>(s.cpu_ns) / 1e9; });
  per_layer("moe_layer_cpu_bytes_read_total", "Bytes of expert weights the CPU expert executor read per MoE layer.",
            [](const MoeLayerStats& s) { return s.cpu_bytes; });
}

/** The freetoken_memory_* families: each engine's memory plan, row by row (/v1/stats' memory rows). */
void put_memory(Exposition& x, const std::vector<EngineFigures>& engines) {
  bool rows = false, limit = false;
  for (const EngineFigures& e : engines) rows = rows || !e.memory_rows.empty(), limit = limit || e.memory_limit > 0;
  if (!rows) return;
  auto per_row = [&](const char* name, const char* help, int64_t MemoryRow::*field) {
    x.family(name, "gauge", help);
    for (const EngineFigures& e : engines)
      for (const MemoryRow& r : e.memory_rows)
        x.sample(name, labels({e.rank, "row=\"" + escape_label(r.name) + "\""}), r.*field);
  };
  per_row("memory_device_bytes", "Device memory of each row of the memory plan (the start-up table).",
          &MemoryRow::device);
  per_row("memory_host_bytes", "Host memory of each row of the memory plan (the start-up table).", &MemoryRow::host);
  if (limit) {
    x.family("memory_limit_bytes", "gauge", "The device memory limit the plan was made under.");
    for (const EngineFigures& e : engines)
      if (e.memory_limit > 0) x.sample("memory_limit_bytes", labels({e.rank}), e.memory_limit);
  }
}

}  // namespace

std::string metrics_text(const ServerContext& ctx, const EngineStats& s) {
  Exposition x;
  put_server(x, ctx, s);
  const std::vector<EngineFigures> engines = engines_of(ctx);
  put_moe(x, engines);
  put_memory(x, engines);
  return x.str();
}

}  // namespace ft::server
