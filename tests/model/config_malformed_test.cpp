// Malformed config.json / GGUF metadata that the fuzz harnesses (fuzz/safetensors_config_fuzz.cpp,
// fuzz/gguf_fuzz.cpp) found escaping config_from_hf / config_from_gguf as something other than an
// ft::Error naming the field: a library exception, signed overflow (undefined behaviour), a per-layer
// table built from any layer count. Each case is refused with ft::Error(kInvalidFile).
#include <gtest/gtest.h>

#include <string>

#include "model/config.h"
#include "util/error.h"

namespace ft {
namespace {

// A minimal valid HF config with `extra` fields merged in.
nlohmann::json hf(const nlohmann::json& extra) {
  nlohmann::json c = {{"vocab_size", 64}, {"hidden_size", 32}, {"num_hidden_layers", 2}, {"num_attention_heads", 2}};
  if (extra.is_object()) c.update(extra);
  return c;
}

// A minimal valid GGUF metadata object (architecture "llama") with `extra` keys merged in.
nlohmann::json gguf(const nlohmann::json& extra) {
  nlohmann::json m = {{"llama.embedding_length", 32}, {"llama.block_count", 2}, {"llama.attention.head_count", 2}};
  if (extra.is_object()) m.update(extra);
  return m;
}

// The message of the ft::Error(kInvalidFile) `f` throws, or "" (a test failure) when it throws nothing.
template <typename F>
std::string invalid_file(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no ft::Error";
  return "";
}

TEST(ConfigMalformed, ValidBaseConfigsParse) {
  EXPECT_EQ(config_from_hf(hf({}), "llama").n_layer, 2);
  EXPECT_EQ(config_from_gguf(gguf({}), "llama", "llama").n_layer, 2);
}

TEST(ConfigMalformed, NonIntegerMlpOnlyLayersIsAnInvalidFile) {
  // Was a nlohmann::json type_error, not an ft::Error.
  EXPECT_NE(invalid_file([] { config_from_hf(hf({{"mlp_only_layers", {1, "x"}}}), "qwen2_moe"); }).find("mlp_only_layers"),
            std::string::npos);
}

TEST(ConfigMalformed, SharedExpertWidthOverflowIsRefused) {
  // moe_intermediate_size x n_shared_experts overflowed int64 (undefined behaviour) and gave a garbage width.
  EXPECT_NE(invalid_file([] {
              config_from_hf(hf({{"moe_intermediate_size", int64_t{9'000'000'000'000'000'000}}, {"n_shared_experts", 4}}),
                             "deepseek_v3");
            }).find("n_shared_experts"),
            std::string::npos);
  EXPECT_NE(invalid_file([] {
              config_from_gguf(gguf({{"llama.expert_feed_forward_length", int64_t{1} << 62},
                                     {"llama.expert_shared_count", 8}}),
                               "llama", "llama");
            }).find("expert_shared_count"),
            std::string::npos);
}

TEST(ConfigMalformed, LayerCountBeyondAnyModelIsRefused) {
  // Per-layer tables (layer types, sliding windows) were built for any count: 2^40 layers ran out of memory.
  EXPECT_NE(invalid_file([] {
              config_from_hf(hf({{"num_hidden_layers", 65537}, {"linear_num_value_heads", 2}}), "qwen3_next");
            }).find("num_hidden_layers"),
            std::string::npos);
  EXPECT_NE(invalid_file([] { config_from_gguf(gguf({{"llama.block_count", int64_t{1} << 40}}), "llama", "llama"); })
                .find("block_count"),
            std::string::npos);
}

TEST(ConfigMalformed, PartialRotaryFactorOutsideUnitIntervalIsRefused) {
  // head_dim x 1e300 converted to int64 was undefined behaviour.
  EXPECT_NE(invalid_file([] { config_from_hf(hf({{"partial_rotary_factor", 1e300}}), "llama"); }).find("partial_rotary"),
            std::string::npos);
  EXPECT_NE(invalid_file([] { config_from_hf(hf({{"partial_rotary_factor", -0.5}}), "llama"); }).find("partial_rotary"),
            std::string::npos);
  EXPECT_EQ(config_from_hf(hf({{"head_dim", 16}, {"partial_rotary_factor", 0.25}}), "llama").n_rot, 4);
}

TEST(ConfigMalformed, HugeFloatIntegerIsRefused) {
  // 1e300 as an integer field was cast to int64 (undefined behaviour) before being compared.
  EXPECT_NE(invalid_file([] { config_from_hf(hf({{"intermediate_size", 1e300}}), "llama"); }).find("intermediate_size"),
            std::string::npos);
  EXPECT_EQ(config_from_hf(hf({{"intermediate_size", 48.0}}), "llama").n_ff, 48);
}

TEST(ConfigMalformed, NegativeSlidingWindowPeriodIsRefused) {
  // A negative period reached `period - 1` (INT64_MIN overflowed) and gave a meaningless pattern.
  EXPECT_NE(invalid_file([] {
              config_from_gguf(gguf({{"llama.attention.sliding_window_pattern", -1}}), "llama", "llama");
            }).find("sliding_window_pattern"),
            std::string::npos);
}

TEST(ConfigMalformed, MlaWidthOverflowIsRefused) {
  // kv_lora_rank + rope dims overflowed int64 (undefined behaviour).
  EXPECT_NE(invalid_file([] {
              config_from_gguf(gguf({{"llama.attention.kv_lora_rank", INT64_MAX}, {"llama.rope.dimension_count", 64}}),
                               "llama", "llama");
            }).find("kv_lora_rank"),
            std::string::npos);
}

}  // namespace
}  // namespace ft
