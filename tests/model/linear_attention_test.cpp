// Hybrid linear-attention models (Qwen3-Next, Qwen3.5): the recurrent state carried between prefill
// chunks gives the logits of one whole pass for chunks of 1, 7 and 64 tokens; sequences batched
// together (each with its own state slot) give their solo logits; the KV cache holds pages only for
// the attention layers and counts the state slots; a request sharing a prefix of random length with
// an earlier one (a hit restores the earlier prompt's snapshot, or none applies) gives the tokens and
// log-probabilities of a cold run, and no state slot leaks.
#include <cstdio>
#include <fstream>
#include <random>

#include "../formats/format_test_util.h"
#include "collect_sink.h"
#include "engine/engine_runner.h"
#include "fixture_util.h"
#include "formats/checkpoint.h"
#include "formats/safetensors.h"

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
  // Value pages as wide as the keys, or kv_v_width (Qwen4-Exp: its indexer's keys after the values).
  const int64_t v_width = mc.kv_v_width > 0 ? mc.kv_v_width : mc.n_head_kv * mc.head_dim;
  EXPECT_EQ(KvCache::bytes_per_token(kc), attn_layers * 4 * (mc.n_head_kv * mc.head_dim + v_width));
  const int64_t per_slot = kc.state_bytes_per_slot();
  // Qwen4-Exp's per-layer embeddings add a second conv window and the last tokens to each slot.
  EXPECT_EQ(per_slot, (mc.n_layer - attn_layers) * 4 *
                          ((mc.lin_conv_kernel - 1) * mc.lin_conv_dim() + mc.lin_n_v_heads * mc.lin_k_dim * mc.lin_v_dim +
                           mc.lin_conv2_rows * mc.lin_conv2_dim + mc.lin_token_history));
  ASSERT_NE(engine->kv().state_pool(), nullptr);
  EXPECT_EQ(engine->kv().state_pool()->n_pages(), engine->options().max_seqs + engine->options().state_snapshots);
  EXPECT_EQ(engine->kv().bytes(), KvCache::bytes_for(kc));
  EXPECT_GE(engine->kv().bytes(), per_slot * engine->options().max_seqs);
  // A --state-snapshots typo is refused at once, naming the flag and its range (it used to spend ~20 s
  // and GBs of memory before an allocation failed without naming it).
  for (int32_t bad : {-1, kMaxStateSnapshots + 1, 1000000000}) {
    EngineOptions o = small_engine_options();
    o.state_snapshots = bad;
    try {
      Engine::load(shared_dir() + "/fixtures/hf/" + GetParam(), o);
      ADD_FAILURE() << "--state-snapshots " << bad << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find("--state-snapshots must be in [0, 4096]"), std::string::npos) << e.what();
    }
  }
}

ServiceConfig service_config() {
  ServiceConfig sc;
  sc.scheduler.max_running = 2;
  sc.scheduler.max_prefill_tokens = 24;
  sc.scheduler.max_seq_len = 512;
  sc.check_integrity = true;
  return sc;
}

