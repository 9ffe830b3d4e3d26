#pragma once
// Model presets: the real shapes of well-known MoE checkpoints (numbers from each model's Hugging
// Face config.json), for synthetic benchmark models (`--model-preset NAME --dummy-weights`, see
// tools/synthetic_checkpoint.h). A preset names the GGUF architecture its synthetic file is
// written as; presets whose architecture the engine cannot run yet are listed (so `ft bench
// --list-presets` shows them) but rejected by require_runnable_preset.
//
// Attention is grouped-query (n_head_kv heads of head_dim, the first n_rot dims rotated, optional
// q/k/v biases and QK-norm) or, with kv_lora_rank > 0, multi-head latent attention (DeepSeek-V2/V3:
// an optional q LoRA of q_lora_rank, a latent of kv_lora_rank plus one shared RoPE key of
// qk_rope_dim; per head qk_nope_dim + qk_rope_dim query/key dims and v_head_dim value dims). The FFN
// is SwiGLU (gpt-oss: its clamped variant with biases, ModelPreset::oai_moe): the first n_dense_lead layers dense (width n_ff), the rest MoE (n_expert routed experts
// of width n_ff_exp, top n_expert_used, plus n_shared_exp ungated shared experts of the same width).
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace ft {

struct ModelPreset {
  std::string name{};        // "qwen3-30b-a3b"
  std::string hf_id{};       // "Qwen/Qwen3-30B-A3B" (where the shapes come from); "" for test presets
  std::string gguf_arch{};   // general.architecture of the synthetic GGUF: "qwen3moe", "llama", "gpt-oss", "deepseek2"
                             // (hf_config presets: the config's model_type, "deepseek_v4")
  bool runnable = false;     // the engine has this architecture (synthetic weights can be built)
  int64_t n_layer = 0;       // num_hidden_layers (MTP / next-n layers not counted)
  int64_t n_embd = 0;        // hidden_size
  int64_t n_head = 0;        // num_attention_heads
  int64_t n_head_kv = 0;     // num_key_value_heads (MLA: = n_head, as config.json says)
  int64_t head_dim = 0;      // head_dim per query/key head (MLA: qk_nope_dim + qk_rope_dim, for display)
  int64_t n_rot = 0;         // rotated dims per head: head_dim * partial_rotary_factor, rotary_dim (0: head_dim)
  int64_t n_expert = 0;      // routed experts per MoE layer
  int64_t n_expert_used = 0; // experts per token (top-k)
  int64_t n_ff_exp = 0;      // per-expert FFN width (moe_intermediate_size)
  int64_t n_ff = 0;          // dense FFN width (intermediate_size; used by dense layers only)
  int64_t n_vocab = 0;       // vocab_size
  double rope_theta = 0;     // rope_theta
  int64_t n_ctx = 0;         // max_position_embeddings
  double rms_eps = 1e-6;     // rms_norm_eps

  // Attention variants.
  bool attn_bias = false;            // attention_bias: q/k/v projections have biases (GLM-4.5)
  QkNorm qk_norm = QkNorm::kNone;    // per head (Qwen3) or over the whole projection (MiniMax-M2)
  int64_t q_lora_rank = 0;           // MLA: q_lora_rank (0: q_proj straight from the hidden state)
  int64_t kv_lora_rank = 0;          // MLA: kv_lora_rank (0: grouped-query attention)
  int64_t qk_nope_dim = 0;           // MLA: qk_nope_head_dim
  int64_t qk_rope_dim = 0;           // MLA: qk_rope_head_dim
  int64_t v_head_dim = 0;            // MLA: v_head_dim
  // YaRN (rope_scaling type yarn; factor 0: none).
  double yarn_factor = 0;            // rope_scaling.factor
  int64_t yarn_orig_ctx = 0;         // rope_scaling.original_max_position_embeddings
  double yarn_mscale_all_dim = 0;    // rope_scaling.mscale_all_dim (DeepSeek; GGUF yarn_log_multiplier = 0.1 x it)

  // FFN and router.
  int64_t n_dense_lead = 0;          // first_k_dense_replace: layers 0..n-1 have a dense FFN of width n_ff
  int64_t n_shared_exp = 0;          // n_shared_experts, each of width n_ff_exp, ungated
  bool sigmoid_router = false;       // scoring_func sigmoid (GGUF expert_gating_func 2), else softmax
  bool router_bias = false;          // e_score_correction_bias (GGUF exp_probs_b.bias [n_expert])
  bool norm_topk_prob = false;       // norm_topk_prob (GGUF expert_weights_norm)
  double routed_scaling = 1.0;       // routed_scaling_factor (GGUF expert_weights_scale)
  int64_t n_group = 1;               // n_group: expert groups of group-limited routing
  int64_t topk_group = 1;            // topk_group: groups a token may route to
  // gpt-oss (OpenAI MoE): attention sinks, biases on q/k/v/o, the router and the experts, clamped
  // SwiGLU (limit 7), softmax over the top-k logits; even layers see the last sliding_window tokens.
  bool oai_moe = false;
  int64_t sliding_window = 0;        // sliding_window of the alternate layers (0: every layer full)
  // Hybrid linear attention (Qwen3-Next): layers off full_attn_interval are Gated DeltaNet layers of
  // lin_k_heads key heads of lin_k_dim, lin_v_heads value heads of lin_v_dim and a lin_conv-tap
  // convolution; the attention layers' q_proj also yields a per-head output gate; the shared expert
  // is scaled by sigmoid(ffn_gate_inp_shexp h).
  int64_t full_attn_interval = 0;    // full_attention_interval (0: every layer attends)
  int64_t lin_k_heads = 0, lin_v_heads = 0, lin_k_dim = 0, lin_v_dim = 0, lin_conv = 0;
  /** The routed experts' type upstream ("MXFP4" for gpt-oss; "": as the other weights): a synthetic
   *  model's experts default to it (SyntheticSpec::expert_type). */
  std::string expert_type{};
  /** config.json of an architecture FreeToken loads from safetensors only (deepseek_v4, qwen4_exp): the model's real
   *  fields; the synthetic model is then in that layout (tools/hf_synthetic.h), gguf_arch names the
   *  model_type, and the fields above only describe it (listing). Per-layer lists are built for the
   *  layer count. "": a GGUF-layout preset. */
  std::string hf_config{};
  std::string notes{};               // what the synthetic model leaves out or why the preset is not runnable

  /** True for multi-head latent attention (kv_lora_rank > 0). */
  bool is_mla() const { return kv_lora_rank > 0; }
  /** True when layer `l` is a linear-attention layer (full_attn_interval > 0 and l + 1 off it). */
  bool is_linear(int64_t l) const { return full_attn_interval > 0 && (l + 1) % full_attn_interval != 0; }
  /** Width of a linear-attention layer's convolved q, k, v. */
  int64_t lin_conv_dim() const { return 2 * lin_k_heads * lin_k_dim + lin_v_heads * lin_v_dim; }
  /** Rotated dims per head: qk_rope_dim (MLA), else n_rot, else head_dim. */
  int64_t rot_dims() const;
  /** Leading dense layers of a model of `layers` layers (0: n_layer) of this preset's shapes:
   *  min(n_dense_lead, layers - 1), so a shortened model (`--dummy-layers`) keeps a MoE layer. */
  int64_t dense_layers(int64_t layers = 0) const;

  /** Parameters of the whole model of `layers` layers (0: n_layer): embedding table, LM head, final
   *  norm and per layer attention (GQA with its biases and QK-norm weights, or MLA with its LoRA
   *  norms), two norms and the FFN: dense SwiGLU in the leading dense layers, else router (+ selection
   *  bias), every routed expert and the shared experts. MTP layers are not counted. */
  int64_t total_params(int64_t layers = 0) const;
  /** Parameters read per token: as total_params but n_expert_used routed experts per MoE layer and
   *  no embedding table (a token reads one row of it); the LM head is counted. */
  int64_t active_params(int64_t layers = 0) const;
};

/** Every preset, runnable ones first. */
const std::vector<ModelPreset>& model_presets();

/** "qwen3-30b-a3b, qwen3-235b-a22b, ..." (runnable only when `runnable_only`). */
std::string preset_names(bool runnable_only);

/** The preset called `name` (case-insensitive; '_' and '-' equivalent). Throws
 *  ft::Error(kInvalidArgument) "unknown model preset 'X' (known: ...)". */
const ModelPreset& find_preset(const std::string& name);

/** find_preset(name), then throws ft::Error(kUnsupported) naming the preset, its architecture and
 *  the runnable presets when the engine cannot run it yet. */
const ModelPreset& require_runnable_preset(const std::string& name);

}  // namespace ft
