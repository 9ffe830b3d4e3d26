// stories260K (a real trained tiny llama GGUF): prompt logits and 64 greedy tokens from BOS and from
// "Once upon a time" against transformers (shared/fixtures/stories260K), through the engine and
// through `ft run` as a user runs it.
#include <cstdio>
#include <sstream>

#include "../model/fixture_util.h"

namespace ft::testing {
namespace {

const std::string kModel = "/data/models/stories260K.gguf";

nlohmann::json reference() {
  return nlohmann::json::parse(read_file(shared_dir() + "/fixtures/stories260K/reference.json"));
}

TEST(Stories260K, PromptLogitsAndGreedyMatchTransformers) {
  const nlohmann::json ref = reference();
  auto engine = Engine::load(shared_dir() + kModel, small_engine_options());
  const int64_t V = engine->config().n_vocab;
  ASSERT_EQ(V, 512);
  const auto prompt = ref.at("prompt_logits").at("input_ids").get<std::vector<int32_t>>();
  const std::vector<float> want = read_f32(shared_dir() + "/fixtures/stories260K/logits_prompt.f32");
  const auto r = generate(*engine, {greedy_request(prompt, 1)})[0];
  const double err = max_row_rel_l2(r.prompt_logits, want, V);
  std::printf("[ fixture ] stories260K prompt: max rel L2 %.3g\n", err);
  EXPECT_LE(err, 1e-4);
  for (const char* run : {"bos", "once_upon_a_time"}) {
    SCOPED_TRACE(run);
    const auto& g = ref.at("greedy").at(run);
    const auto res = generate(*engine, {greedy_request(g.at("prompt_ids").get<std::vector<int32_t>>(), 64)})[0];
    EXPECT_EQ(res.tokens, g.at("generated_ids").get<std::vector<int32_t>>());
  }
}

/** Runs `ft run` with `args` on stories260K; returns stdout (asserting exit status 0). */
std::string ft_run(const std::string& args) {
  const std::string cmd = std::string(FT_BINARY) + " run --model " + shared_dir() + kModel + " --threads 1 " + args +
                          " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  if (!p) return "";
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << cmd << "\n" << out;
  return out;
}

TEST(Stories260K, FtRunPrintsTheReferenceIds) {
  const std::string out = ft_run("--prompt-ids 1 --max-tokens 64 --temperature 0 --print-ids");
  std::vector<int32_t> ids;
  std::istringstream in(out);  // --print-ids prints comma-separated ids
  for (std::string tok; std::getline(in, tok, ',');) ids.push_back(std::stoi(tok));
  EXPECT_EQ(ids, reference().at("greedy").at("bos").at("generated_ids").get<std::vector<int32_t>>());
}

TEST(Stories260K, FtRunPrintsTheReferenceText) {
  // From BOS, as ids; and from the text prompt, encoded by the GGUF's SentencePiece vocabulary.
  const std::string from_bos = ft_run("--prompt-ids 1 --max-tokens 64 --temperature 0");
  EXPECT_EQ(from_bos.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << from_bos;
  EXPECT_EQ(from_bos, reference().at("greedy").at("bos").at("decoded_generated_only").get<std::string>() + "\n");
  const std::string from_text = ft_run("--prompt 'Once upon a time' --max-tokens 64 --temperature 0");
  EXPECT_EQ(from_text,
            reference().at("greedy").at("once_upon_a_time").at("decoded_generated_only").get<std::string>() + "\n");
}

TEST(Stories260K, FtRunWritesPromptLogits) {
  const std::string file = scratch_path("stories_logits.f32");
  const std::string cmd = std::string(FT_BINARY) + " run --model " + shared_dir() + kModel +
                          " --prompt-ids 1,403,407,261,378 --max-tokens 1 --temperature 0 --threads 1 --logits-out " +
                          file + " >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  const std::vector<float> got = read_f32(file);
  const std::vector<float> want = read_f32(shared_dir() + "/fixtures/stories260K/logits_prompt.f32");
  ASSERT_EQ(got.size(), 5u * 512u);
  EXPECT_LE(max_row_rel_l2(got, want, 512), 1e-4);
}

}  // namespace
}  // namespace ft::testing
