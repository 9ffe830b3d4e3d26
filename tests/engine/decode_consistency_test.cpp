// The engine computes the same function however a sequence is split into forwards or batched:
// token-by-token decode, chunked prefill (chunks of 1, 7, 64) and a batch of the `short` and `long`
// fixture cases all equal a one-shot prefill of each sequence alone (<= 1e-5 relative L2 per row).
#include "../model/fixture_util.h"

namespace ft::testing {
namespace {

class DecodeConsistency : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = shared_dir() + "/fixtures/hf/" + GetParam();
    cases_ = read_reference(dir_);
    ASSERT_EQ(cases_.size(), 2u);
    engine_ = Engine::load(dir_, small_engine_options());
    V_ = engine_->config().n_vocab;
  }
  std::string dir_;
  std::vector<RefCase> cases_;
  std::unique_ptr<Engine> engine_;
  int64_t V_ = 0;
};

TEST_P(DecodeConsistency, ChunkedPrefillEqualsOneShot) {
  const RefCase& c = cases_[1];  // long: 130 tokens over several 16-token pages
  const auto one_shot = generate(*engine_, {greedy_request(c.input_ids, 4)})[0];
  EXPECT_LE(max_row_rel_l2(one_shot.prompt_logits, c.logits, V_), 1e-4);  // sanity: it is the reference
  for (int64_t chunk : {1, 7, 64}) {
    SCOPED_TRACE("chunk " + std::to_string(chunk));
    GenerateOptions go;
    go.max_prefill_tokens = chunk;
    const auto r = generate(*engine_, {greedy_request(c.input_ids, 4)}, go)[0];
    EXPECT_LE(max_row_rel_l2(r.prompt_logits, one_shot.prompt_logits, V_), 1e-5);
    EXPECT_EQ(r.tokens, one_shot.tokens);
  }
}

TEST_P(DecodeConsistency, IncrementalDecodeEqualsPrefill) {
  // Teacher forcing: the logits each decode step sampled from equal the logits of a one-shot prefill
  // of prompt + generated tokens at the same positions.
  const RefCase& c = cases_[0];
  GenerateRequest req = greedy_request(c.input_ids, 16);
  req.step_logits = true;
  const auto dec = generate(*engine_, {req})[0];
  ASSERT_EQ(dec.tokens, c.greedy);
  std::vector<int32_t> full = c.input_ids;
  full.insert(full.end(), dec.tokens.begin(), dec.tokens.end() - 1);
  const auto pre = generate(*engine_, {greedy_request(full, 1)})[0];
  const size_t skip = (c.input_ids.size() - 1) * static_cast<size_t>(V_);
  const std::vector<float> tail(pre.prompt_logits.begin() + static_cast<std::ptrdiff_t>(skip), pre.prompt_logits.end());
  EXPECT_LE(max_row_rel_l2(dec.step_logits, tail, V_), 1e-5);
}

TEST_P(DecodeConsistency, BatchEqualsEachAlone) {
  std::vector<GenerateRequest> both;
  for (const RefCase& c : cases_) {
    both.push_back(greedy_request(c.input_ids, 16));
    both.back().step_logits = true;
  }
  const auto together = generate(*engine_, both);
  for (size_t i = 0; i < both.size(); ++i) {
    SCOPED_TRACE(cases_[i].name);
    const auto alone = generate(*engine_, {both[i]})[0];
    EXPECT_EQ(together[i].tokens, alone.tokens);
    EXPECT_EQ(together[i].tokens, cases_[i].greedy);
    EXPECT_LE(max_row_rel_l2(together[i].prompt_logits, alone.prompt_logits, V_), 1e-5);
    EXPECT_LE(max_row_rel_l2(together[i].step_logits, alone.step_logits, V_), 1e-5);
  }
  // All pages went back to the pool.
  EXPECT_EQ(engine_->kv().pool().n_free(), engine_->kv().pool().n_pages());
}

INSTANTIATE_TEST_SUITE_P(Models, DecodeConsistency, ::testing::Values("qwen3", "qwen2_moe", "mixtral"));

TEST(Generate, KvPoolTooSmallIsAnError) {
  EngineOptions o = small_engine_options();
  o.kv_tokens = 32;
  auto engine = Engine::load(shared_dir() + "/fixtures/hf/llama", o);
  const std::vector<RefCase> cases = read_reference(shared_dir() + "/fixtures/hf/llama");
  try {
    generate(*engine, {greedy_request(cases[1].input_ids, 4)});
    FAIL() << "expected ft::Error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
  }
  EXPECT_EQ(engine->kv().pool().n_free(), engine->kv().pool().n_pages());
}

}  // namespace
}  // namespace ft::testing
