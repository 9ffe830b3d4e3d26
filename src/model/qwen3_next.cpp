// Qwen3-Next and Qwen3.5 (Qwen Team, 2025; transformers Qwen3NextForCausalLM, Qwen3_5ForCausalLM,
// Qwen3_5MoeForCausalLM): a hybrid of Gated DeltaNet linear attention (model/gated_delta_net.h; HF
// layer_types "linear_attention", by default three of every four layers) and gated full attention,
// each followed by a SwiGLU MLP (Qwen3.5) or a MoE FFN with a sigmoid-gated shared expert.
//   h = x + Mixer(RMSNorm(x))     Mixer = Gated DeltaNet, or attention with QK-norm, partial NeoX
//                                 RoPE and out = o_proj(attn * sigmoid(gate)), gate from q_proj
//   x = h + FFN(RMSNorm(h))       FFN = sum_{e in top-k(softmax)} p_e Expert_e + sigmoid(w_g h) Shared
// Every RMSNorm but the DeltaNet's gated one stores its weight zero-centred (scale 1 + w). Qwen3-Next
// keeps q/k/v/z and b/a fused per key head (in_proj_qkvz, in_proj_ba), Qwen3.5 separate; the loader
// takes both apart into one layout. Qwen3.5-MoE's router always renormalises its top-k.
// GGUF (llama.cpp's qwen3next, as its converter writes it): the norms hold 1 + w, q/k/v and z split
// into attn_qkv and attn_gate, b and a fused per key head in ssm_ba, A as ssm_a = -exp(A_log), dt_bias
// as ssm_dt.bias, the conv taps ssm_conv1d [C, K]; Qwen3.5's (qwen35, qwen35moe) has b and a apart
// (ssm_beta, ssm_alpha) and its value heads tiled over the key heads (GatedDeltaParams::v_tiled).
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_qwen3_next(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = RopeMode::kNeox;
  c.qk_norm = QkNorm::kPerHead;
  c.norm_weight_offset = ld.is_gguf() ? 0.0f : 1.0f;  // llama.cpp's converter stores 1 + w
  c.attn_output_gate = true;
  if (c.arch == "qwen3_5_moe") c.norm_topk_prob = true;
  if (c.layer_linear.empty())
    fail(ErrorCode::kInvalidFile, "{} model config: no linear-attention layers (layer_types or linear_num_value_heads)",
         c.arch);
  DecoderSpec spec;
  spec.moe = c.n_expert > 0;
  spec.shared_expert = c.n_ff_shexp > 0;  // mlp.shared_expert, gated by mlp.shared_expert_gate
  return build_decoder(std::move(c), ld, ops, spec);
}

}  // namespace ft
