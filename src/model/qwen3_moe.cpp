// Qwen3-MoE (Qwen Team, 2025, "Qwen3 Technical Report"): the Qwen3 decoder (QK-norm per head, no
// QKV bias, NeoX RoPE) with a sparse MoE FFN and no shared expert. Per layer
//   h = x + Attn(RMSNorm(x))
//   x = h + sum_{e in top-k(softmax(W_r h'))} p_e * Expert_e(h'),   h' = RMSNorm(h)
// with the k probabilities renormalised to sum 1 when norm_topk_prob (llama.cpp always does for
// qwen3moe GGUFs). Layers in mlp_only_layers or off the decoder_sparse_step use a dense SwiGLU MLP.
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_qwen3_moe(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = RopeMode::kNeox;
  c.qk_norm = QkNorm::kPerHead;
  if (ld.is_gguf()) c.norm_topk_prob = true;
  DecoderSpec spec;
  spec.moe = true;  // router mlp.gate [E, H]; experts mlp.experts.E.{gate,up,down}_proj
  return build_decoder(std::move(c), ld, ops, spec);
}

}  // namespace ft
