// parse_quant_config: config.json's quantization_config, field by field as transformers'
// FineGrainedFP8Config / Mxfp4Config and compressed-tensors' QuantizationConfig write it (see
// quant_config.h). Known keys without effect here are accepted; an unknown key or an unsupported
// value is refused, naming it.
#include "formats/quant_config.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <set>

#include "util/error.h"

namespace ft {
namespace {

using nlohmann::json;

constexpr size_t kMaxPattern = 512;

[[noreturn]] void unsupported(const std::string& source, const std::string& what) {
  fail(ErrorCode::kUnsupported, "{}: quantization_config: {} is not supported", source, what);
}

[[noreturn]] void bad(const std::string& source, const std::string& field, const std::string& want, const json& got) {
  fail(ErrorCode::kInvalidFile, "{}: quantization_config.{}: expected {}, got {}", source, field, want,
       got.dump().substr(0, 80));
}

std::string string_field(const json& q, const char* key, const std::string& source, const std::string& path) {
  const json& v = q.at(key);
  if (!v.is_string()) bad(source, path + key, "a string", v);
  return v.get<std::string>();
}

void check_keys(const json& obj, const std::set<std::string>& known, const std::string& source,
                const std::string& path) {
  for (auto it = obj.begin(); it != obj.end(); ++it)
    if (!known.count(it.key())) unsupported(source, "option \"" + path + it.key() + "\"");
}

bool is_null_or_empty(const json& v) { return v.is_null() || (v.is_object() && v.empty()); }

/** `pattern` compiled by PCRE2 (anchored at the start when matched, as Python's re.match);
 *  nullptr with `error` set when it does not compile. */
std::shared_ptr<const void> compile_pattern(const std::string& pattern, std::string* error) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* re = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &code, &offset,
                                 nullptr);
  if (re == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(code, msg, sizeof msg);
    if (error) *error = fmt::format("{} at offset {}", reinterpret_cast<const char*>(msg), offset);
    return nullptr;
  }
  return std::shared_ptr<const void>(re, [](const void* p) { pcre2_code_free(static_cast<pcre2_code*>(const_cast<void*>(p))); });
}

/** The regular expression text of a not_converted entry ("re:" prefix dropped). */
std::string regex_text(const std::string& p) { return p.rfind("re:", 0) == 0 ? p.substr(3) : p; }

/** Appends the strings of list field `key` (null or absent: nothing) to `out`, compiling each pattern. */
void pattern_list(const json& q, const char* key, const std::string& source, QuantConfig& c) {
  if (!q.contains(key) || q.at(key).is_null()) return;
  const json& v = q.at(key);
  if (!v.is_array()) bad(source, key, "a list of module names", v);
  for (const json& p : v) {
    if (!p.is_string()) bad(source, key, "a list of module names", p);
    std::string s = p.get<std::string>();
    if (s.size() > kMaxPattern)
      fail(ErrorCode::kInvalidFile, "{}: quantization_config.{}: a pattern of {} characters (at most {})", source, key,
           s.size(), kMaxPattern);
    std::string error;
    auto re = compile_pattern(regex_text(s), &error);
    if (!re)
      fail(ErrorCode::kInvalidFile, "{}: quantization_config.{}: \"{}\" is not a valid regular expression ({})", source,
           key, s.substr(0, 80), error);
    c.not_converted.push_back(std::move(s));
    c.compiled.push_back(std::move(re));
  }
}

/** weight_block_size / block_structure [rows, cols]: positive, cols a multiple of 32 (F8_E4M3_B32). */
void block_shape(const json& v, const std::string& source, const std::string& field, QuantConfig& c) {
  if (!v.is_array() || v.size() != 2 || !v[0].is_number_integer() || !v[1].is_number_integer())
    bad(source, field, "[rows, cols]", v);
  const int64_t r = v[0].get<int64_t>(), k = v[1].get<int64_t>();
  if (r < 1 || k < 1) bad(source, field, "positive block dimensions", v);
  if (k % 32 != 0)
    unsupported(source, field + " " + v.dump() + " (FP8 scale blocks must be a multiple of 32 columns wide)");
  c.fp8_scales = Fp8Scales::kBlock;
  c.block_rows = r;
  c.block_cols = k;
}

