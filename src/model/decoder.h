#pragma once
// The standard pre-norm decoder shared by the Llama family and its MoE variants. Per layer
//   h = x + Attn(RMSNorm_attn(x))
//   x = h + FFN(RMSNorm_ffn(h))      FFN = SwiGLU MLP, or MoE on config.is_moe_layer(l) layers
// then RMSNorm and the LM head. Attention differences (RoPE mode, QKV bias, QK-norm, sliding window)
// and router differences (norm_topk_prob) are ModelConfig fields; the rest are DecoderSpec fields.
// Both are set by the architecture file (model/<arch>.cpp), which then calls build_decoder.
// Intermediates passed to ctx.dump_if per layer: attn_norm, ffn_inp, ffn_norm, ffn_out (dense) or
// ffn_moe_out (MoE), l_out.
#include <memory>

#include "model/blocks.h"

namespace ft {

/** Per-architecture FFN layout of the decoder (weight names are GGUF / HF side by side). */
struct DecoderSpec {
  bool moe = false;                  // false: dense SwiGLU in every layer (no host experts at all)
  const char* router = "mlp.gate";   // HF name of the router [n_expert, H] (GGUF ffn_gate_inp)
  ExpertNames experts;               // HF per-expert names of the routed experts
  bool shared_expert = false;        // + sigmoid-gated shared expert (ffn_*_shexp, width n_ff_shexp)
};

/** Loads the decoder for `config` (already carrying the architecture's fields): output weights,
 *  RoPE table, then per layer attn_norm, attention, ffn_norm, MLP or router + experts (+ shared
 *  expert). Softmax router over n_expert_used experts, renormalised when config.norm_topk_prob.
 *  Throws ft::Error (kInvalidFile naming the field or tensor) for a bad config or missing weight. */
std::unique_ptr<Model> build_decoder(ModelConfig config, WeightLoader& ld, Ops& ops, const DecoderSpec& spec);

}  // namespace ft
