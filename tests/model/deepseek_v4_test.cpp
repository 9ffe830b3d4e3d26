// DeepSeek-V4 (shared/fixtures/hf/deepseek_v4: layers 0-2 heavily compressed (rate 128), layer 3
// compressed sparse (rate 4, indexer top-8), window 8): each compressed entry is pooled once, by the
// step that closes its window, into the entry rows of the KV pages, so prefilling in chunks of 6 over
// pages of 4 (windows and entries cut at every boundary) gives transformers' greedy tokens, and its
// logits wherever the indexer has no choice to make; decode steps after a long prefill and a
// prefix-cache hit read the entries earlier steps wrote and give what one cold prefill gives. The
// key and value pages (each token's kv and compressor projections) are the sliding-window pool's,
// kept for each layer's window only (max(sliding_window, rate (HCA), 2 rate (CSA))); the entry rows
// are the full pool's, kept for the whole context.
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include <nlohmann/json.hpp>

#include "collect_sink.h"
#include "engine/engine_runner.h"
#include "fixture_util.h"

namespace ft::testing {
namespace {

/** The largest relative L2 between each decode step's logits of `dec` (after a prompt of `prompt`
 *  tokens) and the same position's prompt logits of `cold`, one prefill of the prompt and the
 *  tokens `dec` decoded; [V] rows. */
double worst_step_vs_cold(const GenerateResult& dec, const GenerateResult& cold, int64_t V, size_t prompt) {
  double worst = 0;
  for (size_t r = 0; r < dec.tokens.size(); ++r) {
    const auto row = [V](const std::vector<float>& v, size_t i) {
      return std::vector<float>(v.begin() + static_cast<std::ptrdiff_t>(i * V),
                                v.begin() + static_cast<std::ptrdiff_t>((i + 1) * V));
    };
    worst = std::max(worst, max_row_rel_l2(row(dec.step_logits, r), row(cold.prompt_logits, prompt - 1 + r), V));
  }
  return worst;
}

TEST(DeepseekV4, ChunkedPrefillOverSmallPagesKeepsTheReferenceLogits) {
  const std::string dir = shared_dir() + "/fixtures/hf/deepseek_v4";
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u);
  EngineOptions o = small_engine_options();
  o.page_size = 4;
  auto engine = Engine::load(dir, o);
  // Windows: max(8, 128) for the HCA layers, max(8, 2 x 4) for the CSA one; their K and V in the
  // sliding-window pool, the entry rows in the full pool's pages.
  const KvCacheConfig& kc = engine->kv().config();
  EXPECT_EQ(kc.layer_window, (std::vector<int32_t>{128, 128, 128, 8}));
  ASSERT_NE(engine->kv().swa_pool(), nullptr);
  EXPECT_EQ(engine->kv().layer(3).k.dim(0), engine->kv().swa_pool()->n_pages() + kc.spare_pages);
  EXPECT_EQ(engine->kv().layer(3).e.dim(0), engine->kv().pool().n_pages() + kc.spare_pages);
  // Value rows: compressor kv + gate (2 x 2 x 16) and the indexer's (2 x 2 x 16) per token, in heads
  // of gcd(head_dim, index_head_dim) = 16 (each part whole heads: its own scales when quantized).
  EXPECT_EQ(engine->kv().config().v_n_head * engine->kv().config().v_head_dim, 128);
  EXPECT_EQ(engine->kv().config().v_head_dim, 16);
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

/** The weights of fixture `src` (default: the shared one) under its config edited by `edit`, in a scratch folder. */
std::unique_ptr<Engine> load_edited(const std::function<void(nlohmann::json&)>& edit, EngineOptions o,
                                    std::string src = "") {
  if (src.empty()) src = shared_dir() + "/fixtures/hf/deepseek_v4";
  const std::filesystem::path dir = scratch_path("deepseek_v4_edited");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(src + "/config.json"));
  edit(cfg);
  std::ofstream(dir / "config.json") << cfg.dump();
  std::filesystem::create_symlink(src + "/model.safetensors", dir / "model.safetensors");
  return Engine::load(dir.string(), o);
}

TEST(DeepseekV4, SlidingLayersEqualHcaLayersBeforeTheirFirstEntry) {
  // A heavily compressed layer (rate 128) has no compressed entry before position 127, so it is a
  // sliding-window layer there: with layers 0 and 1 made sliding_attention (their compressor weights
  // left unread) and the main RoPE set to the compress RoPE, transformers' logits of positions 0..126
  // and the short case's greedy tokens must come out unchanged.
  for (MoeStrategy strategy : {MoeStrategy::kFused, MoeStrategy::kCpu}) {
    EngineOptions o = small_engine_options();
    o.moe.strategy = strategy;
    auto engine = load_edited(
        [](nlohmann::json& c) {
          c["layer_types"][0] = "sliding_attention";
          c["layer_types"][1] = "sliding_attention";
          c["rope_parameters"]["main"]["rope_theta"] = c["rope_parameters"]["compress"]["rope_theta"];
        },
        o);
    const std::vector<RefCase> cases = read_reference(shared_dir() + "/fixtures/hf/deepseek_v4");
    ASSERT_EQ(cases.size(), 2u);
    const int64_t V = engine->config().n_vocab;
    for (const RefCase& c : cases) {
      SCOPED_TRACE(c.name + (strategy == MoeStrategy::kCpu ? " cpu" : " fused"));
      const bool is_short = c.name == "short";
      const auto res = generate(*engine, {greedy_request(c.input_ids, is_short ? 16 : 1)})[0];
      const size_t rows = std::min<size_t>(c.input_ids.size(), 127);
      const std::vector<float> got(res.prompt_logits.begin(), res.prompt_logits.begin() + rows * V);
      const std::vector<float> want(c.logits.begin(), c.logits.begin() + rows * V);
      const double err = max_row_rel_l2(got, want, V);
      std::printf("[ fixture ] deepseek_v4 with sliding layers 0-1, %s (%zu rows): max rel L2 %.3g\n", c.name.c_str(),
                  rows, err);
      EXPECT_LE(err, 1e-4);
      if (is_short) EXPECT_EQ(res.tokens, c.greedy);
    }
    // The main RoPE is what the sliding layers rotate with: back at rope_theta 10000 the logits move.
    auto plain = load_edited(
        [](nlohmann::json& c) {
          c["layer_types"][0] = "sliding_attention";
          c["layer_types"][1] = "sliding_attention";
        },
        o);
    const auto res = generate(*plain, {greedy_request(cases[0].input_ids, 1)})[0];
    EXPECT_GT(max_row_rel_l2(res.prompt_logits, cases[0].logits, V), 1e-3);
  }
}

TEST(DeepseekV4, EntriesPersistAcrossDecodeStepsAndPrefixHits) {
  // 300 prompt tokens cross two heavily compressed windows (rate 128) and 75 sparse ones (rate 4), in
  // chunks of 64 over pages of 16. With index_topk 128 (more than any row's entries: the indexer has
  // no choice, so a decode step and one forward rank nothing differently), 12 decode steps must give
  // what one cold prefill of the prompt and the generated tokens gives at those positions: the entries
  // they read were written by the prefill's chunks and the earlier steps. Then through the service
  // the same prompt twice: the second run takes 288 tokens (18 pages, their entry rows with them) from
  // the prefix cache and must give the first run's tokens and log-probabilities.
  EngineOptions o = small_engine_options();
  auto engine = load_edited([](nlohmann::json& c) { c["index_topk"] = 128; }, o);
  const KvCacheConfig& kc = engine->kv().config();
  // Entry rows: one a page for the rate-128 layers (an entry every 8th page), 16 / 4 for the rate-4 one
  // (its entry and its indexer key side by side: 16 + 16 wide), F32 on the CPU.
  EXPECT_EQ(engine->kv().layer(0).e.dim(1), 1);
  EXPECT_EQ(engine->kv().layer(0).e.dim(3), 16);
  EXPECT_EQ(engine->kv().layer(3).e.dim(1), 4);
  EXPECT_EQ(engine->kv().layer(3).e.dim(3), 32);
  // Bytes a token: the entry rows of a page over 16 tokens; the key and value pages (4 layers x (16 key
  // + 128 value) x 4 B a token) are the sliding-window pool's fixed cost.
  EXPECT_EQ(KvCache::bytes_per_token(kc), (3 * 16 * 4 + 4 * 32 * 4) / 16);
  EXPECT_EQ(KvCache::swa_pool_bytes(kc), (engine->kv().swa_pool()->n_pages() + kc.spare_pages) * 16 * 4 * 144 * 4);
  std::vector<int32_t> prompt(300);
  uint32_t x = 12345;
  for (int32_t& t : prompt) x = x * 1664525u + 1013904223u, t = static_cast<int32_t>((x >> 8) % 512);
  const int64_t V = engine->config().n_vocab;
  GenerateRequest req = greedy_request(prompt, 12);
  req.step_logits = true;
  GenerateOptions go;
  go.max_prefill_tokens = 64;
  const auto dec = generate(*engine, {req}, go)[0];
  ASSERT_EQ(dec.tokens.size(), 12u);
  std::vector<int32_t> full = prompt;
  full.insert(full.end(), dec.tokens.begin(), dec.tokens.end() - 1);
  const auto cold = generate(*engine, {greedy_request(full, 1)})[0];
  const double worst = worst_step_vs_cold(dec, cold, V, 300);
  std::printf("[ fixture ] deepseek_v4 300-token prompt, 12 decode steps vs one cold prefill: max rel L2 %.3g\n", worst);
  EXPECT_LE(worst, 1e-5);

  EngineRunner runner(*engine);
  ServiceConfig sc;
  sc.scheduler.max_running = 2;
  sc.scheduler.max_prefill_tokens = 64;
  sc.scheduler.max_seq_len = 512;
  sc.check_integrity = true;
  EngineService svc(runner, engine->kv().pools(), sc);
  auto first = run_greedy(svc, prompt, 12), hit = run_greedy(svc, prompt, 12);
  EXPECT_EQ(first->info.cached_tokens, 0);
  EXPECT_EQ(hit->info.cached_tokens, 288);
  ASSERT_EQ(first->tokens.size(), 12u);
  ASSERT_EQ(hit->tokens.size(), 12u);
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(first->tokens[i].id, dec.tokens[i]) << i;
    EXPECT_EQ(hit->tokens[i].id, first->tokens[i].id) << i;
    ASSERT_EQ(hit->tokens[i].top.size(), first->tokens[i].top.size());
    for (size_t j = 0; j < first->tokens[i].top.size(); ++j) {
      EXPECT_EQ(hit->tokens[i].top[j].first, first->tokens[i].top[j].first) << i << "/" << j;
      EXPECT_NEAR(hit->tokens[i].top[j].second, first->tokens[i].top[j].second, 1e-5) << i << "/" << j;
    }
  }
}

