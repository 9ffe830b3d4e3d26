// End to end on the CUDA backend: every Hugging Face fixture of the CPU-inference list
// (shared/fixtures/hf) through the Engine with CudaOps.
//  - prompt logits of every position match reference.json within 2e-2 relative L2 (prefill path);
//  - teacher-forced on prompt + the 16 reference greedy tokens, the logits match the CPU backend's
//    fp32 logits within 2e-2, with the same argmax wherever the CPU's top-2 margin exceeds 0.1;
//  - the logits of 16 incremental decode steps (decode kernels: GEMV, split-K attention, per-pair
//    MoE) match a CPU prefill of the same tokens within 2e-2 (free-running text is not compared:
//    bf16 may flip near-ties).
// Asserted with the default F32 activations; with BF16 activations only for dense models (MoE
// routers flip near-ties on ~1% activation error and the flipped token's error reaches every later
// position through attention) without linear attention (a Gated DeltaNet's state integrates the
// rounding of every bf16 q, k, v it saw: the tiny random qwen3_5 ends at ~9e-2 in BF16 and 2.2e-3 in
// F32 on the H100/H200), nor gemma4 (its tiny random fixture, every sublayer output RMS-normalised and
// attention at scale 1, is ~5x as sensitive to activation rounding as llama's: bf16 storage alone, no
// CUDA kernel involved, gives 0.12 max / 0.036 median relative L2 on the CPU, which
// tests/model/bf16_emulation_test.cpp asserts), those numbers being reported.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <tuple>

#include "formats/checkpoint.h"
#include "backend/op_harness.h"
#include "model/fixture_util.h"

namespace ft::testing {
namespace {

/** (fixture name, activation dtype of the CUDA backend: "bf16" or "f32"). */
class CudaFixture : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  std::string model() const { return std::get<0>(GetParam()); }
  DType act() const { return std::get<1>(GetParam()) == "f32" ? DType::F32 : DType::BF16; }
  std::string tag() const { return model() + "/" + std::get<1>(GetParam()); }
  /** Whether the 2e-2 bounds are asserted (see the file comment). */
  bool strict() const {
    const std::string m = model();
    const bool moe = m.find("moe") != std::string::npos || m == "mixtral" || m == "minimax_m2" || m == "deepseek_v3" ||
                     m == "gpt_oss" || m == "qwen3_next" || m == "qwen4_exp" || m == "deepseek_v4";
    const bool linear = m.find("qwen3_5") != std::string::npos || m == "qwen3_next" || m == "qwen4_exp";
    const bool rounding_sensitive = m == "gemma4";  // bf16 storage alone: see the file comment
    return act() == DType::F32 || (!moe && !linear && !rounding_sensitive);
  }
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
      GTEST_SKIP() << "no CUDA device visible (set FT_REQUIRE_GPU=1 to make this a failure)";
    }
  }
};

/** Rows of `got` vs `want` ([rows, V]) from row `first`: max rel L2; counts argmax checks/mismatches
 *  where want's top-2 margin exceeds 0.1. */
double compare_rows(const std::vector<float>& got, const std::vector<float>& want, int64_t V, int* checked,
                    int* flipped, std::string* stats = nullptr) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  std::vector<double> errs;
  const int64_t rows = static_cast<int64_t>(std::min(got.size(), want.size())) / V;
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = got.data() + r * V;
    const float* w = want.data() + r * V;
    errs.push_back(row_rel_l2(g, w, V));
    worst = std::max(worst, errs.back());
    int64_t best = 0, second = -1, gbest = 0;
    for (int64_t i = 1; i < V; ++i) {
      if (w[i] > w[best]) second = best, best = i;
      else if (second < 0 || w[i] > w[second]) second = i;
      if (g[i] > g[gbest]) gbest = i;
    }
    if (w[best] - w[second] > 0.1f) {
      ++*checked;
      if (gbest != best) ++*flipped;
    }
  }
  if (stats && !errs.empty()) {
    int over = 0, first = -1;
    for (size_t r = 0; r < errs.size(); ++r)
      if (errs[r] > 2e-2) over += 1, first = first < 0 ? static_cast<int>(r) : first;
    std::sort(errs.begin(), errs.end());
    *stats = "rows>2e-2 " + std::to_string(over) + "/" + std::to_string(errs.size()) +
             (first >= 0 ? " first " + std::to_string(first) : "") + " median " +
             std::to_string(errs[errs.size() / 2]).substr(0, 7);
  }
  return worst;
}

