#include "formats/hf_config.h"

#include <cerrno>
#include <cmath>
#include <filesystem>
#include <initializer_list>

#include "util/error.h"
#include "util/read_file.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

// The first of `keys` present (non-null) in `j`, or nullptr.
const nlohmann::json* first_of(const nlohmann::json& j, std::initializer_list<const char*> keys, const char** which) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it != j.end() && !it->is_null()) {
      if (which) *which = k;
      return &*it;
    }
  }
  return nullptr;
}

int64_t to_int(const nlohmann::json& v, const std::string& source, const char* key) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e15) return static_cast<int64_t>(d);
  }
  fail(ErrorCode::kInvalidFile, "{}: {}: expected an integer, got {}", source, key, v.dump());
}

bool get_int(const nlohmann::json& j, std::initializer_list<const char*> keys, const std::string& source, int64_t& out) {
  const char* which = nullptr;
  const nlohmann::json* v = first_of(j, keys, &which);
  if (!v) return false;
  out = to_int(*v, source, which);
  return true;
}

bool get_double(const nlohmann::json& j, std::initializer_list<const char*> keys, const std::string& source, double& out) {
  const char* which = nullptr;
  const nlohmann::json* v = first_of(j, keys, &which);
  if (!v) return false;
  if (!v->is_number()) fail(ErrorCode::kInvalidFile, "{}: {}: expected a number, got {}", source, which, v->dump());
  out = v->get<double>();
  return true;
}

// An id or a list of ids (eos_token_id may be either).
std::vector<int64_t> get_ids(const nlohmann::json& j, const char* key, const std::string& source) {
  std::vector<int64_t> out;
  const nlohmann::json* v = first_of(j, {key}, nullptr);
  if (!v) return out;
  if (v->is_array()) {
    for (const auto& x : *v) out.push_back(to_int(x, source, key));
  } else {
    out.push_back(to_int(*v, source, key));
  }
  return out;
}

double rope_theta_of(const nlohmann::json& c, const std::string& source) {
  double theta = 0;
  if (get_double(c, {"rope_theta"}, source, theta)) return theta;
  auto rp = c.find("rope_parameters");
  if (rp == c.end() || !rp->is_object()) return 0;
  if (get_double(*rp, {"rope_theta"}, source + ": rope_parameters", theta)) return theta;
  // Per-attention-type parameters (Gemma-style "full_attention", DeepSeek-V4 "main").
  for (const char* sub : {"full_attention", "main"}) {
    auto s = rp->find(sub);
    if (s != rp->end() && s->is_object() && get_double(*s, {"rope_theta"}, source + ": rope_parameters." + sub, theta))
      return theta;
  }
  return 0;
}

}  // namespace

nlohmann::json read_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    fail(ErrorCode::kInvalidFile, "{}: invalid JSON at offset {}: {}", path, e.byte, e.what());
  } catch (const nlohmann::json::exception& e) {  // out_of_range: a number too large for a double (1e400)
    fail(ErrorCode::kInvalidFile, "{}: invalid JSON: {}", path, e.what());
  }
}

