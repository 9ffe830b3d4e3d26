// Sliding-window KV (gpt-oss fixture, window 8 on even layers): with pages of 4 tokens and prefill
// chunks of 6, the sliding layers' pages below the window are released while the prompt is still
// being prefilled, yet every prompt logit matches transformers and the greedy tokens are the
// reference's; the sliding layers hold a few pages however long the sequence grows, while the full
// layers hold the whole context.
#include "fixture_util.h"

namespace ft::testing {
namespace {

TEST(SlidingWindowKv, ReleasedWindowPagesKeepTheReferenceLogits) {
  const std::string dir = shared_dir() + "/fixtures/hf/gpt_oss";
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u);
  EngineOptions o = small_engine_options();
  o.page_size = 4;
  o.max_seqs = 2;
  o.max_step_tokens = 64;
  auto engine = Engine::load(dir, o);
  ASSERT_EQ(engine->config().window(0), 8);
  ASSERT_EQ(engine->config().window(1), 0);
  const PagePool* swa = engine->kv().swa_pool();
  ASSERT_NE(swa, nullptr);
  const PagePool& full = engine->kv().pool();
  // max_seqs x (window + 2 pages) + max_step_tokens = 2 x 16 + 64 tokens, against 1024 for the others.
  EXPECT_EQ(swa->n_pages(), 24);
  EXPECT_EQ(full.n_pages(), 256);
  const int64_t V = engine->config().n_vocab;
  GenerateOptions go;
  go.max_prefill_tokens = 6;
  for (const RefCase& c : cases) {
    SCOPED_TRACE(c.name);
    GenerateRequest r = greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()));
    int32_t most_swa = 0, most_full = 0;
    r.on_token = [&](int32_t) {  // while decoding: at most ceil(8 / 4) + 1 window pages
      most_swa = std::max(most_swa, swa->n_pages() - swa->n_free());
      most_full = std::max(most_full, full.n_pages() - full.n_free());
    };
    const auto res = generate(*engine, {r}, go);
    const double err = max_row_rel_l2(res[0].prompt_logits, c.logits, V);
    std::printf("[ fixture ] gpt_oss window pages of 4, chunks of 6, %s: max rel L2 %.3g\n", c.name.c_str(), err);
    EXPECT_LE(err, 1e-4);
    EXPECT_EQ(res[0].tokens, c.greedy);
    EXPECT_LE(most_swa, 3);
    EXPECT_EQ(most_full, static_cast<int32_t>((c.input_ids.size() + c.greedy.size() + 3) / 4));
    EXPECT_EQ(swa->n_free(), swa->n_pages());
  }
}

TEST(SlidingWindowKv, AStepWithoutTheWindowPagesIsRefused) {
  auto engine = Engine::load(shared_dir() + "/fixtures/hf/gpt_oss", small_engine_options());
  BlockTable t;
  ASSERT_TRUE(t.reserve(engine->kv().pool(), 4));
  const std::vector<int32_t> ids = {1, 2, 3, 4};
  try {
    engine->step(StepBatch{{{&t.pages(), 0, ids.data(), 4, 1}}});
    FAIL() << "a step without sliding-window pages ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding-window"), std::string::npos) << e.what();
  }
  t.release(engine->kv().pools());
}

}  // namespace
}  // namespace ft::testing
