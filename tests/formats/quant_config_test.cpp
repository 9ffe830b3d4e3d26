// config.json's quantization_config (formats/quant_config.h): the FP8, compressed-tensors FP8 and
// MXFP4 forms as releases write them, module exclusion as transformers matches it, and refusals that
// name the method or option.
#include <gtest/gtest.h>

#include <string>

#include "formats/quant_config.h"
#include "util/error.h"

namespace ft {
namespace {

using nlohmann::json;

QuantConfig parse(const std::string& quantization_config) {
  return parse_quant_config(json::parse(R"({"hidden_size": 64, "quantization_config": )" + quantization_config + "}"),
                            "config.json");
}

/** The message of the ft::Error parse() throws (and its code), "" if it does not throw. */
std::string refusal(const std::string& q, ErrorCode* code = nullptr) {
  try {
    parse(q);
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

TEST(QuantConfig, AbsentOrNullIsPlain) {
  EXPECT_EQ(parse_quant_config(json::parse(R"({"hidden_size": 64})"), "c").method, QuantMethod::kNone);
  EXPECT_EQ(parse("null").method, QuantMethod::kNone);
  EXPECT_FALSE(parse("null").converts("model.layers.0.mlp.up_proj"));
}

TEST(QuantConfig, DeepSeekBlockFp8) {
  // DeepSeek-V3's quantization_config, as released.
  const QuantConfig c = parse(
      R"({"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]})");
  EXPECT_EQ(c.method, QuantMethod::kFp8);
  EXPECT_EQ(c.method_name, "fp8");
  EXPECT_EQ(c.fp8_scales, Fp8Scales::kBlock);
  EXPECT_EQ(c.block_rows, 128);
  EXPECT_EQ(c.block_cols, 128);
  EXPECT_EQ(c.scale_suffix, "weight_scale_inv");
  EXPECT_TRUE(c.not_converted.empty());
  EXPECT_TRUE(c.converts("model.layers.3.mlp.experts.7.down_proj"));
  EXPECT_EQ(c.note, "");  // dynamic: nothing to say
  // static: accepted, weight-only, and the loader logs that its activation scales are not used.
  const QuantConfig st = parse(R"({"activation_scheme": "static", "quant_method": "fp8", "weight_block_size": [128, 128]})");
  EXPECT_EQ(st.method, QuantMethod::kFp8);
  for (const char* part : {"activation_scheme \"static\"", "activation scales (input_scale) are ignored", "weight-only",
                           "BF16"})
    EXPECT_NE(st.note.find(part), std::string::npos) << part << " in: " << st.note;
}

TEST(QuantConfig, FineGrainedFp8ModulesToNotConvert) {
  // transformers FineGrainedFP8Config's to_dict with the modules it keeps in full precision.
  const QuantConfig c = parse(R"({"quant_method": "fp8", "activation_scheme": "dynamic", "weight_block_size": [128, 128],
      "dequantize": false, "modules_to_not_convert": ["lm_head", "gate", "model.layers.*.self_attn.o_proj"],
      "ignored_layers": ["model.layers.1.mlp.experts.0"]})");
  ASSERT_EQ(c.not_converted.size(), 4u);
  EXPECT_FALSE(c.converts("lm_head"));                                 // exact
  EXPECT_FALSE(c.converts("model.layers.0.mlp.gate"));                 // ends with the pattern
  EXPECT_FALSE(c.converts("model.layers.5.self_attn.o_proj"));         // regular expression from the start
  EXPECT_FALSE(c.converts("model.layers.1.mlp.experts.0.up_proj"));    // prefix (ignored_layers)
  EXPECT_TRUE(c.converts("model.layers.0.mlp.gate_proj"));             // "gate" is not its end
  EXPECT_TRUE(c.converts("model.layers.5.self_attn.q_proj"));
  EXPECT_TRUE(c.converts("model.layers.1.mlp.experts.1.up_proj"));
}

TEST(QuantConfig, Fp8WithoutBlockSizeIsPerTensor) {
  const QuantConfig c = parse(R"({"quant_method": "fp8", "weight_block_size": null})");
  EXPECT_EQ(c.fp8_scales, Fp8Scales::kTensor);
}

TEST(QuantConfig, CompressedTensorsFp8Strategies) {
  const std::string head = R"({"quant_method": "compressed-tensors", "format": "float-quantized",
      "quantization_status": "compressed", "kv_cache_scheme": null, "global_compression_ratio": 1.5,
      "ignore": ["lm_head", "re:.*mlp\\.gate$"], "config_groups": {"group_0": {"targets": ["Linear"],
      "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true, "symmetric": true},
      "output_activations": null, "weights": {"num_bits": 8, "type": "float", "symmetric": true, "dynamic": false,
      "group_size": null, "actorder": null, "observer": "minmax", "observer_kwargs": {}, )";
  QuantConfig c = parse(head + R"("strategy": "channel", "block_structure": null}}}})");
  EXPECT_EQ(c.method, QuantMethod::kFp8);
  EXPECT_EQ(c.method_name, "compressed-tensors");
  EXPECT_EQ(c.fp8_scales, Fp8Scales::kChannel);
  EXPECT_EQ(c.scale_suffix, "weight_scale");
  EXPECT_FALSE(c.converts("lm_head"));
  EXPECT_FALSE(c.converts("model.layers.2.mlp.gate"));
  EXPECT_TRUE(c.converts("model.layers.2.mlp.gate_proj"));
  c = parse(head + R"("strategy": "tensor"}}}})");
  EXPECT_EQ(c.fp8_scales, Fp8Scales::kTensor);
  c = parse(head + R"("strategy": "block", "block_structure": [128, 64]}}}})");
  EXPECT_EQ(c.fp8_scales, Fp8Scales::kBlock);
  EXPECT_EQ(c.block_rows, 128);
  EXPECT_EQ(c.block_cols, 64);
  // Refused: int8 weights, a group size, an unknown strategy, a 48-wide block.
  EXPECT_NE(refusal(head + R"("strategy": "group", "group_size": 128}}}})").find("group_size"), std::string::npos);
  EXPECT_NE(refusal(head + R"("strategy": "tensor_group"}}}})").find("strategy \"tensor_group\""), std::string::npos);
  EXPECT_NE(refusal(head + R"("strategy": "block", "block_structure": [128, 48]}}}})").find("block_structure"),
            std::string::npos);
  std::string int8 = head + R"("strategy": "channel"}}}})";
  int8.replace(int8.rfind("\"type\": \"float\""), 15, "\"type\": \"int\"");
  EXPECT_NE(refusal(int8).find("8-bit float"), std::string::npos);
}

TEST(QuantConfig, CompressedTensorsOtherFormatsAreRefusedByName) {
  ErrorCode code{};
  const std::string mixed = refusal(
      R"({"quant_method": "compressed-tensors", "format": "mixed-precision", "config_groups": {}})", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(mixed.find("\"mixed-precision\""), std::string::npos) << mixed;
  EXPECT_NE(refusal(R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups": {}})")
                .find("\"pack-quantized\""),
            std::string::npos);
}

TEST(QuantConfig, Mxfp4) {
  // gpt-oss's release config.
  const QuantConfig c = parse(R"({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn",
      "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]})");
  EXPECT_EQ(c.method, QuantMethod::kMxfp4);
  EXPECT_FALSE(c.converts("model.layers.11.self_attn.q_proj"));
  EXPECT_FALSE(c.converts("model.layers.0.mlp.router"));
  EXPECT_TRUE(c.converts("model.layers.0.mlp.experts"));
}

TEST(QuantConfig, ModelOptNvfp4Forms) {
  // config.json's flat form as ModelOpt 0.3x exports it (vLLM ModelOptNvFp4Config's first branch).
  QuantConfig c = parse(R"({"config_groups": {"group_0": {"input_activations": {"dynamic": false, "num_bits": 4,
      "type": "float", "group_size": 16}, "weights": {"dynamic": false, "num_bits": 4, "type": "float",
      "group_size": 16}, "targets": ["Linear"]}}, "ignore": ["lm_head", "model.layers.*.mlp.gate", "*self_attn*"],
      "quant_algo": "NVFP4", "kv_cache_scheme": {"dynamic": false, "num_bits": 8, "type": "float"},
      "producer": {"name": "modelopt", "version": "0.34.1"}, "quant_method": "modelopt"})");
  EXPECT_EQ(c.method, QuantMethod::kNvfp4);
  EXPECT_EQ(c.method_name, "modelopt");
  EXPECT_EQ(c.group_size, 16);
  EXPECT_TRUE(c.glob_patterns);
  EXPECT_FALSE(c.converts("lm_head"));
  EXPECT_FALSE(c.converts("model.layers.3.mlp.gate"));
  EXPECT_FALSE(c.converts("model.layers.0.self_attn.q_proj"));        // "*self_attn*" matches a part
  EXPECT_TRUE(c.converts("model.layers.3.mlp.gate_proj"));             // a glob matches whole names or parts
  EXPECT_TRUE(c.converts("model.layers.3.mlp.experts.0.gate_proj"));
  // hf_quant_config.json's nested form (what WeightLoader reads when config.json has no quantization_config).
  c = parse(R"({"producer": {"name": "modelopt", "version": "0.19.0"}, "quantization": {"quant_algo": "NVFP4",
      "kv_cache_quant_algo": null, "group_size": 16, "exclude_modules": ["lm_head", "model.layers.0*"]}})");
  EXPECT_EQ(c.method, QuantMethod::kNvfp4);
  EXPECT_FALSE(c.converts("lm_head"));
  EXPECT_FALSE(c.converts("model.layers.0.mlp.down_proj"));
  EXPECT_TRUE(c.converts("model.layers.1.mlp.down_proj"));
  // transformers' ModelOptNvFp4Config style: flat keys, exclude_modules, no group_size (16).
  c = parse(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
      "exclude_modules": ["lm_head"]})");
  EXPECT_EQ(c.group_size, 16);
  EXPECT_FALSE(c.converts("lm_head"));
  EXPECT_TRUE(c.converts("model.layers.0.mlp.up_proj"));
}

