// DeepSeek-V4 (shared/fixtures/hf/deepseek_v4: layers 0-2 heavily compressed (rate 128), layer 3
// compressed sparse (rate 4, indexer top-8), window 8): the compressed entries are recomputed from
// the pages every step, so prefilling in chunks of 6 over pages of 4 (windows and entries cut at
// every boundary) gives transformers' greedy tokens, and its logits wherever the indexer has no
// choice to make; the cache keeps every position (no sliding-window pool) with the compressor
// projections as each token's value row.
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "fixture_util.h"

namespace ft::testing {
namespace {

TEST(DeepseekV4, ChunkedPrefillOverSmallPagesKeepsTheReferenceLogits) {
  const std::string dir = shared_dir() + "/fixtures/hf/deepseek_v4";
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u);
  EngineOptions o = small_engine_options();
  o.page_size = 4;
  auto engine = Engine::load(dir, o);
  EXPECT_EQ(engine->kv().swa_pool(), nullptr);
  // Value rows: compressor kv + gate (2 x 2 x 16) and the indexer's (2 x 2 x 16) per token.
  EXPECT_EQ(engine->kv().config().v_head_dim, 128);
  EXPECT_EQ(engine->kv().config().head_dim, 16);
  const int64_t V = engine->config().n_vocab;
  GenerateOptions go;
  go.max_prefill_tokens = 6;
  for (const RefCase& c : cases) {
    SCOPED_TRACE(c.name);
    const auto res = generate(*engine, {greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()))}, go);
    // Rows that see more entries than index_topk may pick differently among exactly tied scores: the
    // reference breaks ties as torch.topk does over the entries that exist when the row is computed
    // (ops.h indexer_topk), which a chunked prefill changes (so would transformers'). The short
    // prompt's rows see at most 9 entries; compare the long one's rows up to position 35 too.
    const size_t rows = c.name == "short" ? c.input_ids.size() : 36;
    const std::vector<float> got(res[0].prompt_logits.begin(), res[0].prompt_logits.begin() + rows * V);
    const std::vector<float> want(c.logits.begin(), c.logits.begin() + rows * V);
    const double err = max_row_rel_l2(got, want, V);
    std::printf("[ fixture ] deepseek_v4 pages of 4, chunks of 6, %s (%zu rows): max rel L2 %.3g\n", c.name.c_str(),
                rows, err);
    EXPECT_LE(err, 1e-4);
    EXPECT_EQ(res[0].tokens, c.greedy);
  }
}

TEST(DeepseekV4, YarnOnTheCompressedLayersIsRefusedByName) {
  // The released checkpoints scale the compressed layers' RoPE with YaRN, which is not implemented:
  // such a config is refused at load, naming the field, never run with the wrong rotation.
  const std::string src = shared_dir() + "/fixtures/hf/deepseek_v4";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "ft_deepseek_v4_yarn";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ifstream in(src + "/config.json");
  nlohmann::json cfg = nlohmann::json::parse(in);
  cfg["rope_parameters"]["compress"] = {{"rope_type", "yarn"}, {"rope_theta", 160000.0}, {"factor", 16.0},
                                        {"original_max_position_embeddings", 65536}, {"partial_rotary_factor", 0.5}};
  std::ofstream(dir / "config.json") << cfg.dump();
  std::filesystem::create_symlink(src + "/model.safetensors", dir / "model.safetensors");
  try {
    auto engine = Engine::load(dir.string(), small_engine_options());
    FAIL() << "a YaRN deepseek_v4 config loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("rope_parameters.compress.rope_type 'yarn'"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ft::testing
