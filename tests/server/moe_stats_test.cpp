// The `moe` block of GET /v1/stats and the freetoken_moe_* lines of /metrics, over a real Engine
// (the demo model: 4 MoE layers of 8 experts) behind an in-process server: with offload and the
// smallest cache (16 slots for 32 experts, so experts are evicted) the block reports per-layer and
// total hits, misses, hit rate, bytes copied, CPU experts and slots, equal to the engine's own
// counters and to /metrics (no rank label: one engine; freetoken_memory_* its plan's rows); with fused
// the block is null and /metrics has no moe lines.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine_server.h"
#include "prometheus_text.h"

namespace ft::testing {
namespace {

/** The value of the unlabelled Prometheus sample `name` in a /metrics body; NaN when absent. */
double prom_value(const std::string& text, const std::string& name) {
  const size_t at = text.find("\n" + name + " ");
  if (at == std::string::npos) return std::nan("");
  return std::stod(text.substr(at + name.size() + 2));
}

/** The demo model on the CPU engine with `strategy`, served in-process on a free port. */
class MoeServer : public EngineServer {
 public:
  explicit MoeServer(MoeStrategy strategy, int32_t fetch_cap = -1) : EngineServer(options(strategy, fetch_cap)) {
    server::ServedModel sm;
    sm.moe_report = [e = &engine()] { return e->moe_report(); };
    sm.memory_rows = memory_rows(engine().memory_plan());  // as ft serve
    sm.memory_limit = memory_limit(engine().memory_plan());
    serve(demo_service_config(), {}, sm);
  }

