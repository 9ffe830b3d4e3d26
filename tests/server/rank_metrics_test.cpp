// GET /metrics of a rank group (issue 43): each rank's engine figures (freetoken_moe_*, freetoken_memory_*)
// labelled rank="R", every rank's samples of a family under its one HELP and TYPE line; the server's
// series (requests, tokens, the scheduler's KV) unlabelled. The ranks' reports are made up here, so
// every value is known: rank 0 offload with a calibrated prediction, rank 1 cpu (no lookups, so no
// hit rate) without a memory limit. tests/cli/serve_ranks_test.cpp checks a real -tp 2 server.
#include <gtest/gtest.h>

#include <sstream>

#include "engine_server.h"
#include "prometheus_text.h"

namespace ft::testing {
namespace {

MoeReport rank0_moe() {
  MoeReport m;
  m.strategy = MoeStrategy::kOffload;
  m.cache_slots = 8;
  m.prefetch_depth = 1;
  m.layers = {{0, MoeLayerMode::kCache, {.hits = 4, .misses = 2, .bytes = 200}},
              {2, MoeLayerMode::kCache, {.hits = 6, .misses = 3, .bytes = 300}}};
  m.total = {.hits = 10, .misses = 5, .bytes = 500};
  m.step_time.predicted_ms = 2.5;
  m.step_time.predicted_batch = 1;
  m.step_time.measured[1] = {3, 0.006};
  return m;
}

MoeReport rank1_moe() {
  MoeReport m;
  m.strategy = MoeStrategy::kCpu;
  m.layers = {{0, MoeLayerMode::kCpu, {.cpu_experts = 3}}, {2, MoeLayerMode::kCpu, {.cpu_experts = 4}}};
  m.total = {.cpu_experts = 7};
  m.step_time.measured[2] = {5, 0.02};
  return m;
}

class RankGroupServer : public EngineServer {
 public:
  RankGroupServer() : EngineServer(demo_engine_options()) {
    server::ServedModel sm;
    sm.moe_report = [] { return std::optional<MoeReport>(rank0_moe()); };  // as ft serve: rank 0's
    sm.memory_rows = {{"dense weights", 100, 0, ""}, {"KV cache", 200, 0, ""}};
    sm.memory_limit = 1000;
    sm.ranks.push_back({sm.memory_rows, 1000, sm.moe_report});
    sm.ranks.push_back({{{"dense weights", 110, 0, ""}, {"routed experts", 0, 300, ""}},
                        0,
                        [] { return std::optional<MoeReport>(rank1_moe()); }});
    serve(demo_service_config(), {}, sm);
  }
};

TEST(RankMetrics, EveryRankLabelledInOneFamily) {
  RankGroupServer s;
  auto c = s.client();
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  const std::string& text = r->body;
  EXPECT_EQ(exposition_problems(text), "") << text;

  EXPECT_EQ(prom_sample(text, "freetoken_moe_hits_total{rank=\"0\"}"), 10.0) << text;
  EXPECT_EQ(prom_sample(text, "freetoken_moe_hits_total{rank=\"1\"}"), 0.0);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_hits_total"), std::nullopt);  // no unlabelled copy of rank 0
  EXPECT_EQ(prom_sample(text, "freetoken_moe_cache_slots{rank=\"0\"}"), 8.0);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_cache_slots{rank=\"1\"}"), 0.0);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_cpu_experts_total{rank=\"1\"}"), 7.0);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_hit_rate{rank=\"0\"}"), 10.0 / 15.0);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_hit_rate{rank=\"1\"}"), std::nullopt);  // no lookups: no rate
  EXPECT_EQ(prom_sample(text, "freetoken_moe_info{rank=\"1\",strategy=\"cpu\",bank_format=\"stored\","
                              "prefetch_depth=\"0\",fetch_cap=\"-1\"}"),
            1.0);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_predicted_step_seconds{rank=\"0\",batch=\"1\"}"), 0.0025);
  EXPECT_EQ(text.find("freetoken_moe_predicted_step_seconds{rank=\"1\""), std::string::npos);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_decode_step_seconds_count{rank=\"0\",batch=\"1\"}"), 3.0);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_decode_step_seconds_sum{rank=\"1\",batch=\"2\"}"), 0.02);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_layer_misses_total{rank=\"0\",layer=\"2\"}"), 3.0);
  EXPECT_EQ(prom_sample(text, "freetoken_moe_layer_cpu_experts_total{rank=\"1\",layer=\"2\"}"), 4.0);

  EXPECT_EQ(prom_sample(text, "freetoken_memory_device_bytes{rank=\"0\",row=\"KV cache\"}"), 200.0);
  EXPECT_EQ(prom_sample(text, "freetoken_memory_device_bytes{rank=\"1\",row=\"dense weights\"}"), 110.0);
  EXPECT_EQ(prom_sample(text, "freetoken_memory_host_bytes{rank=\"1\",row=\"routed experts\"}"), 300.0);
  EXPECT_EQ(prom_sample(text, "freetoken_memory_limit_bytes{rank=\"0\"}"), 1000.0);
  EXPECT_EQ(prom_sample(text, "freetoken_memory_limit_bytes{rank=\"1\"}"), std::nullopt);  // none

  // The server's series stay unlabelled; only the engines' carry a rank.
  EXPECT_EQ(prom_sample(text, "freetoken_requests_total"), 0.0);
  EXPECT_TRUE(prom_sample(text, "freetoken_kv_pages_total").has_value());
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find("rank=") != std::string::npos)
      EXPECT_TRUE(line.rfind("freetoken_moe_", 0) == 0 || line.rfind("freetoken_memory_", 0) == 0) << line;
}

}  // namespace
}  // namespace ft::testing
