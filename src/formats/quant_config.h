#pragma once
// config.json's `quantization_config` (Hugging Face checkpoints) as a typed struct: which quantized
// weight layout the safetensors hold, and which modules stay unquantized. Read forms:
//  - transformers FineGrainedFP8Config / DeepSeek-V3 / Qwen FP8 releases: quant_method "fp8", fmt
//    "e4m3", weight_block_size [128, 128] (F8_E4M3 `weight` + F32 `weight_scale_inv`, one per
//    [128, 128] tile; value = w * scale_inv), activation_scheme "dynamic" or "static" (activations are
//    not quantized here: weight-only use), modules_to_not_convert. Without weight_block_size: one
//    scale per tensor.
//  - compressed-tensors (llm-compressor), format "float-quantized": config_groups whose weights are
//    8-bit "float" with strategy "tensor", "channel" or "block" (block_structure), F8_E4M3 `weight` +
//    `weight_scale` (value = w * weight_scale); input_activations and `input_scale` are ignored
//    (weight-only use); `ignore` names or "re:" patterns.
//  - gpt-oss MXFP4 (quant_method "mxfp4", modules_to_not_convert): read by model/weights.cpp's fused
//    expert path.
//  - NVIDIA ModelOpt NVFP4 (quant_algo "NVFP4", group_size 16; U8 `weight` of packed E2M1 + F8_E4M3
//    `weight_scale` per 16 values + F32 `weight_scale_2` per tensor, quant/nvfp4.h): config.json's flat
//    form {"quant_method": "modelopt", "quant_algo": "NVFP4", "ignore" or "exclude_modules", optional
//    "config_groups" of 4-bit float weights in groups of 16} or hf_quant_config.json's nested form
//    {"producer", "quantization": {"quant_algo", "group_size", "exclude_modules", "kv_cache_quant_algo"}}.
//    Weight-only use: input_activations / `input_scale` and a kv_cache_quant_algo's k/v scales are ignored.
//  - compressed-tensors (llm-compressor) NVFP4, format "nvfp4-pack-quantized": config_groups whose weights
//    are 4-bit "float", strategy "tensor_group", group_size 16: U8 `weight_packed` (E2M1, low nibble
//    first) + F8_E4M3 `weight_scale` per 16 values + F32 `weight_global_scale`, value = e2m1 *
//    (weight_scale / weight_global_scale); `input_global_scale` ignored; `ignore` as for FP8.
// Everything else (ModelOpt FP8 / other algorithms, GPTQ, AWQ, bitsandbytes, other compressed-tensors
// formats, options this reader does not know) is refused, naming the method or the option.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft {

enum class QuantMethod : uint8_t {
  kNone,   // no quantization_config: plain weights
  kFp8,    // FP8 E4M3 weights with float32 scales (either spelling above)
  kMxfp4,  // gpt-oss MXFP4 experts
  kNvfp4,  // ModelOpt NVFP4 linear weights
};

/** How an FP8 weight's scales are laid out. */
enum class Fp8Scales : uint8_t {
  kBlock,    // [ceil(N / block_rows), ceil(K / block_cols)]
  kTensor,   // one scale ([] or [1])
  kChannel,  // one per output row ([N] or [N, 1])
};

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  std::string method_name;        // quant_method as written ("fp8", "compressed-tensors", "mxfp4"); "" for none
  Fp8Scales fp8_scales = Fp8Scales::kBlock;
  int64_t block_rows = 0;         // kBlock: the tile's rows (output dim) and columns (input dim)
  int64_t block_cols = 0;
  std::string scale_suffix;       // kFp8: the scale tensor beside "<module>.weight": "weight_scale_inv" or "weight_scale"
  int64_t group_size = 0;         // kNvfp4: values per E4M3 scale (16)
  std::string nvfp4_codes;        // kNvfp4: the codes beside "<module>.": "weight" (ModelOpt) or "weight_packed"
  std::string nvfp4_global;       // kNvfp4: "weight_scale_2" (multiplies) or "weight_global_scale" (divides)
  bool nvfp4_global_divides = false;  // compressed-tensors: block scale = weight_scale / weight_global_scale
  std::vector<std::string> not_converted;  // modules_to_not_convert + ignored_layers, or compressed-tensors' ignore
  bool glob_patterns = false;     // not_converted are ModelOpt's exclude_modules globs (see converts())
  /** What the config asks for that the loader accepts but does not do, for one log line at load
   *  (load_model): FP8's activation_scheme "static" (its activation scales are not used). "": none. */
  std::string note;

  /** Whether module `module` (a tensor name without ".weight", e.g. "model.layers.0.mlp.gate") is
   *  quantized: false when a not_converted pattern matches it the way transformers'
   *  should_convert_module does (the pattern as a regular expression matching a prefix of the name,
   *  or the name ending with the pattern text); a compressed-tensors "re:" pattern is a regular
   *  expression matching a prefix. ModelOpt's patterns (glob_patterns) are globs whose '*' matches any
   *  text, matched as vLLM's is_layer_excluded does: against the whole name or against any one of its
   *  dot-separated parts ("lm_head", "model.layers.*.mlp.gate", "*self_attn*"). An unquantized config
   *  (kNone) converts nothing. */
  bool converts(std::string_view module) const;

  /** not_converted compiled (PCRE2, one per pattern, same order), filled by parse_quant_config; when
   *  its size differs from not_converted's, converts() compiles the patterns itself. A match that
   *  exceeds PCRE2's match limit (100000 steps) throws ft::Error(kInvalidFile) naming the pattern. */
  std::vector<std::shared_ptr<const void>> compiled;
};

/** Parses `config`'s "quantization_config" (config.json's top level or its text_config; absent or null:
 *  method kNone). `source` names the file in errors. Throws ft::Error: kUnsupported naming a method
 *  or option this reader does not support (e.g. "quant_method \"gptq\"", "ModelOpt NVFP4",
 *  "fmt \"e5m2\"", "weight_block_size [64, 32]" when not a multiple of 32 wide, "activation_scheme"
 *  values other than dynamic/static, an unknown key); kInvalidFile for a field of the wrong type or a
 *  pattern that is not a valid regular expression (PCRE2 syntax, as Python's re reads these;
 *  patterns longer than 512 characters are refused). */
QuantConfig parse_quant_config(const nlohmann::json& config, const std::string& source);

}  // namespace ft
