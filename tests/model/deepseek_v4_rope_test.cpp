// DeepSeek-V4's RoPE kinds (model/deepseek_v4_rope.h) against values worked out by hand from
// transformers' _compute_yarn_parameters for DeepSeek-V4-Flash's compressed layers: head_dim 512 x
// partial_rotary_factor 0.125 = 64 rotated dims (32 pairs), compress_rope_theta 160000, factor 16,
// original_max_position_embeddings 65536, beta_fast 32, beta_slow 1.
//   correction dim d(r) = 64 ln(65536 / (2 pi r)) / (2 ln 160000):
//   d(32) = 64 x 5.78674 / 23.96586 = 15.4533 -> floor 15;  d(1) = 64 x 9.25247 / 23.96586 = 24.7084 -> ceil 25
//   ramp(i) = clamp((i - 15) / 10, 0, 1);  inv[i] = f_i (1 - ramp) + f_i / 16 ramp,  f_i = 160000^(-i/32)
//   so pairs 0..15 keep f_i, pair 20 gets f_20 (1/2 + 1/32) = 0.53125 f_20, pairs 25..31 get f_i / 16.
//   attention factor: 1 (the V4 config sets it for a YaRN compress built from rope_scaling); a nested
//   compress dict without one gets 0.1 ln 16 + 1 = 1.2772589, with mscale 0.707 / mscale_all_dim 1
//   (0.0707 ln 16 + 1) / (0.1 ln 16 + 1) = 0.9363975.
#include <gtest/gtest.h>

#include <cmath>

#include "model/deepseek_v4_rope.h"
#include "util/error.h"

namespace ft {
namespace {

using nlohmann::json;

json flash_upstream() {
  return json::parse(R"({"head_dim": 512, "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
      "partial_rotary_factor": 0.125, "max_position_embeddings": 1048576,
      "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                       "beta_fast": 32, "beta_slow": 1}})");
}

double f(int i) { return std::pow(160000.0, -i / 32.0); }

void expect_flash_yarn(const DeepseekV4RopeKind& k) {
  ASSERT_EQ(k.n_rot, 64);
  ASSERT_EQ(k.table.inv_freq.size(), 32u);
  EXPECT_EQ(k.type, "yarn");
  for (int i : {0, 1, 7, 15}) EXPECT_FLOAT_EQ(k.table.inv_freq[i], static_cast<float>(f(i))) << i;
  EXPECT_FLOAT_EQ(k.table.inv_freq[16], static_cast<float>(f(16) * (0.9 + 0.1 / 16))) << 16;
  EXPECT_FLOAT_EQ(k.table.inv_freq[20], static_cast<float>(f(20) * 0.53125)) << 20;
  EXPECT_FLOAT_EQ(k.table.inv_freq[24], static_cast<float>(f(24) * (0.1 + 0.9 / 16))) << 24;
  for (int i : {25, 28, 31}) EXPECT_FLOAT_EQ(k.table.inv_freq[i], static_cast<float>(f(i) / 16)) << i;
}

TEST(DeepseekV4Rope, FlashUpstreamConfigYarnOnCompressPlainMain) {
  const DeepseekV4Rope r = deepseek_v4_rope(flash_upstream());
  expect_flash_yarn(r.compress);
  EXPECT_EQ(r.compress.theta, 160000.0);
  EXPECT_EQ(r.compress.table.attn_factor, 1.0f);  // forced by DeepseekV4Config for rope_scaling yarn
  // main: default RoPE at rope_theta 10000 over the same 64 dims, no scaling
  EXPECT_EQ(r.main.type, "default");
  ASSERT_EQ(r.main.table.inv_freq.size(), 32u);
  for (int i : {0, 5, 31}) EXPECT_FLOAT_EQ(r.main.table.inv_freq[i], static_cast<float>(std::pow(1e4, -i / 32.0)));
  EXPECT_EQ(r.main.table.attn_factor, 1.0f);
}

TEST(DeepseekV4Rope, SavedNestedFormIsReadAsIs) {
  json c = flash_upstream();
  c.erase("rope_scaling");
  c["rope_parameters"] = json::parse(R"({
      "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.125},
      "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": 0.125, "factor": 16.0,
                   "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1,
                   "attention_factor": 1.0}})");
  DeepseekV4Rope r = deepseek_v4_rope(c);
  expect_flash_yarn(r.compress);
  EXPECT_EQ(r.compress.table.attn_factor, 1.0f);
  // No attention_factor: derived from the factor (transformers' get_mscale), then with mscale pairs.
  c["rope_parameters"]["compress"].erase("attention_factor");
  r = deepseek_v4_rope(c);
  expect_flash_yarn(r.compress);
  EXPECT_FLOAT_EQ(r.compress.table.attn_factor, 1.2772589f);
  c["rope_parameters"]["compress"]["mscale"] = 0.707;
  c["rope_parameters"]["compress"]["mscale_all_dim"] = 1.0;
  EXPECT_FLOAT_EQ(deepseek_v4_rope(c).compress.table.attn_factor, 0.9363975f);
  // beta_fast / beta_slow null or 0 take 32 / 1 ("or 32"); a missing factor is max_position / original.
  c["rope_parameters"]["compress"]["beta_fast"] = nullptr;
  c["rope_parameters"]["compress"]["beta_slow"] = 0;
  c["rope_parameters"]["compress"].erase("factor");
  expect_flash_yarn(deepseek_v4_rope(c).compress);
}

TEST(DeepseekV4Rope, DefaultCompressAndRefusals) {
  json c = flash_upstream();
  c.erase("rope_scaling");
  DeepseekV4Rope r = deepseek_v4_rope(c);  // no scaling anywhere: both default, at their thetas
  EXPECT_EQ(r.compress.type, "default");
  EXPECT_FLOAT_EQ(r.compress.table.inv_freq[20], static_cast<float>(f(20)));
  EXPECT_EQ(r.compress.table.attn_factor, 1.0f);
  c["rope_scaling"] = {{"type", "longrope"}, {"factor", 4.0}};
  try {
    deepseek_v4_rope(c);
    FAIL() << "longrope accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("rope_parameters.compress.rope_type 'longrope'"), std::string::npos) << e.what();
  }
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 0.5}, {"original_max_position_embeddings", 65536}};
  EXPECT_THROW(deepseek_v4_rope(c), Error);
}

}  // namespace
}  // namespace ft