void parse_fp8(const json& q, const std::string& source, QuantConfig& c) {
  check_keys(q,
             {"quant_method", "fmt", "activation_scheme", "weight_block_size", "modules_to_not_convert",
              "ignored_layers", "dequantize", "scale_fmt"},
             source, "");
  c.method = QuantMethod::kFp8;
  c.scale_suffix = "weight_scale_inv";
  if (q.contains("fmt") && !q["fmt"].is_null()) {
    const std::string fmt = string_field(q, "fmt", source, "");
    if (fmt != "e4m3") unsupported(source, "fmt \"" + fmt + "\" (FP8 weights are read as e4m3)");
  }
  if (q.contains("activation_scheme") && !q["activation_scheme"].is_null()) {
    const std::string a = string_field(q, "activation_scheme", source, "");
    if (a != "dynamic" && a != "static") unsupported(source, "activation_scheme \"" + a + "\"");
    if (a == "static")
      c.note = source + ": activation_scheme \"static\": its activation scales (input_scale) are ignored; the FP8 "
               "weights are used weight-only, activations stay BF16 (CUDA) or F32 (CPU)";
  }
  if (q.contains("dequantize") && !q["dequantize"].is_boolean()) bad(source, "dequantize", "true or false", q["dequantize"]);
  if (q.contains("scale_fmt") && !q["scale_fmt"].is_null()) {
    const std::string s = string_field(q, "scale_fmt", source, "");  // DeepSeek-V3.1: "ue8m0" scales, stored F32
    if (s != "ue8m0" && s != "fp32") unsupported(source, "scale_fmt \"" + s + "\"");
  }
  if (q.contains("weight_block_size") && !q["weight_block_size"].is_null())
    block_shape(q["weight_block_size"], source, "weight_block_size", c);
  else
    c.fp8_scales = Fp8Scales::kTensor;
  pattern_list(q, "modules_to_not_convert", source, c);
  pattern_list(q, "ignored_layers", source, c);
}

/** The "kv_cache_scheme", "sparsity_config" and "transform_config" of compressed-tensors config `q`
 *  refused, and its "config_groups" required to be a non-empty object. */
void compressed_common(const json& q, const std::string& source) {
  for (const char* k : {"kv_cache_scheme", "sparsity_config", "transform_config"})
    if (q.contains(k) && !is_null_or_empty(q[k])) unsupported(source, std::string("compressed-tensors ") + k);
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    bad(source, "config_groups", "an object of quantization groups", q.value("config_groups", json()));
}

/** compressed-tensors group `g` at `path` ("config_groups.NAME."): its keys checked, output
 *  activations refused (input activations are not quantized here: weight-only use, input scales
 *  ignored), and its "weights" object returned with its keys checked and num_bits `bits` of type
 *  float, symmetric, not dynamic (`what` names the format in the refusal). Throws ft::Error naming
 *  the field otherwise. */
const json& compressed_group_weights(const json& g, const std::string& path, const std::string& source, int bits,
                                     const char* what) {
  if (!g.is_object()) bad(source, path.substr(0, path.size() - 1), "an object", g);
  check_keys(g, {"targets", "weights", "input_activations", "output_activations", "format"}, source, path);
  if (g.contains("output_activations") && !g["output_activations"].is_null())
    unsupported(source, path + "output_activations");
  if (!g.contains("weights") || !g["weights"].is_object()) bad(source, path + "weights", "an object", g.value("weights", json()));
  const json& w = g["weights"];
  check_keys(w,
             {"num_bits", "type", "symmetric", "group_size", "strategy", "block_structure", "dynamic", "actorder",
              "observer", "observer_kwargs", "scale_dtype", "zp_dtype"},
             source, path + "weights.");
  const json nb = w.value("num_bits", json()), ty = w.value("type", json());
  if (nb != json(bits) || ty != json("float"))
    unsupported(source, path + "weights: num_bits " + nb.dump() + " type " + ty.dump() + " (" + what + ")");
  if (w.contains("symmetric") && w["symmetric"] != json(true)) unsupported(source, path + "weights.symmetric false");
  if (w.contains("dynamic") && w["dynamic"] != json(false)) unsupported(source, path + "weights.dynamic " + w["dynamic"].dump());
  return w;
}

