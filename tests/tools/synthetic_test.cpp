// Synthetic benchmark models: preset shapes (parameter counts of the real models), the random
// weight generators (valid blocks with the requested RMS), determinism, the router-skew
// construction (Zipf over a per-layer permutation), and the GGUF written from a synthetic
// checkpoint (reopens with the same tensors and the same logits).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <unistd.h>

#include "backend/cpu/cpu_ops.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "tools/greedy_request.h"
#include "tools/model_presets.h"
#include "tools/route_stats.h"
#include "tools/synthetic_checkpoint.h"
#include "tools/synthetic_weights.h"
#include "kv/page_pool.h"
#include "model/fixture_util.h"
#include "quant/quant.h"
#include "util/error.h"

namespace ft {
namespace {

EngineOptions small_engine() {
  EngineOptions eo = testing::small_engine_options();  // 1 thread, 1024 KV tokens in pages of 16
  eo.max_step_tokens = 256;
  eo.max_logit_rows = 256;
  eo.max_seqs = 4;
  return eo;
}

std::unique_ptr<Engine> make_engine(std::unique_ptr<Checkpoint> ckpt) {
  return std::make_unique<Engine>(std::move(ckpt), std::make_unique<CpuOps>(1), small_engine());
}

std::vector<int32_t> ids(int64_t n, int32_t vocab, uint64_t seed) {
  SynthRng rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& x : v) x = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(vocab));
  return v;
}

/** Logits of every prompt position from one prefill forward. */
std::vector<float> prefill_logits(Engine& e, const std::vector<int32_t>& prompt) {
  BlockTable t;
  EXPECT_TRUE(t.reserve(e.kv().pool(), static_cast<int64_t>(prompt.size())));
  const int64_t n = static_cast<int64_t>(prompt.size());
  const std::span<const float> step = e.step(StepBatch{{StepItem{&t.pages(), 0, prompt.data(), n, n}}});
  std::vector<float> out(step.begin(), step.end());
  t.release(e.kv().pool());
  return out;
}

GenerateRequest greedy(std::vector<int32_t> prompt, int64_t n) {
  return testing::greedy_with_logits(std::move(prompt), n);
}

SyntheticSpec tiny(DType type, double skew = 0, uint64_t seed = 0, int threads = 1) {
  SyntheticSpec s;
  s.preset = "tiny-moe";
  s.weight_type = type;
  s.router_skew = skew;
  s.seed = seed;
  s.threads = threads;
  return s;
}

TEST(ModelPresets, RealShapesGiveTheModelsParameterCounts) {
  // Totals as the model cards state them; "active" here excludes the embedding table.
  const ModelPreset& q30 = find_preset("Qwen3_30B_A3B");
  EXPECT_EQ(q30.name, "qwen3-30b-a3b");
  EXPECT_NEAR(static_cast<double>(q30.total_params()), 30.5e9, 0.2e9);
  EXPECT_NEAR(static_cast<double>(q30.active_params() + q30.n_vocab * q30.n_embd), 3.35e9, 0.1e9);
  const ModelPreset& q235 = find_preset("qwen3-235b-a22b");
  EXPECT_NEAR(static_cast<double>(q235.total_params()), 235e9, 1e9);
  EXPECT_NEAR(static_cast<double>(q235.active_params() + q235.n_vocab * q235.n_embd), 22.2e9, 0.3e9);
  const ModelPreset& mx = find_preset("mixtral-8x7b");
  EXPECT_NEAR(static_cast<double>(mx.total_params()), 46.7e9, 0.2e9);
  EXPECT_NEAR(static_cast<double>(mx.active_params() + mx.n_vocab * mx.n_embd), 12.9e9, 0.1e9);
  EXPECT_NEAR(static_cast<double>(find_preset("gpt-oss-20b").total_params()), 20.9e9, 0.3e9);
  EXPECT_NEAR(static_cast<double>(find_preset("gpt-oss-120b").total_params()), 116.8e9, 1.0e9);
  EXPECT_EQ(find_preset("deepseek-v2-lite").n_expert, 64);
}

TEST(ModelPresets, UnknownAndUnsupportedPresetsAreRejectedByName) {
  try {
    find_preset("llama-7b");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("qwen3-30b-a3b"), std::string::npos);
  }
  SyntheticSpec bad = tiny(DType::IQ2_XXS);
  EXPECT_THROW(SyntheticCheckpoint{bad}, Error);
  EXPECT_THROW(parse_synthetic_weight_type("q3_xyz"), Error);
  EXPECT_EQ(parse_synthetic_weight_type("q4_k"), DType::Q4_K);
}

