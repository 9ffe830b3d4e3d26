// DeepSeek-V4's layer schedule (model/deepseek_v4_schedule.h): a saved config's lists as they are, and
// the upstream config.json's legacy keys folded in as DeepseekV4Config.__post_init__ does.
#include <gtest/gtest.h>

#include "model/deepseek_v4_schedule.h"
#include "util/error.h"

namespace ft {
namespace {

using nlohmann::json;

TEST(DeepseekV4Schedule, UpstreamCompressRatiosAndHashLayers) {
  // DeepSeek-V4-Flash's upstream fields: compress_ratios 0, 0, 4, 128, 4, ... and num_hash_layers 3.
  const json c = json::parse(R"({"compress_ratios": [0, 0, 4, 128, 4, 128, 4], "num_hash_layers": 3,
                                 "compress_rate_hca": 128})");
  const DeepseekV4Schedule s = deepseek_v4_schedule(c, 6);
  EXPECT_EQ(s.layer_types, (std::vector<std::string>{"sliding_attention", "sliding_attention",
                                                      "compressed_sparse_attention", "heavily_compressed_attention",
                                                      "compressed_sparse_attention", "heavily_compressed_attention"}));
  EXPECT_EQ(s.mlp_layer_types, (std::vector<std::string>{"hash_moe", "hash_moe", "hash_moe", "moe", "moe", "moe"}));
  EXPECT_EQ(s.rate_csa, 4);
  EXPECT_EQ(s.rate_hca, 128);
}

TEST(DeepseekV4Schedule, DefaultsAndSavedLists) {
  // Nothing given: 2 x HCA, then HCA / CSA alternating; 3 hash layers; rates 4 / 128.
  DeepseekV4Schedule s = deepseek_v4_schedule(json::object(), 5);
  EXPECT_EQ(s.layer_types, (std::vector<std::string>{"heavily_compressed_attention", "heavily_compressed_attention",
                                                      "heavily_compressed_attention", "compressed_sparse_attention",
                                                      "heavily_compressed_attention"}));
  EXPECT_EQ(s.mlp_layer_types, (std::vector<std::string>{"hash_moe", "hash_moe", "hash_moe", "moe", "moe"}));
  EXPECT_EQ(s.rate_csa, 4);
  EXPECT_EQ(s.rate_hca, 128);
  // Saved lists win over legacy keys; compress_rates with a legacy override.
  const json c = json::parse(R"({"layer_types": ["sliding_attention", "compressed_sparse_attention", "x"],
      "mlp_layer_types": ["moe", "hash_moe", "moe"], "compress_ratios": [128, 128, 128], "num_hash_layers": 0,
      "compress_rates": {"compressed_sparse_attention": 8, "heavily_compressed_attention": 16}, "compress_rate_csa": 2})");
  s = deepseek_v4_schedule(c, 2);
  EXPECT_EQ(s.layer_types, (std::vector<std::string>{"sliding_attention", "compressed_sparse_attention"}));
  EXPECT_EQ(s.mlp_layer_types, (std::vector<std::string>{"moe", "hash_moe"}));
  EXPECT_EQ(s.rate_csa, 2);
  EXPECT_EQ(s.rate_hca, 16);
}

TEST(DeepseekV4Schedule, BadEntriesAreRefusedByName) {
  auto message = [](const char* text, int64_t n, ErrorCode want) {
    try {
      deepseek_v4_schedule(json::parse(text), n);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), want) << e.what();
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message(R"({"compress_ratios": [0, 16]})", 2, ErrorCode::kInvalidFile).find("compress_ratios[1] 16"),
            std::string::npos);
  EXPECT_NE(message(R"({"layer_types": ["full_attention"]})", 1, ErrorCode::kUnsupported).find("layer_types[0] 'full_attention'"),
            std::string::npos);
  EXPECT_NE(message(R"({"layer_types": ["sliding_attention"]})", 2, ErrorCode::kInvalidFile).find("layer_types must list 2"),
            std::string::npos);
  EXPECT_NE(message(R"({"mlp_layer_types": ["dense"]})", 1, ErrorCode::kInvalidFile).find("mlp_layer_types[0] 'dense'"),
            std::string::npos);
}

}  // namespace
}  // namespace ft
