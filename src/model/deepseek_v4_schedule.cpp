#include "model/deepseek_v4_schedule.h"

#include "util/error.h"

namespace ft {
namespace {

using nlohmann::json;

const json* present(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  return it == cfg.end() || it->is_null() ? nullptr : &*it;
}

int64_t integer(const json& v, const std::string& where) {
  if (!v.is_number_integer()) fail(ErrorCode::kInvalidFile, "config.json: {}: expected an integer, got {}", where, v.dump());
  return v.get<int64_t>();
}

std::vector<std::string> strings(const json& v, const char* key, int64_t n) {
  if (!v.is_array() || static_cast<int64_t>(v.size()) < n)
    fail(ErrorCode::kInvalidFile, "config.json: {} must list {} layers", key, n);
  std::vector<std::string> out;
  for (int64_t l = 0; l < n; ++l) {
    const json& e = v[static_cast<size_t>(l)];
    if (!e.is_string()) fail(ErrorCode::kInvalidFile, "config.json: {}[{}]: expected a string, got {}", key, l, e.dump());
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

DeepseekV4Schedule deepseek_v4_schedule(const json& cfg, int64_t n) {
  DeepseekV4Schedule s;
  if (const json* r = present(cfg, "compress_rates")) {
    if (!r->is_object()) fail(ErrorCode::kInvalidFile, "config.json: compress_rates: expected an object");
    if (const json* v = present(*r, "compressed_sparse_attention")) s.rate_csa = integer(*v, "compress_rates.compressed_sparse_attention");
    if (const json* v = present(*r, "heavily_compressed_attention")) s.rate_hca = integer(*v, "compress_rates.heavily_compressed_attention");
  }
  if (const json* v = present(cfg, "compress_rate_csa")) s.rate_csa = integer(*v, "compress_rate_csa");
  if (const json* v = present(cfg, "compress_rate_hca")) s.rate_hca = integer(*v, "compress_rate_hca");
  if (s.rate_csa < 1 || s.rate_hca < 1)
    fail(ErrorCode::kInvalidFile, "config.json: compress rates {} (CSA) and {} (HCA) must be >= 1", s.rate_csa, s.rate_hca);

  if (const json* lt = present(cfg, "layer_types")) {
    s.layer_types = strings(*lt, "layer_types", n);
  } else if (const json* cr = present(cfg, "compress_ratios")) {
    if (!cr->is_array() || static_cast<int64_t>(cr->size()) < n)
      fail(ErrorCode::kInvalidFile, "config.json: compress_ratios must list {} layers", n);
    for (int64_t l = 0; l < n; ++l) {
      const int64_t r = integer((*cr)[static_cast<size_t>(l)], fmt::format("compress_ratios[{}]", l));
      if (r == 0) s.layer_types.emplace_back("sliding_attention");
      else if (r == 4) s.layer_types.emplace_back("compressed_sparse_attention");
      else if (r == 128) s.layer_types.emplace_back("heavily_compressed_attention");
      else fail(ErrorCode::kInvalidFile, "config.json: compress_ratios[{}] {}: DeepseekV4Config maps 0, 4 and 128", l, r);
    }
  } else {
    for (int64_t l = 0; l < n; ++l)
      s.layer_types.emplace_back(l < 2 || (l - 2) % 2 == 0 ? "heavily_compressed_attention" : "compressed_sparse_attention");
  }
  for (int64_t l = 0; l < n; ++l) {
    const std::string& t = s.layer_types[static_cast<size_t>(l)];
    if (t != "sliding_attention" && t != "compressed_sparse_attention" && t != "heavily_compressed_attention")
      fail(ErrorCode::kUnsupported, "config.json: layer_types[{}] '{}': deepseek_v4 has sliding_attention, "
           "compressed_sparse_attention and heavily_compressed_attention layers", l, t);
  }

  if (const json* mt = present(cfg, "mlp_layer_types")) {
    s.mlp_layer_types = strings(*mt, "mlp_layer_types", n);
  } else {
    const json* h = present(cfg, "num_hash_layers");
    const int64_t n_hash = h ? integer(*h, "num_hash_layers") : 3;
    for (int64_t l = 0; l < n; ++l) s.mlp_layer_types.emplace_back(l < n_hash ? "hash_moe" : "moe");
  }
  for (int64_t l = 0; l < n; ++l) {
    const std::string& m = s.mlp_layer_types[static_cast<size_t>(l)];
    if (m != "hash_moe" && m != "moe")
      fail(ErrorCode::kInvalidFile, "config.json: mlp_layer_types[{}] '{}' is not hash_moe or moe", l, m);
  }
  return s;
}

}  // namespace ft