/** `o` with the KV cache in the activation dtype `act` (--kv-cache-dtype f32 or bf16) rather than
 *  auto's bf16: with F32 activations the bounds above hold for an f32 path throughout. bf16 KV pages
 *  move the tiny random MoE fixtures' routing (their top-k margins are ~1e-3): measured on an H100,
 *  qwen3_moe's long prompt 0.37 relative L2 with bf16 KV against 2.1e-3 with f32, dense models 2-6e-3. */
EngineOptions kv_as_activations(EngineOptions o, DType act) {
  o.kv_cache_dtype = act == DType::F32 ? KvCacheDtype::kF32 : KvCacheDtype::kBf16;
  return o;
}

TEST_P(CudaFixture, MatchesReferenceAndCpu) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + model();
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u) << "missing fixture " << dir;
  const EngineOptions opts = small_engine_options();
  Engine gpu(open_checkpoint(dir), make_cuda_ops(0, act()), kv_as_activations(opts, act()));
  auto cpu = Engine::load(dir, opts);
  const int64_t V = gpu.config().n_vocab;
  for (const RefCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int32_t n_gen = static_cast<int32_t>(c.greedy.size());
    // 1. prompt logits vs the reference
    GenerateRequest req = greedy_request(c.input_ids, n_gen);
    req.step_logits = true;
    const GenerateResult g = generate(gpu, {req})[0];
    int checked = 0, flipped = 0;
    std::string st_ref, st_tf, st_dec;
    const double e_ref = compare_rows(g.prompt_logits, c.logits, V, &checked, &flipped, &st_ref);
    if (strict()) {
      EXPECT_LE(e_ref, 2e-2);
    }
    if (strict()) {
      EXPECT_EQ(flipped, 0) << "argmax differs from the reference at " << flipped << " of " << checked << " positions";
    }
    // 2. teacher-forced on prompt + reference greedy tokens vs the CPU backend
    std::vector<int32_t> full = c.input_ids;
    full.insert(full.end(), c.greedy.begin(), c.greedy.end());
    const auto gf = generate(gpu, {greedy_request(full, 1)})[0];
    const auto cf = generate(*cpu, {greedy_request(full, 1)})[0];
    int checked2 = 0, flipped2 = 0;
    const double e_tf = compare_rows(gf.prompt_logits, cf.prompt_logits, V, &checked2, &flipped2, &st_tf);
    if (strict()) {
      EXPECT_LE(e_tf, 2e-2);
    }
    if (strict()) {
      EXPECT_EQ(flipped2, 0) << "argmax differs from the CPU at " << flipped2 << " of " << checked2 << " positions";
    }
    // 3. decode steps vs a CPU prefill of the tokens the GPU generated. DeepSeek-V4's indexer ranks the
    // compressed entries that exist at a step: a decode step ranks fewer candidates than a prefill row
    // of the same position (the rest at -inf), and torch.topk's order among exactly tied scores (ReLU
    // zeros) depends on that count, so decode and prefill may keep different entries (transformers
    // too; tests/model/deepseek_v4_test.cpp). Its decode steps are compared with the CPU's decode
    // steps instead, up to the first token where the two runs differ.
    std::vector<float> tail;
    std::vector<float> gsteps = g.step_logits;
    if (model() == "deepseek_v4") {
      const GenerateResult cd = generate(*cpu, {req})[0];
      size_t n = 0;
      while (n < g.tokens.size() && n < cd.tokens.size() && g.tokens[n] == cd.tokens[n]) ++n;
      n = std::min(n + 1, std::min(g.tokens.size(), cd.tokens.size()));  // the first differing step's logits too
      gsteps.resize(n * static_cast<size_t>(V));
      tail.assign(cd.step_logits.begin(), cd.step_logits.begin() + static_cast<std::ptrdiff_t>(n * V));
    } else {
      std::vector<int32_t> own = c.input_ids;
      own.insert(own.end(), g.tokens.begin(), g.tokens.end() - 1);
      const auto co = generate(*cpu, {greedy_request(own, 1)})[0];
      tail.assign(co.prompt_logits.end() - static_cast<std::ptrdiff_t>(g.step_logits.size()), co.prompt_logits.end());
    }
    int checked3 = 0, flipped3 = 0;
    const double e_dec = compare_rows(gsteps, tail, V, &checked3, &flipped3, &st_dec);
    if (strict()) {
      EXPECT_LE(e_dec, 2e-2);
    }
    if (strict()) {
      EXPECT_EQ(flipped3, 0) << "decode argmax differs from the CPU at " << flipped3 << " of " << checked3;
    }
    int same = 0;
    for (size_t i = 0; i < c.greedy.size() && i < g.tokens.size(); ++i) same += g.tokens[i] == c.greedy[i];
    report("fixture " + tag(), c.name + " prompt vs reference (" + st_ref + ")", e_ref);
    report("fixture " + tag(), c.name + " teacher-forced vs cpu (" + st_tf + ")", e_tf);
    report("fixture " + tag(), c.name + " decode steps vs cpu (greedy " + std::to_string(same) + "/16, " + st_dec + ")", e_dec);
  }
}

