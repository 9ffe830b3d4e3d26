// rope_tail: DeepSeek-V4's RoPE on the last n_rot dims of a head, adjacent pairs (transformers'
// DeepseekV4 apply_rotary_pos_emb: rotate_half over x[..., 0::2] / x[..., 1::2] of the rope slice).
// A helper of the V4 ops (compress_kv, indexer_topk, attention_compressed); angle in fp32 as HF.
#include <cmath>

#include "backend/cpu/cpu_ops.h"

namespace ft::cpu {

void rope_tail(const RopeParams& p, float* x, double pos, float sign) {
  const int64_t half = p.n_rot / 2, d0 = p.head_dim - p.n_rot;
  const float* inv = p.inv_freq.ptr<float>();
  const float fp = static_cast<float>(pos);
  for (int64_t i = 0; i < half; ++i) {
    const float angle = fp * inv[i];
    const float c = std::cos(angle) * p.attn_factor, s = sign * std::sin(angle) * p.attn_factor;
    float* r = x + d0 + 2 * i;
    const float a = r[0], b = r[1];
    r[0] = a * c - b * s;
    r[1] = b * c + a * s;
  }
}

}  // namespace ft::cpu
