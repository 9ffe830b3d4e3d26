// Hybrid linear-attention models (Qwen3-Next, Qwen3.5): the recurrent state carried between prefill
// chunks gives the logits of one whole pass for chunks of 1, 7 and 64 tokens; sequences batched
// together (each with its own state slot) give their solo logits; the KV cache holds pages only for
// the attention layers and counts the state slots.
#include <cstdio>

#include "fixture_util.h"

namespace ft::testing {
namespace {

class LinearAttention : public ::testing::TestWithParam<std::string> {};

TEST_P(LinearAttention, ChunkedPrefillCarriesTheState) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u) << "missing fixture " << dir;
  auto engine = Engine::load(dir, small_engine_options());
  const int64_t V = engine->config().n_vocab;
  const RefCase& c = cases[1];  // the long prompt (130 tokens)
  const std::vector<float> whole = generate(*engine, {greedy_request(c.input_ids, 4)})[0].prompt_logits;
  for (int64_t chunk : {1, 7, 64}) {
    GenerateOptions o;
    o.max_prefill_tokens = chunk;
    const std::vector<float> got = generate(*engine, {greedy_request(c.input_ids, 4)}, o)[0].prompt_logits;
    const double err = max_row_rel_l2(got, whole, V);
    std::printf("[ fixture ] %s chunk %lld vs one pass: max rel L2 %.3g\n", GetParam().c_str(),
                static_cast<long long>(chunk), err);
    EXPECT_LE(err, 1e-6) << "chunk " << chunk;
  }
}

TEST_P(LinearAttention, BatchedSequencesKeepTheirOwnState) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u);
  auto engine = Engine::load(dir, small_engine_options());
  std::vector<GenerateRequest> reqs;
  for (const RefCase& c : cases) reqs.push_back(greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size())));
  GenerateOptions o;
  o.max_prefill_tokens = 24;  // prefill chunks of both prompts, then decodes, share steps
  const std::vector<GenerateResult> res = generate(*engine, reqs, o);
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].name);
    EXPECT_LE(max_row_rel_l2(res[i].prompt_logits, cases[i].logits, engine->config().n_vocab), 1e-4);
    EXPECT_EQ(res[i].tokens, cases[i].greedy);
  }
}

TEST_P(LinearAttention, KvCacheHoldsPagesOnlyForAttentionLayers) {
  auto engine = Engine::load(shared_dir() + "/fixtures/hf/" + GetParam(), small_engine_options());
  const ModelConfig& mc = engine->config();
  const KvCacheConfig& kc = engine->kv().config();
  int64_t attn_layers = 0;
  for (int64_t l = 0; l < mc.n_layer; ++l) {
    attn_layers += mc.is_linear_layer(l) ? 0 : 1;
    EXPECT_EQ(engine->kv().layer(static_cast<int32_t>(l)).k.empty(), mc.is_linear_layer(l)) << "layer " << l;
  }
  ASSERT_GT(attn_layers, 0);
  ASSERT_LT(attn_layers, mc.n_layer);
  EXPECT_EQ(KvCache::bytes_per_token(kc), attn_layers * 2 * 4 * mc.n_head_kv * mc.head_dim);
  const int64_t per_slot = kc.state_bytes_per_slot();
  EXPECT_EQ(per_slot, (mc.n_layer - attn_layers) * 4 *
                          ((mc.lin_conv_kernel - 1) * mc.lin_conv_dim() + mc.lin_n_v_heads * mc.lin_k_dim * mc.lin_v_dim));
  ASSERT_NE(engine->kv().state_pool(), nullptr);
  EXPECT_EQ(engine->kv().state_pool()->n_pages(), engine->options().max_seqs);
  EXPECT_EQ(engine->kv().bytes(), KvCache::bytes_for(kc));
  EXPECT_GE(engine->kv().bytes(), per_slot * engine->options().max_seqs);
}

INSTANTIATE_TEST_SUITE_P(Archs, LinearAttention, ::testing::Values("qwen3_next", "qwen3_5", "qwen3_5_moe"));

}  // namespace
}  // namespace ft::testing
