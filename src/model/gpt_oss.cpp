// gpt-oss (OpenAI, 2025, "gpt-oss-120b & gpt-oss-20b Model Card"; transformers GptOssForCausalLM,
// llama.cpp's gpt-oss / LLM_ARCH_OPENAI_MOE): the pre-norm decoder with a MoE FFN in every layer.
//   h = x + Attn(RMSNorm(x))    q/k/v/o with biases; YaRN RoPE (NeoX halves); per-head learned sinks
//                               p_j = exp(s_j) / (exp(sink_h) + sum_i exp(s_i)); layer_types
//                               alternate sliding_window attention (even layers) and full attention
//   x = h + sum_{e in top-k(l)} softmax_k(l)_e * Expert_e(h'),   l = W_r h' + b_r,  h' = RMSNorm(h)
//   Expert_e(v) = W_down (u + 1) * g * sigmoid(alpha g) + b_down,   g = min(W_g v + b_g, limit),
//                 u = clamp(W_u v + b_u, -limit, limit)    (alpha 1.702, limit swiglu_limit = 7)
// The softmax over the k selected logits is softmax scoring with norm_topk_prob. HF stores the experts
// fused and input-major (mlp.experts.gate_up_proj [E, H, 2F] with gate/up interleaved, down_proj
// [E, F, H], and their biases: WeightLoader::host_fused_experts converts them); GGUF as llama.cpp's
// converter writes them: ffn_{gate,up,down}_exps.{weight,bias} de-interleaved and output-major, the
// pre-FFN norm as post_attention_norm, attn_sinks.weight, the window pattern by
// attention.sliding_window_pattern (default period 2, llama.cpp's set_swa_pattern(2)).
// YaRN: OpenAI's model (and transformers, truncate false) keeps the correction range unrounded;
// llama.cpp rounds it for every model, so on GGUF files this follows the model, not llama.cpp.
#include "model/architectures.h"
#include "model/decoder.h"

namespace ft {

std::unique_ptr<Model> build_gpt_oss(ModelConfig c, WeightLoader& ld, Ops& ops) {
  c.rope_mode = RopeMode::kNeox;
  c.attn_bias = true;      // q_proj/k_proj/v_proj.bias
  c.attn_out_bias = true;  // o_proj.bias
  c.attn_sinks = true;     // self_attn.sinks [n_head]
  c.rope_scaling.truncate = false;
  c.router_scoring = RouterScoring::kSoftmax;
  c.norm_topk_prob = true;
  c.expert_glu = ExpertGlu::kSwigluOai;
  // transformers' default layer_types and llama.cpp's default pattern: even layers slide.
  if (c.layer_window.empty() && c.sliding_window > 0) set_swa_period(c, 2);
  DecoderSpec spec;
  spec.moe = true;
  spec.router = "mlp.router";      // [E, H] + bias [E]
  spec.router_logit_bias = true;
  spec.experts.fused = "mlp.experts";  // gate_up_proj, down_proj (+ _bias)
  spec.experts.bias = true;
  spec.ffn_norm = "post_attention_norm";
  return build_decoder(std::move(c), ld, ops, spec);
}

}  // namespace ft
