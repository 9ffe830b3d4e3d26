// DeepSeek-V3 / R1 / V3.1 and Kimi-K2 (DeepSeek-AI, 2024, "DeepSeek-V3 Technical Report",
// arXiv 2412.19437; transformers' DeepseekV3ForCausalLM; llama.cpp's deepseek2): the pre-norm decoder
// with multi-head latent attention (model/mla.h: optional q LoRA, a kv_lora_rank latent plus a shared
// qk_rope_head_dim RoPE key, adjacent-pair RoPE when rope_interleave) and, after the first
// first_k_dense_replace dense layers, the MoE FFN
//   s = sigmoid(W_r h'),  experts = top-k of s + e_score_correction_bias within the topk_group best
//   of n_group groups (group score: the sum of its best two),
//   x = h + routed_scaling_factor * sum_e (s_e / sum s) Expert_e(h') + Shared(h')
// with n_shared_experts ungated shared experts. MTP layers (num_nextn_predict_layers) are not loaded.
#include "model/architectures.h"
#include "model/decoder.h"
#include "util/error.h"

namespace ft {

std::unique_ptr<Model> build_deepseek_v3(ModelConfig c, WeightLoader& ld, Ops& ops) {
  const char* src = ld.is_gguf() ? "GGUF metadata" : "config.json";
  auto need = [&](int64_t v, const char* key) {
    if (v <= 0) fail(ErrorCode::kInvalidFile, "{}: {}: missing or not positive (deepseek_v3 needs it)", src, key);
  };
  need(c.kv_lora_rank, ld.is_gguf() ? "deepseek2.attention.kv_lora_rank" : "kv_lora_rank");
  need(c.qk_nope_dim, ld.is_gguf() ? "deepseek2.attention.key_length_mla" : "qk_nope_head_dim");
  need(c.qk_rope_dim, ld.is_gguf() ? "deepseek2.rope.dimension_count" : "qk_rope_head_dim");
  need(c.v_head_dim, ld.is_gguf() ? "deepseek2.attention.value_length_mla" : "v_head_dim");
  c.head_dim = c.n_rot = c.qk_rope_dim;  // the RoPE table's width; attention widths come from the MLA fields
  c.n_head_kv = c.n_head;
  c.rope_mode = c.rope_interleave ? RopeMode::kNormal : RopeMode::kNeox;
  // DeepSeek-V2 / V2.5 share the architecture but route by softmax with group maxima and no selection
  // bias (their configs say scoring_func softmax / topk_method greedy; llama.cpp reads a deepseek2
  // GGUF without expert_gating_func as softmax): not this router.
  if ((ld.is_gguf() || c.router_scoring_given) && c.router_scoring != RouterScoring::kSigmoid)
    fail(ErrorCode::kUnsupported,
         "{}: softmax expert routing (DeepSeek-V2 / V2.5) is not supported yet; DeepSeek-V3, R1 and Kimi-K2 route "
         "by sigmoid ({})", ld.checkpoint().path(),
         ld.is_gguf() ? "deepseek2.expert_gating_func = 2" : "scoring_func sigmoid, topk_method noaux_tc");
  c.router_scoring = RouterScoring::kSigmoid;
  const DecoderSpec spec = deepseek_moe_spec(c);
  return build_decoder(std::move(c), ld, ops, spec);
}

}  // namespace ft
