// Llama (Touvron et al., 2023, "LLaMA: Open and Efficient Foundation Language Models"; Llama 2/3)
// and Mistral: a pre-norm decoder. Per layer
//   h = x + Attn(RMSNorm(x))        GQA attention with RoPE
//   x = h + MLP(RMSNorm(h))         SwiGLU: down(silu(gate x) * up x)
// then RMSNorm and the LM head.
// RoPE layout: HF checkpoints use NeoX halves (rotate_half). llama.cpp's converter permutes the
// Q/K rows of `llama` GGUFs so that GGML's normal (adjacent-pair) mode gives the same result, so
// GGUF files run in normal mode, with the rows as stored (no un-permuting at load).
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_llama(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = ld.is_gguf() ? RopeMode::kNormal : RopeMode::kNeox;
  return build_decoder(std::move(c), ld, ops, DecoderSpec{});  // dense SwiGLU: gate, up [F, H]; down [H, F]
}

}  // namespace ft
