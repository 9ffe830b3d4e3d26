// Qwen4-Exp specifics beyond the end-to-end fixture (hf_fixture_test.cpp): the hashed n-gram tables
// computed from the config equal the buffers transformers stored in the fixture, and the fixture
// loads and matches transformers without them (a checkpoint that does not store them) and with its
// n-gram table shards stored apart (stacked at load instead of viewed in place).
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "../formats/format_test_util.h"
#include "fixture_util.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "model/qwen4_exp.h"

namespace ft::testing {
namespace {

std::vector<int64_t> i64(const Checkpoint& ck, const std::string& name) {
  const TensorInfo* t = ck.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<int64_t> v(static_cast<size_t>(t->shape[0]));
  std::memcpy(v.data(), t->data, v.size() * 8);
  return v;
}

TEST(Qwen4Exp, NgramTablesFromTheConfigEqualTransformersBuffers) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen4_exp";
  const auto ck = open_checkpoint(dir);
  // ple_layer_ids [1, 3]: the PLE modules of layers 0 and 2, PLE indices 0 and 1.
  for (const auto& [layer, index] : {std::pair<int, int>{0, 0}, {2, 1}}) {
    SCOPED_TRACE(layer);
    const NgramTables t = qwen4_ngram_tables(512, 3, 8, 1000, 128, index, 1234);
    const std::string p = "model.layers." + std::to_string(layer) + ".ple.ple_embedding.";
    EXPECT_EQ(t.mult, i64(*ck, p + "layer_multipliers"));
    EXPECT_EQ(t.sizes, i64(*ck, p + "ngram_heads_vocab_sizes"));
    EXPECT_EQ(t.offsets, i64(*ck, p + "ngram_heads_offsets"));
    int64_t rows = 0;
    for (int s = 0; s < 4; ++s) rows += ck->find(p + "ngram_embedding.shard_" + std::to_string(s) + ".weight")->shape[0];
    EXPECT_EQ(t.rows, rows);  // the padded table the shards make up
  }
}

TEST(Qwen4Exp, LoadsWithoutTheStoredBuffers) {
  const std::string src = shared_dir() + "/fixtures/hf/qwen4_exp";
  const std::vector<RefCase> cases = read_reference(src);
  ASSERT_EQ(cases.size(), 2u);
  TempDir tmp("qwen4_exp_nobuf");
  std::filesystem::copy_file(src + "/config.json", tmp.file("config.json"));
  const auto ck = open_checkpoint(src);
  std::vector<SafetensorsTensor> ts;
  for (const TensorInfo& t : ck->tensors())
    if (t.dtype != DType::I64) ts.push_back({t.name, t.dtype, t.shape, t.data});
  ASSERT_EQ(ts.size() + 6, ck->tensors().size());  // 3 buffers in each of the 2 PLE layers
  std::reverse(ts.begin(), ts.end());  // the n-gram table's shards no longer follow each other: stacked at load
  write_safetensors(tmp.file("model.safetensors"), ts);
  auto engine = Engine::load(tmp.path().string(), small_engine_options());
  const auto res = generate(*engine, {greedy_request(cases[0].input_ids, static_cast<int32_t>(cases[0].greedy.size()))});
  EXPECT_LE(max_row_rel_l2(res[0].prompt_logits, cases[0].logits, engine->config().n_vocab), 1e-4);
  EXPECT_EQ(res[0].tokens, cases[0].greedy);
}

TEST(Qwen4Exp, SigmoidOutputGateMatchesTransformers) {
  // tests/model/fixtures/qwen4_exp_sigmoid (tests/model/gen_qwen4_exp_sigmoid.py, transformers 5.17
  // float32): the shared fixture's weights with output_gate_type "sigmoid" (Qwen3.8-Flash-Next's
  // config), the Gated DeltaNet norm's gate through sigmoid instead of silu. The logits differ from
  // the silu fixture's by far more than the bound, so the gate must be read.
  const std::string src = shared_dir() + "/fixtures/hf/qwen4_exp";
  const std::string ref = source_dir() + "/tests/model/fixtures/qwen4_exp_sigmoid";
  if (!std::filesystem::exists(ref + "/reference.json"))
    GTEST_SKIP() << "tests/model/fixtures/qwen4_exp_sigmoid is missing (run tests/model/gen_qwen4_exp_sigmoid.py where "
                    "transformers is installed)";
  const std::vector<RefCase> cases = read_reference(ref), silu = read_reference(src);
  ASSERT_EQ(cases.size(), 2u);
  ASSERT_EQ(silu.size(), 2u);
  TempDir tmp("qwen4_exp_sigmoid");
  std::filesystem::copy_file(ref + "/config.json", tmp.file("config.json"));
  std::filesystem::copy_file(src + "/model.safetensors", tmp.file("model.safetensors"));
  auto engine = Engine::load(tmp.path().string(), small_engine_options());
  const int64_t V = engine->config().n_vocab;
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto res = generate(*engine, {greedy_request(cases[i].input_ids, static_cast<int32_t>(cases[i].greedy.size()))});
    EXPECT_LE(max_row_rel_l2(res[0].prompt_logits, cases[i].logits, V), 1e-4) << cases[i].name;
    EXPECT_EQ(res[0].tokens, cases[i].greedy) << cases[i].name;
    EXPECT_GT(max_row_rel_l2(cases[i].logits, silu[i].logits, V), 1e-2) << cases[i].name;
  }
}

TEST(Qwen4Exp, RefusesAnOutputGateTransformersRefuses) {
  const std::string src = shared_dir() + "/fixtures/hf/qwen4_exp";
  TempDir tmp("qwen4_exp_gate_bad");
  nlohmann::json cfg = nlohmann::json::parse(read_file(src + "/config.json"));
  cfg["output_gate_type"] = "swish";  // transformers' validate_architecture takes sigmoid and silu only
  std::ofstream(tmp.file("config.json")) << cfg.dump();
  std::filesystem::copy_file(src + "/model.safetensors", tmp.file("model.safetensors"));
  try {
    Engine::load(tmp.path().string(), small_engine_options());
    FAIL() << "output_gate_type swish loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("output_gate_type \"swish\""), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ft::testing
