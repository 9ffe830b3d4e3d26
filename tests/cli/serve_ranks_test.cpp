// `ft serve --tensor-parallel-size 2 --expert-parallel on` (issue 43) on the demo MoE model (4 layers of
// 8 experts), the ranks threads on the CPU backend: each rank holds half the experts (16) in an expert
// cache of its own (offload, 8 slots), /v1/stats lists both ranks' plans and counters, /metrics has
// both ranks' samples labelled rank="R" (equal to /v1/stats' "ranks"), and a greedy chat completion is
// the one a single-rank server gives, whose /metrics has no rank label.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "cli/run_ft.h"
#include "prometheus_text.h"

namespace ft {
namespace {

/** Starts `ft serve <flags>` on a port of its own, posts one greedy chat completion, reads /v1/stats and
 *  /metrics, stops the server; returns {completion body, stats body, log, metrics body}. */
std::array<std::string, 4> serve_once(const std::string& flags, int port_offset) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ft_ranks_" + std::to_string(::getpid()) + "_" + std::to_string(port_offset)))
                              .string();
  std::filesystem::create_directories(dir);
  const std::string port = std::to_string(20000 + (::getpid() * 2 + port_offset) % 20000);
  const std::string body =
      R"({"model":"freetoken-demo","messages":[{"role":"user","content":"hello there"}],"max_tokens":12,"temperature":0,"ignore_eos":true})";
  const std::string script =
      "FT=" + quote(FT_BINARY) + "; D=" + quote(dir) + "; P=" + port + ";"
      "$FT serve " + flags + " --port $P --device cpu --threads 1 > $D/srv.log 2>&1 & pid=$!;"
      "for i in $(seq 400); do curl -sf localhost:$P/health >/dev/null && break; sleep 0.05; done;"
      "curl -s localhost:$P/v1/chat/completions -H 'Content-Type: application/json' -d " + quote(body) + " > $D/chat.json;"
      "curl -s localhost:$P/v1/stats > $D/stats.json; curl -s localhost:$P/metrics > $D/metrics.txt; kill -INT $pid; wait $pid";
  FILE* p = popen(("bash -c " + quote(script)).c_str(), "r");
  if (p) {
    char buf[4096];
    while (fread(buf, 1, sizeof(buf), p) > 0) {
    }
    pclose(p);
  }
  std::array<std::string, 4> out = {::ft::testing::read_file(dir + "/chat.json"),
                                    ::ft::testing::read_file(dir + "/stats.json"),
                                    ::ft::testing::read_file(dir + "/srv.log"),
                                    ::ft::testing::read_file(dir + "/metrics.txt")};
  std::filesystem::remove_all(dir);
  return out;
}

TEST(ServeRanks, TwoRanksSplitTheExpertsAndAnswerAsOne) {
  const auto [chat2, stats2, log2, metrics2] =
      serve_once("-tp 2 --expert-parallel on --moe-strategy offload --moe-cache-slots 8", 0);
  const auto [chat1, stats1, log1, metrics1] = serve_once("--moe-strategy offload --moe-cache-slots 16", 1);
  ASSERT_FALSE(chat2.empty()) << log2;
  ASSERT_FALSE(chat1.empty()) << log1;
  const nlohmann::json c2 = nlohmann::json::parse(chat2), c1 = nlohmann::json::parse(chat1);
  ASSERT_TRUE(c2.contains("choices")) << chat2;
  EXPECT_EQ(c2["choices"][0]["message"]["content"], c1["choices"][0]["message"]["content"]);
  EXPECT_EQ(c2["usage"]["completion_tokens"], 12);
  const nlohmann::json s = nlohmann::json::parse(stats2);
  ASSERT_TRUE(s.contains("ranks") && s["ranks"].size() == 2) << stats2;
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json& rk = s["ranks"][r];
    EXPECT_EQ(rk["rank"], r);
    bool experts = false;
    for (const nlohmann::json& row : rk["memory"]["rows"])
      if (row["name"] == "routed experts") {
        experts = true;
        EXPECT_EQ(row["detail"].get<std::string>().rfind("16 experts", 0), 0u) << row.dump();  // 32 / 2
      }
    EXPECT_TRUE(experts) << rk.dump();
    ASSERT_TRUE(rk["moe"].is_object()) << rk.dump();
    EXPECT_EQ(rk["moe"]["strategy"], "offload");
    EXPECT_EQ(rk["moe"]["cache_slots"], 8);
    EXPECT_GT(rk["moe"]["hits"].get<int64_t>() + rk["moe"]["misses"].get<int64_t>(), 0) << "rank " << r;
  }
  EXPECT_FALSE(nlohmann::json::parse(stats1).contains("ranks"));

  // /metrics: every rank's engine figures labelled rank="R", equal to /v1/stats' "ranks" (the server is
  // idle once the chat is answered); the families whole; with one rank no rank label.
  using ::ft::testing::prom_sample;
  EXPECT_EQ(::ft::testing::exposition_problems(metrics2), "") << metrics2;
  for (int r = 0; r < 2; ++r) {
    const nlohmann::json& m = s["ranks"][r]["moe"];
    const std::string rank = "rank=\"" + std::to_string(r) + "\"";
    EXPECT_EQ(prom_sample(metrics2, "freetoken_moe_cache_slots{" + rank + "}"), 8.0) << metrics2;
    EXPECT_EQ(prom_sample(metrics2, "freetoken_moe_hits_total{" + rank + "}"), m["hits"].get<double>()) << metrics2;
    EXPECT_EQ(prom_sample(metrics2, "freetoken_moe_misses_total{" + rank + "}"), m["misses"].get<double>());
    EXPECT_EQ(prom_sample(metrics2, "freetoken_moe_bytes_copied_total{" + rank + "}"), m["bytes_copied"].get<double>());
    for (const nlohmann::json& l : m["layers"])
      EXPECT_EQ(prom_sample(metrics2, "freetoken_moe_layer_hits_total{" + rank + ",layer=\"" +
                                          std::to_string(l["layer"].get<int64_t>()) + "\"}"),
                l["hits"].get<double>());
    for (const nlohmann::json& row : s["ranks"][r]["memory"]["rows"])
      EXPECT_EQ(prom_sample(metrics2, "freetoken_memory_host_bytes{" + rank + ",row=\"" +
                                          row["name"].get<std::string>() + "\"}"),
                row["host_bytes"].get<double>());
  }
  EXPECT_EQ(prom_sample(metrics2, "freetoken_moe_hits_total"), std::nullopt);  // no unlabelled rank 0
  EXPECT_EQ(prom_sample(metrics2, "freetoken_requests_total"), 1.0);  // the server's: unlabelled
  EXPECT_EQ(::ft::testing::exposition_problems(metrics1), "") << metrics1;
  EXPECT_EQ(metrics1.find("rank="), std::string::npos) << metrics1;
  EXPECT_EQ(prom_sample(metrics1, "freetoken_moe_cache_slots"), 16.0) << metrics1;
  EXPECT_NE(log2.find("ranks     2 (tensor parallel, experts split over the ranks)"), std::string::npos) << log2;
}

}  // namespace
}  // namespace ft