TEST(SyntheticWeights, EveryTypeDequantizesToTheRequestedRms) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                  DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K, DType::IQ4_NL, DType::IQ4_XS,
                  DType::MXFP4, DType::F8_E4M3_B32, DType::F8_E4M3_B16, DType::NVFP4_G64, DType::NVFP4_G16}) {
    const int64_t n = 256 * 64;
    std::vector<uint8_t> raw(static_cast<size_t>(dtype_bytes(t, n)));
    const float want = 0.05f;
    fill_random(t, raw.data(), n, want, 42);
    std::vector<float> x(static_cast<size_t>(n));
    dequantize_row(t, raw.data(), x.data(), n);
    double ss = 0, sum = 0;
    for (float v : x) {
      ASSERT_TRUE(std::isfinite(v)) << dtype_name(t);
      ss += static_cast<double>(v) * v;
      sum += v;
    }
    const double rms = std::sqrt(ss / n), mean = sum / n;
    // MXFP4 scales are powers of two: within a factor sqrt(2).
    const double tol = t == DType::MXFP4 ? 0.42 : 0.12;
    EXPECT_NEAR(rms / want, 1.0, tol) << dtype_name(t);
    EXPECT_LT(std::abs(mean), 0.25 * want) << dtype_name(t);
    std::vector<uint8_t> again(raw.size());
    fill_random(t, again.data(), n, want, 42);
    EXPECT_EQ(raw, again) << dtype_name(t);
    fill_random(t, again.data(), n, want, 43);
    EXPECT_NE(raw, again) << dtype_name(t);
  }
}

TEST(SyntheticCheckpoint, DeterministicAndIndependentOfThreadCount) {
  SyntheticCheckpoint a(tiny(DType::Q4_K, 0.5, 7, 1)), b(tiny(DType::Q4_K, 0.5, 7, 2)), c(tiny(DType::Q4_K, 0.5, 8, 2));
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  ASSERT_EQ(a.tensors().size(), 1 + 2 * 12 + 2u);
  bool differs = false;
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const TensorInfo &x = a.tensors()[i], &y = b.tensors()[i], &z = c.tensors()[i];
    EXPECT_EQ(x.name, y.name);
    ASSERT_EQ(x.bytes, y.bytes);
    EXPECT_EQ(std::memcmp(x.data, y.data, static_cast<size_t>(x.bytes)), 0) << x.name;
    differs = differs || std::memcmp(x.data, z.data, static_cast<size_t>(x.bytes)) != 0;
  }
  EXPECT_TRUE(differs);
  EXPECT_EQ(a.get("blk.1.ffn_gate_exps.weight").dtype, DType::Q4_K);
  EXPECT_EQ(a.get("blk.1.ffn_gate_exps.weight").shape, (std::vector<int64_t>{8, 256, 256}));
  EXPECT_EQ(a.get("blk.1.ffn_gate_inp.weight").dtype, DType::F32);
  EXPECT_EQ(a.get("blk.0.attn_norm.weight").dtype, DType::F32);
  EXPECT_EQ(a.get("token_embd.weight").dtype, DType::Q4_K);
  EXPECT_EQ(a.metadata()["general.architecture"], "qwen3moe");
  EXPECT_EQ(a.metadata()["tokenizer.ggml.tokens"].size(), 512u);
  // Q5_K cannot be written by quantize_row: the embedding falls back to Q8_0, matrices stay Q5_K.
  SyntheticCheckpoint q5(tiny(DType::Q5_K));
  EXPECT_EQ(q5.get("token_embd.weight").dtype, DType::Q8_0);
  EXPECT_EQ(q5.get("output.weight").dtype, DType::Q5_K);
  SyntheticSpec two = tiny(DType::F16);
  two.n_layer = 1;
  EXPECT_EQ(SyntheticCheckpoint(two).find("blk.1.attn_q.weight"), nullptr);
}

