// `ft bench --profile-ops` times every op of the decode steps through ProfilingOps, which must forward
// each op the architectures call: DeepSeek-V4's and Qwen4-Exp's own ops (hc_pre, compress_kv,
// indexer_topk, attention_compressed, ngram_hash, attention_qsa, ...) fell through to the base Ops and
// failed as "no kernel for this op" before they were forwarded.
#include <gtest/gtest.h>

#include "cli/run_ft.h"

namespace ft {
namespace {

std::string profile(const std::string& preset) {
  return "bench --model-preset " + preset + " --dummy-weights --device cpu --threads 1 --prompt-tokens 12 "
         "--gen-tokens 2 --batch 1 --copy-mib 8 --profile-ops";
}

TEST(BenchProfileOps, DeepseekV4OpsAreTimed) {
  const Result r = run_ft(profile("tiny-deepseek-v4"));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* op : {"hc_pre", "hc_post", "compress_kv (rate", "indexer_topk", "attention_compressed (rate",
                         "moe_route_sqrtsoftplus", "swiglu_clamp"})
    EXPECT_NE(r.out.find(op), std::string::npos) << op << "\n" << r.out;
}

TEST(BenchProfileOps, Qwen4ExpOpsAreTimed) {
  const Result r = run_ft(profile("tiny-qwen4-exp"));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* op : {"ngram_hash", "attention_qsa", "stream_weighted_sum"})
    EXPECT_NE(r.out.find(op), std::string::npos) << op << "\n" << r.out;
}

}  // namespace
}  // namespace ft