/** Named intermediates of a prefill of the `short` case on both backends, compared per (name,
 *  layer): the first layer where the GPU drifts is where a kernel (or bf16 itself) loses accuracy. */
TEST_P(CudaFixture, IntermediatesTrackCpu) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + model();
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u);
  const EngineOptions opts = small_engine_options();
  Engine gpu(open_checkpoint(dir), make_cuda_ops(0, act()), kv_as_activations(opts, act()));
  auto cpu = Engine::load(dir, opts);
  using Dump = std::vector<std::pair<std::string, std::vector<float>>>;
  Dump dg, dc;
  auto hook = [](Ops& ops, Dump& d) {
    return [&ops, &d](const std::string& name, int64_t layer, const Tensor& t) {
      std::vector<float> v(static_cast<size_t>(t.numel()));
      if (t.dtype == DType::I32) {  // ids (DeepSeek-V4's indexer_ids): each row a set, compared sorted
        std::vector<int32_t> ids(v.size());
        ops.copy(t, Tensor(ids.data(), DType::I32, t.shape.data(), t.ndim));
        const int64_t cols = t.cols();
        for (size_t r = 0; cols > 0 && r < ids.size(); r += static_cast<size_t>(cols))
          std::sort(ids.begin() + static_cast<std::ptrdiff_t>(r), ids.begin() + static_cast<std::ptrdiff_t>(r + cols));
        std::copy(ids.begin(), ids.end(), v.begin());
      } else {
        ops.copy(t, Tensor(v.data(), DType::F32, t.shape.data(), t.ndim));
      }
      d.push_back({name + "." + std::to_string(layer) + "/" + std::to_string(t.cols()), std::move(v)});
    };
  };
  gpu.set_dump_hook(hook(gpu.ops(), dg));
  cpu->set_dump_hook(hook(cpu->ops(), dc));
  for (const RefCase& c : cases) {
  dg.clear();
  dc.clear();
  generate(gpu, {greedy_request(c.input_ids, 1)});
  generate(*cpu, {greedy_request(c.input_ids, 1)});
  ASSERT_EQ(dg.size(), dc.size());
  for (size_t i = 0; i < dg.size() && i < dc.size(); ++i) {
    ASSERT_EQ(dg[i].first, dc[i].first);
    const std::string& key = dg[i].first;
    const int64_t cols = std::stoll(key.substr(key.rfind('/') + 1));
    int c1 = 0, f1 = 0;
    std::string st;
    const double worst = compare_rows(dg[i].second, dc[i].second, cols, &c1, &f1, &st);
    const double all = rel_l2(dg[i].second, dc[i].second);
    report("layers " + tag(), c.name + " " + key.substr(0, key.rfind('/')) + " (max row " +
                                  std::to_string(worst).substr(0, 6) + ", " + st + ")", all);
    if (strict()) {
      EXPECT_LE(all, 5e-2) << key;
    }
  }
  }
}

/** A fixture committed under tests/model/fixtures/<name> (a quantized checkpoint with transformers'
 *  logits on its dequantized weights) on CUDA with F32 activations, fused and offload with the
 *  smallest expert cache (16 slots: 2 x 8 experts): prompt logits within 2e-2, no greedy flips, and
 *  the reference's greedy tokens. */
