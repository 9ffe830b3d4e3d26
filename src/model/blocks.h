#pragma once
// Shared transformer blocks every architecture file is written with: token embedding, attention
// (QKV projections with optional bias, optional QK-norm, RoPE, paged KV, output projection), the
// gated (SwiGLU) MLP, the MoE FFN (calling moe/), and the final norm + LM head. Also the weight
// loading helpers for them, with GGUF and HF names side by side.
#include <vector>

#include "backend/ops.h"
#include "model/config.h"
#include "model/model.h"
#include "model/weights.h"
#include "moe/moe_ffn.h"

namespace ft {

// ---- attention ----

struct AttentionWeights {
  /** q, k, v stacked [(n_head + 2 n_kv) * hd, H] when they share a dtype and have no bias (one
   *  matmul for a single-token forward); wq, wk, wv are then row views of it. Empty otherwise. */
  Tensor wqkv;
  Tensor wq, wk, wv;      // [n_head * hd, H], [n_kv * hd, H], [n_kv * hd, H]
  Tensor wo;              // [H, n_head * hd]
  Tensor bq, bk, bv;      // optional biases [n_head * hd], [n_kv * hd], [n_kv * hd]
  Tensor bo;              // optional output bias [H] (config.attn_out_bias)
  Tensor sinks;           // optional F32 [n_head] attention sinks (config.attn_sinks; AttentionParams::sinks)
  Tensor wgate;           // optional [n_head * hd, H] output gate rows of q_proj (config.attn_output_gate)
  Tensor q_norm, k_norm;  // optional QK-norm: [hd] (per head) or [n_head * hd] / [n_kv * hd] (full)
};

/** Attention hyperparameters of one layer, derived from the config once. */
struct AttentionSpec {
  AttentionParams attn;
  RopeParams rope;
  RmsNormParams qk_norm_params;
  QkNorm qk_norm = QkNorm::kNone;
  std::vector<int32_t> layer_window;  // config.layer_window: per-layer sliding windows (empty: attn's)
};

/** Spec for `config` with `inv_freq` (resident F32 [n_rot/2]) and YaRN attention factor. */
AttentionSpec attention_spec(const ModelConfig& config, const Tensor& inv_freq, float attn_factor);

/** Loads layer `l`'s attention: attn_q/k/v/output (self_attn.q/k/v/o_proj), biases when config.attn_bias,
 *  the output bias when config.attn_out_bias, attn_q_norm/attn_k_norm (self_attn.q_norm/k_norm) per
 *  config.qk_norm, attn_sinks.weight (self_attn.sinks, as F32) when config.attn_sinks. With
 *  config.attn_output_gate, q_proj is [2 n_head hd, H] with each head's hd query rows followed by its
 *  hd gate rows; they are taken apart into wq and wgate. */
AttentionWeights load_attention(WeightLoader& ld, const ModelConfig& config, int64_t l);

/** load_attention for one tensor-parallel rank (dist/tensor_parallel.h; `config` the whole model's):
 *  Q/K/V rows of the rank's heads (tp_heads, tp_kv_heads) and their bias slices, O's input columns of
 *  those heads (WeightLoader::get_cols), O's bias on rank 0 only (the ranks' outputs are summed), the
 *  rank's sinks, the output gate rows of the rank's heads (config.attn_output_gate), per-head QK-norm
 *  weights whole, full-width QK-norm weights' slices of the rank's heads (the RMS itself spans every
 *  rank: tp_full_rms_norm). tp.size 1 is load_attention itself. Throws ft::Error(kUnsupported) for
 *  heads not a multiple of the size (dist::tp_split's message), a q bias with an output gate (no
 *  checkpoint has one); what the loader throws. */
AttentionWeights load_attention(WeightLoader& ld, const ModelConfig& config, int64_t l, const dist::TpShard& tp);

/** Full-width QK-norm (QkNorm::kFull: one RMS over all heads of a token) of q [T, Dq] and k [T, Dk]
 *  in place, with weights wq [Dq], wk [Dk]. Over a tensor-parallel group (ctx.tp of n > 1 ranks, each
 *  holding an equal slice of the heads and of the weights) each token's sums of squares ([T, 2] F32)
 *  are all-reduced and the mean taken over the whole width n Dq (n Dk). Without a group: ops.rms_norm
 *  of each. Throws ft::Error(kUnsupported) for a group on a backend other than the CPU (F32). */
void tp_full_rms_norm(ForwardContext& ctx, const RmsNormParams& p, const Tensor& q, const Tensor& wq, const Tensor& k,
                      const Tensor& wk);

/** out [T, H] = attention of h [T, H] for layer `l` (QK-norm before RoPE; K/V written to the cache),
 *  with layer l's sliding window (spec.layer_window) and w's sinks when it has them; multiplied by
 *  sigmoid(h wgate^T) before the output projection when w has an output gate. h_q8 (optional): h's
 *  int8 form from h's producer (ActQ8, backend/ops.h) for the projections of h; the attention output's
 *  own form goes from the attention to the output projection. */
void attention_block(ForwardContext& ctx, int64_t l, const AttentionSpec& spec, const AttentionWeights& w,
                     const Tensor& h, Tensor out, const ActQ8* h_q8 = nullptr);

/** out = the sum over ctx.tp's ranks of out (in place): the one reduction of a row-parallel layer's
 *  partial output (tensor parallelism). Nothing when ctx.tp is null or of one rank. */
void tp_all_reduce(ForwardContext& ctx, const Tensor& out);

/** The KV heads tensor-parallel rank `tp` reads, of n_kv KV heads shared by n_head query heads (the
 *  rank's query heads dist::tp_heads(n_head, tp)): its block of them when tp.size divides n_kv
 *  (dist::tp_kv_heads); the one KV head its query heads share when n_kv divides tp.size (that head
 *  replicated on tp.size / n_kv ranks, each computing it, as vLLM does). Throws ft::Error(kUnsupported)
 *  otherwise (dist::tp_split's message) and for n_head not a multiple of the size. */
dist::TpRange tp_kv_heads_read(int64_t n_head, int64_t n_kv, const dist::TpShard& tp);

/** The indices begin, begin + 1, ..., begin + n - 1 (the rows of WeightLoader::get_rows). */
std::vector<int64_t> index_range(int64_t begin, int64_t n);

/** Throws ft::Error(kInvalidArgument) unless ctx.tp's group (none: one rank) is the one `tp` (the
 *  model's Model::tensor_parallel()) was loaded for: the same size and rank. */
void check_tp_group(const ForwardContext& ctx, const dist::TpShard& tp);

// ---- feed-forward ----

struct MlpWeights {
  Tensor gate, up;  // [F, H]
  Tensor down;      // [H, F]
};

/** Layer `l`'s dense SwiGLU MLP: ffn_gate/up/down (mlp.gate_proj/up_proj/down_proj by default). */
MlpWeights load_mlp(WeightLoader& ld, const ModelConfig& config, int64_t l, int64_t n_ff);

/** The rank's slice of a SwiGLU MLP of width n_ff named `gguf`/`hf` + gate_proj, up_proj, down_proj
 *  (e.g. "ffn_{}" / "mlp.{}_proj"; "{}" is gate, up, down): gate and up rows and down's input columns
 *  of tp_ffn(n_ff, tp). tp.size 1: the whole matrices (load_mlp's). Throws kUnsupported when the size
 *  does not divide n_ff or a quantized down's slice is not on its blocks, and what the loader throws. */
MlpWeights load_mlp_shard(WeightLoader& ld, const WeightName& gate, const WeightName& up, const WeightName& down,
                          int64_t n_embd, int64_t n_ff, const dist::TpShard& tp);

/** out [T, H] = down(silu(gate h) * up h), all-reduced over ctx.tp (w the rank's slice). h_q8
 *  (optional): h's int8 form from its producer (ActQ8). */
void gated_mlp(ForwardContext& ctx, const MlpWeights& w, const Tensor& h, Tensor out, const ActQ8* h_q8 = nullptr);

/** HF per-expert name patterns ("{}" = expert index) of one architecture's routed experts. */
struct ExpertNames {
  const char* gate = "mlp.experts.{}.gate_proj";
  const char* up = "mlp.experts.{}.up_proj";
  const char* down = "mlp.experts.{}.down_proj";
  /** HF module of fused experts in gpt-oss's layout (WeightLoader::host_fused_experts), e.g.
   *  "mlp.experts", in place of the per-expert names; nullptr: per-expert tensors. */
  const char* fused = nullptr;
  /** Per-expert biases: GGUF ffn_{gate,up,down}_exps.bias [E, F] / [E, H] (HF: the fused module's). */
  bool bias = false;
};

/** Host views of layer `l`'s routed experts (ffn_{gate,up,down}_exps, stacked, or HF per expert, or
 *  HF fused), with their biases as F32 host copies when names.bias, and config's expert GLU
 *  (expert_glu, swiglu_alpha, swiglu_limit). */
ExpertBank load_host_experts(WeightLoader& ld, const ModelConfig& config, int64_t l, const ExpertNames& names);

/** out [T, H] = MoE FFN of h (router + routed experts + shared expert) via ctx.experts; the shared
 *  expert's partial all-reduced over ctx.tp (moe_ffn's tp).
 *  prefetch: the layers of ctx.experts->prefetch_targets(l, T) with their routers (moe_ffn). h_q8
 *  (optional, in and out): h's int8 form, as moe_ffn's x_q8. */
void moe_block(ForwardContext& ctx, int64_t l, const RouterParams& router, const MoeWeights& w, const Tensor& h,
               Tensor out, const MoePrefetch& prefetch = MoePrefetch(), ActQ8* h_q8 = nullptr);

// ---- embeddings and output ----

struct OutputWeights {
  Tensor tok_embd;     // [V, H]
  Tensor output_norm;  // [H]
  Tensor output;       // [V, H] (tok_embd when tied)
  bool tied = false;   // output_tied()
};

/** token_embd / model.embed_tokens, output_norm / model.norm, output / lm_head (tied: the embedding
 *  table, also when a GGUF simply has no output.weight). Sets config.n_vocab from the table if 0. An
 *  untied embedding table is left unplaced (WeightLoader::unplaced: the memory plan puts it on the
 *  device or in host memory, Model::place_deferred / move_embeddings_to_host). */
OutputWeights load_output(WeightLoader& ld, ModelConfig& config);
/** Whether the LM head is the embedding table (config tie_word_embeddings without lm_head, or a GGUF
 *  without output.weight, as llama.cpp reads it). */
bool output_tied(const WeightLoader& ld, const ModelConfig& config);
/** The embedding table [n_vocab, n_embd] placed by WeightLoader::get_host_mapped. */
Tensor load_token_embd_host_mapped(WeightLoader& ld, const ModelConfig& config);
/** Places an embedding table load_output left unplaced (untied: WeightLoader::unplaced) on the device
 *  (WeightLoader::get), for Model::place_deferred; a placed table is left as it is. */
void place_token_embd(WeightLoader& ld, const ModelConfig& config, Tensor& tok_embd);

/** ctx.state.x [T, H] = tok_embd[token_ids]. Returns that view. */
Tensor embed(ForwardContext& ctx, const Tensor& tok_embd);

/** ctx.logits [R, V] = output(rms_norm(x[logit_rows])). */
void lm_head(ForwardContext& ctx, const OutputWeights& w, const RmsNormParams& norm, const Tensor& x);

/** Layer `l`'s RMSNorm weight [H] (e.g. "attn_norm" / "input_layernorm"). */
Tensor load_norm(WeightLoader& ld, const ModelConfig& config, int64_t l, const char* gguf, const char* hf);

/** The model's RoPE table made resident (owned by `storage`) as an AttentionSpec. A GGUF
 *  `rope_freqs.weight` (llama3-style per-dim factors) is applied when present. */
AttentionSpec load_attention_spec(WeightLoader& ld, Ops& ops, const ModelConfig& config, std::vector<Buffer>& storage);

/** A resident F32 copy of host values (RoPE tables), owned by `storage`. */
Tensor upload_f32(Ops& ops, const std::vector<float>& values, std::vector<Buffer>& storage);

}  // namespace ft