/** compressed-tensors' "nvfp4-pack-quantized" (the top-level keys already checked). */
void parse_compressed_nvfp4(const json& q, const std::string& source, QuantConfig& c) {
  compressed_common(q, source);
  c.method = QuantMethod::kNvfp4;
  c.group_size = 16;
  c.nvfp4_codes = "weight_packed";
  c.nvfp4_global = "weight_global_scale";
  c.nvfp4_global_divides = true;
  for (auto g = q["config_groups"].begin(); g != q["config_groups"].end(); ++g) {
    const std::string path = "config_groups." + g.key() + ".";
    const json& w = compressed_group_weights(*g, path, source, 4, "NVFP4: 4-bit float");
    if (g->contains("format") && !(*g)["format"].is_null() && (*g)["format"] != json("nvfp4-pack-quantized"))
      unsupported(source, path + "format " + (*g)["format"].dump().substr(0, 40));
    if (w.contains("actorder") && !w["actorder"].is_null()) unsupported(source, path + "weights.actorder " + w["actorder"].dump());
    const std::string strategy = w.contains("strategy") ? string_field(w, "strategy", source, path + "weights.") : "";
    if (strategy != "tensor_group") unsupported(source, path + "weights.strategy \"" + strategy + "\" (NVFP4: tensor_group)");
    if (w.value("group_size", json()) != json(16))
      unsupported(source, path + "weights.group_size " + w.value("group_size", json()).dump() +
                              " (NVFP4 is read with one E4M3 scale per 16 values)");
  }
  pattern_list(q, "ignore", source, c);
}

void parse_compressed_tensors(const json& q, const std::string& source, QuantConfig& c) {
  check_keys(q,
             {"quant_method", "format", "config_groups", "ignore", "quantization_status", "kv_cache_scheme",
              "global_compression_ratio", "version", "sparsity_config", "transform_config", "provider"},
             source, "");
  const std::string format = q.contains("format") ? string_field(q, "format", source, "") : "";
  if (format == "nvfp4-pack-quantized") return parse_compressed_nvfp4(q, source, c);
  if (format != "float-quantized" && format != "naive-quantized")
    unsupported(source, "compressed-tensors format \"" + format +
                            "\" (FP8 \"float-quantized\" and NVFP4 \"nvfp4-pack-quantized\" are read)");
  compressed_common(q, source);
  c.method = QuantMethod::kFp8;
  c.scale_suffix = "weight_scale";
  bool first = true;
  for (auto g = q["config_groups"].begin(); g != q["config_groups"].end(); ++g) {
    const std::string path = "config_groups." + g.key() + ".";
    const json& w = compressed_group_weights(*g, path, source, 8, "8-bit float is read");
    for (const char* k : {"group_size", "actorder"})
      if (w.contains(k) && !w[k].is_null()) unsupported(source, path + "weights." + k + " " + w[k].dump());
    QuantConfig one;
    const std::string strategy = w.contains("strategy") ? string_field(w, "strategy", source, path + "weights.") : "";
    if (strategy == "tensor") one.fp8_scales = Fp8Scales::kTensor;
    else if (strategy == "channel") one.fp8_scales = Fp8Scales::kChannel;
    else if (strategy == "block") block_shape(w.value("block_structure", json()), source, path + "weights.block_structure", one);
    else unsupported(source, path + "weights.strategy \"" + strategy + "\"");
    if (!first && (one.fp8_scales != c.fp8_scales || one.block_rows != c.block_rows || one.block_cols != c.block_cols))
      unsupported(source, "config_groups with different weight strategies");
    c.fp8_scales = one.fp8_scales, c.block_rows = one.block_rows, c.block_cols = one.block_cols;
    first = false;
  }
  pattern_list(q, "ignore", source, c);
}

void parse_mxfp4(const json& q, const std::string& source, QuantConfig& c) {
  check_keys(q, {"quant_method", "modules_to_not_convert", "dequantize"}, source, "");
  if (q.contains("dequantize") && !q["dequantize"].is_boolean()) bad(source, "dequantize", "true or false", q["dequantize"]);
  c.method = QuantMethod::kMxfp4;
  pattern_list(q, "modules_to_not_convert", source, c);
}

/** Appends the strings of glob list field `key` of `obj` (null or absent: nothing) to c.not_converted. */
void glob_list(const json& obj, const char* key, const std::string& source, const std::string& path, QuantConfig& c) {
  if (!obj.contains(key) || obj.at(key).is_null()) return;
  const json& v = obj.at(key);
  if (!v.is_array()) bad(source, path + key, "a list of module names", v);
  for (const json& p : v) {
    if (!p.is_string()) bad(source, path + key, "a list of module names", p);
    std::string s = p.get<std::string>();
    if (s.size() > kMaxPattern)
      fail(ErrorCode::kInvalidFile, "{}: quantization_config.{}{}: a pattern of {} characters (at most {})", source, path,
           key, s.size(), kMaxPattern);
    c.not_converted.push_back(std::move(s));
  }
  c.glob_patterns = true;
}

