// EngineOptions::streamed_step_tokens (ft serve without --max-prefill-tokens): a plan that streams
// routed experts at prefill (offload, hybrid) is made again for bigger forwards, at most the KV
// cache's tokens and one a sequence; a plan that keeps every expert on the device (fused, cpu) keeps
// max_step_tokens. The bigger forwards compute what the small ones do (a 300-token prompt in one
// forward against pieces of 64, qwen3_moe_64e fixture), and gpt-oss's sliding-window pool is made
// again to hold the bigger step.
#include "../model/fixture_util.h"

namespace ft::testing {
namespace {

EngineOptions streamed_options(MoeStrategy s, int64_t step, int64_t streamed) {
  EngineOptions o = small_engine_options();
  o.moe.strategy = s;
  if (s == MoeStrategy::kOffload || s == MoeStrategy::kHybrid) o.moe.cache = {CacheSizeMode::kSlots, 224, 0.0};
  o.max_step_tokens = step;
  o.max_logit_rows = 512;
  o.streamed_step_tokens = streamed;
  return o;
}

TEST(StreamedStepTokens, AStreamingPlanTakesBiggerForwardsAndComputesTheSame) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  for (MoeStrategy s : {MoeStrategy::kOffload, MoeStrategy::kHybrid}) {
    SCOPED_TRACE(s == MoeStrategy::kHybrid ? "hybrid" : "offload");
    auto big = Engine::load(dir, streamed_options(s, 64, 4096));
    // kv_tokens 1024 + max_seqs 16: no forward can hold more.
    EXPECT_EQ(big->options().max_step_tokens, 1024 + big->options().max_seqs);
    auto small = Engine::load(dir, streamed_options(s, 64, 0));
    EXPECT_EQ(small->options().max_step_tokens, 64);

    std::vector<int32_t> prompt(300);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % 500);
    GenerateOptions one, pieces;
    one.max_prefill_tokens = 4096;
    pieces.max_prefill_tokens = 64;
    const auto a = generate(*big, {greedy_request(prompt, 4)}, one);
    const auto b = generate(*small, {greedy_request(prompt, 4)}, pieces);
    const int64_t V = big->config().n_vocab;
    ASSERT_EQ(a[0].prompt_logits.size(), b[0].prompt_logits.size());
    EXPECT_LT(max_row_rel_l2(a[0].prompt_logits, b[0].prompt_logits, V), 1e-4);
    EXPECT_EQ(a[0].tokens, b[0].tokens);
  }
}

TEST(StreamedStepTokens, TheSlidingWindowPoolHoldsTheBiggerStep) {
  // gpt-oss (window 8 in the fixture): the window pool is sized for the windows and one step's
  // tokens, so it is made again for the bigger forwards (it held 64 more than the windows before).
  const std::string dir = shared_dir() + "/fixtures/hf/gpt_oss";
  EngineOptions o = streamed_options(MoeStrategy::kOffload, 64, 4096);
  o.moe.cache = {CacheSizeMode::kSlots, 64, 0.0};
  auto big = Engine::load(dir, o);
  const int64_t step = big->options().max_step_tokens;
  EXPECT_EQ(step, 1024 + big->options().max_seqs);
  auto small = Engine::load(dir, streamed_options(MoeStrategy::kOffload, 64, 0));
  auto pool_tokens = [](Engine& e) {
    const PagePool* swa = e.kv().swa_pool();
    return swa ? int64_t{swa->n_pages()} * swa->page_size() : int64_t{0};
  };
  // 16 sequences x (window 8 + 2 pages of 16) + the step, at most the 1024 KV tokens.
  EXPECT_EQ(pool_tokens(*small), 16 * 40 + 64);
  EXPECT_EQ(pool_tokens(*big), 1024);
  std::vector<int32_t> prompt(300);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 37 + 11) % 500);
  GenerateOptions one;
  one.max_prefill_tokens = 4096;
  GenerateOptions pieces;
  pieces.max_prefill_tokens = 64;
  const auto a = generate(*big, {greedy_request(prompt, 4)}, one);
  const auto b = generate(*small, {greedy_request(prompt, 4)}, pieces);
  EXPECT_LT(max_row_rel_l2(a[0].prompt_logits, b[0].prompt_logits, big->config().n_vocab), 1e-4);
  EXPECT_EQ(a[0].tokens, b[0].tokens);
}

TEST(StreamedStepTokens, APlanWithEveryExpertOnTheDeviceKeepsItsForwards) {
  const std::string dir = shared_dir() + "/fixtures/hf/qwen3_moe_64e";
  for (MoeStrategy s : {MoeStrategy::kFused, MoeStrategy::kCpu}) {
    auto e = Engine::load(dir, streamed_options(s, 64, 4096));
    EXPECT_EQ(e->options().max_step_tokens, 64) << moe_strategy_name(s);
  }
}

}  // namespace
}  // namespace ft::testing