 private:
  static EngineOptions options(MoeStrategy strategy, int32_t fetch_cap) {
    EngineOptions eo = demo_engine_options();
    eo.moe.strategy = strategy;
    if (strategy == MoeStrategy::kOffload || strategy == MoeStrategy::kHybrid)
      eo.moe.cache = {CacheSizeMode::kSlots, 16, 0.0};
    eo.moe.fetch_cap = fetch_cap;
    return eo;
  }
};

constexpr int kMaxTokens = 12;  // each chat's tokens: the first from the prefill, then 11 decode steps

void chat(httplib::Client& c, const std::string& text) {
  const nlohmann::json body = {{"model", "demo"},
                               {"messages", {{{"role", "user"}, {"content", text}}}},
                               {"max_tokens", kMaxTokens},
                               {"temperature", 0},
                               {"ignore_eos", true}};
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
}

/** `step_ms` of the moe block (one chat at a time: batch 1 only) holds `steps` decode steps with a
 *  positive mean, and /metrics' summary of them agrees. */
void expect_decode_steps(const nlohmann::json& step_ms, const std::string& text, int64_t steps) {
  ASSERT_EQ(step_ms["measured"].size(), 1u) << step_ms.dump();
  const nlohmann::json& b1 = step_ms["measured"]["1"];
  EXPECT_EQ(b1["steps"], steps) << step_ms.dump();
  const double mean_ms = b1["mean"].get<double>();
  EXPECT_GT(mean_ms, 0.0);
  EXPECT_EQ(prom_value(text, "freetoken_moe_decode_step_seconds_count{batch=\"1\"}"), static_cast<double>(steps))
      << text;
  const double sum_s = prom_value(text, "freetoken_moe_decode_step_seconds_sum{batch=\"1\"}");
  EXPECT_NEAR(sum_s, mean_ms * static_cast<double>(steps) / 1e3, 1e-9 + 1e-6 * sum_s) << text;
  EXPECT_NE(text.find("# TYPE freetoken_moe_decode_step_seconds summary\n"), std::string::npos);
}

/** The `moe` block of GET /v1/stats. */
nlohmann::json moe_block(httplib::Client& c) {
  auto r = c.Get("/v1/stats");
  EXPECT_TRUE(r && r->status == 200);
  return r ? nlohmann::json::parse(r->body)["moe"] : nlohmann::json();
}

std::string metrics(httplib::Client& c) {
  auto r = c.Get("/metrics");
  EXPECT_TRUE(r);
  return r ? r->body : "";
}

TEST(MoeStats, OffloadReportsTheCacheCounters) {
  MoeServer s(MoeStrategy::kOffload);
  auto c = s.client();
  chat(c, "a first prompt for the expert cache");
  chat(c, "and a second, different one");
  auto r = c.Get("/v1/stats");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const nlohmann::json st = nlohmann::json::parse(r->body);
  ASSERT_TRUE(st.contains("moe") && st["moe"].is_object()) << r->body;
  const nlohmann::json& m = st["moe"];
  const std::optional<MoeReport> want = s.engine().moe_report();  // idle now: the same counters
  ASSERT_TRUE(want.has_value());
  EXPECT_EQ(m["strategy"], "offload");
  EXPECT_EQ(m["cache_slots"], 16);
  EXPECT_EQ(m["slot_bytes"], want->slot_bytes);
  // One record size: one slot class holding every slot, of slot_bytes, over the MoE layers.
  ASSERT_EQ(m["slot_classes"].size(), 1u) << m.dump();
  EXPECT_EQ(m["slot_classes"][0]["slots"], 16);
  EXPECT_EQ(m["slot_classes"][0]["slot_bytes"], want->slot_bytes);
  EXPECT_EQ(m["slot_classes"][0]["layers"], want->slot_classes.at(0).layer_list());
  EXPECT_FALSE(m["slot_classes"][0]["layers"].get<std::string>().empty());
  EXPECT_EQ(m["hits"], want->total.hits);
  EXPECT_EQ(m["misses"], want->total.misses);
  EXPECT_EQ(m["bytes_copied"], want->total.bytes);
  EXPECT_EQ(m["cpu_experts"], 0);
  EXPECT_EQ(m["cpu_seconds"], 0.0);  // offload: the CPU computes nothing
  EXPECT_EQ(m["cpu_bytes_read"], 0);
  EXPECT_EQ(m["cpu_threads"], 0);
  EXPECT_EQ(m["bank_format"], "stored");  // this fixture's experts are not in whole 64-value groups
  EXPECT_EQ(m["prefetched"], want->total.prefetched);  // offload prefetches by default (--moe-prefetch auto)
  EXPECT_EQ(m["prefetch"], true);
  EXPECT_EQ(m["prefetch_depth"], 1);  // 16 slots: fewer than depth 2's 4 x experts per layer
  EXPECT_TRUE(m["fetch_cap"].is_null());  // hybrid only
  EXPECT_TRUE(m["cpu_cost_fetches"].is_null());
  // The memory plan's table, row for row.
  ASSERT_TRUE(st.contains("memory")) << r->body;
  const std::vector<MemoryRow> rows = memory_rows(s.engine().memory_plan());
  ASSERT_EQ(st["memory"]["rows"].size(), rows.size());
  int64_t device = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(st["memory"]["rows"][i]["name"], rows[i].name);
    EXPECT_EQ(st["memory"]["rows"][i]["device_bytes"], rows[i].device);
    EXPECT_EQ(st["memory"]["rows"][i]["host_bytes"], rows[i].host);
    device += rows[i].device;
  }
  EXPECT_EQ(st["memory"]["device_bytes"], device);
  EXPECT_EQ(st["memory"]["rows"][1]["name"], "routed experts");
  EXPECT_GT(st["memory"]["rows"][1]["host_bytes"], 0);  // offload: host banks
  EXPECT_TRUE(st["memory"]["limit_bytes"].is_null());  // the CPU backend without --gpu-memory-limit
  const int64_t fetched = want->total.misses + want->total.prefetched;
  EXPECT_GT(fetched, 16);  // more experts fetched than slots: evictions happened
  EXPECT_GT(want->total.hits, 0);
  EXPECT_EQ(want->total.bytes, fetched * want->slot_bytes);
  EXPECT_DOUBLE_EQ(m["hit_rate"].get<double>(),
                   static_cast<double>(want->total.hits) / static_cast<double>(want->total.hits + want->total.misses));
  ASSERT_EQ(m["layers"].size(), 4u);
  int64_t hits = 0, misses = 0;
  for (size_t l = 0; l < 4; ++l) {
    const nlohmann::json& e = m["layers"][l];
    EXPECT_EQ(e["layer"], static_cast<int64_t>(l));
    EXPECT_EQ(e["mode"], "cache");
    EXPECT_EQ(e["misses"], want->layers[l].stats.misses);
    // The first prompt's prefill touches every expert: fetched at the layer or ahead of it.
    EXPECT_GE(e["misses"].get<int64_t>() + e["prefetched"].get<int64_t>(), 8);
    hits += e["hits"].get<int64_t>();
    misses += e["misses"].get<int64_t>();
  }
  EXPECT_EQ(hits, want->total.hits);
  EXPECT_EQ(misses, want->total.misses);

