// Qwen3 (Qwen Team, 2025, "Qwen3 Technical Report"): the Llama decoder with QK-norm, an RMSNorm over
// each head of q and k (weights [head_dim]) before RoPE, and no QKV bias. Per layer
//   h = x + Attn(RMSNorm(x))        q = RoPE(RMSNorm_head(W_q x)), k likewise, GQA
//   x = h + MLP(RMSNorm(h))         SwiGLU
// Small Qwen3 models tie the LM head to the embedding table (tie_word_embeddings; GGUF: no
// output.weight). NeoX RoPE in both formats.
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_qwen3(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = RopeMode::kNeox;
  c.qk_norm = QkNorm::kPerHead;  // q_norm, k_norm: [head_dim]
  return build_decoder(std::move(c), ld, ops, DecoderSpec{});
}

}  // namespace ft
