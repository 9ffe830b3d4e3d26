#pragma once
// Host-side RoPE frequencies: the scaling variants (default, linear, llama3, yarn) folded into one
// inverse-frequency table and an attention factor, once at load, following transformers'
// ROPE_INIT_FUNCTIONS (modeling_rope_utils.py).
#include <vector>

#include "model/config.h"

namespace ft {

struct RopeTable {
  std::vector<float> inv_freq;  // [n_rot / 2]: angle of pair i at position p is p * inv_freq[i]
  float attn_factor = 1.0f;     // multiplies cos and sin (YaRN)
};

/** inv_freq[i] = 1 / theta^(2i / n_rot), adjusted by config.rope_scaling. `freq_factors` (optional,
 *  [n_rot / 2]: GGUF `rope_freqs.weight`, llama3-style) divides each frequency. Throws
 *  ft::Error(kUnsupported) naming an unknown scaling type. */
RopeTable rope_table(const ModelConfig& config, const std::vector<float>& freq_factors = {});

}  // namespace ft