  const std::string text = metrics(c);
  EXPECT_NE(text.find("freetoken_moe_cache_slots 16\n"), std::string::npos) << text;
  EXPECT_NE(text.find("freetoken_moe_info{strategy=\"offload\",bank_format=\"stored\",prefetch_depth=\"1\","
                      "fetch_cap=\"-1\"} 1\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find(fmt::format("freetoken_moe_hits_total {}\n", want->total.hits)), std::string::npos) << text;
  EXPECT_NE(text.find(fmt::format("freetoken_moe_misses_total {}\n", want->total.misses)), std::string::npos);
  EXPECT_NE(text.find(fmt::format("freetoken_moe_bytes_copied_total {}\n", want->total.bytes)), std::string::npos);
  EXPECT_NE(text.find(fmt::format("freetoken_moe_prefetched_total {}\n", want->total.prefetched)), std::string::npos);
  // The fill of --moe-preload counts there too (the HELP lines say so, not only --moe-prefetch).
  EXPECT_NE(text.find("# HELP freetoken_moe_prefetched_total Routed experts fetched ahead of their layer "
                      "(--moe-prefetch) or at start (--moe-preload).\n"),
            std::string::npos);
  EXPECT_NE(text.find("# HELP freetoken_moe_layer_prefetched_total Routed experts fetched ahead of their layer "
                      "(--moe-prefetch) or at start (--moe-preload) per MoE layer.\n"),
            std::string::npos);
  EXPECT_NE(text.find("freetoken_moe_cpu_experts_total 0\n"), std::string::npos);
  EXPECT_NE(text.find("# TYPE freetoken_moe_hit_rate gauge\n"), std::string::npos);
  EXPECT_NE(text.find(fmt::format("freetoken_moe_layer_misses_total{{layer=\"3\"}} {}\n", want->layers[3].stats.misses)),
            std::string::npos)
      << text;
  // Offload runs no calibration: no predicted step, and the reason; the decode steps are timed.
  const nlohmann::json& st_ms = m["step_ms"];
  EXPECT_TRUE(st_ms["predicted"].is_null()) << st_ms.dump();
  EXPECT_TRUE(st_ms["predicted_batch"].is_null());
  EXPECT_NE(st_ms["no_prediction"].get<std::string>().find("offload strategy"), std::string::npos) << st_ms.dump();
  expect_decode_steps(st_ms, text, 2 * (kMaxTokens - 1));
  EXPECT_EQ(text.find("freetoken_moe_predicted_step_seconds"), std::string::npos);
  // One engine: a valid exposition, no rank label, and the memory plan's rows as gauges.
  EXPECT_EQ(exposition_problems(text), "") << text;
  EXPECT_EQ(text.find("rank="), std::string::npos) << text;
  for (const MemoryRow& row : rows) {
    EXPECT_EQ(prom_sample(text, "freetoken_memory_device_bytes{row=\"" + row.name + "\"}"), double(row.device)) << text;
    EXPECT_EQ(prom_sample(text, "freetoken_memory_host_bytes{row=\"" + row.name + "\"}"), double(row.host));
  }
  EXPECT_EQ(text.find("freetoken_memory_limit_bytes"), std::string::npos);  // no limit on the CPU backend
}

// The cpu strategy has no cache: no lookups, so no hit rate (null, and no gauge), and every routed
// expert is counted as computed on the CPU.
TEST(MoeStats, CpuStrategyHasNoHitRate) {
  MoeServer s(MoeStrategy::kCpu);
  auto c = s.client();
  chat(c, "on the host cores");
  const nlohmann::json m = moe_block(c);
  ASSERT_TRUE(m.is_object()) << m.dump();
  EXPECT_EQ(m["strategy"], "cpu");
  EXPECT_EQ(m["cache_slots"], 0);
  EXPECT_EQ(m["prefetch"], false);
  EXPECT_EQ(m["prefetch_depth"], 0);
  EXPECT_GT(m["cpu_threads"].get<int64_t>(), 0);
  EXPECT_TRUE(m["hit_rate"].is_null()) << m.dump();
  EXPECT_TRUE(m["layers"][0]["hit_rate"].is_null());
  EXPECT_GT(m["cpu_experts"].get<int64_t>(), 0);
  // The executor's working time: positive, summed over the layers, and under the server's uptime.
  const double cpu_s = m["cpu_seconds"].get<double>();
  EXPECT_GT(cpu_s, 0.0);
  double layer_s = 0;
  for (const auto& l : m["layers"]) layer_s += l["cpu_seconds"].get<double>();
  EXPECT_NEAR(layer_s, cpu_s, 1e-9 + 1e-9 * cpu_s);
  const std::string text = metrics(c);
  EXPECT_LT(cpu_s, prom_value(text, "freetoken_uptime_seconds"));
  EXPECT_NEAR(prom_value(text, "freetoken_moe_cpu_seconds_total"), cpu_s, 1e-6 + 1e-6 * cpu_s);
  EXPECT_EQ(prom_value(text, "freetoken_moe_cpu_bytes_read_total"), m["cpu_bytes_read"].get<double>());
  for (const auto& l : m["layers"]) {  // the per-layer metrics equal the JSON's per-layer counters
    const std::string label = fmt::format("{{layer=\"{}\"}}", l["layer"].get<int64_t>());
    EXPECT_EQ(prom_value(text, "freetoken_moe_layer_cpu_bytes_read_total" + label), l["cpu_bytes_read"].get<double>());
    EXPECT_EQ(prom_value(text, "freetoken_moe_layer_cpu_misses_total" + label), l["cpu_misses"].get<double>());
    EXPECT_NEAR(prom_value(text, "freetoken_moe_layer_cpu_seconds_total" + label), l["cpu_seconds"].get<double>(),
                1e-6 + 1e-6 * l["cpu_seconds"].get<double>());
  }
  EXPECT_GT(m["cpu_bytes_read"].get<int64_t>(), 0);
  EXPECT_EQ(text.find("freetoken_moe_hit_rate"), std::string::npos) << text;
  EXPECT_NE(text.find("freetoken_moe_cache_slots 0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("freetoken_moe_info{strategy=\"cpu\","), std::string::npos) << text;
}

// Hybrid without a cap reports the planned split its calibration chose (the CPU cost of an expert,
// in fetches: one of the five candidates) and no cap.
TEST(MoeStats, HybridReportsItsPlannedSplit) {
  MoeServer s(MoeStrategy::kHybrid);
  auto c = s.client();
  chat(c, "split by cost");
  const nlohmann::json m = moe_block(c);
  ASSERT_TRUE(m.is_object()) << m.dump();
  EXPECT_EQ(m["strategy"], "hybrid");
  EXPECT_TRUE(m["fetch_cap"].is_null()) << m.dump();
  // The calibration that chose it: timed at this start (the engine keeps no file by default).
  const nlohmann::json& cal = m["calibration"];
  ASSERT_TRUE(cal.is_object()) << m.dump();
  EXPECT_EQ(cal["ms_per_step"].size(), 10u) << m.dump();
  EXPECT_TRUE(cal["ms_per_step"].contains(cal["choice"].get<std::string>())) << m.dump();
  EXPECT_EQ(cal["cached"], false);
  EXPECT_TRUE(cal["file"].is_null()) << m.dump();
  ASSERT_TRUE(cal["ms_per_step"][cal["choice"].get<std::string>()].is_number()) << m.dump();
  ASSERT_TRUE(m["cpu_cost_fetches"].is_number()) << m.dump();
  const double cost = m["cpu_cost_fetches"].get<double>();
  const double grid[] = {0.125, 0.18, 0.25, 0.35, 0.5, 0.7, 1.0, 1.4, 2.0, 4.0};  // the calibration's candidates
  EXPECT_NE(std::find_if(std::begin(grid), std::end(grid), [&](double g) { return std::abs(cost - g) < 1e-3; }),
            std::end(grid)) << cost;
  EXPECT_GE(m["cpu_token_cost_fetches"].get<double>(), 0.0);
  EXPECT_LE(m["cpu_token_cost_fetches"].get<double>(), cost);
  // The predicted step: the calibration's time of its choice, timed at batch 1.
  const nlohmann::json& st_ms = m["step_ms"];
  EXPECT_EQ(st_ms["predicted"].get<double>(), cal["ms_per_step"][cal["choice"].get<std::string>()].get<double>());
  EXPECT_EQ(st_ms["predicted_batch"], 1);
  EXPECT_EQ(st_ms["predicted_from"], "calibration: " + cal["choice"].get<std::string>());
  EXPECT_TRUE(st_ms["no_prediction"].is_null());
  const std::string text = metrics(c);
  expect_decode_steps(st_ms, text, kMaxTokens - 1);
  EXPECT_NEAR(prom_value(text, "freetoken_moe_predicted_step_seconds{batch=\"1\"}"),
              st_ms["predicted"].get<double>() / 1e3, 1e-12) << text;
}

// Hybrid reports its fetch cap (here given; otherwise the calibrated one).
TEST(MoeStats, HybridReportsItsFetchCap) {
  MoeServer s(MoeStrategy::kHybrid, 1);
  auto c = s.client();
  chat(c, "half on the host");
  const nlohmann::json m = moe_block(c);
  ASSERT_TRUE(m.is_object()) << m.dump();
  EXPECT_EQ(m["strategy"], "hybrid");
  EXPECT_EQ(m["fetch_cap"], 1);
  EXPECT_EQ(m["prefetch"], true);  // auto: on for hybrid
  EXPECT_EQ(m["prefetch_depth"], 1);  // hybrid predicts one layer ahead
  // Misses over the cap ran on the CPU: lookups that missed, in the hit rate and in /metrics.
  const int64_t hits = m["hits"].get<int64_t>(), misses = m["misses"].get<int64_t>();
  const int64_t cpu_misses = m["cpu_misses"].get<int64_t>();
  EXPECT_GT(cpu_misses, 0) << m.dump();
  EXPECT_EQ(cpu_misses, m["cpu_experts"].get<int64_t>());  // every MoE layer is a cache layer here
  // The executor read each of those experts' records once (one layout, the slot's size here).
  EXPECT_EQ(m["cpu_bytes_read"].get<int64_t>(), m["cpu_experts"].get<int64_t>() * m["slot_bytes"].get<int64_t>());
  EXPECT_GT(m["cpu_threads"].get<int64_t>(), 0);
  EXPECT_DOUBLE_EQ(m["hit_rate"].get<double>(),
                   static_cast<double>(hits) / static_cast<double>(hits + misses + cpu_misses));
  EXPECT_NE(metrics(c).find(fmt::format("freetoken_moe_cpu_misses_total {}\n", cpu_misses)), std::string::npos);
}

TEST(MoeStats, FusedHasNoMoeBlock) {
  MoeServer s(MoeStrategy::kFused);
  auto c = s.client();
  chat(c, "fused");
  auto r = c.Get("/v1/stats");
  ASSERT_TRUE(r);
  const nlohmann::json st = nlohmann::json::parse(r->body);
  ASSERT_TRUE(st.contains("moe"));
  EXPECT_TRUE(st["moe"].is_null());
  EXPECT_EQ(metrics(c).find("freetoken_moe_"), std::string::npos);
}

}  // namespace
}  // namespace ft::testing
