// Gemma 4 beyond the reference logits (hf_fixture_test.cpp): the dense fixture (shared/fixtures/hf/gemma4)
// and the MoE fixture (tests/model/fixtures/gemma4_moe: KV-shared layers, k_eq_v, soft-capping) give
// the same logits however the prompt is split into forwards or batched (sliding-window pages, shared
// K/V read across steps), and config fields outside what gemma4.cpp implements are refused by name.
#include <filesystem>
#include <fstream>

#include "../formats/format_test_util.h"
#include "prefix_hit.h"
#include "fixture_util.h"

namespace ft::testing {
namespace {

std::string fixture_dir(const std::string& name) {
  return name == "gemma4" ? shared_dir() + "/fixtures/hf/gemma4" : source_dir() + "/tests/model/fixtures/" + name;
}

class Gemma4Consistency : public ::testing::TestWithParam<std::string> {};

TEST_P(Gemma4Consistency, ChunkedPrefillDecodeAndBatchEqualOneShot) {
  const std::string dir = fixture_dir(GetParam());
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u) << "missing fixture " << dir;
  auto engine = Engine::load(dir, small_engine_options());
  const int64_t V = engine->config().n_vocab;
  const RefCase& c = cases[1];  // long: 130 tokens, far past the window of 8
  const auto one_shot = generate(*engine, {greedy_request(c.input_ids, 4)})[0];
  EXPECT_LE(max_row_rel_l2(one_shot.prompt_logits, c.logits, V), 1e-4);
  for (int64_t chunk : {1, 7, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    GenerateOptions go;
    go.max_prefill_tokens = chunk;
    const auto r = generate(*engine, {greedy_request(c.input_ids, 4)}, go)[0];
    EXPECT_LE(max_row_rel_l2(r.prompt_logits, one_shot.prompt_logits, V), 1e-5);
    EXPECT_EQ(r.tokens, one_shot.tokens);
  }
  // Teacher forcing: each decode step's logits equal a prefill of prompt + generated tokens.
  GenerateRequest req = greedy_request(cases[0].input_ids, 16);
  req.step_logits = true;
  const auto dec = generate(*engine, {req})[0];
  ASSERT_EQ(dec.tokens, cases[0].greedy);
  std::vector<int32_t> full = cases[0].input_ids;
  full.insert(full.end(), dec.tokens.begin(), dec.tokens.end() - 1);
  const auto pre = generate(*engine, {greedy_request(full, 1)})[0];
  const size_t skip = (cases[0].input_ids.size() - 1) * static_cast<size_t>(V);
  const std::vector<float> tail(pre.prompt_logits.begin() + static_cast<std::ptrdiff_t>(skip), pre.prompt_logits.end());
  EXPECT_LE(max_row_rel_l2(dec.step_logits, tail, V), 1e-5);
  // Both cases in one batch equal each alone.
  std::vector<GenerateRequest> both;
  for (const RefCase& rc : cases) both.push_back(greedy_request(rc.input_ids, 16));
  const auto together = generate(*engine, both);
  for (size_t i = 0; i < both.size(); ++i) {
    EXPECT_EQ(together[i].tokens, cases[i].greedy) << cases[i].name;
    EXPECT_LE(max_row_rel_l2(together[i].prompt_logits, cases[i].logits, V), 1e-4) << cases[i].name;
  }
}

TEST_P(Gemma4Consistency, PrefixHitGivesTheColdRunsLogprobs) {
  // The second run of the 130-token prompt takes 128 tokens from the prefix cache: the sliding layers'
  // cached window pages and the full layers' pages, which the KV-shared layers read too.
  const std::string dir = fixture_dir(GetParam());
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u);
  const RefCase& ref = cases[1];
  auto engine = Engine::load(dir, small_engine_options());
  expect_prefix_hit_gives_cold_logprobs(*engine, ref, /*check_reference=*/true);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Gemma4Consistency, ::testing::Values("gemma4", "gemma4_moe"));

/** Loads the dense fixture's weights under its config edited by `edit`; returns the error's message
 *  after checking its code (empty when it loaded). */
std::string load_edited(const std::function<void(nlohmann::json&)>& edit, ErrorCode want = ErrorCode::kUnsupported) {
  const std::string src = shared_dir() + "/fixtures/hf/gemma4";
  TempDir tmp("gemma4_config");
  std::filesystem::create_symlink(src + "/model.safetensors", tmp.file("model.safetensors"));
  nlohmann::json config = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  edit(config);
  std::ofstream(tmp.file("config.json")) << config.dump();
  try {
    Engine::load(tmp.path().string(), small_engine_options());
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), want) << e.what();
    return e.what();
  }
  return "";
}

TEST(Gemma4Config, FieldsOutsideTheImplementationAreRefusedByName) {
  EXPECT_NE(load_edited([](nlohmann::json& c) { c["use_bidirectional_attention"] = "all"; })
                .find("use_bidirectional_attention"),
            std::string::npos);
  EXPECT_NE(load_edited([](nlohmann::json& c) { c["hidden_activation"] = "gelu"; }).find("hidden_activation"),
            std::string::npos);
  EXPECT_NE(load_edited([](nlohmann::json& c) { c["rope_parameters"]["full_attention"]["rope_type"] = "yarn"; })
                .find("rope_type 'yarn'"),
            std::string::npos);
  EXPECT_NE(load_edited([](nlohmann::json& c) { c["per_layer_config"]["3"]["sliding_window"] = 4; })
                .find("per_layer_config[\"3\"].sliding_window"),
            std::string::npos);
  EXPECT_NE(load_edited([](nlohmann::json& c) { c["num_kv_shared_layers"] = 4; }, ErrorCode::kInvalidFile)
                .find("num_kv_shared_layers"),
            std::string::npos);
  // Sharing K/V needs an earlier layer of the same type: the only full layer is the last one.
  EXPECT_NE(load_edited([](nlohmann::json& c) { c["num_kv_shared_layers"] = 1; }, ErrorCode::kInvalidFile)
                .find("no earlier layer has its type"),
            std::string::npos);
}

}  // namespace
}  // namespace ft::testing
