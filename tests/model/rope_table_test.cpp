// RoPE frequency tables for the scaling variants (transformers' ROPE_INIT_FUNCTIONS semantics):
// default, linear, llama3 (per-band), yarn (ramp between extrapolation and interpolation, attention
// factor), and GGUF rope_freqs factors.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "model/rope.h"
#include "util/error.h"

namespace ft {
namespace {

ModelConfig base_config() {
  ModelConfig c;
  c.arch = "test";
  c.head_dim = 64;
  c.n_rot = 64;
  c.rope_theta = 10000.0;
  c.n_ctx_train = 4096;
  return c;
}

double default_freq(int64_t i, int64_t dim, double theta) { return std::pow(theta, -2.0 * i / dim); }

TEST(RopeTable, DefaultAndPartialRotary) {
  ModelConfig c = base_config();
  RopeTable t = rope_table(c);
  ASSERT_EQ(t.inv_freq.size(), 32u);
  EXPECT_FLOAT_EQ(t.inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(t.inv_freq[31], static_cast<float>(default_freq(31, 64, 1e4)));
  EXPECT_EQ(t.attn_factor, 1.0f);
  c.n_rot = 16;  // partial rotary: frequencies over the rotated dims only
  t = rope_table(c);
  ASSERT_EQ(t.inv_freq.size(), 8u);
  EXPECT_FLOAT_EQ(t.inv_freq[1], static_cast<float>(default_freq(1, 16, 1e4)));
}

TEST(RopeTable, LinearDividesEveryFrequency) {
  ModelConfig c = base_config();
  c.rope_scaling.type = "linear";
  c.rope_scaling.factor = 4.0;
  const RopeTable t = rope_table(c);
  for (int64_t i = 0; i < 32; ++i) EXPECT_FLOAT_EQ(t.inv_freq[i], static_cast<float>(default_freq(i, 64, 1e4) / 4.0));
}

TEST(RopeTable, Llama3KeepsHighAndScalesLowFrequencies) {
  ModelConfig c = base_config();
  c.rope_theta = 500000.0;
  c.rope_scaling = {};
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position = 8192;
  const RopeTable t = rope_table(c);
  int kept = 0, scaled = 0, smoothed = 0;
  for (int64_t i = 0; i < 32; ++i) {
    const double f = default_freq(i, 64, 500000.0), wl = 2 * std::numbers::pi / f;
    if (wl < 8192.0 / 4.0) {
      EXPECT_FLOAT_EQ(t.inv_freq[i], static_cast<float>(f));
      ++kept;
    } else if (wl > 8192.0) {
      EXPECT_FLOAT_EQ(t.inv_freq[i], static_cast<float>(f / 8.0));
      ++scaled;
    } else {
      EXPECT_LT(t.inv_freq[i], f);
      EXPECT_GT(t.inv_freq[i], f / 8.0);
      ++smoothed;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(scaled, 0);
  EXPECT_GT(smoothed, 0);
}

TEST(RopeTable, YarnRampsBetweenExtrapolationAndInterpolation) {
  ModelConfig c = base_config();
  c.rope_scaling.type = "yarn";
  c.rope_scaling.factor = 32.0;
  c.rope_scaling.original_max_position = 4096;
  c.rope_scaling.truncate = false;  // gpt-oss style
  const RopeTable t = rope_table(c);
  // Correction range from beta_fast 32 / beta_slow 1: dims below `lo` keep the original frequency,
  // dims above `hi` are divided by the factor.
  auto corr = [](double rot) { return 64 * std::log(4096 / (rot * 2 * std::numbers::pi)) / (2 * std::log(1e4)); };
  const double lo = corr(32), hi = corr(1);
  for (int64_t i = 0; i < 32; ++i) {
    const double f = default_freq(i, 64, 1e4);
    if (i <= lo) {
      EXPECT_FLOAT_EQ(t.inv_freq[i], static_cast<float>(f)) << i;
    }
    if (i >= hi) {
      EXPECT_FLOAT_EQ(t.inv_freq[i], static_cast<float>(f / 32.0)) << i;
    }
  }
  EXPECT_FLOAT_EQ(t.attn_factor, static_cast<float>(0.1 * std::log(32.0) + 1.0));
}

TEST(RopeTable, FreqFactorsAndUnknownType) {
  ModelConfig c = base_config();
  std::vector<float> factors(32, 1.0f);
  factors[31] = 2.0f;
  const RopeTable t = rope_table(c, factors);
  EXPECT_FLOAT_EQ(t.inv_freq[31], static_cast<float>(default_freq(31, 64, 1e4) / 2.0));
  EXPECT_THROW(rope_table(c, std::vector<float>(3, 1.0f)), Error);
  c.rope_scaling.type = "longrope";
  try {
    rope_table(c);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("longrope"), std::string::npos);
  }
}

}  // namespace
}  // namespace ft