TEST(DeepseekV4, UpstreamConfigFieldsLoadAsTransformersFoldsThem) {
  // The fixture's config in the upstream form (compress_ratios, num_hash_layers, no rope_parameters,
  // default compress_rates): DeepseekV4Config folds it into the same schedule and RoPE kinds, so the
  // reference logits and greedy tokens come out unchanged.
  auto engine = load_edited(
      [](nlohmann::json& c) {
        for (const char* k : {"layer_types", "mlp_layer_types", "rope_parameters", "compress_rates"}) c.erase(k);
        c["compress_ratios"] = {128, 128, 128, 4};
        c["num_hash_layers"] = 3;
      },
      small_engine_options());
  const std::vector<RefCase> cases = read_reference(shared_dir() + "/fixtures/hf/deepseek_v4");
  ASSERT_EQ(cases.size(), 2u);
  const int64_t V = engine->config().n_vocab;
  for (const RefCase& c : cases) {
    SCOPED_TRACE(c.name);
    const auto res = generate(*engine, {greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()))})[0];
    EXPECT_LE(max_row_rel_l2(res.prompt_logits, c.logits, V), 1e-4);
    EXPECT_EQ(res.tokens, c.greedy);
  }
}

TEST(DeepseekV4, UnknownLayerTypeAndRopeTypeAreRefusedByName) {
  try {
    load_edited([](nlohmann::json& c) { c["layer_types"][2] = "full_attention"; }, small_engine_options());
    FAIL() << "a full_attention layer loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("layer_types[2] 'full_attention'"), std::string::npos) << e.what();
  }
  try {
    load_edited([](nlohmann::json& c) { c["rope_parameters"]["compress"]["rope_type"] = "llama3"; },
                small_engine_options());
    FAIL() << "a llama3 compress RoPE loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("rope_parameters.compress.rope_type 'llama3'"), std::string::npos) << e.what();
  }
}

