// NVFP4 checkpoints (issue 36): the qwen3_moe, deepseek_v3 and llama fixtures quantized here to
// NVIDIA ModelOpt's NVFP4 layout (U8 `weight` of E2M1 codes two a byte, low nibble first; F8_E4M3
// `weight_scale` per 16 values; F32 `weight_scale_2` per tensor; F32 `input_scale`, ignored), with the
// config in config.json's flat form or in hf_quant_config.json, and in compressed-tensors'
// nvfp4-pack-quantized (`weight_packed`, `weight_global_scale` dividing the block scales). The weights load as NVFP4_G64 /
// NVFP4_G16 (no widening), decode to exactly the dequantized F32 weights, and the model's logits equal,
// bit for bit, those of the same model loaded from those F32 weights, through the resident experts
// (fused) and the CPU expert executor (cpu); excluded modules stay BF16.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fixture_util.h"
#include "backend/cpu/cpu_ops.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "model/weights.h"
#include "quant/fp8.h"
#include "quant/mxfp4.h"
#include "quant/nvfp4.h"
#include "quant/quant.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Nvfp4Layout {
  std::string name;
  json quantization_config;     // config.json's (null: none)
  json hf_quant_config;         // hf_quant_config.json (null: not written)
  std::string excluded_prefix;  // modules under it stay BF16 ("" for none)
  bool compressed_tensors = false;  // llm-compressor's names: weight_packed, weight_global_scale (divides)
};

/** Every "*_proj*.weight" matrix (attention, MLA, dense and expert MLPs); not routers, embeddings, lm_head. */
bool quantizable(const TensorInfo& t) {
  const std::string& n = t.name;
  return t.shape.size() == 2 && n.find("_proj") != std::string::npos && n.ends_with(".weight");
}

/** Writes `dir`/nvfp4 (the fixture with NVFP4 linear weights, those under lay.excluded_prefix left as
 *  stored) and `dir`/f32 (the same model with those weights dequantized to F32 as ModelOpt does:
 *  e2m1(q) * (float(weight_scale) * weight_scale_2), every other tensor as stored). */
void write_pair(const std::string& dir, const Nvfp4Layout& lay, const std::string& fixture) {
  const std::string src = shared_dir() + "/fixtures/hf/" + fixture;
  auto ckpt = open_checkpoint(src);
  std::vector<std::vector<uint8_t>> keep;
  auto bytes = [&](const void* p, size_t n) {
    keep.emplace_back(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n);
    return keep.back().data();
  };
  std::vector<SafetensorsTensor> q4, f32;
  for (const TensorInfo& t : ckpt->tensors()) {
    const bool excluded = !lay.excluded_prefix.empty() && t.name.rfind(lay.excluded_prefix, 0) == 0;
    if (!quantizable(t) || excluded) {
      q4.push_back({t.name, t.dtype, t.shape, t.data});
      f32.push_back({t.name, t.dtype, t.shape, t.data});
      continue;
    }
    const int64_t N = t.shape[0], K = t.shape[1];
    std::vector<float> x(N * K);
    dequantize_row(t.dtype, t.data, x.data(), N * K);
    std::vector<uint8_t> packed(N * K / 2), scales(N * K / 16);
    float g = 0;
    nvfp4_quantize_modelopt(x.data(), N, K, packed.data(), scales.data(), &g);
    std::vector<float> y(N * K);
    const float gs = 1.0f / g;  // compressed-tensors' weight_global_scale: the block scale is divided by it
    for (int64_t i = 0; i < N * K; ++i) {
      const uint8_t b = packed[i / 2];
      const float s = e4m3_to_f32(scales[i / 16]);
      y[i] = e2m1_to_f32(i % 2 == 0 ? b & 0x0f : b >> 4) * (lay.compressed_tensors ? s / gs : s * g);
    }
    // The quantization itself is sane: E2M1 with E4M3 scales of 16 keeps a matrix within ~15%.
    EXPECT_LE(row_rel_l2(y.data(), x.data(), N * K), 0.15) << t.name;
    const std::string module = t.name.substr(0, t.name.size() - 7);
    const float input_scale = 1.0f / 2688.0f;
    if (lay.compressed_tensors) {
      q4.push_back({module + ".weight_packed", DType::U8, {N, K / 2}, bytes(packed.data(), packed.size())});
      q4.push_back({module + ".weight_scale", DType::F8_E4M3, {N, K / 16}, bytes(scales.data(), scales.size())});
      q4.push_back({module + ".weight_global_scale", DType::F32, {1}, bytes(&gs, 4)});
      q4.push_back({module + ".input_global_scale", DType::F32, {1}, bytes(&input_scale, 4)});
    } else {
      q4.push_back({t.name, DType::U8, {N, K / 2}, bytes(packed.data(), packed.size())});
      q4.push_back({module + ".weight_scale", DType::F8_E4M3, {N, K / 16}, bytes(scales.data(), scales.size())});
      q4.push_back({module + ".weight_scale_2", DType::F32, {}, bytes(&g, 4)});
      q4.push_back({module + ".input_scale", DType::F32, {}, bytes(&input_scale, 4)});
    }
    f32.push_back({t.name, DType::F32, t.shape, bytes(y.data(), y.size() * 4)});
  }
  json config = read_json_file(src + "/config.json");
  for (const char* sub : {"/nvfp4", "/f32"}) fs::create_directories(dir + sub);
  std::ofstream(dir + "/f32/config.json") << config.dump(2);
  if (!lay.quantization_config.is_null()) config["quantization_config"] = lay.quantization_config;
  std::ofstream(dir + "/nvfp4/config.json") << config.dump(2);
  if (!lay.hf_quant_config.is_null()) std::ofstream(dir + "/nvfp4/hf_quant_config.json") << lay.hf_quant_config.dump(2);
  write_safetensors(dir + "/nvfp4/model.safetensors", q4);
  write_safetensors(dir + "/f32/model.safetensors", f32);
}

