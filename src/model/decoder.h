#pragma once
// The standard pre-norm decoder shared by the Llama family and its MoE variants. Per layer
//   h = x + Attn(RMSNorm_attn(x))
//   x = h + FFN(RMSNorm_ffn(h))      FFN = SwiGLU MLP, or MoE on config.is_moe_layer(l) layers
// then RMSNorm and the LM head. Attention differences (RoPE mode, QKV(O) bias, QK-norm,
// per-layer sliding windows, sinks) and router differences (scoring, norm_topk_prob, groups, scaling) are ModelConfig fields, as is
// multi-head latent attention (config.is_mla(): model/mla.h in place of the standard attention) and
// linear attention in the layers config.is_linear_layer(l) marks (model/gated_delta_net.h);
// the rest are DecoderSpec fields.
// Both are set by the architecture file (model/<arch>.cpp), which then calls build_decoder.
// Intermediates passed to ctx.dump_if per layer: attn_norm, ffn_inp, ffn_norm, ffn_out (dense) or
// ffn_moe_out (MoE), l_out.
#include <memory>

#include "model/blocks.h"
#include "model/mla.h"

namespace ft {

/** Per-architecture FFN layout of the decoder (weight names are GGUF / HF side by side). */
struct DecoderSpec {
  bool moe = false;                  // false: dense SwiGLU in every layer (no host experts at all)
  const char* router = "mlp.gate";   // HF name of the router [n_expert, H] (GGUF ffn_gate_inp)
  ExpertNames experts;               // HF per-expert names of the routed experts
  bool shared_expert = false;        // + shared expert (ffn_*_shexp, width n_ff_shexp)
  const char* shared_prefix = "mlp.shared_expert";  // its HF module (gate_proj, up_proj, down_proj)
  bool shared_gated = true;          // scaled by sigmoid(mlp.shared_expert_gate h) (Qwen2-MoE)
  /** HF name of the router's selection bias after "model.layers.N." (GGUF exp_probs_b.bias), e.g.
   *  "mlp.gate.e_score_correction_bias"; nullptr: the router has none. */
  const char* router_bias = nullptr;
  /** The router has a bias added to its logits (gpt-oss: HF `<router>.bias`, GGUF ffn_gate_inp.bias). */
  bool router_logit_bias = false;
  /** GGUF name of the pre-FFN norm (HF post_attention_layernorm): "ffn_norm", or llama.cpp's
   *  "post_attention_norm" for glm4moe and gpt-oss. */
  const char* ffn_norm = "ffn_norm";
};

/** The DeepSeek-V3-style MoE FFN layout (DeepSeek-V3, GLM-4.5): router mlp.gate with its
 *  e_score_correction_bias, routed experts mlp.experts.E.*, and config.n_ff_shexp wide ungated
 *  shared experts mlp.shared_experts (GGUF ffn_*_shexp) when there are any. */
DecoderSpec deepseek_moe_spec(const ModelConfig& config);

/** Loads the decoder for `config` (already carrying the architecture's fields): output weights,
 *  RoPE table, then per layer attn_norm, attention (or MLA), ffn_norm, MLP or router + experts (+
 *  shared expert). The router scores per config.router_scoring over n_expert_used experts (groups,
 *  bias, renormalisation and scaling as the config and spec say).
 *  With ld.tensor_parallel() of size > 1 it loads that rank's shard (dist/tensor_parallel.h: the
 *  rank's attention heads (with their output-gate rows and full-width QK-norm slices), MLA heads
 *  (q_a / kv_a and the cached latent whole), linear-attention key/value heads and their recurrent
 *  state, FFN / shared-expert columns; router, norms, embeddings, LM head and routed experts whole),
 *  its config() the rank's sizes, and forward() needs ForwardContext::tp of that group; throws
 *  kUnsupported for what is not split yet (a backend other than the CPU, per-layer KV heads, value
 *  heads tiled over key heads, sizes the group does not divide, ...).
 *  Throws ft::Error (kInvalidFile naming the field or tensor) for a bad config or missing weight. */
std::unique_ptr<Model> build_decoder(ModelConfig config, WeightLoader& ld, Ops& ops, const DecoderSpec& spec);

}  // namespace ft