void expect_repo_fixture_on_cuda(const std::string& name) {
  if (cuda_device_count() == 0) {
    if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
    GTEST_SKIP() << "no CUDA device visible";
  }
  const std::string dir = source_dir() + "/tests/model/fixtures/" + name;
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u) << "missing fixture " << dir;
  for (MoeStrategy strategy : {MoeStrategy::kFused, MoeStrategy::kOffload}) {
    EngineOptions o = kv_as_activations(small_engine_options(), DType::F32);
    o.moe.strategy = strategy;
    if (strategy == MoeStrategy::kOffload) o.moe.cache = {CacheSizeMode::kSlots, 16, 0.0};
    Engine gpu(open_checkpoint(dir), make_cuda_ops(0, DType::F32), o);
    const int64_t V = gpu.config().n_vocab;
    for (const RefCase& c : cases) {
      const std::string tag = c.name + (strategy == MoeStrategy::kFused ? " fused" : " offload");
      SCOPED_TRACE(tag);
      const GenerateResult g = generate(gpu, {greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()))})[0];
      int checked = 0, flipped = 0;
      const double err = compare_rows(g.prompt_logits, c.logits, V, &checked, &flipped);
      report(name, tag, err);
      EXPECT_LE(err, 2e-2);
      EXPECT_EQ(flipped, 0) << "of " << checked;
      EXPECT_EQ(g.tokens, c.greedy);
    }
  }
}

TEST(CudaFixtureMxfp4, GptOssMxfp4MatchesTransformers) {
  // gpt_oss_mxfp4: MXFP4 experts in OpenAI's layout, transformers' logits with Mxfp4Config(dequantize=
  // True); the experts stay MXFP4 in the resident weights (fused) and in the expert cache's slots
  // (offload: copied from the host banks), decoded in the kernels.
  expect_repo_fixture_on_cuda("gpt_oss_mxfp4");
}

TEST(CudaFixtureFp8, Qwen3MoeFp8MatchesTransformers) {
  // qwen3_moe_fp8: DeepSeek's / Qwen's FP8 layout (E4M3 weights with a float32 scale_inv per
  // [128, 128] tile); dense and expert weights stay F8_E4M3_B32 / F8_E4M3_B16 on the device (fused) and
  // in the expert cache's slots (offload), decoded in the kernels.
  expect_repo_fixture_on_cuda("qwen3_moe_fp8");
}

TEST(CudaFixtureFp8, DeepseekV3Fp8MatchesTransformers) {
  // deepseek_v3_fp8 (tests/model/gen_quantized_moe.py fp8): MLA's projections and every expert in FP8
  // on the device (fused) and in the expert cache's slots (offload).
  expect_repo_fixture_on_cuda("deepseek_v3_fp8");
}

TEST(CudaFixtureNvfp4, ModelOptNvfp4MatchesTransformers) {
  // {qwen3_moe,deepseek_v3}_nvfp4 (tests/model/gen_quantized_moe.py nvfp4): ModelOpt NVFP4 weights kept
  // as NVFP4_G64 / G16 on the device and in the expert cache's slots, decoded in the kernels.
  expect_repo_fixture_on_cuda("qwen3_moe_nvfp4");
  expect_repo_fixture_on_cuda("deepseek_v3_nvfp4");
}

TEST(CudaFixtureDeepseekV4Yarn, SlidingLayersAndYarnMatchTransformers) {
  // deepseek_v4_yarn (tests/model/gen_deepseek_v4_yarn.py): DeepSeek-V4-Flash's two leading
  // sliding_attention layers (main RoPE) and YaRN on the compressed layers' RoPE (attention factor on
  // cos / sin), fused and offload. Skipped until the generated fixture is committed.
  if (!std::filesystem::exists(source_dir() + "/tests/model/fixtures/deepseek_v4_yarn/reference.json"))
    GTEST_SKIP() << "tests/model/fixtures/deepseek_v4_yarn is missing (run tests/model/gen_deepseek_v4_yarn.py)";
  expect_repo_fixture_on_cuda("deepseek_v4_yarn");
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaFixture,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "qwen3_tied", "qwen3_moe",
                                                              "qwen3_moe_64e", "mixtral", "qwen2_moe", "olmoe",
                                                              "glm4_moe", "minimax_m2", "deepseek_v3", "gpt_oss",
                                                              "qwen3_next", "qwen3_5", "qwen3_5_moe", "qwen4_exp",
                                                              "deepseek_v4", "gemma4"),
                                            ::testing::Values("bf16", "f32")));

}  // namespace
}  // namespace ft::testing
