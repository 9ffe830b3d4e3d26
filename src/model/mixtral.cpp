// Mixtral (Jiang et al., 2024, "Mixtral of Experts"): the Mistral/Llama decoder (no QKV bias, no
// QK-norm) whose FFN is a sparse MoE of 8 SwiGLU experts (w1 = gate, w3 = up, w2 = down), top-2,
// with the two router probabilities renormalised (softmax over the selected logits). Per layer
//   h = x + Attn(RMSNorm(x))
//   x = h + sum_{e in top-k} p_e * Expert_e(RMSNorm(h))
// llama.cpp stores Mixtral as GGUF architecture `llama` (with experts) and permutes Q/K rows for
// GGML's normal RoPE: GGUF runs in normal mode, HF in NeoX mode.
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_mixtral(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = ld.is_gguf() ? RopeMode::kNormal : RopeMode::kNeox;
  c.norm_topk_prob = true;  // softmax over the top-k logits == renormalised top-k probabilities
  DecoderSpec spec;
  spec.moe = true;
  spec.router = "block_sparse_moe.gate";  // [E, H]
  // HF names: block_sparse_moe.experts.E.w1 (gate), w3 (up), w2 (down).
  spec.experts = {"block_sparse_moe.experts.{}.w1", "block_sparse_moe.experts.{}.w3", "block_sparse_moe.experts.{}.w2"};
  return build_decoder(std::move(c), ld, ops, spec);
}

}  // namespace ft
