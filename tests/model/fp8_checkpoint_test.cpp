// FP8 checkpoints (issue 36): the qwen3_moe and deepseek_v3 fixtures quantized here to FP8 E4M3 with
// float32 scales in the layouts releases use (DeepSeek / Qwen "fp8" [128, 128] tiles, smaller ragged
// tiles, compressed-tensors per-channel and per-tensor scales). The weights load as F8_E4M3_B32 /
// F8_E4M3_B16 (no widening) and the model's logits equal those of the same model loaded from the
// dequantized weights in F32, through the resident experts (fused) and the CPU expert executor (cpu).
// Plus the transformers references made by tests/model/gen_quantized_moe.py (qwen3_moe_fp8, deepseek_v3_fp8).
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fixture_util.h"
#include "backend/cpu/cpu_ops.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "quant/fp8.h"
#include "model/weights.h"
#include "quant/quant.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Fp8Layout {
  std::string name;
  json quantization_config;
  std::string scale_suffix;
  Fp8ScaleGrid grid;     // rows, cols of a scale block; {0, 0}: one per tensor; {1, 0}: one per row
  bool column_scales;    // per-channel scales written [N, 1]
};

/** The linear layers an FP8 release quantizes: every "*_proj*.weight" matrix (attention, MLA's
 *  q_a/q_b/kv_a_proj_with_mqa/kv_b, dense and expert MLPs); not routers, embeddings, lm_head, norms. */
bool quantized(const TensorInfo& t) {
  const std::string& n = t.name;
  return t.shape.size() == 2 && n.find("_proj") != std::string::npos && n.size() > 7 &&
         n.compare(n.size() - 7, 7, ".weight") == 0;
}

/** Writes `dir`/fp8 (the fixture with FP8 linear weights in `lay`) and `dir`/f32 (the same model with those
 *  weights dequantized to F32: e4m3(w) * scale, every other tensor as stored). */
void write_pair(const std::string& dir, const Fp8Layout& lay, const std::string& fixture = "qwen3_moe") {
  const std::string src = shared_dir() + "/fixtures/hf/" + fixture;
  auto ckpt = open_checkpoint(src);
  std::vector<std::vector<uint8_t>> keep;
  std::vector<SafetensorsTensor> fp8, f32;
  for (const TensorInfo& t : ckpt->tensors()) {
    if (!quantized(t)) {
      fp8.push_back({t.name, t.dtype, t.shape, t.data});
      f32.push_back({t.name, t.dtype, t.shape, t.data});
      continue;
    }
    const int64_t N = t.shape[0], K = t.shape[1];
    std::vector<float> x(N * K);
    dequantize_row(t.dtype, t.data, x.data(), N * K);
    Fp8ScaleGrid g = lay.grid;
    if (g.block_rows == 0) g = {N, K};
    else if (g.block_cols == 0) g = {1, K};
    const int64_t sr = (N + g.block_rows - 1) / g.block_rows, sc = (K + g.block_cols - 1) / g.block_cols;
    std::vector<uint8_t> w(N * K);
    std::vector<float> s(sr * sc);
    fp8_quantize_scaled(x.data(), N, K, g, w.data(), s.data());
    std::vector<float> y(N * K);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < K; ++c)
        y[r * K + c] = e4m3_to_f32(w[r * K + c]) * s[(r / g.block_rows) * sc + c / g.block_cols];
    // The quantization itself is sane: each matrix within E4M3's relative precision (2^-4 at worst).
    EXPECT_LE(row_rel_l2(y.data(), x.data(), N * K), 0.0625) << t.name;
    const std::string module = t.name.substr(0, t.name.size() - 7);
    std::vector<int64_t> sshape = {sr, sc};
    if (lay.grid.block_rows == 0) sshape = {1};
    else if (lay.grid.block_cols == 0) sshape = {N, 1};
    keep.push_back(std::move(w));
    fp8.push_back({t.name, DType::F8_E4M3, t.shape, keep.back().data()});
    keep.emplace_back(reinterpret_cast<const uint8_t*>(s.data()), reinterpret_cast<const uint8_t*>(s.data() + s.size()));
    fp8.push_back({module + "." + lay.scale_suffix, DType::F32, sshape, keep.back().data()});
    keep.emplace_back(reinterpret_cast<const uint8_t*>(y.data()), reinterpret_cast<const uint8_t*>(y.data() + y.size()));
    f32.push_back({t.name, DType::F32, t.shape, keep.back().data()});
  }
  json config = read_json_file(src + "/config.json");
  for (const char* sub : {"/fp8", "/f32"}) fs::create_directories(dir + sub);
  std::ofstream(dir + "/f32/config.json") << config.dump(2);
  config["quantization_config"] = lay.quantization_config;
  std::ofstream(dir + "/fp8/config.json") << config.dump(2);
  write_safetensors(dir + "/fp8/model.safetensors", fp8);
  write_safetensors(dir + "/f32/model.safetensors", f32);
}