TEST(QuantConfig, CompressedTensorsNvfp4) {
  // llm-compressor's NVFP4 scheme as it writes config.json.
  const std::string head = R"({"quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
      "quantization_status": "compressed", "kv_cache_scheme": null, "ignore": ["lm_head", "re:.*mlp\\.gate$"],
      "config_groups": {"group_0": {"targets": ["Linear"], "format": "nvfp4-pack-quantized",
      "input_activations": {"num_bits": 4, "type": "float", "strategy": "tensor_group", "group_size": 16,
      "dynamic": "local", "symmetric": true, "observer": "minmax"}, "output_activations": null,
      "weights": {"num_bits": 4, "type": "float", "symmetric": true, "dynamic": false, "actorder": null,
      "observer": "minmax", "observer_kwargs": {}, "block_structure": null, )";
  const QuantConfig c = parse(head + R"("strategy": "tensor_group", "group_size": 16}}}})");
  EXPECT_EQ(c.method, QuantMethod::kNvfp4);
  EXPECT_EQ(c.method_name, "compressed-tensors");
  EXPECT_EQ(c.group_size, 16);
  EXPECT_EQ(c.nvfp4_codes, "weight_packed");
  EXPECT_EQ(c.nvfp4_global, "weight_global_scale");
  EXPECT_TRUE(c.nvfp4_global_divides);
  EXPECT_FALSE(c.glob_patterns);
  EXPECT_FALSE(c.converts("lm_head"));
  EXPECT_FALSE(c.converts("model.layers.2.mlp.gate"));
  EXPECT_TRUE(c.converts("model.layers.2.mlp.gate_proj"));
  ErrorCode code{};
  std::string m = refusal(head + R"("strategy": "tensor_group", "group_size": 32}}}})", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("config_groups.group_0.weights.group_size 32"), std::string::npos) << m;
  m = refusal(head + R"("strategy": "group", "group_size": 16}}}})");
  EXPECT_NE(m.find("weights.strategy \"group\""), std::string::npos) << m;
  m = refusal(head + R"("strategy": "tensor_group", "group_size": 16, "num_bits": 8}}}})");
  EXPECT_NE(m.find("num_bits"), std::string::npos) << m;
}

TEST(QuantConfig, ModelOptRefusalsNameTheOption) {
  ErrorCode code{};
  std::string m = refusal(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "group_size": 32})", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("group_size 32"), std::string::npos) << m;
  m = refusal(R"({"quantization": {"quant_algo": "NVFP4", "group_size": 64}})");
  EXPECT_NE(m.find("quantization.group_size 64"), std::string::npos) << m;
  m = refusal(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "config_groups": {"g": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "float", "group_size": 32}}}})");
  EXPECT_NE(m.find("config_groups.g.weights.group_size 32"), std::string::npos) << m;
  m = refusal(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "config_groups": {"g": {"targets": ["Linear"],
      "weights": {"num_bits": 8, "type": "float"}}}})");
  EXPECT_NE(m.find("num_bits 8"), std::string::npos) << m;
  m = refusal(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "awq_block_size": 128})", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("option \"awq_block_size\""), std::string::npos) << m;
  m = refusal(R"({"quantization": {"quant_algo": "NVFP4", "has_zero_point": false}})");
  EXPECT_NE(m.find("option \"quantization.has_zero_point\""), std::string::npos) << m;
  m = refusal(R"({"quantization": {"quant_algo": "W4A8_AWQ"}})");
  EXPECT_NE(m.find("ModelOpt quant_algo \"W4A8_AWQ\""), std::string::npos) << m;
  m = refusal(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "NVFP4"})");
  EXPECT_NE(m.find("kv_cache_quant_algo \"NVFP4\""), std::string::npos) << m;
  m = refusal(R"({"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": "lm_head"})", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("exclude_modules"), std::string::npos) << m;
  m = refusal(R"({"quant_method": "modelopt"})", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("quant_algo"), std::string::npos) << m;
}