TEST(SyntheticCheckpoint, TinyPresetsLoadAndGenerateDeterministically) {
  for (const char* preset : {"tiny-moe", "tiny-mixtral"}) {
    SyntheticSpec s = tiny(DType::Q8_0);
    s.preset = preset;
    auto e1 = make_engine(std::make_unique<SyntheticCheckpoint>(s));
    auto e2 = make_engine(std::make_unique<SyntheticCheckpoint>(s));
    EXPECT_EQ(e1->config().arch, std::string(preset) == "tiny-moe" ? "qwen3_moe" : "mixtral");
    EXPECT_EQ(e1->config().n_vocab, 512);
    const GenerateRequest req = greedy(ids(20, 512, 3), 8);
    const GenerateResult r1 = generate(*e1, {req})[0], r2 = generate(*e2, {req})[0];
    ASSERT_EQ(r1.tokens.size(), 8u);
    EXPECT_EQ(r1.tokens, r2.tokens);
    EXPECT_EQ(r1.step_logits, r2.step_logits);
    for (float v : r1.step_logits) ASSERT_TRUE(std::isfinite(v));
    s.seed = 1;
    auto e3 = make_engine(std::make_unique<SyntheticCheckpoint>(s));
    EXPECT_NE(generate(*e3, {req})[0].step_logits, r1.step_logits);
  }
}

// Under offload the expert banks hold their own copy of every routed expert, so the synthetic
// checkpoint's pages of them go back to the OS (a 130 GB model then needs its memory once, not
// twice); decoding must not read them any more, so offload still equals fused bit for bit.
TEST(SyntheticCheckpoint, ExpertBanksTakeOverTheExpertMemory) {
  const SyntheticSpec s = tiny(DType::Q8_0);
  auto fused = make_engine(std::make_unique<SyntheticCheckpoint>(s));
  EngineOptions eo = small_engine();
  eo.moe.strategy = MoeStrategy::kOffload;
  auto off = std::make_unique<Engine>(std::make_unique<SyntheticCheckpoint>(s), std::make_unique<CpuOps>(1), eo);
  const auto& released = static_cast<const SyntheticCheckpoint&>(off->checkpoint());
  int64_t expert_bytes = 0;
  for (const TensorInfo& t : released.tensors())
    if (t.name.find("_exps.") != std::string::npos) expert_bytes += t.bytes;
  EXPECT_GT(released.released_bytes(), expert_bytes / 2) << expert_bytes;  // whole pages inside each tensor
  EXPECT_LE(released.released_bytes(), expert_bytes);
  EXPECT_EQ(static_cast<const SyntheticCheckpoint&>(fused->checkpoint()).released_bytes(), 0);
  const GenerateRequest req = greedy(ids(20, 512, 5), 6);
  const GenerateResult a = generate(*fused, {req})[0], b = generate(*off, {req})[0];
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.step_logits, b.step_logits);
  const std::string file = testing::scratch_path("released.gguf");
  try {
    released.write_gguf(file);
    ADD_FAILURE() << "write_gguf wrote released tensors";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("released"), std::string::npos) << e.what();
  }
}

TEST(SyntheticCheckpoint, WrittenGgufReopensWithTheSameTensorsAndLogits) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ft_synth_" + std::to_string(::getpid()) + ".gguf")).string();
  for (DType t : {DType::Q4_K, DType::BF16}) {
    auto mem = std::make_unique<SyntheticCheckpoint>(tiny(t, 1.0, 5));
    mem->write_gguf(path);
    auto file = open_checkpoint(path);
    std::filesystem::remove(path);  // mapped: stays readable
    ASSERT_EQ(file->tensors().size(), mem->tensors().size());
    for (size_t i = 0; i < mem->tensors().size(); ++i) {
      const TensorInfo &a = mem->tensors()[i], &b = file->tensors()[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.dtype, b.dtype);
      EXPECT_EQ(a.shape, b.shape);
      ASSERT_EQ(a.bytes, b.bytes);
      EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(a.bytes)), 0) << a.name;
    }
    EXPECT_EQ(file->metadata(), mem->metadata());
    auto e_mem = make_engine(std::move(mem));
    auto e_file = make_engine(std::move(file));
    const std::vector<int32_t> prompt = ids(37, 512, 11);
    const std::vector<float> a = prefill_logits(*e_mem, prompt), b = prefill_logits(*e_file, prompt);
    ASSERT_EQ(a.size(), 37u * 512u);
    EXPECT_EQ(a, b) << dtype_name(t);
  }
}

