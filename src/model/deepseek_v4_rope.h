#pragma once
// DeepSeek-V4's two RoPE kinds, as transformers 5.17 builds them (DeepseekV4Config.__post_init__ and
// DeepseekV4RotaryEmbedding): "main" (sliding_attention layers; default RoPE at rope_theta) and
// "compress" (compressed_sparse_attention / heavily_compressed_attention layers, their compressors and
// the indexer; compress_rope_theta, YaRN in the released checkpoints).
//
// A saved config holds rope_parameters = {"main": {...}, "compress": {...}} and each is read as is.
// Otherwise (an upstream config.json: rope_scaling, or flat rope_parameters) the V4 config's rule
// applies: main = default RoPE at rope_theta; compress = the flat dict's scaling keys at
// compress_rope_theta, and a YaRN compress gets attention_factor 1.0 unless it names one (the
// reference implementation does not scale cos/sin by YaRN's mscale).
// YaRN follows transformers' _compute_yarn_parameters: factor as given (max_position_embeddings /
// original_max_position_embeddings when null), original_max_position_embeddings defaulting to
// max_position_embeddings, beta_fast 32 / beta_slow 1 when unset or 0, attention_factor when null =
// mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are set, else 0.1 ln(factor) + 1.
#include <cstdint>

#include <nlohmann/json.hpp>

#include "model/rope.h"

namespace ft {

struct DeepseekV4RopeKind {
  RopeTable table;       // inv_freq [n_rot / 2] and the factor cos / sin are multiplied by
  int64_t n_rot = 0;     // int(head_dim * partial_rotary_factor): the rotated tail of a head
  double theta = 0.0;    // rope_theta of this kind
  std::string type;      // "default" or "yarn"
};

struct DeepseekV4Rope {
  DeepseekV4RopeKind main, compress;
};

/** Both RoPE kinds of a DeepSeek-V4 config.json (`cfg`; head_dim, rope_theta, compress_rope_theta,
 *  partial_rotary_factor, max_position_embeddings, rope_parameters or rope_scaling). Throws
 *  ft::Error(kUnsupported) naming a rope_type other than default and yarn, kInvalidFile for a bad
 *  field (a factor or rotary width out of range). */
DeepseekV4Rope deepseek_v4_rope(const nlohmann::json& cfg);

}  // namespace ft