std::vector<Fp8Layout> layouts() {
  const json ct = json::parse(R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "ignore": ["lm_head", "re:.*mlp\\.gate$"], "config_groups": {"group_0": {"targets": ["Linear"],
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true},
      "weights": {"num_bits": 8, "type": "float", "symmetric": true, "dynamic": false, "strategy": "channel"}}}})");
  json ct_tensor = ct;
  ct_tensor["config_groups"]["group_0"]["weights"]["strategy"] = "tensor";
  return {
      {"block128", json::parse(R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
          "weight_block_size": [128, 128], "modules_to_not_convert": ["lm_head", "gate"]})"),
       "weight_scale_inv", {128, 128}, false},
      {"block16x64", json::parse(R"({"quant_method": "fp8", "weight_block_size": [16, 64]})"), "weight_scale_inv",
       {16, 64}, false},
      {"channel", ct, "weight_scale", {1, 0}, true},
      {"tensor", ct_tensor, "weight_scale", {0, 0}, false},
  };
}

// qwen3_moe (attention + routed experts) and deepseek_v3 (MLA with q_lora_rank 48: F8_E4M3_B16 rows,
// a dense layer, shared experts) in each layout.
const char* const kFixtures[] = {"qwen3_moe", "deepseek_v3"};

class Fp8Checkpoint : public ::testing::TestWithParam<int> {};

TEST_P(Fp8Checkpoint, LogitsEqualTheDequantizedModel) {
  const Fp8Layout lay = layouts()[GetParam() % 4];
  const std::string fixture = kFixtures[GetParam() / 4];
  const std::string dir = scratch_path("fp8_" + fixture + "_" + lay.name);
  write_pair(dir, lay, fixture);
  // The printed distance to the BF16 reference is how far FP8 moves this tiny random model (routing
  // flips amplify the weights' ~3% error); the bound is on the weights (write_pair).
  expect_same_as_dequantized(dir + "/fp8", dir + "/f32", fixture, "fp8 " + fixture + " " + lay.name, 1e-5,
                             {MoeStrategy::kFused, MoeStrategy::kCpu});
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Layouts, Fp8Checkpoint, ::testing::Range(0, 8), [](const auto& info) {
  return std::string(kFixtures[info.param / 4]) + "_" + layouts()[info.param % 4].name;
});

TEST(Fp8CheckpointLoader, WeightsStayFp8WithTheirScales) {
  // Dense and expert weights come out of the loader as F8_E4M3_B32 (1.125 bytes a weight, not widened),
  // decoding to exactly the F32 checkpoint's dequantized values; the router and lm_head stay BF16.
  const Fp8Layout lay = layouts()[1];  // [16, 64] tiles: several tiles a matrix, ragged in both dims
  const std::string dir = scratch_path("fp8_loader");
  write_pair(dir, lay);
  auto fp8 = open_checkpoint(dir + "/fp8");
  auto f32 = open_checkpoint(dir + "/f32");
  CpuOps ops(1);
  WeightLoader ld(*fp8, ops);
  EXPECT_EQ(ld.quant_config().method, QuantMethod::kFp8);
  const Tensor q = ld.get(layer_weight(0, "attn_q", "self_attn.q_proj"), {64, 64});
  EXPECT_EQ(q.dtype, DType::F8_E4M3_B32);
  EXPECT_EQ(q.bytes(), 64 * 2 * 36);
  expect_decodes_to(q, *f32, "model.layers.0.self_attn.q_proj.weight");
  const std::vector<Tensor> down = ld.host_experts(1, "ffn_down_exps", "mlp.experts.{}.down_proj", 8, 64, 32);
  ASSERT_EQ(down.size(), 8u);
  for (int e = 0; e < 8; ++e) {
    EXPECT_EQ(down[e].dtype, DType::F8_E4M3_B32);
    expect_decodes_to(down[e], *f32, "model.layers.1.mlp.experts." + std::to_string(e) + ".down_proj.weight");
  }
  EXPECT_EQ(ld.get(layer_weight(0, "ffn_gate_inp", "mlp.gate"), {8, 64}).dtype, DType::BF16);
  EXPECT_EQ(ld.get({"output.weight", "lm_head.weight"}, {512, 64}).dtype, DType::BF16);
  // The same tensor twice is repacked once.
  EXPECT_EQ(ld.host(layer_weight(0, "attn_q", "self_attn.q_proj"), {64, 64}).data, q.data);
  fs::remove_all(dir);
}

