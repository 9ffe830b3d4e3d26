// Qwen2 (Qwen Team, 2024, "Qwen2 Technical Report"): the Llama decoder with biases on the Q, K and V
// projections. Per layer
//   h = x + Attn(RMSNorm(x))        GQA attention, q/k/v = W x + b, RoPE (NeoX halves)
//   x = h + MLP(RMSNorm(h))         SwiGLU
// Optional sliding-window attention (use_sliding_window). GGUF qwen2 files are not permuted, so both
// formats use NeoX RoPE.
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_qwen2(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = RopeMode::kNeox;
  c.attn_bias = true;  // q_proj/k_proj/v_proj carry biases
  return build_decoder(std::move(c), ld, ops, DecoderSpec{});
}

}  // namespace ft