/** ModelOpt's weights group_size: absent or null means 16; anything but 16 is refused. */
void nvfp4_group_size(const json& obj, const std::string& source, const std::string& path, QuantConfig& c) {
  if (!obj.contains("group_size") || obj["group_size"].is_null()) return;
  const json& g = obj["group_size"];
  if (!g.is_number_integer()) bad(source, path + "group_size", "an integer", g);
  if (g.get<int64_t>() != 16)
    unsupported(source, path + "group_size " + g.dump() + " (NVFP4 is read with one E4M3 scale per 16 values)");
  c.group_size = 16;
}

/** NVIDIA ModelOpt: config.json's flat quantization_config or hf_quant_config.json's nested form. */
void parse_modelopt(const json& q, const std::string& source, QuantConfig& c) {
  const bool nested = q.contains("quantization");
  const json& sec = nested ? q["quantization"] : q;
  const std::string path = nested ? "quantization." : "";
  if (nested) {
    check_keys(q, {"producer", "quantization", "quant_method"}, source, "");
    if (!sec.is_object()) bad(source, "quantization", "an object", sec);
    check_keys(sec, {"quant_algo", "group_size", "exclude_modules", "kv_cache_quant_algo"}, source, path);
  } else {
    check_keys(q,
               {"quant_method", "quant_algo", "group_size", "exclude_modules", "ignore", "kv_cache_quant_algo",
                "kv_cache_scheme", "config_groups", "producer"},
               source, "");
  }
  if (q.contains("quant_method")) {
    const std::string m = string_field(q, "quant_method", source, "");
    if (m != "modelopt") unsupported(source, "quant_method \"" + m.substr(0, 40) + "\" with a ModelOpt quant_algo");
  }
  c.method_name = "modelopt";
  if (!sec.contains("quant_algo")) bad(source, path + "quant_algo", "a string", json());
  const std::string algo = string_field(sec, "quant_algo", source, path);
  if (algo != "NVFP4")
    unsupported(source, "ModelOpt quant_algo \"" + algo.substr(0, 40) + "\" (ModelOpt NVFP4 checkpoints are read)");
  c.method = QuantMethod::kNvfp4;
  c.group_size = 16;
  c.nvfp4_codes = "weight";
  c.nvfp4_global = "weight_scale_2";
  nvfp4_group_size(sec, source, path, c);
  if (sec.contains("kv_cache_quant_algo") && !sec["kv_cache_quant_algo"].is_null()) {
    // FP8 KV cache scales (k_scale / v_scale): not read; the KV cache keeps FreeToken's own types.
    const std::string kv = string_field(sec, "kv_cache_quant_algo", source, path);
    if (kv != "FP8") unsupported(source, path + "kv_cache_quant_algo \"" + kv.substr(0, 40) + "\"");
  }
  if (!nested && q.contains("kv_cache_scheme") && !is_null_or_empty(q["kv_cache_scheme"])) {
    const json& kv = q["kv_cache_scheme"];
    if (!kv.is_object() || kv.value("num_bits", json()) != json(8) || kv.value("type", json()) != json("float"))
      unsupported(source, "kv_cache_scheme " + kv.dump().substr(0, 80) + " (an 8-bit float KV scheme is ignored)");
  }
  if (!nested && q.contains("config_groups") && !q["config_groups"].is_null()) {
    const json& groups = q["config_groups"];
    if (!groups.is_object()) bad(source, "config_groups", "an object of quantization groups", groups);
    for (auto g = groups.begin(); g != groups.end(); ++g) {
      const std::string gp = "config_groups." + g.key() + ".";
      if (!g->is_object()) bad(source, gp.substr(0, gp.size() - 1), "an object", *g);
      check_keys(*g, {"targets", "weights", "input_activations", "output_activations"}, source, gp);
      if (g->contains("output_activations") && !(*g)["output_activations"].is_null())
        unsupported(source, gp + "output_activations");
      // input_activations (NVFP4 activations with input_scale): not quantized here, weight-only use.
      if (!g->contains("weights") || !(*g)["weights"].is_object())
        bad(source, gp + "weights", "an object", g->value("weights", json()));
      const json& w = (*g)["weights"];
      check_keys(w, {"num_bits", "type", "group_size", "dynamic", "symmetric", "strategy", "observer", "observer_kwargs"},
                 source, gp + "weights.");
      const json nb = w.value("num_bits", json()), ty = w.value("type", json());
      if (nb != json(4) || ty != json("float"))
        unsupported(source, gp + "weights: num_bits " + nb.dump() + " type " + ty.dump() + " (NVFP4: 4-bit float)");
      if (w.contains("dynamic") && w["dynamic"] != json(false)) unsupported(source, gp + "weights.dynamic " + w["dynamic"].dump());
      nvfp4_group_size(w, source, gp + "weights.", c);
    }
  }
  glob_list(sec, "exclude_modules", source, path, c);
  if (!nested) glob_list(q, "ignore", source, "", c);
}