TEST(DeepseekV4Yarn, FixtureMatchesTransformersOnFusedAndCpu) {
  // tests/model/fixtures/deepseek_v4_yarn (tests/model/gen_deepseek_v4_yarn.py, transformers 5.17 float32):
  // DeepSeek-V4-Flash's layer schedule in small: two sliding_attention layers (main RoPE, window 8),
  // then a CSA (rate 4, indexer top-8) and an HCA (rate 16) layer whose compress RoPE is YaRN (factor
  // 16, attention factor 0.1 ln 16 + 1), prompts of 37 and 130 tokens (past the window; the long one
  // has 32 CSA and 8 HCA entries). Every position within 1e-4 and the greedy tokens, on the fused and
  // the cpu strategies.
  const std::string dir = source_dir() + "/tests/model/fixtures/deepseek_v4_yarn";
  expect_reference_on_fused_and_cpu(dir, "deepseek_v4_yarn");
}

TEST(DeepseekV4Yarn, TheWindowPoolHoldsALongContextInItsWindows) {
  // The yarn fixture (windows: 8 for the sliding layers, max(8, 2 x 4) for the CSA layer, max(8, 16) for
  // the HCA one) with one sequence and steps of 32 tokens: its sliding-window pool holds 1 x (16 + 2 x 4)
  // + 32 = 56 tokens, so a 300-token prompt (prefilled in chunks of 32, then 12 decode steps) keeps only
  // its last windows' kv and projections while its entry rows stay in the full pool. With index_topk 128
  // (more than any row's 77 CSA entries: no choice to make) the steps must give what one cold prefill of
  // prompt + generated tokens gives in an engine whose window pool holds it all at once.
  const std::string dir = source_dir() + "/tests/model/fixtures/deepseek_v4_yarn";
  auto edit = [](nlohmann::json& c) { c["index_topk"] = 128; };
  EngineOptions o = small_engine_options();
  o.page_size = 4;
  o.max_seqs = 1;
  o.max_step_tokens = 32;
  o.max_logit_rows = 32;
  auto engine = load_edited(edit, o, dir);
  const KvCacheConfig& kc = engine->kv().config();
  EXPECT_EQ(kc.layer_window, (std::vector<int32_t>{8, 8, 8, 16}));
  ASSERT_NE(engine->kv().swa_pool(), nullptr);
  EXPECT_EQ(engine->kv().swa_pool()->n_pages(), 56 / 4);
  // KV bytes a token: the entry rows only, a page of 4 holding one row of the CSA layer (entry 32 +
  // indexer key 16) and one of the HCA layer (32), F32: (48 + 32) x 4 / 4 = 80 B. Before the window pool
  // every layer also kept 32 key + 4 x (32 + 16) projection values a token: 4 x 224 x 4 + 80 = 3664 B.
  EXPECT_EQ(KvCache::bytes_per_token(kc), 80);
  EXPECT_EQ(KvCache::swa_pool_bytes(kc), int64_t{56 / 4 + kc.spare_pages} * 4 * 4 * (32 + 192) * 4);
  std::vector<int32_t> prompt(300);
  uint32_t x = 777;
  for (int32_t& t : prompt) x = x * 1664525u + 1013904223u, t = static_cast<int32_t>((x >> 8) % 256);
  GenerateRequest req = greedy_request(prompt, 12);
  req.step_logits = true;
  GenerateOptions go;
  go.max_prefill_tokens = 32;
  const auto dec = generate(*engine, {req}, go)[0];
  ASSERT_EQ(dec.tokens.size(), 12u);
  EngineOptions wide = small_engine_options();
  wide.page_size = 4;
  auto ref = load_edited(edit, wide, dir);
  ASSERT_GE(int64_t{ref->kv().swa_pool()->n_pages()} * 4, 311);
  std::vector<int32_t> full = prompt;
  full.insert(full.end(), dec.tokens.begin(), dec.tokens.end() - 1);
  const auto cold = generate(*ref, {greedy_request(full, 1)})[0];
  const int64_t V = engine->config().n_vocab;
  const double worst = worst_step_vs_cold(dec, cold, V, 300);
  std::printf("[ fixture ] deepseek_v4_yarn 300 tokens through a 56-token window pool, 12 steps vs a cold "
              "prefill: max rel L2 %.3g\n", worst);
  EXPECT_LE(worst, 1e-5);
  EXPECT_EQ(cold.tokens[0], dec.tokens.back());
}