// FP8 / NVFP4 as the loader stores those checkpoints (quant/fp8.h, quant/nvfp4.h): `--expert-weight-type
// fp8 / nvfp4` (and `--weight-type`) give a model that loads and runs on the CPU with finite logits of the
// BF16 model's magnitude, experts at 36/64 (FP8) and 40/128 (NVFP4) of BF16's bytes, the expert banks'
// slots sized from them; GGUF cannot hold them, so --write-gguf refuses before generating.
TEST(SyntheticCheckpoint, Fp8AndNvfp4ExpertsLoadRunAndSizeTheBanks) {
  EXPECT_EQ(parse_synthetic_weight_type("fp8", "--expert-weight-type"), DType::F8_E4M3_B32);
  EXPECT_EQ(parse_synthetic_weight_type("FP8"), DType::F8_E4M3_B32);
  EXPECT_EQ(parse_synthetic_weight_type("nvfp4"), DType::NVFP4_G64);
  EXPECT_EQ(parse_synthetic_weight_type("f8_e4m3_b16"), DType::F8_E4M3_B16);
  EXPECT_EQ(parse_synthetic_weight_type("NVFP4_G16"), DType::NVFP4_G16);
  try {
    parse_synthetic_weight_type("fp9", "--expert-weight-type");
    ADD_FAILURE() << "fp9 accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    // The names --weight-type documents, not the stored forms' internal ones.
    for (const char* name : {"--expert-weight-type fp9", "MXFP4", "fp8 (E4M3", "nvfp4 (ModelOpt"})
      EXPECT_NE(m.find(name), std::string::npos) << name << " not in: " << m;
    for (const char* name : {"F8_E4M3_B32", "F8_E4M3_B16", "NVFP4_G64", "NVFP4_G16"})
      EXPECT_EQ(m.find(name), std::string::npos) << name << " in: " << m;
  }
  EXPECT_THROW(parse_synthetic_weight_type("f8_e4m3"), Error);  // per-element FP8 without scales: no
  EXPECT_STREQ(user_type_name(DType::F8_E4M3_B16), "fp8");
  EXPECT_STREQ(user_type_name(DType::NVFP4_G64), "nvfp4");
  EXPECT_STREQ(user_type_name(DType::NVFP4), "NVFP4");  // GGUF's own type keeps its name

  auto run = [](const SyntheticSpec& s, MoeStrategy strategy, int64_t* slot_bytes) {
    EngineOptions eo = small_engine();
    eo.moe.strategy = strategy;
    Engine e(std::make_unique<SyntheticCheckpoint>(s), std::make_unique<CpuOps>(1), eo);
    if (slot_bytes) *slot_bytes = e.moe_report().value().slot_bytes;
    return generate(e, {greedy(ids(20, 512, 3), 4)})[0];
  };
  auto expert_bytes = [](const SyntheticCheckpoint& c) {
    int64_t b = 0;
    for (const TensorInfo& t : c.tensors())
      if (t.name.find("_exps.") != std::string::npos) b += t.bytes;
    return b;
  };
  SyntheticSpec bf = tiny(DType::BF16);
  const int64_t bf_bytes = expert_bytes(SyntheticCheckpoint(bf));
  int64_t bf_slot = 0;
  const GenerateResult ref = run(bf, MoeStrategy::kOffload, &bf_slot);
  auto logit_rms = [](const GenerateResult& r) {
    double ss = 0;
    for (float v : r.step_logits) ss += static_cast<double>(v) * v;
    return std::sqrt(ss / static_cast<double>(r.step_logits.size()));
  };
  const double ref_rms = logit_rms(ref);
  ASSERT_GT(ref_rms, 0.0);
  struct Case {
    DType weights, experts;
    double ratio;  // expert bytes / BF16's
  };
  for (const Case c : {Case{DType::BF16, DType::F8_E4M3_B32, 36.0 / 64}, Case{DType::BF16, DType::NVFP4_G64, 40.0 / 128},
                       Case{DType::F8_E4M3_B32, DType::F8_E4M3_B32, 36.0 / 64},
                       Case{DType::NVFP4_G64, DType::NVFP4_G64, 40.0 / 128}}) {
    SCOPED_TRACE(std::string(dtype_name(c.weights)) + " + experts " + dtype_name(c.experts));
    SyntheticSpec s = tiny(c.weights);
    s.expert_type = c.experts;
    const SyntheticCheckpoint ck(s);
    EXPECT_EQ(ck.get("blk.1.ffn_down_exps.weight").dtype, c.experts);
    EXPECT_EQ(ck.get("blk.1.attn_q.weight").dtype, c.weights);
    EXPECT_EQ(ck.get("token_embd.weight").dtype, DType::BF16);  // as FP8 / NVFP4 checkpoints keep them
    EXPECT_EQ(ck.get("output.weight").dtype, DType::BF16);
    EXPECT_DOUBLE_EQ(static_cast<double>(expert_bytes(ck)) / static_cast<double>(bf_bytes), c.ratio);
    try {
      require_synthetic_gguf(s);
      ADD_FAILURE() << "GGUF accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
      // FP8: GGUF has no such type; NVFP4: GGUF has one, which the generator does not write.
      const bool fp8 = c.weights == DType::F8_E4M3_B32 || c.experts == DType::F8_E4M3_B32;
      EXPECT_NE(std::string(e.what()).find(fp8 ? "is fp8 (GGUF has no FP8 type)"
                                               : "is nvfp4 (the generator does not write GGUF's NVFP4 type"),
                std::string::npos) << e.what();
    }
    EXPECT_THROW(ck.write_gguf(testing::scratch_path("fp8.gguf")), Error);
    int64_t slot = 0;
    const GenerateResult fused = run(s, MoeStrategy::kFused, nullptr), off = run(s, MoeStrategy::kOffload, &slot);
    ASSERT_EQ(fused.tokens.size(), 4u);
    for (float v : fused.step_logits) ASSERT_TRUE(std::isfinite(v));
    // Same weight magnitude as BF16's: the logits' scale stays within a factor 2 of the BF16 model's.
    EXPECT_NEAR(logit_rms(fused) / ref_rms, 1.0, 0.5);
    EXPECT_EQ(off.tokens, fused.tokens);
    EXPECT_EQ(off.step_logits, fused.step_logits);
    EXPECT_NEAR(static_cast<double>(slot) / static_cast<double>(bf_slot), c.ratio, 0.02) << slot << " vs " << bf_slot;
  }
}