/** Whether glob `p` ('*' matches any text, every other character itself) matches all of `s`. */
bool glob_match(std::string_view p, std::string_view s) {
  size_t pi = 0, si = 0, star = std::string_view::npos, mark = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star = pi++;
      mark = si;
    } else if (pi < p.size() && p[pi] == s[si]) {
      ++pi, ++si;
    } else if (star != std::string_view::npos) {
      pi = star + 1;
      si = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

/** Whether compiled pattern `re` matches a prefix of `name` (Python's re.match); throws when the match
 *  runs past PCRE2's limits (a pattern that backtracks without end). */
bool regex_prefix(const void* re, const std::string& pattern, std::string_view name) {
  auto* code = static_cast<pcre2_code*>(const_cast<void*>(re));
  std::unique_ptr<pcre2_match_context, void (*)(pcre2_match_context*)> ctx(pcre2_match_context_create(nullptr),
                                                                          pcre2_match_context_free);
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> md(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  if (!ctx || !md) fail(ErrorCode::kInternal, "quantization_config: out of memory matching a module pattern");
  pcre2_set_match_limit(ctx.get(), 100000);
  pcre2_set_depth_limit(ctx.get(), 1000);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(name.data()), name.size(), 0, PCRE2_ANCHORED,
                             md.get(), ctx.get());
  if (rc >= 0) return true;
  if (rc == PCRE2_ERROR_NOMATCH) return false;
  fail(ErrorCode::kInvalidFile, "quantization_config: module pattern \"{}\" cannot be matched against {} (PCRE2 error {})",
       pattern.substr(0, 80), name, rc);
}

}  // namespace

bool QuantConfig::converts(std::string_view module) const {
  if (method == QuantMethod::kNone) return false;
  if (glob_patterns) {  // ModelOpt (vLLM is_layer_excluded): the whole name or one of its parts
    for (const std::string& p : not_converted) {
      if (glob_match(p, module)) return false;
      for (size_t at = 0; at <= module.size();) {
        const size_t dot = std::min(module.find('.', at), module.size());
        if (glob_match(p, module.substr(at, dot - at))) return false;
        at = dot + 1;
      }
    }
    return true;
  }
  for (size_t i = 0; i < not_converted.size(); ++i) {
    const std::string& p = not_converted[i];
    // transformers' should_convert_module: the name ends with the pattern, or re.match(pattern) (a
    // prefix); compressed-tensors' "re:" entries: re.match of the expression.
    if (p.rfind("re:", 0) != 0 && module.size() >= p.size() && module.substr(module.size() - p.size()) == p)
      return false;
    std::shared_ptr<const void> own;
    const void* re = compiled.size() == not_converted.size() ? compiled[i].get() : nullptr;
    if (re == nullptr) {
      std::string error;
      own = compile_pattern(regex_text(p), &error);
      if (!own) fail(ErrorCode::kInvalidFile, "quantization_config: \"{}\" is not a valid regular expression ({})",
                     p.substr(0, 80), error);
      re = own.get();
    }
    if (regex_prefix(re, p, module)) return false;
  }
  return true;
}

QuantConfig parse_quant_config(const nlohmann::json& config, const std::string& source) {
  QuantConfig c;
  if (!config.is_object()) return c;
  const json* q = nullptr;
  if (config.contains("quantization_config")) q = &config["quantization_config"];
  else if (config.contains("text_config") && config["text_config"].is_object() &&
           config["text_config"].contains("quantization_config"))
    q = &config["text_config"]["quantization_config"];
  if (q == nullptr || q->is_null()) return c;
  if (!q->is_object()) bad(source, "", "an object", *q);
  if (q->contains("quant_algo") || q->contains("quantization")) {  // NVIDIA ModelOpt
    parse_modelopt(*q, source, c);
    return c;
  }
  if (!q->contains("quant_method")) bad(source, "quant_method", "a string", json());
  const std::string method = string_field(*q, "quant_method", source, "");
  c.method_name = method;
  if (method == "fp8") parse_fp8(*q, source, c);
  else if (method == "compressed-tensors") parse_compressed_tensors(*q, source, c);
  else if (method == "mxfp4") parse_mxfp4(*q, source, c);
  else if (method == "modelopt") bad(source, "quant_algo", "a string (ModelOpt's algorithm, e.g. \"NVFP4\")", json());
  else unsupported(source, "quant_method \"" + method.substr(0, 40) + "\"");
  return c;
}

}  // namespace ft