TEST(QuantConfig, RefusalsNameTheMethodOrOption) {
  ErrorCode code{};
  std::string m = refusal(R"({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_quant_algo": null})", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("ModelOpt quant_algo \"FP8\""), std::string::npos) << m;
  m = refusal(R"({"quant_method": "gptq", "bits": 4})", &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("quant_method \"gptq\""), std::string::npos) << m;
  EXPECT_NE(refusal(R"({"quant_method": "awq"})").find("\"awq\""), std::string::npos);
  m = refusal(R"({"quant_method": "fp8", "fmt": "e5m2"})");
  EXPECT_NE(m.find("fmt \"e5m2\""), std::string::npos) << m;
  m = refusal(R"({"quant_method": "fp8", "weight_block_size": [128, 100]})");
  EXPECT_NE(m.find("weight_block_size [128,100]"), std::string::npos) << m;
  m = refusal(R"({"quant_method": "fp8", "weight_block_size": [128, 128], "per_token_scales": true})");
  EXPECT_NE(m.find("option \"per_token_scales\""), std::string::npos) << m;
  m = refusal(R"({"quant_method": "fp8", "activation_scheme": "per_token"})");
  EXPECT_NE(m.find("activation_scheme \"per_token\""), std::string::npos) << m;
}

TEST(QuantConfig, MalformedFieldsAreInvalidFile) {
  ErrorCode code{};
  EXPECT_NE(refusal(R"({"weight_block_size": [128, 128]})", &code).find("quant_method"), std::string::npos);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  refusal(R"("fp8")", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  refusal(R"({"quant_method": 8})", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  refusal(R"({"quant_method": "fp8", "weight_block_size": [128]})", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  refusal(R"({"quant_method": "fp8", "weight_block_size": [0, 128]})", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  refusal(R"({"quant_method": "fp8", "modules_to_not_convert": "lm_head"})", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  const std::string m = refusal(R"({"quant_method": "fp8", "modules_to_not_convert": ["model.(layers"]})", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("model.(layers"), std::string::npos) << m;
  refusal(R"({"quant_method": "fp8", "modules_to_not_convert": [")" + std::string(600, 'a') + R"("]})", &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
}

TEST(QuantConfig, BacktrackingPatternsAreBounded) {
  // A pattern that backtracks exponentially against a long name stops at PCRE2's match limit with a
  // refusal naming it, instead of hanging the load (found by the quant_config fuzz harness).
  const QuantConfig c = parse(R"({"quant_method": "fp8", "modules_to_not_convert": ["(a|aa)*[bc]"]})");
  const std::string name(64, 'a');
  try {
    c.converts(name);
    FAIL() << "expected a refusal";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("(a|aa)*[bc]"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(c.converts("model.layers.0.mlp.up_proj"));  // short names still match normally
}

TEST(QuantConfig, HandBuiltConfigCompilesItsPatterns) {
  QuantConfig c;
  c.method = QuantMethod::kFp8;
  c.not_converted = {"lm_head", "re:model\\.layers\\.[0-9]+\\.mlp\\.gate$"};
  EXPECT_FALSE(c.converts("lm_head"));
  EXPECT_FALSE(c.converts("model.layers.17.mlp.gate"));
  EXPECT_TRUE(c.converts("model.layers.17.mlp.gate_proj"));
  c.not_converted = {"model.(layers"};
  EXPECT_THROW(c.converts("model.layers.0.mlp.gate"), Error);
}

TEST(QuantConfig, TextConfigIsRead) {
  const QuantConfig c = parse_quant_config(
      json::parse(R"({"text_config": {"hidden_size": 8, "quantization_config": {"quant_method": "fp8",
                   "weight_block_size": [128, 128]}}})"),
      "config.json");
  EXPECT_EQ(c.method, QuantMethod::kFp8);
}

}  // namespace
}  // namespace ft
