#pragma once
// ModelConfig: the hyperparameters of every supported architecture, read from a Hugging Face
// config.json (transformers field names) or GGUF metadata (llama.cpp `{arch}.*` keys).
// Architecture-specific defaults are applied by the architecture's file (model/<arch>.cpp).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/ops.h"
#include "kv/kv_cache.h"

namespace ft {

/** RoPE frequency scaling (HF `rope_parameters` / `rope_scaling`, GGUF `rope.scaling.*`). */
struct RopeScaling {
  std::string type = "default";        // default | linear | yarn | llama3 (dynamic is default below its limit)
  double factor = 1.0;
  int64_t original_max_position = 0;  // yarn, llama3
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  double beta_fast = 32.0;             // yarn
  double beta_slow = 1.0;              // yarn
  double attention_factor = 0.0;       // yarn: 0 = derive from factor (0.1 ln(factor) + 1)
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn (DeepSeek)
  bool truncate = true;                // yarn: round the correction range to whole dims
};

/** Where the QK-norm weight applies: per head ([head_dim], Qwen3) or over the whole projection
 *  ([n_head * head_dim], OLMoE). */
enum class QkNorm : uint8_t { kNone = 0, kPerHead = 1, kFull = 2 };

struct ModelConfig {
  std::string arch;           // registry name: "llama", "qwen3_moe", ...
  std::string format;         // "gguf" or "safetensors"
  int64_t n_vocab = 0;
  int64_t n_embd = 0;         // hidden size
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;
  /** Per-layer KV heads and head dims where layers differ (Gemma 4: sliding layers of more heads of a
   *  smaller dim over pages sized n_head_kv x head_dim for the widest layer), n_layer entries each, or
   *  empty: every layer has n_head_kv x head_dim. */
  std::vector<int64_t> layer_kv_heads, layer_head_dim;
  int64_t n_ff = 0;           // dense FFN width
  double rms_eps = 1e-6;
  int64_t n_ctx_train = 0;    // max_position_embeddings / context_length

  double rope_theta = 10000.0;
  int64_t n_rot = 0;          // rotated dims per head (partial rotary: < head_dim)
  RopeMode rope_mode = RopeMode::kNeox;
  RopeScaling rope_scaling;
  bool rope_interleave = true;  // DeepSeek-V3's rope_interleave: adjacent pairs rotate (RopeMode::kNormal)

  bool tie_embeddings = false;
  bool attn_bias = false;     // q/k/v projections have biases (Qwen2)
  bool attn_out_bias = false; // the output projection has a bias too (gpt-oss's o_proj.bias, GGUF attn_output.bias)
  bool attn_sinks = false;    // per-head attention sinks (gpt-oss's self_attn.sinks, GGUF attn_sinks.weight)
  QkNorm qk_norm = QkNorm::kNone;
  int32_t sliding_window = 0;  // 0 = full attention; every layer's window unless layer_window is set
  /** Per-layer sliding windows (0: full attention), n_layer entries, or empty: every layer has
   *  sliding_window. From HF layer_types ("sliding_attention" / "full_attention") or GGUF
   *  attention.sliding_window_pattern; read through window(l). */
  std::vector<int32_t> layer_window;

  /** RMSNorm weights stored zero-centred (Qwen3-Next, Qwen3.5: out = x / rms(x) * (1 + w)): 1, else 0.
   *  Applies to the decoder's norms and the QK-norm (RmsNormParams::weight_offset). */
  float norm_weight_offset = 0.0f;
  /** The query projection also yields a per-head output gate: q_proj rows alternate per head between
   *  head_dim query rows and head_dim gate rows; attention's output is multiplied by sigmoid(gate)
   *  before o_proj (Qwen3-Next's gated attention). */
  bool attn_output_gate = false;

  // Linear attention (Gated DeltaNet: Qwen3-Next, Qwen3.5): layers with layer_linear[l] = 1 keep a
  // recurrent state instead of KV (HF layer_types "linear_attention"); the others attend.
  std::vector<uint8_t> layer_linear;
  int64_t lin_n_k_heads = 0;     // linear_num_key_heads
  int64_t lin_n_v_heads = 0;     // linear_num_value_heads
  int64_t lin_k_dim = 0;         // linear_key_head_dim
  int64_t lin_v_dim = 0;         // linear_value_head_dim
  int64_t lin_conv_kernel = 0;   // linear_conv_kernel_dim
  bool lin_v_tiled = false;      // value heads tiled over key heads (llama.cpp's qwen35 GGUF order)
  /** Extra per-slot state of each linear-attention layer (Qwen4-Exp's per-layer embeddings,
   *  KvCacheConfig::conv2_rows etc.): a second convolution window and the last tokens; 0: none. */
  int64_t lin_conv2_rows = 0, lin_conv2_dim = 0, lin_token_history = 0;

