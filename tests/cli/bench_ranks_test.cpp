// `ft bench --tensor-parallel-size 2` (issue 43): the benchmark measures a rank group (threads over the
// in-process collective on the CPU build), TP2 and TP2 with the experts split, on a synthetic model
// (generated once, shared by the ranks) and on a model file; the JSON's "ranks" says which figures are
// rank 0's and holds each rank's plan and expert-cache counters. A -tp the heads do not divide and
// --profile-ops with ranks are refused naming the flag. (That the group samples one rank's ids is
// checked through the library: tests/tools/bench_ranks_test.cpp.)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli/run_ft.h"

namespace ft {
namespace {

const std::string kTiny =
    "bench --model-preset tiny-moe --dummy-weights --device cpu --threads 1 --prompt-tokens 12 --gen-tokens 4 "
    "--batch 1,3 --copy-mib 8";

TEST(BenchRanksCli, TwoRanksReportWhatIsRankZeros) {
  const Result tp = run_ft(kTiny + " -tp 2 --json");
  ASSERT_EQ(tp.code, 0) << tp.err;
  const nlohmann::json j = nlohmann::json::parse(tp.out);
  ASSERT_TRUE(j.contains("ranks")) << tp.out;
  EXPECT_EQ(j["ranks"]["tensor_parallel"], 2);
  EXPECT_EQ(j["ranks"]["expert_parallel"], false);
  ASSERT_EQ(j["ranks"]["per_rank"].size(), 2u);
  EXPECT_EQ(j["ranks"]["per_rank"][1]["rank"], 1);
  EXPECT_NE(j["ranks"]["note"].get<std::string>().find("rank 0's"), std::string::npos);
  EXPECT_EQ(j["synthetic"]["preset"], "tiny-moe");
  EXPECT_EQ(j["model"], "synthetic:tiny-moe:BF16:2L:skew0:seed0");
  ASSERT_EQ(j["results"].size(), 2u);
  for (const nlohmann::json& b : j["results"]) {
    EXPECT_EQ(b["decode_steps"], 4);
    EXPECT_GT(b["decode_tokens_per_s"].get<double>(), 0);
    EXPECT_EQ(b["experts_source"], "measured");
  }
  EXPECT_EQ(j["results"][0]["experts_per_layer"].get<double>(), 2.0);  // one token: its top-2
  EXPECT_NE(tp.err.find("2 ranks (tensor parallel)"), std::string::npos) << tp.err;

  const Result ep = run_ft(kTiny + " -tp 2 --expert-parallel on --moe-strategy offload --moe-cache-slots 8 --json");
  ASSERT_EQ(ep.code, 0) << ep.err;
  const nlohmann::json e = nlohmann::json::parse(ep.out);
  EXPECT_EQ(e["ranks"]["expert_parallel"], true);
  for (const nlohmann::json& rk : e["ranks"]["per_rank"]) {
    EXPECT_EQ(rk["moe_cache_slots"], 8);
    EXPECT_EQ(rk["moe_plan"].get<std::string>().rfind("moe: strategy offload, expert cache 8 slots", 0), 0u) << rk;
  }
  for (const nlohmann::json& b : e["results"]) {
    ASSERT_TRUE(b.contains("moe_cache")) << b;
    ASSERT_EQ(b["moe_cache"]["ranks"].size(), 2u) << b;
    EXPECT_EQ(b["moe_cache"]["ranks"][0]["hits"], b["moe_cache"]["hits"]);  // the top level is rank 0's
  }
  const Result table = run_ft(kTiny + " -tp 2 --expert-parallel on --moe-strategy offload --moe-cache-slots 8");
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("ranks    2 (tensor parallel, experts split over the ranks)"), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find("\n    r1 "), std::string::npos) << table.out;  // rank 1's expert-cache row
}

TEST(BenchRanksCli, BadRankRequestsAreRefusedNamingTheFlag) {
  const Result three = run_ft(kTiny + " -tp 3");  // 4 heads
  EXPECT_EQ(three.code, 2) << three.err;
  EXPECT_NE(three.err.find("attention heads (4) is not a multiple of the tensor-parallel size (3): give a -tp "
                           "(--tensor-parallel-size) that divides it"),
            std::string::npos)
      << three.err;
  const Result prof = run_ft(kTiny + " -tp 2 --profile-ops");
  EXPECT_EQ(prof.code, 2) << prof.err;
  EXPECT_NE(prof.err.find("--profile-ops times the ops of one engine"), std::string::npos) << prof.err;
  const Result tiers = run_ft(kTiny + " -tp 2 --kv-host-gib 1");
  EXPECT_EQ(tiers.code, 2) << tiers.err;
  EXPECT_NE(tiers.err.find("--kv-host-gib"), std::string::npos) << tiers.err;
}

}  // namespace
}  // namespace ft