std::vector<Nvfp4Layout> layouts() {
  return {
      // config.json's flat form (ModelOpt 0.3x), layer 1's attention left in BF16 by a glob.
      {"flat", json::parse(R"({"config_groups": {"group_0": {"input_activations": {"dynamic": false, "num_bits": 4,
          "type": "float", "group_size": 16}, "weights": {"dynamic": false, "num_bits": 4, "type": "float",
          "group_size": 16}, "targets": ["Linear"]}}, "ignore": ["lm_head", "model.layers.*.mlp.gate",
          "model.layers.1.self_attn*"], "quant_algo": "NVFP4", "producer": {"name": "modelopt", "version": "0.34.1"},
          "quant_method": "modelopt"})"),
       nullptr, "model.layers.1.self_attn."},
      // hf_quant_config.json only (older exports), everything quantizable quantized.
      {"hf_quant_config", nullptr,
       json::parse(R"({"producer": {"name": "modelopt", "version": "0.19.0"}, "quantization": {"quant_algo": "NVFP4",
          "kv_cache_quant_algo": null, "group_size": 16, "exclude_modules": ["lm_head"]}})"),
       ""},
      // compressed-tensors' nvfp4-pack-quantized (llm-compressor), layer 0's MLP left in BF16 by a regex.
      {"compressed_tensors", json::parse(R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
          "quantization_status": "compressed", "kv_cache_scheme": null, "ignore": ["lm_head", "re:.*mlp\\.gate$",
          "re:model\\.layers\\.0\\.mlp\\..*"], "config_groups": {"group_0": {"targets": ["Linear"],
          "format": "nvfp4-pack-quantized", "input_activations": {"num_bits": 4, "type": "float", "strategy":
          "tensor_group", "group_size": 16, "dynamic": "local", "symmetric": true}, "output_activations": null,
          "weights": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16, "symmetric": true,
          "dynamic": false, "observer": "minmax", "actorder": null, "block_structure": null}}}})"),
       nullptr, "model.layers.0.mlp.", true},
  };
}

// qwen3_moe (attention + routed experts: gate/up K = 64 in NVFP4_G64, down K = 32 in NVFP4_G16),
// deepseek_v3 (MLA with q_lora_rank 48: NVFP4_G16 rows, a dense layer, shared experts) and llama (dense).
const char* const kFixtures[] = {"qwen3_moe", "deepseek_v3", "llama"};

class Nvfp4Checkpoint : public ::testing::TestWithParam<int> {};