/** The indexer's selections of CSA layer `layer` as sets, one per row, over the next generate calls. */
struct IndexerSets {
  std::vector<std::set<int32_t>> rows;
  void hook(Engine& e, int64_t layer) {
    e.set_dump_hook([this, layer](const std::string& name, int64_t l, const Tensor& t) {
      if (name != "indexer_ids" || l != layer) return;
      for (int64_t r = 0; r < t.dim(0); ++r)
        rows.emplace_back(t.ptr<int32_t>() + r * t.dim(1), t.ptr<int32_t>() + (r + 1) * t.dim(1));
    });
  }
};

TEST(DeepseekV4Yarn, ChunkedPrefillAndDecodeKeepTheOneShotLogits) {
  // The same fixture prefilled in chunks of 5 over pages of 4 (windows and compressed blocks cut at
  // every boundary), and teacher-forced decode steps, against one forward of the whole prompt. The
  // short prompt: only its last chunk's rows (35, 36) see more entries than index_topk, over the same
  // candidates as the one-shot forward, so the indexer's tie-breaking cannot differ.
  // A decode step's indexer, as transformers' with a cache, ranks the entries that exist at that step
  // while one forward over prompt + generated tokens ranks all 13 of them (the unseen ones at -inf):
  // torch.topk's order among exactly tied scores (the ReLU zeroing both heads) depends on that count,
  // so where the 8th pick falls among tied zeros the two pick different sets from bit-equal scores
  // (here the rows at positions 40 (6 positive + 4 zeros, 2 to pick) and 50 (7 positive + 5 zeros)).
  // From position 40 on, every later row reads that row's keys (window, entries), so the steps differ
  // from there. So: the steps before position 40 within 1e-5, the disagreeing selections exactly those
  // two rows, the step at 40 off by far more, and with index_topk 16 (no choice left) every step
  // within 1e-5, which leaves the indexer's choice as the only difference on the decode path.
  const std::string dir = source_dir() + "/tests/model/fixtures/deepseek_v4_yarn";
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u);
  EngineOptions o = small_engine_options();
  o.page_size = 4;
  auto engine = Engine::load(dir, o);
  const int64_t V = engine->config().n_vocab;
  const RefCase& c = cases[0];  // short: 37 tokens
  const auto one_shot = generate(*engine, {greedy_request(c.input_ids, 16)})[0];
  EXPECT_EQ(one_shot.tokens, c.greedy);
  GenerateOptions go;
  go.max_prefill_tokens = 5;
  const auto chunked = generate(*engine, {greedy_request(c.input_ids, 16)}, go)[0];
  EXPECT_LE(max_row_rel_l2(chunked.prompt_logits, one_shot.prompt_logits, V), 1e-5);
  EXPECT_EQ(chunked.tokens, c.greedy);

  // Teacher-forced decode vs one forward, the CSA layer's (2) selections recorded for both.
  auto decode_vs_one_shot = [&](Engine& e, std::vector<std::set<int32_t>>* dec_sets,
                                std::vector<std::set<int32_t>>* pre_sets) {
    IndexerSets ds, ps;
    ds.hook(e, 2);
    GenerateRequest req = greedy_request(c.input_ids, 16);
    req.step_logits = true;
    const auto dec = generate(e, {req})[0];
    std::vector<int32_t> full = c.input_ids;
    full.insert(full.end(), dec.tokens.begin(), dec.tokens.end() - 1);
    ps.hook(e, 2);
    const auto pre = generate(e, {greedy_request(full, 1)})[0];
    e.set_dump_hook(nullptr);
    // dec's rows: the prompt's 37, then one per decode step (15, the last token is not fed back).
    EXPECT_EQ(ds.rows.size(), full.size());
    EXPECT_EQ(ps.rows.size(), full.size());
    *dec_sets = std::vector<std::set<int32_t>>(ds.rows.end() - 15, ds.rows.end());
    *pre_sets = std::vector<std::set<int32_t>>(ps.rows.end() - 15, ps.rows.end());
    std::vector<double> errs;
    const size_t skip = c.input_ids.size() - 1;
    for (size_t r = 0; r < dec.tokens.size(); ++r) {
      const std::vector<float> a(dec.step_logits.begin() + static_cast<std::ptrdiff_t>(r * V),
                                 dec.step_logits.begin() + static_cast<std::ptrdiff_t>((r + 1) * V));
      const std::vector<float> b(pre.prompt_logits.begin() + static_cast<std::ptrdiff_t>((skip + r) * V),
                                 pre.prompt_logits.begin() + static_cast<std::ptrdiff_t>((skip + r + 1) * V));
      errs.push_back(max_row_rel_l2(a, b, V));
    }
    return errs;
  };
  std::vector<std::set<int32_t>> dec_sets, pre_sets;
  const std::vector<double> errs = decode_vs_one_shot(*engine, &dec_sets, &pre_sets);
  ASSERT_EQ(errs.size(), 16u);
  ASSERT_EQ(dec_sets.size(), 15u);
  // Step r's logits come from the row of position 36 + r; its CSA row is fed at r >= 1 (position 36 + r).
  std::vector<int> differing;
  for (size_t r = 1; r < errs.size(); ++r)
    if (dec_sets[r - 1] != pre_sets[r - 1]) differing.push_back(36 + static_cast<int>(r));
  ASSERT_EQ(differing, (std::vector<int>{40, 50}));
  for (size_t r = 0; r < 4; ++r) EXPECT_LE(errs[r], 1e-5) << "step " << r << " (position " << 36 + r << ")";
  EXPECT_GT(errs[4], 1e-2);  // 0.38: two of the eight entries swapped

  // index_topk 16 >= every row's 13 entries: the same weights, no choice, every step within 1e-5.
  const std::filesystem::path all = scratch_path("deepseek_v4_yarn_topk16");
  std::filesystem::remove_all(all);
  std::filesystem::create_directories(all);
  for (const char* f : {"model.safetensors", "generation_config.json", "reference.json"})
    std::filesystem::create_symlink(dir + "/" + f, all / f);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  cfg["index_topk"] = 16;
  std::ofstream(all / "config.json") << cfg.dump();
  auto engine16 = Engine::load(all.string(), o);
  const std::vector<double> errs16 = decode_vs_one_shot(*engine16, &dec_sets, &pre_sets);
  for (size_t r = 0; r < errs16.size(); ++r) EXPECT_LE(errs16[r], 1e-5) << "index_topk 16, step " << r;
}

}  // namespace
}  // namespace ft::testing
