// Qwen2-MoE (Qwen Team, 2024, "Qwen1.5-MoE" / "Qwen2 Technical Report"): the Qwen2 decoder (QKV bias,
// NeoX RoPE) with a MoE FFN of fine-grained routed experts plus one always-on shared expert whose
// output is scaled by a sigmoid gate. Per layer
//   h = x + Attn(RMSNorm(x))
//   x = h + sum_{e in top-k(softmax(W_r h'))} p_e * Expert_e(h') + sigmoid(w_g . h') * Shared(h'),
// h' = RMSNorm(h); the top-k probabilities are not renormalised unless norm_topk_prob.
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_qwen2_moe(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = RopeMode::kNeox;
  c.attn_bias = true;
  if (ld.is_gguf()) c.norm_topk_prob = false;
  DecoderSpec spec;
  spec.moe = true;
  spec.shared_expert = true;  // mlp.shared_expert.{gate,up,down}_proj + mlp.shared_expert_gate [1, H]
  return build_decoder(std::move(c), ld, ops, spec);
}

}  // namespace ft