TEST_P(LinearAttention, PrefixHitsAtRandomSplitsGiveTheColdRun) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + GetParam();
  EngineOptions o = small_engine_options();
  o.max_seqs = 2;
  o.state_snapshots = 2;  // fewer snapshots than prompts: older ones are dropped
  auto warm_engine = Engine::load(dir, o), cold_engine = Engine::load(dir, o);
  EngineRunner warm_runner(*warm_engine), cold_runner(*cold_engine);
  ServiceConfig cold_sc = service_config();
  cold_sc.scheduler.prefix_cache = false;
  EngineService warm(warm_runner, warm_engine->kv().pools(), service_config());
  EngineService cold(cold_runner, cold_engine->kv().pools(), cold_sc);
  std::mt19937 rng(7);
  auto tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(rng() % 500) + 3);
    return t;
  };
  const std::vector<int32_t> base = tokens(90);
  int hits = 0;
  for (int trial = 0; trial < 6; ++trial) {
    // Shares a random prefix (0..90 tokens) with `base`, which the warm service has seen.
    const int shared = static_cast<int>(rng() % 91);
    std::vector<int32_t> prompt(base.begin(), base.begin() + shared);
    for (int32_t t : tokens(5 + static_cast<int>(rng() % 40))) prompt.push_back(t);
    if (trial == 0 || trial == 3) run_greedy(warm, base, 6);  // (re)cache the base prompt's snapshot
    const auto got = run_greedy(warm, prompt, 6), want = run_greedy(cold, prompt, 6);
    SCOPED_TRACE("shared " + std::to_string(shared) + " of " + std::to_string(prompt.size()));
    hits += got->info.cached_tokens > 0;
    EXPECT_EQ(want->info.cached_tokens, 0);
    ASSERT_EQ(got->tokens.size(), want->tokens.size());
    for (size_t i = 0; i < want->tokens.size(); ++i) {
      EXPECT_EQ(got->tokens[i].id, want->tokens[i].id) << i;
      ASSERT_EQ(got->tokens[i].top.size(), want->tokens[i].top.size());
      for (size_t j = 0; j < want->tokens[i].top.size(); ++j)
        EXPECT_NEAR(got->tokens[i].top[j].second, want->tokens[i].top[j].second, 1e-5) << i << "/" << j;
    }
  }
  EXPECT_GT(hits, 0);
  // Every slot is free or a snapshot: none leaked to a finished request.
  const EngineStats st = warm.stats();
  EXPECT_EQ(st.state_slots_total, o.max_seqs + o.state_snapshots);
  EXPECT_EQ(st.state_slots_used, 0);
  EXPECT_GT(st.state_snapshots, 0);
}

TEST(Qwen35Multimodal, TheTextModelOfAMultimodalFolderLoads) {
  // Qwen3.5's releases are Qwen3_5MoeForConditionalGeneration folders: the text model's config under
  // text_config and its tensors under model.language_model., beside a vision tower and MTP weights.
  // The fixture written that way loads as its text model and gives the reference logits.
  const std::string src = shared_dir() + "/fixtures/hf/qwen3_5_moe";
  const std::vector<RefCase> cases = read_reference(src);
  ASSERT_EQ(cases.size(), 2u);
  TempDir tmp("qwen35_multimodal");
  const nlohmann::json text = nlohmann::json::parse(read_file(src + "/config.json"));
  nlohmann::json config = {{"model_type", "qwen3_5_moe"},
                           {"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
                           {"tie_word_embeddings", false},
                           {"text_config", text},
                           {"vision_config", {{"model_type", "qwen3_5_moe_vision"}, {"depth", 2}}}};
  std::ofstream(tmp.file("config.json")) << config.dump(1);
  const auto ck = open_checkpoint(src);
  std::vector<SafetensorsTensor> ts;
  for (const TensorInfo& t : ck->tensors()) {
    const std::string name = t.name.starts_with("model.") ? "model.language_model." + t.name.substr(6) : t.name;
    ts.push_back({name, t.dtype, t.shape, t.data});
  }
  const std::vector<float> extra(64, 0.5f);
  ts.push_back({"model.visual.patch_embed.proj.weight", DType::F32, {8, 8}, extra.data()});
  ts.push_back({"mtp.fc.weight", DType::F32, {8, 8}, extra.data()});
  write_safetensors(tmp.file("model.safetensors"), ts);
  auto engine = Engine::load(tmp.path().string(), small_engine_options());
  EXPECT_EQ(engine->config().arch, "qwen3_5_moe");
  for (const RefCase& c : cases) {
    const auto res = generate(*engine, {greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()))});
    EXPECT_LE(max_row_rel_l2(res[0].prompt_logits, c.logits, engine->config().n_vocab), 1e-4) << c.name;
    EXPECT_EQ(res[0].tokens, c.greedy) << c.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, LinearAttention,
                         ::testing::Values("qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen4_exp"));

}  // namespace
}  // namespace ft::testing
