#pragma once
// Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, §2.1; DeepSeek-V3 keeps it): keys and
// values are up-projected from one shared latent c = RMSNorm(W_DKV h) [kv_lora_rank] plus a shared
// rotated key r = RoPE(W_KR h) [qk_rope_head_dim]. The KV cache holds only c and r per token. The
// up-projections are absorbed (§2.1.2, as FlashMLA computes it): each head's query is taken into
// latent space, q_lat = W_UK^T q_nope, attention runs over (c, r) for every head at once, and W_UV
// maps each head's latent output back to v_head_dim before W_O. Prefill uses the same form.
#include <vector>

#include "model/blocks.h"

namespace ft {

struct MlaWeights {
  Tensor wq_a;        // [q_lora_rank, H] (q LoRA; empty: wq_nope/wq_rope project h directly)
  Tensor q_a_norm;    // [q_lora_rank]
  Tensor wq_nope;     // [n_head * qk_nope, q_lora_rank or H]: the non-rotated query rows of q_b_proj
  Tensor wq_rope;     // [n_head * qk_rope, q_lora_rank or H]: the rotated query rows
  Tensor wkv_a;       // [kv_lora_rank + qk_rope, H] kv_a_proj_with_mqa (row views below)
  Tensor w_dkv;       // [kv_lora_rank, H] latent rows
  Tensor w_kr;        // [qk_rope, H] RoPE-key rows
  Tensor kv_a_norm;   // [kv_lora_rank]
  Tensor w_uk_t;      // [n_head, kv_lora_rank, qk_nope] W_UK transposed per head (llama.cpp attn_k_b)
  Tensor w_uv;        // [n_head, v_head_dim, kv_lora_rank] (llama.cpp attn_v_b)
  Tensor wo;          // [H, n_head * v_head_dim]
};

/** MLA hyperparameters of the model, derived from the config once. */
struct MlaSpec {
  MlaAttentionParams attn;
  RopeParams rope;       // head_dim = n_rot = qk_rope_head_dim
  RmsNormParams norm;    // q_a_layernorm, kv_a_layernorm
  int32_t qk_nope = 0, v_head_dim = 0, q_lora_rank = 0;
};

/** Spec for `config` with the resident RoPE table `inv_freq` [qk_rope / 2] and YaRN factors: the
 *  softmax scale is (qk_nope + qk_rope)^-0.5, times mscale(factor, mscale_all_dim)^2 under YaRN. */
MlaSpec mla_spec(const ModelConfig& config, const Tensor& inv_freq, float attn_factor);

/** Loads layer `l`'s MLA weights: attn_q_a / attn_q_a_norm / attn_q_b (or attn_q), attn_kv_a_mqa,
 *  attn_kv_a_norm, attn_k_b + attn_v_b or attn_kv_b (HF self_attn.q_a_proj, q_a_layernorm, q_b_proj or
 *  q_proj, kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj), attn_output (o_proj). The query rows are
 *  split into their non-rotated and rotated parts and kv_b into W_UK^T and W_UV per head, in host
 *  buffers kept in `storage` (F32 for block-quantized sources, else the source dtype).
 *  Tensor parallelism (`tp`, dist/tensor_parallel.h; `config` the whole model's): the low-rank q_a /
 *  kv_a projections and their norms whole on every rank (the latent they make is shared by all heads,
 *  so every rank caches the same one), q_b's and kv_b's rows and o_proj's input columns of the rank's
 *  heads (tp_heads); mla_block all-reduces the output. Throws what the loader throws, and what
 *  dist::tp_heads throws for heads not a multiple of the size. */
MlaWeights load_mla(WeightLoader& ld, Ops& ops, const ModelConfig& config, int64_t l, std::vector<Buffer>& storage,
                    const dist::TpShard& tp = {});

/** out [T, H] = MLA of h [T, H] for layer `l` (latent and RoPE key written to the layer's pages),
 *  all-reduced over ctx.tp (w the rank's heads: out is their partial sum before the reduction). h_q8
 *  (optional): h's int8 form from its producer (ActQ8) for the projections of h. */
void mla_block(ForwardContext& ctx, int64_t l, const MlaSpec& spec, const MlaWeights& w, const Tensor& h, Tensor out,
               const ActQ8* h_q8 = nullptr);

}  // namespace ft