TEST_P(Nvfp4Checkpoint, LogitsEqualTheDequantizedModel) {
  const Nvfp4Layout lay = layouts()[GetParam() % 3];
  const std::string fixture = kFixtures[GetParam() / 3];
  const std::string dir = scratch_path("nvfp4_" + fixture + "_" + lay.name);
  write_pair(dir, lay, fixture);
  // Bit for bit: the CPU backend dots NVFP4 rows by decoding them to the very floats the F32 file holds
  // (on every SIMD level: FT_CPU_SIMD=scalar / avx2 give the same).
  const std::string label = "nvfp4 " + fixture + " " + lay.name;
  const std::vector<MoeStrategy> strategies =
      fixture == "llama" ? std::vector{MoeStrategy::kFused} : std::vector{MoeStrategy::kFused, MoeStrategy::kCpu};
  expect_same_as_dequantized(dir + "/nvfp4", dir + "/f32", fixture, label, 0.0, strategies);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Nvfp4Checkpoint, ::testing::Range(0, 9), [](const auto& info) {
  return std::string(kFixtures[info.param / 3]) + "_" + layouts()[info.param % 3].name;
});

TEST(Nvfp4CheckpointLoader, WeightsStayNvfp4WithTheirScales) {
  // Dense and expert weights come out of the loader as NVFP4_G64 / NVFP4_G16 (5 / 6.5 bits a weight),
  // decoding to exactly the F32 checkpoint's values; excluded modules, the router and lm_head stay BF16.
  const std::string dir = scratch_path("nvfp4_loader");
  write_pair(dir, layouts()[0], "qwen3_moe");
  auto q4 = open_checkpoint(dir + "/nvfp4");
  auto f32 = open_checkpoint(dir + "/f32");
  CpuOps ops(1);
  WeightLoader ld(*q4, ops);
  EXPECT_EQ(ld.quant_config().method, QuantMethod::kNvfp4);
  const Tensor q = ld.get(layer_weight(0, "attn_q", "self_attn.q_proj"), {64, 64});
  EXPECT_EQ(q.dtype, DType::NVFP4_G64);
  EXPECT_EQ(q.bytes(), 64 * 40);
  expect_decodes_to(q, *f32, "model.layers.0.self_attn.q_proj.weight");
  const std::vector<Tensor> gate = ld.host_experts(1, "ffn_gate_exps", "mlp.experts.{}.gate_proj", 8, 32, 64);
  const std::vector<Tensor> down = ld.host_experts(1, "ffn_down_exps", "mlp.experts.{}.down_proj", 8, 64, 32);
  ASSERT_EQ(down.size(), 8u);
  for (int e = 0; e < 8; ++e) {
    EXPECT_EQ(gate[e].dtype, DType::NVFP4_G64);
    EXPECT_EQ(down[e].dtype, DType::NVFP4_G16);
    EXPECT_EQ(down[e].bytes(), 64 * 2 * 13);
    expect_decodes_to(gate[e], *f32, "model.layers.1.mlp.experts." + std::to_string(e) + ".gate_proj.weight");
    expect_decodes_to(down[e], *f32, "model.layers.1.mlp.experts." + std::to_string(e) + ".down_proj.weight");
  }
  EXPECT_EQ(ld.get(layer_weight(1, "attn_q", "self_attn.q_proj"), {64, 64}).dtype, DType::BF16);  // excluded
  EXPECT_EQ(ld.get(layer_weight(0, "ffn_gate_inp", "mlp.gate"), {8, 64}).dtype, DType::BF16);
  EXPECT_EQ(ld.get({"output.weight", "lm_head.weight"}, {512, 64}).dtype, DType::BF16);
  // The same tensor twice is repacked once.
  EXPECT_EQ(ld.host(layer_weight(0, "attn_q", "self_attn.q_proj"), {64, 64}).data, q.data);
  fs::remove_all(dir);
}

