// NVFP4 checkpoints on the CUDA backend (issue 36): the qwen3_moe and deepseek_v3 fixtures quantized
// here to ModelOpt's NVFP4 layout (U8 `weight`, F8_E4M3 `weight_scale` per 16 values, F32
// `weight_scale_2`) and to compressed-tensors' nvfp4-pack-quantized (`weight_packed`,
// `weight_global_scale` dividing the block scales) load on CUDA as NVFP4_G64 / NVFP4_G16 (no longer
// refused) and, under the fused and offload strategies, give the CPU backend's logits on the same file
// within 2e-2 relative L2 (F32 activations) and the same argmax where the CPU's top-2 margin exceeds 0.1,
// for the prompt (prefill kernels) and the decode steps (GEMVs) of a greedy generation. deepseek_v3 has NVFP4_G16 rows (MLA's q_lora_rank 48, the experts' down
// K = 32). The CPU backend equals the dequantized model bit for bit (tests/model/nvfp4_checkpoint_test).
#include <filesystem>
#include <fstream>

#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "backend/op_harness.h"
#include "model/fixture_util.h"
#include "quant/nvfp4.h"
#include "quant/quant.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

/** Writes `dir` (config.json + model.safetensors): `fixture` with every 2-D "*_proj*.weight" in NVFP4,
 *  ModelOpt's layout or (compressed) compressed-tensors'. */
void write_nvfp4(const std::string& dir, const std::string& fixture, bool compressed) {
  const std::string src = shared_dir() + "/fixtures/hf/" + fixture;
  auto ckpt = open_checkpoint(src);
  std::vector<std::vector<uint8_t>> keep;
  auto bytes = [&](const void* p, size_t n) {
    keep.emplace_back(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    return keep.back().data();
  };
  std::vector<SafetensorsTensor> out;
  for (const TensorInfo& t : ckpt->tensors()) {
    if (t.shape.size() != 2 || t.name.find("_proj") == std::string::npos || !t.name.ends_with(".weight")) {
      out.push_back({t.name, t.dtype, t.shape, t.data});
      continue;
    }
    const int64_t N = t.shape[0], K = t.shape[1];
    std::vector<float> x(static_cast<size_t>(N * K));
    dequantize_row(t.dtype, t.data, x.data(), N * K);
    std::vector<uint8_t> packed(static_cast<size_t>(N * K / 2)), scales(static_cast<size_t>(N * K / 16));
    float g = 0;
    nvfp4_quantize_modelopt(x.data(), N, K, packed.data(), scales.data(), &g);
    const std::string module = t.name.substr(0, t.name.size() - 7);
    const float inv = 1.0f / g;
    out.push_back({compressed ? module + ".weight_packed" : t.name, DType::U8, {N, K / 2},
                   bytes(packed.data(), packed.size())});
    out.push_back({module + ".weight_scale", DType::F8_E4M3, {N, K / 16}, bytes(scales.data(), scales.size())});
    if (compressed) out.push_back({module + ".weight_global_scale", DType::F32, {1}, bytes(&inv, 4)});
    else out.push_back({module + ".weight_scale_2", DType::F32, {}, bytes(&g, 4)});
  }
  json config = read_json_file(src + "/config.json");
  config["quantization_config"] =
      compressed
          ? json::parse(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
              "quantization_status": "compressed", "ignore": ["lm_head", "re:.*mlp\\.gate$"], "config_groups":
              {"group_0": {"targets": ["Linear"], "format": "nvfp4-pack-quantized", "input_activations": {"num_bits": 4,
              "type": "float", "strategy": "tensor_group", "group_size": 16, "dynamic": "local", "symmetric": true},
              "output_activations": null, "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group",
              "group_size": 16, "symmetric": true, "dynamic": false, "observer": "minmax", "actorder": null,
              "block_structure": null}}}})")
          : json::parse(R"({"config_groups": {"group_0": {"input_activations": {"dynamic": false, "num_bits": 4,
              "type": "float", "group_size": 16}, "weights": {"dynamic": false, "num_bits": 4, "type": "float",
              "group_size": 16}, "targets": ["Linear"]}}, "ignore": ["lm_head", "model.layers.*.mlp.gate"],
              "quant_algo": "NVFP4", "producer": {"name": "modelopt", "version": "0.34.1"}, "quant_method": "modelopt"})");
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << config.dump(2);
  write_safetensors(dir + "/model.safetensors", out);
}

