// Multi-head latent attention's KV cache (DeepSeek-V3 fixture): the pages hold only the latent and
// the RoPE key per token per layer; a prefix-cache hit on those pages, and on gpt-oss's
// sliding-window and full pages, gives the cold run's tokens and log-probabilities.
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <fstream>
#include <mutex>

#include "prefix_hit.h"
#include "fixture_util.h"

namespace ft::testing {
namespace {

const std::string kDir = "/fixtures/hf/deepseek_v3";

TEST(MlaKvCache, BytesPerTokenAreTheLatents) {
  auto engine = Engine::load(shared_dir() + kDir, small_engine_options());
  const ModelConfig& c = engine->config();
  ASSERT_TRUE(c.is_mla());
  const KvLayer kv = engine->kv().layer(0);
  EXPECT_EQ(kv.k.shape_str(), fmt::format("[{}, 16, 1, {}]", kv.k.dim(0), c.kv_lora_rank));  // latent c
  EXPECT_EQ(kv.v.shape_str(), fmt::format("[{}, 16, 1, {}]", kv.v.dim(0), c.qk_rope_dim));   // RoPE key r
  const int64_t per_token = KvCache::bytes_per_token(engine->kv().config());
  EXPECT_EQ(per_token, c.n_layer * (c.kv_lora_rank + c.qk_rope_dim) * 4);  // 3 x (32 + 8) floats
  // What decompressed K and V would take: 2 x heads x (nope + rope) per layer, 4.8x more here
  // (V3's real shapes: 576 values against 2 x 128 x 192 = 49152).
  EXPECT_LT(per_token * 4, c.n_layer * c.n_head * (2 * (c.qk_nope_dim + c.qk_rope_dim)) * 4);
}

class PrefixHit : public ::testing::TestWithParam<std::string> {};

// DeepSeek-V3's latent pages, gpt-oss's sliding-window layers (window 8: the hit reuses the cached
// window pages before it, kv/prefix_cache.h) with its full-attention layers' pages, and the
// linear-attention models' recurrent state restored from the snapshot at the prompt's last page
// boundary (128 of 130 tokens).
TEST_P(PrefixHit, GivesTheColdRunsLogprobs) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u);
  const RefCase& ref = cases[1];  // "long": 130 tokens
  auto engine = Engine::load(dir, small_engine_options());
  expect_prefix_hit_gives_cold_logprobs(*engine, ref, /*check_reference=*/true);
}

INSTANTIATE_TEST_SUITE_P(Archs, PrefixHit,
                         ::testing::Values("deepseek_v3", "gpt_oss", "qwen3_next", "qwen3_5", "qwen3_5_moe",
                                           "deepseek_v4", "qwen4_exp"));

TEST(MlaConfig, AMissingKeyIsNamed) {
  const std::string src = shared_dir() + kDir;
  const nlohmann::json config = nlohmann::json::parse(read_file(src + "/config.json"));
  for (const char* key : {"kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"}) {
    const std::string dir = scratch_path(std::string("mla_no_") + key);
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    nlohmann::json c = config;
    c.erase(key);
    std::ofstream(dir + "/config.json") << c.dump();
    std::filesystem::create_symlink(src + "/model.safetensors", dir + "/model.safetensors");
    try {
      Engine::load(dir, small_engine_options());
      ADD_FAILURE() << "loaded without " << key;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidFile) << e.what();
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  }
}

/** Logits of the "short" case of `src` loaded with `edit` applied to its config.json. */
std::vector<float> logits_with_config(const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
  const std::string src = shared_dir() + "/fixtures/hf/" + name;
  const std::string dir = scratch_path("cfg_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json c = nlohmann::json::parse(read_file(src + "/config.json"));
  edit(c);
  std::ofstream(dir + "/config.json") << c.dump();
  std::filesystem::create_symlink(src + "/model.safetensors", dir + "/model.safetensors");
  auto engine = Engine::load(dir, small_engine_options());
  const RefCase ref = read_reference(src)[0];
  return generate(*engine, {greedy_request(ref.input_ids, 1)})[0].prompt_logits;
}

TEST(ArchConfig, LeftOutFieldsTakeTransformersDefaults) {
  // GLM-4.5's partial_rotary_factor (0.5) and first_k_dense_replace (1), MiniMax-M2's rope theta
  // (5e6) are the fixtures' values: without them the logits stay the reference's.
  for (const auto& [name, edit] : std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>>{
           {"glm4_moe", [](nlohmann::json& c) {
              c.erase("partial_rotary_factor");
              c["rope_parameters"].erase("partial_rotary_factor");
              c.erase("first_k_dense_replace");
            }},
           {"minimax_m2", [](nlohmann::json& c) { c.erase("rope_parameters"); }}}) {
    SCOPED_TRACE(name);
    const RefCase ref = read_reference(shared_dir() + "/fixtures/hf/" + name)[0];
    EXPECT_LE(max_row_rel_l2(logits_with_config(name, edit), ref.logits, 512), 1e-4);
  }
}

TEST(ArchConfig, BadRouterGroupsAndSoftmaxDeepseekAreRefusedAtLoad) {
  auto load_error = [](const std::string& name, const std::function<void(nlohmann::json&)>& edit) -> std::string {
    try {
      logits_with_config(name, edit);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(load_error("deepseek_v3", [](nlohmann::json& c) { c["n_group"] = 3; }).find("n_group"), std::string::npos);
  EXPECT_NE(load_error("glm4_moe", [](nlohmann::json& c) { c["topk_group"] = 3; }).find("kept groups"),
            std::string::npos);
  EXPECT_NE(load_error("deepseek_v3", [](nlohmann::json& c) { c["scoring_func"] = "softmax"; }).find("DeepSeek-V2"),
            std::string::npos);
  EXPECT_NE(load_error("deepseek_v3", [](nlohmann::json& c) { c["topk_method"] = "greedy"; }).find("DeepSeek-V2"),
            std::string::npos);
  EXPECT_EQ(load_error("deepseek_v3", [](nlohmann::json& c) { c["scoring_func"] = "sigmoid"; }), "");
}

}  // namespace
}  // namespace ft::testing
