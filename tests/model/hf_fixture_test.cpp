// Every supported architecture end to end against its Hugging Face fixture (shared/fixtures/hf):
// logits of every prompt position within 1e-4 relative L2, and the 16 greedy tokens identical.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fixture_util.h"
#include "model/registry.h"

namespace ft::testing {
namespace {

class HfFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFixture, LogitsAndGreedyMatchReference) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u) << "missing fixture " << dir;
  auto engine = Engine::load(dir, small_engine_options());
  const int64_t V = engine->config().n_vocab;
  for (const RefCase& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(c.logits.size(), c.input_ids.size() * static_cast<size_t>(V));
    auto res = generate(*engine, {greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()))});
    const double err = max_row_rel_l2(res[0].prompt_logits, c.logits, V);
    std::printf("[ fixture ] hf/%s %s: max rel L2 %.3g\n", GetParam().c_str(), c.name.c_str(), err);
    EXPECT_LE(err, 1e-4);
    EXPECT_EQ(res[0].tokens, c.greedy);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, HfFixture,
                         ::testing::Values("llama", "qwen2", "qwen3", "qwen3_tied", "qwen3_moe", "qwen3_moe_64e",
                                           "mixtral", "qwen2_moe", "olmoe", "glm4_moe", "minimax_m2",
                                           "deepseek_v3", "gpt_oss", "qwen3_next", "qwen3_5", "qwen3_5_moe",
                                           "deepseek_v4", "gemma4", "qwen4_exp"));

TEST(HfFixtureStrategies, GptOssOnTheCpuExecutorGivesTheFusedLogits) {
  // gpt-oss's experts through the expert banks and the CPU executor (strategy cpu: the banks' host
  // views carry the clamped SwiGLU and the biases) equal the resident experts' CpuOps::moe_experts
  // bit for bit, so also the reference.
  const std::string dir = shared_dir() + "/fixtures/hf/gpt_oss";
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u);
  EngineOptions fused_o = small_engine_options(), cpu_o = small_engine_options();
  fused_o.moe.strategy = MoeStrategy::kFused;
  cpu_o.moe.strategy = MoeStrategy::kCpu;
  auto fused = Engine::load(dir, fused_o), cpu = Engine::load(dir, cpu_o);
  for (const RefCase& c : cases) {
    SCOPED_TRACE(c.name);
    const GenerateRequest req = greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()));
    const GenerateResult a = generate(*fused, {req})[0], b = generate(*cpu, {req})[0];
    EXPECT_EQ(a.prompt_logits, b.prompt_logits);
    EXPECT_EQ(b.tokens, c.greedy);
  }
}

TEST(HfFixtureMxfp4, GptOssMxfp4CheckpointMatchesTransformers) {
  // tests/model/fixtures/gpt_oss_mxfp4: the gpt_oss fixture with MXFP4 experts in OpenAI's release
  // layout, reference logits from transformers with Mxfp4Config(dequantize=True)
  // (tests/model/gen_gpt_oss_mxfp4.py). The experts stay MXFP4 in the banks and kernels; fused
  // (resident experts) and cpu (expert banks through the CPU executor) both match.
  expect_reference_on_fused_and_cpu(source_dir() + "/tests/model/fixtures/gpt_oss_mxfp4", "gpt_oss_mxfp4");
}

TEST(HfFixtureGemma4Moe, MoeBlockMatchesTransformersOnEveryStrategy) {
  // tests/model/fixtures/gemma4_moe (tests/model/fixtures/gen_gemma4_moe.py, transformers 5.17 float32):
  // Gemma 4 with enable_moe_block (router with scale and per_expert_scale, GEGLU experts beside the
  // dense MLP), attention_k_eq_v full layers of their own head_dim and one KV head, two KV-shared
  // layers with double-wide MLPs, final_logit_softcapping, per-layer inputs and a sliding window of 8.
  // The experts through resident banks (fused) and the CPU executor (cpu) both match.
  expect_reference_on_fused_and_cpu(source_dir() + "/tests/model/fixtures/gemma4_moe", "gemma4_moe");
}

TEST(HfFixtureStrategies, Qwen4ExpOnTheCpuExecutorGivesTheReference) {
  // qwen4_exp's routed experts through resident banks (fused) and the CPU executor (cpu) both match
  // transformers (its streams, PLE and QSA layers around them are the same code either way).
  expect_reference_on_fused_and_cpu(shared_dir() + "/fixtures/hf/qwen4_exp", "qwen4_exp");
}

TEST(Registry, EveryArchitectureHasAFixture) {
  // An architecture registered without an end-to-end fixture test fails here.
  const std::vector<std::string> tested = {"llama",     "qwen2", "qwen3",    "qwen3_moe",  "mixtral",    "qwen2_moe",
                                           "olmoe",     "glm4_moe", "minimax_m2", "deepseek_v3", "gpt_oss",
                                           "qwen3_next", "qwen3_5", "qwen3_5_moe", "deepseek_v4", "gemma4",
                                           "qwen4_exp"};
  for (const ArchEntry& a : architectures())
    EXPECT_NE(std::find(tested.begin(), tested.end(), a.name), tested.end()) << a.name << " has no fixture test";
}

TEST(Registry, UnsupportedArchitectureIsNamed) {
  // The multimodal Gemma 4 wrapper (model_type gemma4, text_config inside) is not a text model FreeToken
  // reads: the gemma4 fixture's weights under such a config.
  const std::string dir = scratch_path("unsupported_arch");
  std::filesystem::create_directories(dir);
  std::filesystem::remove(dir + "/model.safetensors");
  std::filesystem::create_symlink(shared_dir() + "/fixtures/hf/gemma4/model.safetensors", dir + "/model.safetensors");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(shared_dir() + "/fixtures/hf/gemma4/config.json"));
  config["model_type"] = "gemma4";
  std::ofstream(dir + "/config.json") << config.dump();
  try {
    auto engine = Engine::load(dir, small_engine_options());
    FAIL() << "expected ft::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(msg.find("'gemma4'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("qwen3_moe"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace ft::testing