  // Mixture of experts (n_expert == 0: dense).
  int64_t n_expert = 0;
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;        // per-expert FFN width
  int64_t n_ff_shexp = 0;      // shared expert FFN width (0: none)
  ExpertGlu expert_glu = ExpertGlu::kSwiglu;  // the routed experts' gated unit (kSwigluOai: gpt-oss)
  double swiglu_alpha = 1.702;  // kSwigluOai: sigmoid gain (HF swiglu_alpha)
  double swiglu_limit = 7.0;    // kSwigluOai: clamp of gate (above) and up (both sides) (HF swiglu_limit)
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  int64_t first_k_dense = 0;   // first_k_dense_replace / leading_dense_block_count: layers 0..n-1 dense
  RouterScoring router_scoring = RouterScoring::kSoftmax;  // sigmoid: DeepSeek-V3, GLM-4.5, MiniMax-M2
  bool router_scoring_given = false;  // the checkpoint names it (HF scoring_func / topk_method, GGUF expert_gating_func)
  double routed_scaling = 1.0;  // routed_scaling_factor / expert_weights_scale
  int64_t n_group = 1;          // n_group / expert_group_count (group-limited routing)
  int64_t topk_group = 1;       // topk_group / expert_group_used_count
  int64_t n_nextn_layers = 0;   // num_nextn_predict_layers: MTP layers, skipped at load

  // Multi-head latent attention (DeepSeek-V2/V3; kv_lora_rank == 0: standard attention).
  int64_t q_lora_rank = 0;      // 0: q_proj [n_head * (nope + rope), H] without LoRA
  int64_t kv_lora_rank = 0;     // latent width
  int64_t qk_nope_dim = 0;      // qk_nope_head_dim
  int64_t qk_rope_dim = 0;      // qk_rope_head_dim (= n_rot)
  int64_t v_head_dim = 0;

  /** Per-layer input width (Gemma 4's hidden_size_per_layer_input; 0: none): ForwardState::ple. */
  int64_t ple_dim = 0;

  /** Width of each token's value-page row when the architecture keeps something else there than
   *  n_head_kv x head_dim values (DeepSeek-V4: its compressors' per-token projections); 0: none. */
  int64_t kv_v_width = 0;
  /** Width of one head of those value pages (a divisor of kv_v_width; 0: the row is one head). Each
   *  part of the row that an op writes on its own (DeepSeek-V4: a compressor's kv and gate, the
   *  indexer's; Qwen4-Exp: each KV head's V, the indexer's key and gates) is whole heads, so quantized
   *  pages (--kv-cache-dtype fp8 / q8_0, scales per head: quant/kv_quant.h) quantize each part alone,
   *  never re-scaling a neighbour written earlier. */
  int64_t kv_v_head_dim = 0;
  /** DeepSeek-V4: each layer's compress rate (0: none) and the width of its compressed-entry rows in
   *  the KV pages (entries, then the indexer's keys), or empty (KvCacheConfig::layer_entry_rate). */
  std::vector<int32_t> layer_entry_rate, layer_entry_width;

  int32_t bos_id = -1;
  std::vector<int32_t> eos_ids;

  /** True when layer `l` is a linear-attention (Gated DeltaNet) layer. */
  bool is_linear_layer(int64_t l) const {
    return !layer_linear.empty() && layer_linear[static_cast<size_t>(l)] != 0;
  }
  /** Width of a linear-attention layer's convolved q, k, v: 2 Hk dk + Hv dv. */
  int64_t lin_conv_dim() const { return 2 * lin_n_k_heads * lin_k_dim + lin_n_v_heads * lin_v_dim; }
  /** True for multi-head latent attention (kv_lora_rank > 0). */
  bool is_mla() const { return kv_lora_rank > 0; }
  /** Sliding window of layer `l` (0: full attention): layer_window[l], or sliding_window when
   *  layer_window is empty. */
  int32_t window(int64_t l) const {
    return layer_window.empty() ? sliding_window : layer_window[static_cast<size_t>(l)];
  }
  /** True if layer `l` has a MoE FFN (n_expert > 0, l >= first_k_dense, not in mlp_only_layers, on
   *  the sparse step). */
  bool is_moe_layer(int64_t l) const;
  /** Throws ft::Error(kInvalidFile) naming the field when a size is missing or inconsistent. */
  void validate() const;
};

/** llama.cpp's hparams.set_swa_pattern(period) (dense_first false): layer l has config.sliding_window
 *  when l % period < period - 1, else full attention (period 2: even layers slide, as gpt-oss); period
 *  0: every layer slides, 1: none. Fills config.layer_window for config.n_layer layers. */
void set_swa_period(ModelConfig& config, int64_t period);

/** The KV page layout of `config` (all but the pool's size, page size, dtype and spare pages): per
 *  layer n_head_kv x head_dim keys and values, or for MLA one latent head of kv_lora_rank in the key
 *  pages and one RoPE-key head of qk_rope_dim in the value pages; each layer's sliding window when
 *  any layer slides (the caller sets swa_token_budget to give them their own pool). */
KvCacheConfig kv_layout(const ModelConfig& config);

/** Reads the architecture-independent fields from HF config.json. `arch` is the registry name.
 *  Throws ft::Error(kInvalidFile) "config.json: <field>: ..." for a missing or mistyped field. */
ModelConfig config_from_hf(const nlohmann::json& config, const std::string& arch);

/** Reads `{gguf_arch}.*` keys and tokenizer ids from GGUF metadata. Throws kInvalidFile naming the key. */
ModelConfig config_from_gguf(const nlohmann::json& meta, const std::string& gguf_arch, const std::string& arch);

}  // namespace ft
