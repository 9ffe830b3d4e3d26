#pragma once
// DeepSeek-V4's per-layer schedule as transformers 5.17's DeepseekV4Config.__post_init__ derives it:
// layer_types (attention: sliding_attention / compressed_sparse_attention / heavily_compressed_attention),
// mlp_layer_types (hash_moe / moe) and compress_rates, from a saved config's lists or from the upstream
// config.json's legacy keys:
//   compress_rates: given, else {CSA 4, HCA 128}; compress_rate_csa / compress_rate_hca override;
//   layer_types: given, else compress_ratios mapped 0 -> sliding_attention, 4 -> compressed_sparse_attention,
//     128 -> heavily_compressed_attention, else 2 x heavily_compressed_attention then CSA / HCA alternating
//     (CSA on odd indices of the rest);
//   mlp_layer_types: given, else num_hash_layers (default 3) x hash_moe then moe;
//   each list cut to num_hidden_layers.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft {

struct DeepseekV4Schedule {
  std::vector<std::string> layer_types, mlp_layer_types;  // n_layer entries each
  int64_t rate_csa = 4, rate_hca = 128;
};

/** The schedule of `cfg` (a DeepSeek-V4 config.json) for its first `n_layer` layers. Throws
 *  ft::Error(kInvalidFile) naming the field for a list shorter than n_layer, an entry of the wrong
 *  type or a compress_ratios value other than 0, 4 and 128, kUnsupported for an unknown layer type. */
DeepseekV4Schedule deepseek_v4_schedule(const nlohmann::json& cfg, int64_t n_layer);

}  // namespace ft
