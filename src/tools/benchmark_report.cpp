// The benchmark's report: bench_json (the --json object) and bench_table (the text table), with the
// ceilings the measured copy and host-read bandwidths allow.
#include <algorithm>
#include <cmath>
#include <string>

#include <fmt/format.h>

#include "tools/benchmark.h"
#include "util/format.h"

namespace ft {

namespace {

/** Tokens/s the timed decode's fetches allow at the measured host -> device bandwidth (0: no fetches
 *  or not measured). */
double moe_ceiling(const BenchReport& r, const BenchBatch& b) {
  if (b.moe.bytes <= 0 || r.h2d_bandwidth <= 0 || b.decode_steps <= 0) return 0;
  const double per_step = static_cast<double>(b.moe.bytes) / static_cast<double>(b.decode_steps);
  return static_cast<double>(b.batch) * r.h2d_bandwidth / per_step;
}

}  // namespace

double host_memory_ceiling(const BenchReport& r, const BenchBatch& b) {
  if (b.moe.cpu_bytes <= 0 || r.host_read_bandwidth <= 0 || b.decode_steps <= 0) return 0;
  const double per_step = static_cast<double>(b.moe.bytes + b.moe.cpu_bytes) / static_cast<double>(b.decode_steps);
  return static_cast<double>(b.batch) * r.host_read_bandwidth / per_step;
}

nlohmann::json bench_json(const BenchReport& r) {
  nlohmann::json results = nlohmann::json::array();
  for (const BenchBatch& b : r.batches) {
    const double bw = b.achieved_bandwidth();
    // --gen-tokens 0 times the prefill only: the decode figures are absent, not zero.
    const auto decoded = [&](double v) { return b.decode_steps > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    results.push_back({{"batch", b.batch},
                       {"prefill_tokens", b.prefill_tokens},
                       {"prefill_s", b.prefill_seconds},
                       {"prefill_tokens_per_s", b.prefill_tokens_per_s()},
                       {"decode_steps", b.decode_steps},
                       {"graph_steps", b.graph_steps},
                       {"decode_s", b.decode_seconds},
                       {"decode_tokens_per_s", decoded(b.decode_tokens_per_s())},
                       {"ms_per_step", decoded(b.ms_per_step())},
                       {"experts_per_layer", b.experts_per_layer},
                       {"experts_source", b.experts_source},
                       {"weight_bytes_per_step", b.weight_bytes_per_step},
                       {"achieved_gbs", decoded(bw / 1e9)},
                       {"bandwidth_fraction", r.copy_bandwidth > 0 ? decoded(bw / r.copy_bandwidth) : nlohmann::json(nullptr)}});
    if (b.moe_cache) {
      const double n = static_cast<double>(std::max<int64_t>(b.decode_steps, 1)), ceiling = moe_ceiling(r, b);
      const double host_ceiling = host_memory_ceiling(r, b);
      results.back()["moe_cache"] = {{"hits", b.moe.hits},
                                     {"misses", b.moe.misses},
                                     {"cpu_misses", b.moe.cpu_misses},
                                     {"hit_rate", b.moe.lookups() > 0 ? nlohmann::json(moe_hit_rate(b.moe))
                                                                                : nlohmann::json(nullptr)},
                                     {"fetched_bytes_per_step", decoded(static_cast<double>(b.moe.bytes) / n)},
                                     {"cpu_experts_per_step", decoded(static_cast<double>(b.moe.cpu_experts) / n)},
                                     {"prefetched_per_step", decoded(static_cast<double>(b.moe.prefetched) / n)},
                                     {"cpu_ms_per_step", decoded(static_cast<double>(b.moe.cpu_ns) / 1e6 / n)},
                                     {"cpu_bytes_per_step", decoded(static_cast<double>(b.moe.cpu_bytes) / n)},
                                     {"ceiling_tokens_per_s", ceiling > 0 ? nlohmann::json(ceiling) : nlohmann::json(nullptr)},
                                     {"host_ceiling_tokens_per_s",
                                      host_ceiling > 0 ? nlohmann::json(host_ceiling) : nlohmann::json(nullptr)}};
    }
    if (b.moe_cache && !b.rank_moe.empty()) {  // a rank group: each rank's counters (the object above: rank 0's)
      const double n = static_cast<double>(std::max<int64_t>(b.decode_steps, 1));
      nlohmann::json ranks = nlohmann::json::array();
      for (size_t i = 0; i < b.rank_moe.size(); ++i) {
        const MoeLayerStats& m = b.rank_moe[i];
        ranks.push_back({{"rank", static_cast<int64_t>(i)},
                         {"hits", m.hits},
                         {"misses", m.misses},
                         {"cpu_misses", m.cpu_misses},
                         {"hit_rate", m.lookups() > 0 ? nlohmann::json(moe_hit_rate(m)) : nlohmann::json(nullptr)},
                         {"fetched_bytes_per_step", decoded(static_cast<double>(m.bytes) / n)},
                         {"cpu_experts_per_step", decoded(static_cast<double>(m.cpu_experts) / n)}});
      }
      results.back()["moe_cache"]["ranks"] = ranks;
    }
    if (!b.decode_profile.empty() && b.decode_steps > 0) {
      nlohmann::json prof = nlohmann::json::array();
      const double n = static_cast<double>(b.decode_steps);
      for (const OpProfileRow& p : b.decode_profile)
        prof.push_back({{"op", p.key}, {"calls_per_step", p.calls / n}, {"us_per_step", 1e6 * p.seconds / n}});
      results.back()["decode_profile"] = prof;
    }
    if (!b.prefill_profile.empty()) {
      nlohmann::json prof = nlohmann::json::array();
      for (const OpProfileRow& p : b.prefill_profile)
        prof.push_back({{"op", p.key}, {"calls", p.calls}, {"us", 1e6 * p.seconds}});
      results.back()["prefill_profile"] = prof;
    }
  }
  nlohmann::json j = {{"model", r.model},
          {"arch", r.arch},
          {"device", r.device},
          {"activation_dtype", r.activation_dtype},
          {"weight_type", r.weight_type},
          {"n_layer", r.n_layer},
          {"n_expert", r.n_expert},
          {"n_expert_used", r.n_expert_used},
          {"weight_bytes", r.weight_bytes},
          {"dense_bytes", r.dense_bytes},
          {"embedding_bytes", r.embedding_bytes},
          {"ngram_table_bytes", r.ngram_table_bytes},
          {"embeddings", r.embeddings_on_host ? "host" : "device"},
          {"routed_expert_bytes", r.routed_expert_bytes},
          {"prompt_tokens", r.prompt_tokens},
          {"gen_tokens", r.gen_tokens},
          {"copy_bandwidth_gbs", r.copy_bandwidth / 1e9},
          {"copy_bytes", r.copy_bytes},
          {"h2d_bandwidth_gbs", r.h2d_bandwidth > 0 ? nlohmann::json(r.h2d_bandwidth / 1e9) : nlohmann::json(nullptr)},
          {"host_read_bandwidth_gbs",
           r.host_read_bandwidth > 0 ? nlohmann::json(r.host_read_bandwidth / 1e9) : nlohmann::json(nullptr)},
          {"host_read_threads", r.host_read_bandwidth > 0 ? nlohmann::json(r.host_read_threads) : nlohmann::json(nullptr)},
          {"moe_plan", r.moe_plan},
          {"moe_bank_format", r.moe_bank_format.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.moe_bank_format)},
          {"moe_strategy", r.moe_strategy.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.moe_strategy)},
          {"moe_cache_slots", r.moe_cache_slots},
          {"moe_prefetch_depth", r.moe_prefetch_depth},
          {"sampling", r.sampling},
          {"peak_host_rss_bytes", r.peak_host_rss},
          {"profiled", r.profiled},
          {"device_memory_bytes", r.device_memory >= 0 ? nlohmann::json(r.device_memory) : nlohmann::json(nullptr)},
          {"device_memory_note", r.device_memory_note},
          {"results", results}};
  if (!r.ranks.empty()) {  // a rank group only: one rank's JSON keeps its keys
    nlohmann::json per = nlohmann::json::array();
    for (const BenchRank& rk : r.ranks)
      per.push_back({{"rank", rk.rank},
                     {"moe_plan", rk.moe_plan},
                     {"moe_cache_slots", rk.moe_cache_slots},
                     {"device_memory_bytes", rk.device_memory >= 0 ? nlohmann::json(rk.device_memory) : nlohmann::json(nullptr)}});
    j["ranks"] = {{"tensor_parallel", r.tensor_parallel},
                  {"expert_parallel", r.expert_parallel},
                  {"note", "the top-level moe_* fields, device_memory_bytes, graph_steps, the copy and h2d probes and "
                           "each result's moe_cache are rank 0's (moe_cache.ranks: every rank's); weight bytes count "
                           "the whole model once, whichever ranks read them; times are rank 0's steps, each one of "
                           "every rank"},
                  {"per_rank", per}};
  }
  return j;
}

