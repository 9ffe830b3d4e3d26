// The same checkpoints as GGUF files from llama.cpp's converter (shared/fixtures/gguf/<name>/):
// f32 and bf16 within 1e-4 relative L2 of the HF reference at every position, with identical greedy
// tokens. q8_0: the weights alone (dequantized exactly, fp32 activations) put typical positions at
// 1-2.5e-2, but on these random-weight MoE models a few positions flip an expert at a router
// near-tie and reach 0.1-0.5 (mixtral, qwen3_moe, olmoe), and dense qwen3 has positions up to
// 4.6e-2; so for q8_0 dense models must hold 3e-2 over the whole [T, V] matrix (5e-2 at any position)
// and MoE models 3e-2 at the median position and 0.1 over the whole matrix.
// llama/mixtral files carry permuted Q/K rows (normal-mode RoPE); olmoe files hold RMS epsilon
// 1e-5 and compare against reference_eps1e-05.json.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "fixture_util.h"

namespace ft::testing {
namespace {

struct GgufCase {
  std::string name, type;
};

class GgufFixture : public ::testing::TestWithParam<GgufCase> {};

TEST_P(GgufFixture, LogitsMatchReference) {
  const GgufCase& p = GetParam();
  const std::string gdir = shared_dir() + "/fixtures/gguf/" + p.name;
  const std::vector<RefCase> cases = p.name == "olmoe" ? read_reference(gdir, "reference_eps1e-05.json")
                                                       : read_reference(shared_dir() + "/fixtures/hf/" + p.name);
  ASSERT_EQ(cases.size(), 2u);
  const std::string file = gdir + "/" + p.name + "-" + p.type + ".gguf";
  if (!std::filesystem::exists(file) && p.name == "qwen3_moe_64e" && p.type == "f32")
    GTEST_SKIP() << "the fixture set keeps no f32 file for qwen3_moe_64e (see its README)";
  auto engine = Engine::load(file, small_engine_options());
  const int64_t V = engine->config().n_vocab;
  const bool exact = p.type != "q8_0";
  for (const RefCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto res = generate(*engine, {greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()))});
    ASSERT_EQ(res[0].prompt_logits.size(), c.logits.size());
    const double err = max_row_rel_l2(res[0].prompt_logits, c.logits, V);
    std::vector<double> rows;
    for (size_t t = 0; t < c.input_ids.size(); ++t)
      rows.push_back(row_rel_l2(res[0].prompt_logits.data() + t * V, c.logits.data() + t * V, V));
    std::sort(rows.begin(), rows.end());
    const double median = rows[rows.size() / 2];
    const double whole = row_rel_l2(res[0].prompt_logits.data(), c.logits.data(), static_cast<int64_t>(c.logits.size()));
    std::printf("[ fixture ] gguf/%s-%s %s: rel L2 max %.3g median %.3g whole %.3g\n", p.name.c_str(), p.type.c_str(),
                c.name.c_str(), err, median, whole);
    if (exact) {
      EXPECT_LE(err, 1e-4);
      EXPECT_EQ(res[0].tokens, c.greedy);
    } else if (engine->config().n_expert == 0) {
      // Dense: no router to flip, so the whole matrix holds the 3e-2.
      EXPECT_LE(whole, 3e-2);
      EXPECT_LE(err, 5e-2);
    } else {
      EXPECT_LE(median, 3e-2);
      EXPECT_LE(whole, 0.1);
    }
  }
}

std::vector<GgufCase> all_cases() {
  std::vector<GgufCase> v;
  for (const char* n :
       {"llama", "qwen2", "qwen3", "qwen3_tied", "qwen3_moe", "qwen3_moe_64e", "mixtral", "qwen2_moe", "olmoe"})
    for (const char* t : {"f32", "bf16", "q8_0"}) v.push_back({n, t});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Files, GgufFixture, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<GgufCase>& i) { return i.param.name + "_" + i.param.type; });

}  // namespace
}  // namespace ft::testing
