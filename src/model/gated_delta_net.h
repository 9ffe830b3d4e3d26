#pragma once
// Gated DeltaNet (Yang, Kautz, Hatamizadeh 2024, "Gated Delta Networks: Improving Mamba2 with Delta
// Rule", arXiv 2412.06464), the linear-attention layer of Qwen3-Next and Qwen3.5 (transformers
// Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet). Per layer, for h [T, H]:
//   qkv = silu(causal_conv1d(h W_qkv^T))          q, k [Hk dk], v [Hv dv]; conv window in the state
//   o   = gated_delta_rule(q, k, v, a = h W_a^T, b = h W_b^T)   S [Hv, dk, dv] in the state
//   out = (RMSNorm_per_head(o) * silu(h W_z^T)) W_out^T
// The recurrent state (conv window + S) lives in the KV cache's state slots (kv/kv_cache.h StateLayer),
// one per running sequence.
#include <vector>

#include "model/blocks.h"

namespace ft {

struct GatedDeltaNetWeights {
  Tensor in_qkv;   // [2 Hk dk + Hv dv, H]: q, k, v rows (value head h's rows at 2 Hk dk + h dv)
  Tensor in_z;     // [Hv dv, H] output-gate rows
  Tensor in_b;     // [Hv, H] beta rows
  Tensor in_a;     // [Hv, H] decay rows
  Tensor conv;     // F32 [2 Hk dk + Hv dv, conv_kernel] depthwise taps
  Tensor a_log;    // F32 [Hv]
  Tensor dt_bias;  // F32 [Hv]
  Tensor norm;     // [dv] the gated RMSNorm's weight (plain: scale by w)
  Tensor out;      // [H, Hv dv]
  /** The gated RMSNorm's gate activation: silu (Qwen3-Next, Qwen3.5) or sigmoid (qwen4_exp's
   *  output_gate_type "sigmoid": transformers Qwen4ExpTextRMSNormGated, ACT2FN[output_gate_type]). */
  bool sigmoid_gate = false;
};

/** Hyperparameters of every Gated DeltaNet layer of `config`, with `a_log` / `dt_bias` left empty
 *  (per layer). */
GatedDeltaParams gated_delta_params(const ModelConfig& config);

/** Loads linear-attention layer `l` (HF linear_attn.*): Qwen3.5's in_proj_qkv, in_proj_z, in_proj_b,
 *  in_proj_a, or Qwen3-Next's in_proj_qkvz [Hk (2 dk + 2 r dv), H] and in_proj_ba [Hk 2 r, H] (r = Hv /
 *  Hk; grouped per key head as q, k, v, z and b, a: transformers' fix_query_key_value_ordering), taken
 *  apart into the same matrices; conv1d.weight [C, 1, K], A_log, dt_bias (F32), norm.weight, out_proj.
 *  GGUF (llama.cpp's qwen3next; qwen35 has ssm_beta and ssm_alpha for ssm_ba and tiled value heads):
 *  attn_qkv, attn_gate, ssm_ba (grouped as in_proj_ba), ssm_conv1d
 *  [C, K], ssm_a (-exp(A_log): A_log recovered, resident F32 owned by `storage`), ssm_dt.bias, ssm_norm,
 *  ssm_out. Throws what the loader throws, kInvalidFile for an ssm_a entry that is not negative.
 *  Tensor parallelism (`tp`, dist/tensor_parallel.h; `config` the whole model's): the rank's key heads
 *  (an even split of Hk) and the r = Hv / Hk value heads that read each: their q / k / v / z / b / a
 *  rows, conv channels, A_log and dt_bias entries, out_proj's input columns (the gated norm's [dv]
 *  weight is every head's); gated_delta_net_block all-reduces the output, and each rank's recurrent
 *  state holds its own heads (sized by the rank's config). Throws kUnsupported for Hk not a multiple
 *  of the size and for value heads tiled over the key heads (config.lin_v_tiled). */
GatedDeltaNetWeights load_gated_delta_net(WeightLoader& ld, Ops& ops, const ModelConfig& config, int64_t l,
                                          std::vector<Buffer>& storage, const dist::TpShard& tp = {});

/** out [T, H] = the Gated DeltaNet of h [T, H] for layer `l`, advancing each sequence's state
 *  (ctx.batch.state_slots) in ctx.kv.state(l); all-reduced over ctx.tp (w the rank's heads). `p` from gated_delta_params; `norm` the gated
 *  RMSNorm's params; h_q8 (optional): h's int8 form from its producer (ActQ8) for the input projections. */
void gated_delta_net_block(ForwardContext& ctx, int64_t l, GatedDeltaParams p, const RmsNormParams& norm,
                           const GatedDeltaNetWeights& w, const Tensor& h, Tensor out, const ActQ8* h_q8 = nullptr);

}  // namespace ft
