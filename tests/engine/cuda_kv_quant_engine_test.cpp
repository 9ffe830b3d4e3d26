// --kv-cache-dtype fp8 / q8_0 through the Engine on CUDA (issue 39) against the CPU backend with the
// same dtype, F32 activations on both: qwen3 (full attention, per-head QK-norm: the unfused calls over
// quantized pages), gpt_oss (sliding-window layers with sinks, MoE) and llama; teacher-forced on prompt
// + the reference's greedy tokens (prefill: the general kernel), and the logits of the GPU's own greedy
// decode steps (the decode kernel) against a CPU prefill of those tokens. gemma4 (narrower sliding
// layers read through kv_head_view) is reported, not asserted: its fixture moves 26% (fp8) / 4.5%
// (q8_0) at the median against f32 pages on the CPU, so one code that rounds the other way on the two
// backends shows at the 1e-3 level. deepseek_v3 (MLA: quantized latent and RoPE-key pages, read by
// attention_mla's CUDA-core kernel in decode and prefill) is asserted as the MoE fixtures are, and its
// GPU greedy tokens must equal the CPU's with the same KV dtype. deepseek_v4 and qwen4_exp (compressed
// KV: compress_kv, attention_compressed and attention_qsa over quantized key and value pages) are
// asserted as the MoE fixtures are.
//
// Tolerance. Both backends quantize with the same formula and rounding (tests/backend/cuda_kv_quant_test.cpp checks the
// codes and scales byte for byte given equal inputs), so the pages differ only where a K or V value
// computed in a different fp32 order (~1e-6 relative) falls on the other side of a rounding boundary:
// about 2e-6 / (1/16) = 3e-5 of the values for fp8, fewer for q8_0, i.e. rarely one or two values in
// these fixtures. The median row must stay within 2e-3 relative L2 (a wrong scale, block or code
// mapping moves every row by about the quantization error itself: 4-8e-2 for fp8, 1-2e-2 for q8_0 on
// these fixtures, kv_dtype_test.cpp); the rows above 2e-2 (where such a flipped code tips a router's
// near-tie, which gpt_oss's fixture does: its fp8 max against f32 is 1.6) are at most a tenth, and
// on dense qwen3 and llama none.
#include <algorithm>
#include <string>
#include <tuple>

#include "backend/op_harness.h"
#include "model/fixture_util.h"

namespace ft::testing {
namespace {

struct RowStats {
  double median = 0, max = 0;
  int over = 0, rows = 0;
};

RowStats row_stats(const std::vector<float>& got, const std::vector<float>& want, int64_t V) {
  EXPECT_EQ(got.size(), want.size());
  std::vector<double> errs;
  for (size_t r = 0; (r + 1) * V <= std::min(got.size(), want.size()); ++r)
    errs.push_back(row_rel_l2(got.data() + r * V, want.data() + r * V, V));
  RowStats s;
  if (errs.empty()) return s;
  s.rows = static_cast<int>(errs.size());
  for (double e : errs) s.over += e > 2e-2;
  std::sort(errs.begin(), errs.end());
  s.median = errs[errs.size() / 2], s.max = errs.back();
  return s;
}

/** (fixture, "fp8" or "q8_0"). */
class CudaKvDtypeFixture : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
      GTEST_SKIP() << "no CUDA device visible (set FT_REQUIRE_GPU=1 to make this a failure)";
    }
  }
  std::string model() const { return std::get<0>(GetParam()); }
  std::string dtype() const { return std::get<1>(GetParam()); }
  bool asserted() const { return model() != "gemma4"; }
  bool dense() const { return model() == "qwen3" || model() == "llama"; }

  void check(const RowStats& s, const std::string& what) {
    report("kv " + dtype() + " fixture " + model(),
           what + " (median " + std::to_string(s.median).substr(0, 8) + ", rows>2e-2 " + std::to_string(s.over) + "/" +
               std::to_string(s.rows) + ")",
           s.max);
    if (!asserted()) return;
    EXPECT_LE(s.median, 2e-3) << what;
    EXPECT_LE(s.over * 10, s.rows) << what;
    if (dense()) {
      EXPECT_LE(s.max, 2e-2) << what;
    }
  }
};

TEST_P(CudaKvDtypeFixture, LogitsMatchTheCpuBackendsQuantizedKv) {
  const std::string dir = shared_dir() + "/fixtures/hf/" + model();
  const std::vector<RefCase> cases = read_reference(dir);
  ASSERT_EQ(cases.size(), 2u) << "missing fixture " << dir;
  EngineOptions opts = small_engine_options();
  opts.kv_cache_dtype = kv_cache_dtype_from_name(dtype()).value();
  Engine gpu(open_checkpoint(dir), make_cuda_ops(0, DType::F32), opts);
  auto cpu = Engine::load(dir, opts);
  EXPECT_EQ(gpu.memory_plan().kv_bytes_per_token, cpu->memory_plan().kv_bytes_per_token);
  const int64_t V = gpu.config().n_vocab;
  for (const RefCase& c : cases) {
    SCOPED_TRACE(c.name);
    // teacher-forced on prompt + reference greedy tokens: prefill over quantized pages
    std::vector<int32_t> full = c.input_ids;
    full.insert(full.end(), c.greedy.begin(), c.greedy.end());
    const auto gf = generate(gpu, {greedy_request(full, 1)})[0];
    const auto cf = generate(*cpu, {greedy_request(full, 1)})[0];
    check(row_stats(gf.prompt_logits, cf.prompt_logits, V), c.name + " teacher-forced vs cpu");
    // the GPU's decode steps vs a CPU prefill of the same tokens
    GenerateRequest req = greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()));
    req.step_logits = true;
    const GenerateResult g = generate(gpu, {req})[0];
    std::vector<int32_t> own = c.input_ids;
    own.insert(own.end(), g.tokens.begin(), g.tokens.end() - 1);
    const auto co = generate(*cpu, {greedy_request(own, 1)})[0];
    const std::vector<float> tail(co.prompt_logits.end() - static_cast<std::ptrdiff_t>(g.step_logits.size()),
                                  co.prompt_logits.end());
    check(row_stats(g.step_logits, tail, V), c.name + " decode steps vs cpu");
    if (model() == "deepseek_v3") {  // MLA: greedy decode over quantized latents equals the CPU's
      const GenerateResult cg = generate(*cpu, {greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()))})[0];
      EXPECT_EQ(g.tokens, cg.tokens) << "greedy tokens, gpu vs cpu";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaKvDtypeFixture,
                         ::testing::Combine(::testing::Values("qwen3", "gpt_oss", "llama", "gemma4", "deepseek_v3",
                                                              "deepseek_v4", "qwen4_exp"),
                                            ::testing::Values("fp8", "q8_0")),
                         [](const auto& info) { return std::get<0>(info.param) + "_" + std::get<1>(info.param); });

}  // namespace
}  // namespace ft::testing
