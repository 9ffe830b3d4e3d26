// OLMoE (Muennighoff et al., 2024, "OLMoE: Open Mixture-of-Experts Language Models"): a pre-norm
// decoder with QK-norm over the whole q and k projections (RMSNorm weights [n_head * head_dim] and
// [n_kv * head_dim], before the heads are split and RoPE'd) and a sparse MoE FFN, softmax router,
// top-k probabilities used as they are (norm_topk_prob false), no shared expert. Per layer
//   h = x + Attn(RMSNorm(x))        q = RoPE(RMSNorm(W_q x)), k = RoPE(RMSNorm(W_k x))
//   x = h + sum_{e in top-k} p_e * Expert_e(RMSNorm(h))
// NeoX RoPE in both formats (llama.cpp does not permute olmoe).
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_olmoe(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = RopeMode::kNeox;
  c.qk_norm = QkNorm::kFull;  // q_norm [n_head * hd], k_norm [n_kv * hd]
  if (ld.is_gguf()) c.norm_topk_prob = false;
  DecoderSpec spec;
  spec.moe = true;
  return build_decoder(std::move(c), ld, ops, spec);
}

}  // namespace ft
