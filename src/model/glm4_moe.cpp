// GLM-4.5 / 4.6 / 4.7 (Zhipu AI, 2025, "GLM-4.5: Agentic, Reasoning, and Coding (ARC) Foundation
// Models"; transformers' Glm4MoeForCausalLM): the pre-norm decoder with partial NeoX RoPE
// (partial_rotary_factor of each head), optional q/k/v bias and per-head QK-norm (use_qk_norm), the
// first `first_k_dense_replace` layers dense, the rest a DeepSeek-V3-style MoE:
//   s = sigmoid(W_r h'),  experts = top-k of s + e_score_correction_bias within the topk_group best
//   of n_group groups,  x = h + routed_scaling_factor * sum_e (s_e / sum s) Expert_e(h') + Shared(h')
// with n_shared_experts ungated shared experts of the routed width. MTP layers (num_nextn_predict_layers)
// are not loaded.
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_glm4_moe(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = RopeMode::kNeox;
  c.router_scoring = RouterScoring::kSigmoid;
  if (ld.is_gguf()) {  // GGUF has no flags for these: llama.cpp loads the tensors when present
    if (ld.has(layer_weight(0, "attn_q_norm", ""))) c.qk_norm = QkNorm::kPerHead;
    if (ld.has(layer_weight(0, "attn_q", "", "bias"))) c.attn_bias = true;  // GLM-4.5's attention_bias
  }
  DecoderSpec spec = deepseek_moe_spec(c);  // mlp.gate + bias, mlp.experts.E.*, mlp.shared_experts
  spec.ffn_norm = "post_attention_norm";    // llama.cpp's name of post_attention_layernorm for glm4moe
  return build_decoder(std::move(c), ld, ops, spec);
}

}  // namespace ft