TEST(Nvfp4CheckpointLoader, StackedExpertsWithPerExpertGlobalScales) {
  // A stacked [E, N, K] NVFP4 weight with one weight_scale_2 per expert ([E]): each expert's rows carry
  // its own global scale.
  const std::string dir = scratch_path("nvfp4_stacked");
  fs::create_directories(dir);
  const int64_t E = 3, N = 4, K = 64;
  std::vector<uint8_t> packed(E * N * K / 2), scales(E * N * K / 16);
  for (size_t i = 0; i < packed.size(); ++i) packed[i] = static_cast<uint8_t>(i * 37 + 11);
  for (size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<uint8_t>(0x30 + i % 16);
  const float g[E] = {0.5f, 0.1f, 3.0f};
  const std::string w = "model.layers.0.mlp.experts.gate_proj.weight";
  write_safetensors(dir + "/model.safetensors",
                    {{w, DType::U8, {E, N, K / 2}, packed.data()},
                     {"model.layers.0.mlp.experts.gate_proj.weight_scale", DType::F8_E4M3, {E, N, K / 16}, scales.data()},
                     {"model.layers.0.mlp.experts.gate_proj.weight_scale_2", DType::F32, {E}, g}});
  json config = read_json_file(shared_dir() + "/fixtures/hf/qwen3_moe/config.json");
  config["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}};
  std::ofstream(dir + "/config.json") << config.dump(2);
  auto ckpt = open_checkpoint(dir);
  CpuOps ops(1);
  WeightLoader ld(*ckpt, ops);
  const Tensor t = ld.host({"", w}, {E, N, K});
  ASSERT_EQ(t.dtype, DType::NVFP4_G64);
  std::vector<float> got(E * N * K);
  dequantize_row(t.dtype, t.data, got.data(), E * N * K);
  for (int64_t i = 0; i < E * N * K; ++i) {
    const uint8_t b = packed[i / 2];
    const float want = e2m1_to_f32(i % 2 == 0 ? b & 0x0f : b >> 4) * (e4m3_to_f32(scales[i / 16]) * g[i / (N * K)]);
    ASSERT_EQ(got[i], want) << i;
  }
  fs::remove_all(dir);
}

TEST(Nvfp4CheckpointErrors, BadFilesAreRefusedNamingTheTensor) {
  const std::string dir = scratch_path("nvfp4_errors");
  ErrorCode code{};
  // A module the config leaves unquantized but stored as NVFP4.
  Nvfp4Layout lay = layouts()[0];
  lay.excluded_prefix = "";
  write_pair(dir, lay, "qwen3_moe");
  std::string m = load_error(dir + "/nvfp4", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("model.layers.1.self_attn"), std::string::npos) << m;
  EXPECT_NE(m.find("exclude_modules / ignore"), std::string::npos) << m;
  // Another group size than NVFP4's 16.
  lay = layouts()[1];
  lay.hf_quant_config["quantization"]["group_size"] = 32;
  fs::remove_all(dir);
  write_pair(dir, lay, "qwen3_moe");
  m = load_error(dir + "/nvfp4", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("group_size 32"), std::string::npos) << m;
  EXPECT_NE(m.find("hf_quant_config.json"), std::string::npos) << m;
  // NVFP4 tensors without any quantization config: the U8 weight is refused by name.
  lay = layouts()[1];
  lay.hf_quant_config = nullptr;
  fs::remove_all(dir);
  write_pair(dir, lay, "qwen3_moe");
  m = load_error(dir + "/nvfp4", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("model.layers.0.self_attn.q_proj.weight [64, 32]"), std::string::npos) << m;
  EXPECT_NE(m.find("quant_algo \"NVFP4\""), std::string::npos) << m;
  fs::remove_all(dir);
}

TEST(Nvfp4CheckpointReference, Qwen3MoeAndDeepseekV3MatchTransformers) {
  // tests/model/fixtures/{qwen3_moe,deepseek_v3}_nvfp4: the fixtures in ModelOpt's NVFP4 layout (U8 codes,
  // F8_E4M3 weight_scale per 16 values, F32 weight_scale_2, input_scale), quantized as
  // NVFP4QTensor.quantize does; reference logits from transformers on the dequantized weights
  // (tests/model/gen_quantized_moe.py nvfp4). The experts stay NVFP4_G64 / G16 in the banks and kernels.
  for (const char* name : {"qwen3_moe_nvfp4", "deepseek_v3_nvfp4"})
    expect_reference_on_fused_and_cpu(source_dir() + "/tests/model/fixtures/" + name, name);
}

}  // namespace
}  // namespace ft::testing