TEST(Fp8CheckpointErrors, BadFilesAreRefusedNamingTheTensor) {
  const std::string dir = scratch_path("fp8_errors");
  Fp8Layout lay = layouts()[0];
  ErrorCode code{};
  // A module the config leaves unquantized but stored as FP8.
  lay.quantization_config["modules_to_not_convert"] = {"lm_head", "gate", "model.layers.1.self_attn"};
  write_pair(dir, lay);
  std::string m = load_error(dir + "/fp8", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("model.layers.1.self_attn"), std::string::npos) << m;
  EXPECT_NE(m.find("modules_to_not_convert"), std::string::npos) << m;
  // The scales under another name than the config's method reads.
  lay = layouts()[0];
  lay.scale_suffix = "weight_scale";
  write_pair(dir, lay);
  m = load_error(dir + "/fp8", &code);
  EXPECT_EQ(code, ErrorCode::kNotFound);
  EXPECT_NE(m.find("weight_scale_inv"), std::string::npos) << m;
  // Scales of another grid than the config's.
  lay = layouts()[1];
  lay.quantization_config["weight_block_size"] = {32, 32};
  write_pair(dir, lay);
  m = load_error(dir + "/fp8", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("weight_scale_inv: expected F32 ["), std::string::npos) << m;
  // FP8 weights without a quantization_config, and an unsupported method.
  lay = layouts()[0];
  lay.quantization_config = nullptr;
  write_pair(dir, lay);
  m = load_error(dir + "/fp8", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("quantization_config"), std::string::npos) << m;
  lay.quantization_config = json::parse(R"({"quant_method": "modelopt", "quant_algo": "FP8"})");
  write_pair(dir, lay);
  m = load_error(dir + "/fp8", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("ModelOpt quant_algo \"FP8\""), std::string::npos) << m;
  fs::remove_all(dir);
}

TEST(Fp8CheckpointReference, Qwen3MoeFp8MatchesTransformers) {
  // tests/model/fixtures/qwen3_moe_fp8: the qwen3_moe fixture in DeepSeek's FP8 layout ([128, 128]
  // tiles, F8_E4M3 weight + F32 weight_scale_inv), reference logits from transformers'
  // Qwen3MoeForCausalLM on the dequantized weights (tests/model/gen_quantized_moe.py fp8).
  expect_reference_on_fused_and_cpu(source_dir() + "/tests/model/fixtures/qwen3_moe_fp8", "qwen3_moe_fp8");
}

TEST(Fp8CheckpointReference, DeepseekV3Fp8MatchesTransformers) {
  // tests/model/fixtures/deepseek_v3_fp8: the deepseek_v3 fixture in DeepSeek-V3's own FP8 layout (MLA's
  // q_a / q_b / kv_a_proj_with_mqa / kv_b projections, the dense layer, shared and routed experts in
  // partial [128, 128] tiles), reference logits from transformers' DeepseekV3ForCausalLM on the
  // dequantized weights (tests/model/gen_quantized_moe.py fp8).
  expect_reference_on_fused_and_cpu(source_dir() + "/tests/model/fixtures/deepseek_v3_fp8", "deepseek_v3_fp8");
}

}  // namespace
}  // namespace ft::testing