std::string bench_table(const BenchReport& r) {
  std::string s = fmt::format("model    {} ({}, {} layer{}", r.model, r.arch, r.n_layer, r.n_layer == 1 ? "" : "s");
  if (r.n_expert > 0) s += fmt::format(", {} experts, top-{}", r.n_expert, r.n_expert_used);
  s += fmt::format(") on {}, {} activations\n", r.device, r.activation_dtype);
  s += fmt::format("weights  {}, mostly {} (dense {}, ", format_bytes(r.weight_bytes), r.weight_type,
                   format_bytes(r.dense_bytes));
  if (r.embedding_bytes > 0)
    s += fmt::format("token embedding {}{}, ", format_bytes(r.embedding_bytes), r.embeddings_on_host ? " in host memory" : "");
  if (r.ngram_table_bytes > 0)  // moved with the token table (Model::move_embeddings_to_host), tied or not
    s += fmt::format("n-gram tables {}{}, ", format_bytes(r.ngram_table_bytes), r.embeddings_on_host ? " in host memory" : "");
  s += fmt::format("routed experts {})\n", format_bytes(r.routed_expert_bytes));
  s += fmt::format("copy     {:.1f} GB/s (read + write of a {:.0f} MiB copy)\n", r.copy_bandwidth / 1e9,
                   static_cast<double>(r.copy_bytes) / (1 << 20));
  if (!r.moe_plan.empty())
    s += fmt::format("experts  {}\n", r.moe_plan.rfind("moe: ", 0) == 0 ? r.moe_plan.substr(5) : r.moe_plan);
  s += fmt::format("prompt   {} tokens, {} decode steps per batch size, sampling {} on the backend\n",
                   r.prompt_tokens, r.gen_tokens, r.sampling);
  if (!r.ranks.empty()) {
    s += fmt::format("ranks    {} (tensor parallel{}); experts, memory and the expert cache below are rank 0's\n",
                     r.tensor_parallel, r.expert_parallel ? ", experts split over the ranks" : "");
    for (const BenchRank& rk : r.ranks)
      if (rk.rank > 0 && (!rk.moe_plan.empty() || rk.device_memory >= 0))
        s += fmt::format("rank {}   {}{}\n", rk.rank,
                         rk.moe_plan.rfind("moe: ", 0) == 0 ? rk.moe_plan.substr(5) : rk.moe_plan,
                         rk.device_memory >= 0 ? fmt::format("; device memory {}", format_bytes(rk.device_memory)) : "");
  }
  if (r.profiled)
    s += "profiled every op ran between synchronisations and eagerly: the rates below are slower than a plain run\n";
  s += "\n";
  s += fmt::format("{:>6} {:>14} {:>13} {:>9} {:>15} {:>12} {:>10} {:>9}\n", "batch", "prefill tok/s", "decode tok/s",
                   "ms/step", "experts/layer", "MB/step", "GB/s", "% copy");
  for (const BenchBatch& b : r.batches) {
    const std::string experts =
        b.experts_source == "dense" ? "-" : fmt::format("{:.1f} {}", b.experts_per_layer, b.experts_source == "measured" ? "meas" : "est");
    const bool dec = b.decode_steps > 0;  // --gen-tokens 0: prefill only, no decode figures
    const auto num = [dec](double v, const char* f) { return dec ? fmt::format(fmt::runtime(f), v) : std::string("-"); };
    s += fmt::format("{:>6} {:>14.1f} {:>13} {:>9} {:>15} {:>12.1f} {:>10} {:>9}\n", b.batch, b.prefill_tokens_per_s(),
                     num(b.decode_tokens_per_s(), "{:.1f}"), num(b.ms_per_step(), "{:.3f}"), experts,
                     static_cast<double>(b.weight_bytes_per_step) / 1e6, num(b.achieved_bandwidth() / 1e9, "{:.1f}"),
                     r.copy_bandwidth > 0 ? num(100.0 * b.achieved_bandwidth() / r.copy_bandwidth, "{:.1f}%")
                                          : std::string("-"));
  }
  s += "experts/layer: distinct routed experts a MoE layer reads per step, measured (meas: routers recomputed on\n"
       "extra steps) or estimated (est); GB/s: weight bytes read per step / step time; % copy: that rate as a share\n"
       "of the device copy bandwidth the copy probe measured\n";
  const auto over_copy = [&r](const BenchBatch& b) {
    return b.decode_steps > 0 && r.copy_bandwidth > 0 && b.achieved_bandwidth() > r.copy_bandwidth;
  };
  if (std::any_of(r.batches.begin(), r.batches.end(), over_copy))
    s += fmt::format("% copy over 100%: the weights a step reads stay in a cache that is faster than the {:.0f} MiB "
                     "copy probe (--copy-mib)\n", static_cast<double>(r.copy_bytes) / (1 << 20));
  // The expert-cache table covers timed decode steps: none in a prefill-only run (--gen-tokens 0).
  const auto cache_row = [](const BenchBatch& b) { return b.moe_cache && b.decode_steps > 0; };
  if (std::any_of(r.batches.begin(), r.batches.end(), cache_row)) {
    s += r.h2d_bandwidth > 0
             ? fmt::format("\nexpert cache over the timed decode steps; ceiling = batch x {:.1f} GB/s (pinned host -> "
                           "device copy) / fetched per step\n", r.h2d_bandwidth / 1e9)
             : std::string("\nexpert cache over the timed decode steps (no host -> device link here: no ceiling)\n");
    s += fmt::format("{:>6} {:>9} {:>14} {:>16} {:>17} {:>13} {:>14} {:>10}\n", "batch", "hit rate", "fetched/step",
                     "prefetched/step", "CPU experts/step", "CPU ms/step", "ceiling tok/s", "% ceiling");
    for (const BenchBatch& b : r.batches) {
      if (!cache_row(b)) continue;
      const double n = static_cast<double>(b.decode_steps), ceiling = moe_ceiling(r, b);
      const bool lookups = b.moe.lookups() > 0;  // none when every expert ran on a CPU layer
      s += fmt::format("{:>6} {:>9} {:>14} {:>16.1f} {:>17.1f} {:>13.2f} {:>14} {:>10}\n", b.batch,
                       lookups ? fmt::format("{:.1f}%", 100.0 * moe_hit_rate(b.moe)) : std::string("-"),
                       format_bytes(static_cast<int64_t>(static_cast<double>(b.moe.bytes) / n)),
                       static_cast<double>(b.moe.prefetched) / n, static_cast<double>(b.moe.cpu_experts) / n,
                       static_cast<double>(b.moe.cpu_ns) / 1e6 / n,
                       ceiling > 0 ? fmt::format("{:.1f}", ceiling) : std::string("-"),
                       ceiling > 0 ? fmt::format("{:.1f}%", 100.0 * b.decode_tokens_per_s() / ceiling) : std::string("-"));
      for (size_t i = 1; i < b.rank_moe.size(); ++i) {  // a rank group: the row above is rank 0's
        const MoeLayerStats& m = b.rank_moe[i];
        s += fmt::format("{:>6} {:>9} {:>14} {:>16.1f} {:>17.1f} {:>13.2f}\n", fmt::format("r{}", i),
                         m.lookups() > 0 ? fmt::format("{:.1f}%", 100.0 * moe_hit_rate(m)) : std::string("-"),
                         format_bytes(static_cast<int64_t>(static_cast<double>(m.bytes) / n)),
                         static_cast<double>(m.prefetched) / n, static_cast<double>(m.cpu_experts) / n,
                         static_cast<double>(m.cpu_ns) / 1e6 / n);
      }
    }
    s += "fetched/step: bytes copied into the expert cache per decode step; prefetched/step: experts fetched\n"
         "ahead of their layer; CPU experts/step: experts computed on the CPU; CPU ms/step: the CPU expert\n"
         "executor's working time per step (with a GPU, the rest of ms/step it waits for the GPU's part of each\n"
         "layer)\n";
    for (const BenchBatch& b : r.batches) {
      const double hc = cache_row(b) ? host_memory_ceiling(r, b) : 0;
      if (hc <= 0) continue;
      const double n = static_cast<double>(b.decode_steps);
      s += fmt::format("batch {}: host memory ceiling {:.1f} tok/s ({:.1f}% reached) = batch x {:.1f} GB/s (host "
                       "memory read on {} threads) / ({} fetched + {} read by the CPU per step)\n",
                       b.batch, hc, 100.0 * b.decode_tokens_per_s() / hc, r.host_read_bandwidth / 1e9,
                       r.host_read_threads, format_bytes(static_cast<int64_t>(static_cast<double>(b.moe.bytes) / n)),
                       format_bytes(static_cast<int64_t>(static_cast<double>(b.moe.cpu_bytes) / n)));
    }
  }
  for (const BenchBatch& b : r.batches) {
    if (!b.prefill_profile.empty()) {
      s += fmt::format("\nprefill profile, batch {} (whole timed prefill):\n", b.batch);
      for (const OpProfileRow& p : b.prefill_profile)
        s += fmt::format("  {:<40} {:>7} calls {:>10.1f} us\n", p.key, p.calls, 1e6 * p.seconds);
    }
    if (b.decode_profile.empty() || b.decode_steps <= 0) continue;
    const double n = static_cast<double>(b.decode_steps);
    s += fmt::format("\ndecode profile, batch {} (per step; each op timed between synchronisations):\n", b.batch);
    for (const OpProfileRow& p : b.decode_profile)
      s += fmt::format("  {:<40} {:>7.1f} calls {:>10.1f} us\n", p.key, p.calls / n, 1e6 * p.seconds / n);
  }
  s += fmt::format("\npeak host RSS {}; device memory ", format_bytes(r.peak_host_rss));
  s += r.device_memory >= 0 ? fmt::format("{} ({})\n", format_bytes(r.device_memory), r.device_memory_note)
                            : fmt::format("n/a ({})\n", r.device_memory_note);
  return s;
}

}  // namespace ft
