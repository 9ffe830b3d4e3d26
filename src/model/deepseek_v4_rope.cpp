#include "model/deepseek_v4_rope.h"

#include <cmath>
#include <string>

#include "util/error.h"

namespace ft {
namespace {

using nlohmann::json;

/** obj[key] as a number, or `def` when absent or null. */
double number_or(const json& obj, const char* key, double def, const char* where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return def;
  if (!it->is_number()) fail(ErrorCode::kInvalidFile, "config.json: {}.{}: expected a number, got {}", where, key, it->dump());
  return it->get<double>();
}

/** One kind from its rope_parameters dict `d` (`where` names it in errors). */
DeepseekV4RopeKind read_kind(const json& d, const json& cfg, const char* where, double def_theta, double def_partial) {
  DeepseekV4RopeKind k;
  k.type = d.value("rope_type", d.value("type", std::string("default")));
  k.theta = number_or(d, "rope_theta", def_theta, where);
  const double partial = number_or(d, "partial_rotary_factor", def_partial, where);
  const int64_t head_dim = cfg.at("head_dim").get<int64_t>();
  k.n_rot = static_cast<int64_t>(static_cast<double>(head_dim) * partial);
  if (!(k.theta > 0.0) || k.n_rot < 2 || k.n_rot % 2 != 0 || k.n_rot > head_dim)
    fail(ErrorCode::kInvalidFile, "config.json: {}: rope_theta {} and partial_rotary_factor {} (rotary dims {} of "
         "head_dim {}) must give a positive theta and an even width in [2, head_dim]", where, k.theta, partial, k.n_rot,
         head_dim);
  ModelConfig c;
  c.arch = "deepseek_v4";
  c.head_dim = head_dim;
  c.n_rot = k.n_rot;
  c.rope_theta = k.theta;
  const double max_pos = number_or(cfg, "max_position_embeddings", 0.0, "config");
  c.n_ctx_train = static_cast<int64_t>(max_pos);
  RopeScaling& s = c.rope_scaling;
  if (k.type == "yarn") {
    s.type = "yarn";
    s.original_max_position = static_cast<int64_t>(number_or(d, "original_max_position_embeddings", max_pos, where));
    if (s.original_max_position <= 0)
      fail(ErrorCode::kInvalidFile, "config.json: {}: yarn needs original_max_position_embeddings (or "
           "max_position_embeddings) > 0", where);
    s.factor = number_or(d, "factor", max_pos / static_cast<double>(s.original_max_position), where);
    if (!(s.factor >= 1.0)) fail(ErrorCode::kInvalidFile, "config.json: {}.factor {} must be >= 1 (yarn)", where, s.factor);
    // transformers: `rope_parameters.get("beta_fast") or 32` (0 and null alike take the default)
    s.beta_fast = number_or(d, "beta_fast", 0.0, where);
    s.beta_slow = number_or(d, "beta_slow", 0.0, where);
    if (s.beta_fast == 0.0) s.beta_fast = 32.0;
    if (s.beta_slow == 0.0) s.beta_slow = 1.0;
    s.mscale = number_or(d, "mscale", 0.0, where);
    s.mscale_all_dim = number_or(d, "mscale_all_dim", 0.0, where);
    s.attention_factor = number_or(d, "attention_factor", 0.0, where);  // 0: derived by rope_table
    if (auto it = d.find("truncate"); it != d.end() && it->is_boolean()) s.truncate = it->get<bool>();
  } else if (k.type != "default") {
    fail(ErrorCode::kUnsupported, "config.json: {}.rope_type '{}': deepseek_v4 supports default and yarn", where, k.type);
  }
  k.table = rope_table(c);
  return k;
}

}  // namespace

DeepseekV4Rope deepseek_v4_rope(const json& cfg) {
  if (!cfg.contains("head_dim") || !cfg.at("head_dim").is_number_integer())
    fail(ErrorCode::kInvalidFile, "config.json: head_dim: missing or not an integer (deepseek_v4 needs it)");
  const double rope_theta = number_or(cfg, "rope_theta", 10000.0, "config");
  const double compress_theta = number_or(cfg, "compress_rope_theta", 160000.0, "config");
  // DeepseekV4Config: partial_rotary_factor, else qk_rope_head_dim / head_dim, else 64 / 512.
  const double head_dim = cfg.at("head_dim").get<double>();
  const double partial =
      number_or(cfg, "partial_rotary_factor", number_or(cfg, "qk_rope_head_dim", head_dim / 8.0, "config") / head_dim,
                "config");
  const json* rp = nullptr;
  if (auto it = cfg.find("rope_parameters"); it != cfg.end() && it->is_object() && !it->empty()) rp = &*it;
  else if (auto rs = cfg.find("rope_scaling"); rs != cfg.end() && rs->is_object()) rp = &*rs;
  DeepseekV4Rope out;
  if (rp && rp->contains("main") && rp->contains("compress") && (*rp)["main"].is_object() &&
      (*rp)["compress"].is_object()) {
    out.main = read_kind((*rp)["main"], cfg, "rope_parameters.main", rope_theta, partial);
    out.compress = read_kind((*rp)["compress"], cfg, "rope_parameters.compress", compress_theta, partial);
    return out;
  }
  // Upstream form: main is the plain RoPE; compress takes the flat dict's scaling at compress_rope_theta.
  json main = {{"rope_type", "default"}, {"rope_theta", rope_theta}, {"partial_rotary_factor", partial}};
  json compress = json::object();
  if (rp)
    for (auto it = rp->begin(); it != rp->end(); ++it)
      if (it.key() != "main" && it.key() != "compress") compress[it.key()] = it.value();
  if (!compress.contains("rope_type") && compress.contains("type")) compress["rope_type"] = compress["type"];
  compress["rope_theta"] = compress_theta;
  compress["partial_rotary_factor"] = partial;
  if (!compress.contains("rope_type")) compress["rope_type"] = "default";
  if (compress["rope_type"] == "yarn" && !compress.contains("attention_factor")) compress["attention_factor"] = 1.0;
  out.main = read_kind(main, cfg, "rope_parameters.main", rope_theta, partial);
  out.compress = read_kind(compress, cfg, "rope_parameters.compress", compress_theta, partial);
  return out;
}

}  // namespace ft