/** Per-layer share of router selections, with the expert ranks, over one 256-token prefill. */
struct RoutingShares {
  std::vector<std::vector<double>> share;  // [layer][expert]
  std::vector<std::vector<int32_t>> rank;  // [layer][expert]
};

RoutingShares measure_routing(double skew) {
  auto ckpt = std::make_unique<SyntheticCheckpoint>(tiny(DType::F32, skew, 3));
  const SyntheticCheckpoint* synth = ckpt.get();
  auto engine = make_engine(std::move(ckpt));
  RouteCounter counter(*engine);
  EXPECT_TRUE(counter.available());
  counter.attach();
  prefill_logits(*engine, ids(256, 512, 99));
  counter.detach();
  EXPECT_EQ(counter.layer_steps(), 2);
  RoutingShares r;
  for (int64_t l = 0; l < 2; ++l) {
    const std::vector<int64_t>& c = counter.counts()[static_cast<size_t>(l)];
    const double total = static_cast<double>(std::accumulate(c.begin(), c.end(), int64_t{0}));
    EXPECT_EQ(total, 256.0 * 2);  // top-2 of every token
    std::vector<double> s;
    for (int64_t x : c) s.push_back(static_cast<double>(x) / total);
    r.share.push_back(s);
    r.rank.push_back(synth->expert_ranks(l));
  }
  return r;
}

TEST(SyntheticCheckpoint, RouterSkewMakesLowRanksPopularLikeZipf) {
  const RoutingShares uniform = measure_routing(0.0), skewed = measure_routing(1.5);
  for (size_t l = 0; l < 2; ++l) {
    const auto& u = uniform.share[l];
    const auto& s = skewed.share[l];
    const auto& rank = skewed.rank[l];
    // Uniform: every expert near 1/8 of the selections.
    EXPECT_LT(*std::max_element(u.begin(), u.end()), 0.22) << "layer " << l;
    EXPECT_GT(*std::min_element(u.begin(), u.end()), 0.04) << "layer " << l;
    // Zipf 1.5 over a permutation: the rank-1 expert is the most popular, far above 1/8, and the
    // shares fall with the rank (rank 1 > rank 2 > rank 4 > rank 8).
    std::vector<double> by_rank(9, 0);
    for (size_t e = 0; e < 8; ++e) by_rank[static_cast<size_t>(rank[e])] = s[e];
    EXPECT_GT(by_rank[1], 0.3) << "layer " << l;
    EXPECT_GT(by_rank[1], by_rank[2]);
    EXPECT_GT(by_rank[2], by_rank[4]);
    EXPECT_GT(by_rank[4], by_rank[8]);
    EXPECT_LT(by_rank[8], 0.06);
  }
  // The permutation differs between layers (seeded per layer).
  EXPECT_NE(skewed.rank[0], skewed.rank[1]);
}

}  // namespace
}  // namespace ft