HfConfig parse_hf_config(const nlohmann::json& config, const std::string& source) {
  if (!config.is_object()) fail(ErrorCode::kInvalidFile, "{}: expected a JSON object", source);
  HfConfig h;
  h.raw = config;
  const nlohmann::json* text = &config;
  std::string src = source;
  if (!config.contains("hidden_size") && config.contains("text_config") && config["text_config"].is_object()) {
    text = &config["text_config"];
    src = source + ": text_config";
  }
  const nlohmann::json& c = *text;

  auto str = [&](const nlohmann::json& j, const char* key, std::string& out) {
    const nlohmann::json* v = first_of(j, {key}, nullptr);
    if (!v) return;
    if (!v->is_string()) fail(ErrorCode::kInvalidFile, "{}: {}: expected a string, got {}", source, key, v->dump());
    out = v->get<std::string>();
  };
  str(config, "model_type", h.model_type);
  if (h.model_type.empty()) str(c, "model_type", h.model_type);
  if (const nlohmann::json* a = first_of(config, {"architectures"}, nullptr)) {
    if (!a->is_array()) fail(ErrorCode::kInvalidFile, "{}: architectures: expected a list, got {}", source, a->dump());
    for (const auto& x : *a) {
      if (!x.is_string()) fail(ErrorCode::kInvalidFile, "{}: architectures: expected strings, got {}", source, x.dump());
      h.architectures.push_back(x.get<std::string>());
    }
  }

  auto required = [&](std::initializer_list<const char*> keys, int64_t& out) {
    if (!get_int(c, keys, src, out)) fail(ErrorCode::kInvalidFile, "{}: missing {}", src, *keys.begin());
    if (out <= 0) fail(ErrorCode::kInvalidFile, "{}: {} must be positive, got {}", src, *keys.begin(), out);
  };
  required({"hidden_size", "n_embd", "d_model"}, h.hidden_size);
  required({"num_hidden_layers", "n_layer", "num_layers"}, h.num_hidden_layers);
  required({"num_attention_heads", "n_head", "num_heads"}, h.num_attention_heads);
  required({"vocab_size"}, h.vocab_size);
  get_int(c, {"intermediate_size", "ffn_hidden_size"}, src, h.intermediate_size);
  if (!get_int(c, {"num_key_value_heads", "num_kv_heads", "n_head_kv"}, src, h.num_key_value_heads))
    h.num_key_value_heads = h.num_attention_heads;
  if (!get_int(c, {"head_dim"}, src, h.head_dim)) h.head_dim = h.hidden_size / h.num_attention_heads;
  get_int(c, {"max_position_embeddings", "n_positions", "max_seq_len"}, src, h.max_position_embeddings);
  get_double(c, {"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon"}, src, h.rms_norm_eps);
  h.rope_theta = rope_theta_of(c, src);
  if (const nlohmann::json* t = first_of(config, {"tie_word_embeddings"}, nullptr)) {
    if (!t->is_boolean()) fail(ErrorCode::kInvalidFile, "{}: tie_word_embeddings: expected a bool, got {}", source, t->dump());
    h.tie_word_embeddings = t->get<bool>();
  }
  get_int(c, {"num_experts", "num_local_experts", "n_routed_experts"}, src, h.n_experts);
  get_int(c, {"num_experts_per_tok", "top_k_experts", "moe_topk"}, src, h.n_experts_used);
  get_int(c, {"moe_intermediate_size"}, src, h.moe_intermediate_size);
  // A config can carry expert fields while its MoE block is switched off (Gemma 4's enable_moe_block).
  if (auto e = c.find("enable_moe_block"); e != c.end() && e->is_boolean() && !e->get<bool>()) {
    h.n_experts = 0;
    h.n_experts_used = 0;
  }
  if (h.n_experts < 0 || h.n_experts_used < 0 || h.n_experts_used > h.n_experts)
    fail(ErrorCode::kInvalidFile, "{}: experts per token {} with {} experts", src, h.n_experts_used, h.n_experts);

  std::vector<int64_t> bos = get_ids(config, "bos_token_id", source);
  if (bos.empty() && text != &config) bos = get_ids(c, "bos_token_id", src);
  if (!bos.empty()) h.bos_token_id = bos.front();
  h.eos_token_ids = get_ids(config, "eos_token_id", source);
  if (h.eos_token_ids.empty() && text != &config) h.eos_token_ids = get_ids(c, "eos_token_id", src);
  return h;
}

HfConfig read_hf_config(const std::string& folder) {
  fs::path dir(folder);
  std::string cfg_path = (dir / "config.json").string();
  HfConfig h = parse_hf_config(read_json_file(cfg_path), cfg_path);
  if (fs::path g = dir / "generation_config.json"; fs::exists(g)) {
    h.generation_config = read_json_file(g.string());
    if (!h.generation_config.is_object())
      fail(ErrorCode::kInvalidFile, "{}: expected a JSON object", g.string());
    std::vector<int64_t> eos = get_ids(h.generation_config, "eos_token_id", g.string());
    if (!eos.empty()) h.eos_token_ids = eos;
    std::vector<int64_t> bos = get_ids(h.generation_config, "bos_token_id", g.string());
    if (h.bos_token_id < 0 && !bos.empty()) h.bos_token_id = bos.front();
  }
  if (fs::path t = dir / "tokenizer_config.json"; fs::exists(t)) {
    h.tokenizer_config = read_json_file(t.string());
    if (!h.tokenizer_config.is_object())
      fail(ErrorCode::kInvalidFile, "{}: expected a JSON object", t.string());
  }
  return h;
}

}  // namespace ft