/** Rows of got vs want ([rows, V]): max rel L2; counts argmax checks / flips where want's top-2 margin > 0.1. */
double compare(const std::vector<float>& got, const std::vector<float>& want, int64_t V, int* checked, int* flipped) {
  EXPECT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t r = 0; (r + 1) * V <= std::min(got.size(), want.size()); ++r) {
    const float* g = got.data() + r * V;
    const float* w = want.data() + r * V;
    worst = std::max(worst, row_rel_l2(g, w, V));
    int64_t best = 0, second = -1, gbest = 0;
    for (int64_t i = 1; i < V; ++i) {
      if (w[i] > w[best]) second = best, best = i;
      else if (second < 0 || w[i] > w[second]) second = i;
      if (g[i] > g[gbest]) gbest = i;
    }
    if (w[best] - w[second] > 0.1f) *checked += 1, *flipped += gbest != best;
  }
  return worst;
}

class CudaNvfp4Checkpoint : public ::testing::TestWithParam<std::tuple<std::string, bool>> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible (or this build has no CUDA)";
      GTEST_SKIP() << "no CUDA device visible";
    }
  }
};

TEST_P(CudaNvfp4Checkpoint, LoadsAndMatchesTheCpu) {
  const auto [fixture, compressed] = GetParam();
  const std::string name = fixture + (compressed ? "_compressed_tensors" : "_modelopt");
  const std::string dir = scratch_path("cuda_nvfp4_" + name);
  write_nvfp4(dir, fixture, compressed);
  const std::vector<RefCase> cases = read_reference(shared_dir() + "/fixtures/hf/" + fixture);
  ASSERT_EQ(cases.size(), 2u);
  auto cpu = Engine::load(dir, small_engine_options());
  for (MoeStrategy strategy : {MoeStrategy::kFused, MoeStrategy::kOffload}) {
    EngineOptions o = small_engine_options();
    o.moe.strategy = strategy;
    if (strategy == MoeStrategy::kOffload) o.moe.cache = {CacheSizeMode::kSlots, 16, 0.0};  // misses: slot copies
    Engine gpu(open_checkpoint(dir), make_cuda_ops(0, DType::F32), o);
    const int64_t V = gpu.config().n_vocab;
    for (const RefCase& c : cases) {
      const std::string tag = name + " " + c.name + (strategy == MoeStrategy::kFused ? " fused" : " offload");
      SCOPED_TRACE(tag);
      GenerateRequest req = greedy_request(c.input_ids, static_cast<int32_t>(c.greedy.size()));
      req.step_logits = true;
      const GenerateResult g = generate(gpu, {req})[0];
      // The prompt (prefill kernels) and the decode steps (GEMVs), each against a CPU prefill of the
      // same tokens: the prompt + the tokens the GPU generated (free-running text is not compared:
      // near-ties may flip).
      std::vector<int32_t> own = c.input_ids;
      own.insert(own.end(), g.tokens.begin(), g.tokens.end() - 1);
      const GenerateResult r = generate(*cpu, {greedy_request(own, 1)})[0];
      const std::vector<float> prompt(r.prompt_logits.begin(),
                                      r.prompt_logits.begin() + static_cast<std::ptrdiff_t>(c.input_ids.size() * V));
      const std::vector<float> steps(r.prompt_logits.end() - static_cast<std::ptrdiff_t>(g.step_logits.size()),
                                     r.prompt_logits.end());  // token i's logits: row prompt - 1 + i
      int checked = 0, flipped = 0, checked2 = 0, flipped2 = 0;
      const double e_prompt = compare(g.prompt_logits, prompt, V, &checked, &flipped);
      const double e_steps = compare(g.step_logits, steps, V, &checked2, &flipped2);
      report("nvfp4", tag + " prompt", e_prompt);
      report("nvfp4", tag + " decode", e_steps);
      EXPECT_LE(e_prompt, 2e-2);
      EXPECT_LE(e_steps, 2e-2);
      EXPECT_EQ(flipped, 0) << "prompt argmax differs at " << flipped << " of " << checked;
      EXPECT_EQ(flipped2, 0) << "decode argmax differs at " << flipped2 << " of " << checked2;
      EXPECT_GT(checked + checked2, 0);
    }
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaNvfp4Checkpoint,
                         ::testing::Combine(::testing::Values("qwen3_moe", "deepseek_v3"), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_compressed" : "_modelopt");
                         });

}  // namespace
}  // namespace ft::testing
