#include "tools/model_presets.h"

#include <algorithm>
#include <cctype>

#include "tools/hf_synthetic.h"
#include "util/error.h"

namespace ft {
namespace {

std::string normalise(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/** One layer's attention parameters: projections, biases, QK-norm or MLA's LoRA norms. */
int64_t attention_params(const ModelPreset& p) {
  const int64_t H = p.n_embd, nh = p.n_head;
  if (p.is_mla()) {
    const int64_t qk = p.qk_nope_dim + p.qk_rope_dim, qr = p.q_lora_rank, R = p.kv_lora_rank;
    const int64_t q = qr > 0 ? H * qr + qr + qr * nh * qk : H * nh * qk;  // q_a, q_a_norm, q_b (or q_proj)
    return q + H * (R + p.qk_rope_dim) + R                                // kv_a_proj_with_mqa, kv_a_norm
           + R * nh * (p.qk_nope_dim + p.v_head_dim)                      // kv_b_proj
           + nh * p.v_head_dim * H;                                       // o_proj
  }
  const int64_t qd = nh * p.head_dim, kvd = p.n_head_kv * p.head_dim;
  int64_t n = H * (qd + 2 * kvd) + qd * H;
  if (p.full_attn_interval > 0) n += H * qd;  // the output gate's rows of q_proj
  if (p.attn_bias) n += qd + 2 * kvd;
  if (p.qk_norm == QkNorm::kPerHead) n += 2 * p.head_dim;
  if (p.qk_norm == QkNorm::kFull) n += qd + kvd;
  if (p.oai_moe) n += qd + 2 * kvd + H + nh;  // q/k/v/o biases and the sinks
  return n;
}

/** One layer's FFN parameters: dense SwiGLU, or router (+ bias), `experts` routed and the shared experts. */
int64_t ffn_params(const ModelPreset& p, bool moe, int64_t experts) {
  const int64_t H = p.n_embd;
  if (!moe) return 3 * H * p.n_ff;
  const int64_t biases = p.oai_moe ? p.n_expert + experts * (2 * p.n_ff_exp + H) : 0;  // router and experts
  return p.n_expert * H + (p.router_bias ? p.n_expert : 0) + (experts + p.n_shared_exp) * 3 * H * p.n_ff_exp + biases;
}

/** One linear-attention layer's parameters: q/k/v, z, b, a and output projections, conv taps, A_log,
 *  dt_bias and the gated norm. */
int64_t linear_params(const ModelPreset& p) {
  const int64_t H = p.n_embd, C = p.lin_conv_dim(), Vd = p.lin_v_heads * p.lin_v_dim;
  return H * (C + Vd + 2 * p.lin_v_heads) + C * p.lin_conv + 2 * p.lin_v_heads + p.lin_v_dim + Vd * H;
}

int64_t model_params(const ModelPreset& p, int64_t layers, bool active) {
  const int64_t L = layers > 0 ? layers : p.n_layer, dense = p.dense_layers(L);
  int64_t n_linear = 0;
  for (int64_t l = 0; l < L; ++l) n_linear += p.is_linear(l);
  const int64_t per_layer = 2 * p.n_embd + (p.full_attn_interval > 0 && p.n_shared_exp > 0 ? p.n_embd : 0);
  const int64_t mixers = (L - n_linear) * attention_params(p) + n_linear * linear_params(p);
  const int64_t experts = active ? p.n_expert_used : p.n_expert;
  const int64_t ffn = dense * ffn_params(p, false, 0) + (L - dense) * ffn_params(p, true, experts);
  return (active ? 1 : 2) * p.n_vocab * p.n_embd + p.n_embd + L * per_layer + mixers + ffn;
}

}  // namespace

int64_t ModelPreset::rot_dims() const {
  if (is_mla()) return qk_rope_dim;
  return n_rot > 0 ? n_rot : head_dim;
}

int64_t ModelPreset::dense_layers(int64_t layers) const {
  const int64_t L = layers > 0 ? layers : n_layer;
  return std::clamp<int64_t>(L - 1, 0, n_dense_lead);
}

int64_t ModelPreset::total_params(int64_t layers) const {
  return hf_config.empty() ? model_params(*this, layers, false) : hf_synthetic_params(*this, layers, false);
}

int64_t ModelPreset::active_params(int64_t layers) const {
  return hf_config.empty() ? model_params(*this, layers, true) : hf_synthetic_params(*this, layers, true);
}

const std::vector<ModelPreset>& model_presets() {
  // Shapes from the models' config.json on Hugging Face (num_hidden_layers, hidden_size,
  // num_attention_heads, num_key_value_heads, head_dim, partial_rotary_factor / rotary_dim,
  // num_experts / num_local_experts / n_routed_experts, num_experts_per_tok, moe_intermediate_size,
  // intermediate_size, vocab_size, rope_theta, max_position_embeddings, rms_norm_eps; DeepSeek's
  // q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, rope_scaling,
  // first_k_dense_replace, n_shared_experts, scoring_func, norm_topk_prob, routed_scaling_factor,
  // n_group, topk_group; GLM's attention_bias and use_qk_norm; MiniMax's use_qk_norm / qk_norm_type).
  static const std::vector<ModelPreset> kPresets = {
      {.name = "qwen3-30b-a3b", .hf_id = "Qwen/Qwen3-30B-A3B", .gguf_arch = "qwen3moe", .runnable = true,
       .n_layer = 48, .n_embd = 2048, .n_head = 32, .n_head_kv = 4, .head_dim = 128, .n_expert = 128,
       .n_expert_used = 8, .n_ff_exp = 768, .n_ff = 6144, .n_vocab = 151936, .rope_theta = 1e6, .n_ctx = 40960,
       .rms_eps = 1e-6, .qk_norm = QkNorm::kPerHead, .norm_topk_prob = true,
       .notes = "QK-norm per head, all 48 layers MoE, no shared expert"},
      {.name = "qwen3-235b-a22b", .hf_id = "Qwen/Qwen3-235B-A22B", .gguf_arch = "qwen3moe", .runnable = true,
       .n_layer = 94, .n_embd = 4096, .n_head = 64, .n_head_kv = 4, .head_dim = 128, .n_expert = 128,
       .n_expert_used = 8, .n_ff_exp = 1536, .n_ff = 12288, .n_vocab = 151936, .rope_theta = 1e6, .n_ctx = 40960,
       .rms_eps = 1e-6, .qk_norm = QkNorm::kPerHead, .norm_topk_prob = true,
       .notes = "QK-norm per head, all 94 layers MoE, no shared expert"},
      {.name = "mixtral-8x7b", .hf_id = "mistralai/Mixtral-8x7B-v0.1", .gguf_arch = "llama", .runnable = true,
       .n_layer = 32, .n_embd = 4096, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_expert = 8,
       .n_expert_used = 2, .n_ff_exp = 14336, .n_ff = 14336, .n_vocab = 32000, .rope_theta = 1e6, .n_ctx = 32768,
       .rms_eps = 1e-5, .notes = "GGUF architecture llama with experts (as llama.cpp stores Mixtral)"},
      {.name = "deepseek-v3", .hf_id = "deepseek-ai/DeepSeek-V3", .gguf_arch = "deepseek2", .runnable = true,
       .n_layer = 61, .n_embd = 7168, .n_head = 128, .n_head_kv = 128, .head_dim = 192, .n_expert = 256,
       .n_expert_used = 8, .n_ff_exp = 2048, .n_ff = 18432, .n_vocab = 129280, .rope_theta = 10000,
       .n_ctx = 163840, .rms_eps = 1e-6, .q_lora_rank = 1536, .kv_lora_rank = 512, .qk_nope_dim = 128,
       .qk_rope_dim = 64, .v_head_dim = 128, .yarn_factor = 40, .yarn_orig_ctx = 4096, .yarn_mscale_all_dim = 1.0,
       .n_dense_lead = 3, .n_shared_exp = 1, .sigmoid_router = true, .router_bias = true, .norm_topk_prob = true,
       .routed_scaling = 2.5, .n_group = 8, .topk_group = 4,
       .notes = "MLA (q LoRA 1536, latent 512 + RoPE key 64, kv_b as BF16 k_b/v_b), layers 0-2 dense (ffn 18432), "
                "1 shared expert, sigmoid routing with selection bias in 4 of 8 groups, YaRN x40; no MTP layer; "
                "FP8 upstream (R1, V3.1 and V3.2 without its sparse attention share these shapes)"},
      {.name = "glm-4.5-air", .hf_id = "zai-org/GLM-4.5-Air", .gguf_arch = "glm4moe", .runnable = true,
       .n_layer = 46, .n_embd = 4096, .n_head = 96, .n_head_kv = 8, .head_dim = 128, .n_rot = 64, .n_expert = 128,
       .n_expert_used = 8, .n_ff_exp = 1408, .n_ff = 10944, .n_vocab = 151552, .rope_theta = 1e6, .n_ctx = 131072,
       .rms_eps = 1e-5, .attn_bias = true, .n_dense_lead = 1, .n_shared_exp = 1, .sigmoid_router = true,
       .router_bias = true, .norm_topk_prob = true,
       .notes = "q/k/v biases, RoPE on 64 of 128 dims, layer 0 dense (ffn 10944), 1 shared expert, sigmoid routing "
                "with selection bias; no MTP layer; 1408- and 10944-wide rows fall back from K-quants to Q8_0"},
      {.name = "minimax-m2", .hf_id = "MiniMaxAI/MiniMax-M2", .gguf_arch = "minimax-m2", .runnable = true,
       .n_layer = 62, .n_embd = 3072, .n_head = 48, .n_head_kv = 8, .head_dim = 128, .n_rot = 64, .n_expert = 256,
       .n_expert_used = 8, .n_ff_exp = 1536, .n_ff = 1536, .n_vocab = 200064, .rope_theta = 5e6, .n_ctx = 196608,
       .rms_eps = 1e-6, .qk_norm = QkNorm::kFull, .sigmoid_router = true, .router_bias = true,
       .norm_topk_prob = true,
       .notes = "QK-norm over the whole q and k projections, RoPE on 64 of 128 dims, all 62 layers MoE, no shared "
                "expert, sigmoid routing with selection bias; no MTP modules; FP8 upstream"},
      {.name = "qwen3-next-80b-a3b", .hf_id = "Qwen/Qwen3-Next-80B-A3B-Instruct", .gguf_arch = "qwen3next",
       .runnable = true, .n_layer = 48, .n_embd = 2048, .n_head = 16, .n_head_kv = 2, .head_dim = 256, .n_rot = 64,
       .n_expert = 512, .n_expert_used = 10, .n_ff_exp = 512, .n_ff = 5120, .n_vocab = 151936, .rope_theta = 1e7,
       .n_ctx = 262144, .rms_eps = 1e-6, .qk_norm = QkNorm::kPerHead, .n_shared_exp = 1, .norm_topk_prob = true,
       .full_attn_interval = 4, .lin_k_heads = 16, .lin_v_heads = 32, .lin_k_dim = 128, .lin_v_dim = 128,
       .lin_conv = 4,
       .notes = "36 Gated DeltaNet layers (16 key / 32 value heads of 128, conv 4) and 12 gated attention layers "
                "(QK-norm, RoPE on 64 of 256 dims), 512 experts top-10 plus a sigmoid-gated shared expert; no MTP"},
      {.name = "gpt-oss-120b", .hf_id = "openai/gpt-oss-120b", .gguf_arch = "gpt-oss", .runnable = true,
       .n_layer = 36, .n_embd = 2880, .n_head = 64, .n_head_kv = 8, .head_dim = 64, .n_expert = 128,
       .n_expert_used = 4, .n_ff_exp = 2880, .n_ff = 2880, .n_vocab = 201088, .rope_theta = 150000,
       .n_ctx = 131072, .rms_eps = 1e-5, .yarn_factor = 32, .yarn_orig_ctx = 4096, .norm_topk_prob = true,
       .oai_moe = true, .sliding_window = 128, .expert_type = "MXFP4",
       .notes = "attention sinks, q/k/v/o, router and expert biases, sliding window 128 on even layers, clamped "
                "SwiGLU, YaRN x32; experts MXFP4 (as released) unless --expert-weight-type"},
      {.name = "gpt-oss-20b", .hf_id = "openai/gpt-oss-20b", .gguf_arch = "gpt-oss", .runnable = true,
       .n_layer = 24, .n_embd = 2880, .n_head = 64, .n_head_kv = 8, .head_dim = 64, .n_expert = 32,
       .n_expert_used = 4, .n_ff_exp = 2880, .n_ff = 2880, .n_vocab = 201088, .rope_theta = 150000,
       .n_ctx = 131072, .rms_eps = 1e-5, .yarn_factor = 32, .yarn_orig_ctx = 4096, .norm_topk_prob = true,
       .oai_moe = true, .sliding_window = 128, .expert_type = "MXFP4",
       .notes = "as gpt-oss-120b with 24 layers of 32 experts"},
      // DeepSeek-V4-Flash's config.json as transformers' DeepseekV4Config saves it: the upstream file's
      // compress_ratios [0, 0, 4, 128, 4, ...] and num_hash_layers 3 become layer_types / mlp_layer_types
      // (tools/hf_synthetic.h), its rope_scaling (yarn, factor 16 over 65536 positions) the compress RoPE
      // with attention_factor 1.0 (model/deepseek_v4_rope.h).
      {.name = "deepseek-v4-flash", .hf_id = "deepseek-ai/DeepSeek-V4-Flash", .gguf_arch = "deepseek_v4",
       .runnable = true, .n_layer = 43, .n_embd = 4096, .n_head = 64, .n_head_kv = 1, .head_dim = 512, .n_rot = 64,
       .n_expert = 256, .n_expert_used = 6, .n_ff_exp = 2048, .n_ff = 2048, .n_vocab = 129280, .rope_theta = 10000,
       .n_ctx = 1048576, .rms_eps = 1e-6, .q_lora_rank = 1024, .n_shared_exp = 1, .router_bias = true,
       .norm_topk_prob = true, .routed_scaling = 1.5, .sliding_window = 128, .expert_type = "MXFP4",
       .hf_config = R"({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "vocab_size": 129280,
           "hidden_size": 4096, "moe_intermediate_size": 2048, "num_hidden_layers": 43, "num_attention_heads": 64,
           "num_key_value_heads": 1, "head_dim": 512, "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8,
           "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 6, "scoring_func": "sqrtsoftplus",
           "norm_topk_prob": true, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hidden_act": "silu",
           "max_position_embeddings": 1048576, "rope_theta": 10000.0, "compress_rope_theta": 160000.0,
           "partial_rotary_factor": 0.125, "rope_parameters": {
             "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.125},
             "compress": {"rope_type": "yarn", "rope_theta": 160000.0, "partial_rotary_factor": 0.125,
                          "factor": 16.0, "original_max_position_embeddings": 65536, "beta_fast": 32.0,
                          "beta_slow": 1.0, "attention_factor": 1.0}},
           "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
           "num_hash_layers": 3, "sliding_window": 128, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
           "index_n_heads": 64, "index_head_dim": 128, "index_topk": 512, "num_nextn_predict_layers": 1,
           "rms_norm_eps": 1e-6, "attention_bias": false, "tie_word_embeddings": false, "bos_token_id": 0,
           "eos_token_id": 1})",
       .notes = "hyper-connections (4 streams), MQA over a 128-token window plus compressed KV (CSA rate 4 with a "
                "top-512 indexer, HCA rate 128), q LoRA 1024, grouped output LoRA (8 x 1024), 3 hash-routed then "
                "sqrtsoftplus-routed layers, 1 shared expert, clamped SwiGLU; two leading sliding-window-only "
                "layers; YaRN (x16) on the compressed layers' RoPE; no MTP layer; routed experts MXFP4 as released (the "
                "dense weights ship FP8: --weight-type fp8) unless --expert-weight-type"},
      // Qwen3.8-Flash-Next's text config (transformers Qwen4ExpTextConfig, the checkpoint's text_config).
      {.name = "qwen3.8-flash-next", .hf_id = "Qwen/Qwen3.8-Flash-Next", .gguf_arch = "qwen4_exp_text",
       .runnable = true, .n_layer = 48, .n_embd = 2560, .n_head = 24, .n_head_kv = 2, .head_dim = 256, .n_rot = 64,
       .n_expert = 512, .n_expert_used = 10, .n_ff_exp = 640, .n_ff = 640, .n_vocab = 248320, .rope_theta = 1e7,
       .n_ctx = 262144, .rms_eps = 1e-6, .qk_norm = QkNorm::kPerHead, .n_shared_exp = 1, .norm_topk_prob = true,
       .full_attn_interval = 4, .lin_k_heads = 16, .lin_v_heads = 48, .lin_k_dim = 128, .lin_v_dim = 128,
       .lin_conv = 4,
       .hf_config = R"({"architectures": ["Qwen4ExpForCausalLM"], "model_type": "qwen4_exp_text", "vocab_size": 248320,
           "hidden_size": 2560, "num_hidden_layers": 48, "num_attention_heads": 24, "num_key_value_heads": 2,
           "head_dim": 256, "partial_rotary_factor": 0.25, "rope_parameters": {"rope_type": "default",
           "rope_theta": 10000000.0, "partial_rotary_factor": 0.25}, "max_position_embeddings": 262144,
           "rms_norm_eps": 1e-6, "hidden_act": "silu", "attention_bias": false, "full_attention_interval": 4,
           "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
           "linear_num_key_heads": 16, "linear_num_value_heads": 48, "num_experts": 512, "num_experts_per_tok": 10,
           "moe_intermediate_size": 640, "shared_expert_intermediate_size": 640, "norm_topk_prob": true,
           "hc_count": 4, "hc_lowrank": 320, "ple_layer_ids": [2], "ple_embed_dim": 2560, "ple_conv_kernel_size": 4,
           "ngram_size": 3, "heads_per_ngram": 8, "ngram_vocab_size_base": 20000000,
           "make_ngram_vocab_size_divisible_by": 128, "split_ngram_parts": 128, "indexer_n_heads": 4,
           "indexer_kv_heads": 1, "indexer_head_dim": 128, "indexer_budget": 2048, "indexer_compress_ratio": 4,
           "output_gate_type": "sigmoid", "tie_word_embeddings": false, "bos_token_id": 248044,
           "eos_token_id": 248044})",
       .notes = "gated residual (4 streams, rank 320), 36 Gated DeltaNet layers (16 key / 48 value heads of 128, "
                "sigmoid output gate) and "
                "12 QSA layers (24 heads, 2 KV heads of 256, gated; indexer of 4 heads x 128, budget 2048, blocks of "
                "4), 512 experts top-10 plus a gated shared expert, PLE with a 51B-value hashed 3-gram table at "
                "layer 2 (zeros here, left unwritten, stored as the token embedding); no MTP layer, no vision "
                "tower"},
      {.name = "deepseek-v2-lite", .hf_id = "deepseek-ai/DeepSeek-V2-Lite", .gguf_arch = "deepseek2", .runnable = false,
       .n_layer = 27, .n_embd = 2048, .n_head = 16, .n_head_kv = 16, .head_dim = 192, .n_expert = 64,
       .n_expert_used = 6, .n_ff_exp = 1408, .n_ff = 10944, .n_vocab = 102400, .rope_theta = 10000,
       .n_ctx = 163840, .rms_eps = 1e-6, .kv_lora_rank = 512, .qk_nope_dim = 128, .qk_rope_dim = 64,
       .v_head_dim = 128, .yarn_factor = 40, .yarn_orig_ctx = 4096, .yarn_mscale_all_dim = 0.707,
       .n_dense_lead = 1, .n_shared_exp = 2,
       .notes = "MLA without q LoRA (latent 512 + RoPE key 64), layer 0 dense (ffn 10944), 2 shared experts, "
                "softmax top-6 (DeepSeek-V2 routing, which the deepseek2 loader refuses: it routes as V3 only)"},
      {.name = "tiny-moe", .gguf_arch = "qwen3moe", .runnable = true, .n_layer = 2, .n_embd = 256, .n_head = 4,
       .n_head_kv = 2, .head_dim = 64, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256, .n_ff = 512,
       .n_vocab = 512, .rope_theta = 1e6, .n_ctx = 4096, .rms_eps = 1e-6, .qk_norm = QkNorm::kPerHead,
       .norm_topk_prob = true, .notes = "Qwen3-MoE-shaped test model (CI)"},
      {.name = "tiny-qwen3-next", .gguf_arch = "qwen3next", .runnable = true, .n_layer = 4, .n_embd = 256,
       .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_rot = 16, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 128,
       .n_ff = 512, .n_vocab = 512, .rope_theta = 1e7, .n_ctx = 4096, .rms_eps = 1e-6, .qk_norm = QkNorm::kPerHead,
       .n_shared_exp = 1, .norm_topk_prob = true, .full_attn_interval = 4, .lin_k_heads = 2, .lin_v_heads = 4,
       .lin_k_dim = 32, .lin_v_dim = 32, .lin_conv = 4, .notes = "Qwen3-Next-shaped test model (CI)"},
      {.name = "tiny-mixtral", .gguf_arch = "llama", .runnable = true, .n_layer = 2, .n_embd = 256, .n_head = 4,
       .n_head_kv = 2, .head_dim = 64, .n_expert = 4, .n_expert_used = 2, .n_ff_exp = 256, .n_ff = 256,
       .n_vocab = 512, .rope_theta = 1e6, .n_ctx = 4096, .rms_eps = 1e-5, .notes = "Mixtral-shaped test model (CI)"},
      {.name = "tiny-deepseek", .gguf_arch = "deepseek2", .runnable = true, .n_layer = 3, .n_embd = 256,
       .n_head = 4, .n_head_kv = 4, .head_dim = 64, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256,
       .n_ff = 512, .n_vocab = 512, .rope_theta = 10000, .n_ctx = 4096, .rms_eps = 1e-6, .q_lora_rank = 128,
       .kv_lora_rank = 128, .qk_nope_dim = 32, .qk_rope_dim = 32, .v_head_dim = 32, .yarn_factor = 4,
       .yarn_orig_ctx = 1024, .yarn_mscale_all_dim = 1.0, .n_dense_lead = 1, .n_shared_exp = 1,
       .sigmoid_router = true, .router_bias = true, .norm_topk_prob = true, .routed_scaling = 2.5, .n_group = 4,
       .topk_group = 2, .notes = "DeepSeek-V3-shaped test model (CI): MLA with q LoRA, YaRN, 1 dense layer, groups"},
      {.name = "tiny-glm-moe", .gguf_arch = "glm4moe", .runnable = true, .n_layer = 3, .n_embd = 256, .n_head = 4,
       .n_head_kv = 2, .head_dim = 64, .n_rot = 32, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256,
       .n_ff = 512, .n_vocab = 512, .rope_theta = 1e6, .n_ctx = 4096, .rms_eps = 1e-5, .attn_bias = true,
       .n_dense_lead = 1, .n_shared_exp = 1, .sigmoid_router = true, .router_bias = true, .norm_topk_prob = true,
       .notes = "GLM-4.5-Air-shaped test model (CI)"},
      {.name = "tiny-minimax", .gguf_arch = "minimax-m2", .runnable = true, .n_layer = 2, .n_embd = 256,
       .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_rot = 32, .n_expert = 8, .n_expert_used = 2,
       .n_ff_exp = 256, .n_ff = 256, .n_vocab = 512, .rope_theta = 5e6, .n_ctx = 4096, .rms_eps = 1e-6,
       .qk_norm = QkNorm::kFull, .sigmoid_router = true, .router_bias = true, .norm_topk_prob = true,
       .notes = "MiniMax-M2-shaped test model (CI)"},
      {.name = "tiny-deepseek-v4", .gguf_arch = "deepseek_v4", .runnable = true, .n_layer = 4, .n_embd = 256,
       .n_head = 4, .n_head_kv = 1, .head_dim = 64, .n_rot = 16, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 128,
       .n_ff = 128, .n_vocab = 512, .rope_theta = 10000, .n_ctx = 4096, .rms_eps = 1e-6, .q_lora_rank = 64,
       .n_shared_exp = 1, .router_bias = true, .norm_topk_prob = true, .routed_scaling = 1.5, .sliding_window = 16,
       .hf_config = R"({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "vocab_size": 512,
           "hidden_size": 256, "moe_intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 1,
           "head_dim": 64, "q_lora_rank": 64, "o_lora_rank": 64, "o_groups": 4, "n_routed_experts": 8,
           "n_shared_experts": 1, "num_experts_per_tok": 2, "scoring_func": "sqrtsoftplus", "norm_topk_prob": true,
           "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hidden_act": "silu", "max_position_embeddings": 4096,
           "rope_theta": 10000.0, "compress_rope_theta": 160000.0, "partial_rotary_factor": 0.25,
           "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 256, "beta_fast": 32,
                            "beta_slow": 1},
           "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
           "num_hash_layers": 1, "sliding_window": 16, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-6,
           "index_n_heads": 2, "index_head_dim": 32, "index_topk": 8, "num_nextn_predict_layers": 0,
           "rms_norm_eps": 1e-6, "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": 1})",
       .notes = "DeepSeek-V4-shaped test model (CI): sliding, CSA and HCA layers (YaRN from an upstream-style "
                "rope_scaling), a hash-routed layer"},
      {.name = "tiny-qwen4-exp", .gguf_arch = "qwen4_exp_text", .runnable = true, .n_layer = 4, .n_embd = 256,
       .n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_rot = 16, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 128,
       .n_ff = 128, .n_vocab = 512, .rope_theta = 1e7, .n_ctx = 4096, .rms_eps = 1e-6, .qk_norm = QkNorm::kPerHead,
       .n_shared_exp = 1, .norm_topk_prob = true, .full_attn_interval = 4, .lin_k_heads = 2, .lin_v_heads = 4,
       .lin_k_dim = 32, .lin_v_dim = 32, .lin_conv = 4,
       .hf_config = R"({"architectures": ["Qwen4ExpForCausalLM"], "model_type": "qwen4_exp_text", "vocab_size": 512,
           "hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "partial_rotary_factor": 0.25, "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0,
           "partial_rotary_factor": 0.25}, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "hidden_act": "silu",
           "full_attention_interval": 4, "linear_conv_kernel_dim": 4, "linear_key_head_dim": 32,
           "linear_value_head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "num_experts": 8,
           "num_experts_per_tok": 2, "moe_intermediate_size": 128, "shared_expert_intermediate_size": 128,
           "norm_topk_prob": true, "hc_count": 4, "hc_lowrank": 32, "ple_layer_ids": [2], "ple_embed_dim": 256,
           "ple_conv_kernel_size": 4, "ngram_size": 3, "heads_per_ngram": 8, "ngram_vocab_size_base": 1000,
           "make_ngram_vocab_size_divisible_by": 128, "split_ngram_parts": 4, "indexer_n_heads": 2,
           "indexer_kv_heads": 1, "indexer_head_dim": 32, "indexer_budget": 16, "indexer_compress_ratio": 4,
           "tie_word_embeddings": false, "bos_token_id": 0, "eos_token_id": 1})",
       .notes = "Qwen3.8-Flash-Next-shaped test model (CI): Gated DeltaNet, QSA, PLE"},
      {.name = "tiny-gpt-oss", .gguf_arch = "gpt-oss", .runnable = true, .n_layer = 2, .n_embd = 256, .n_head = 4,
       .n_head_kv = 2, .head_dim = 64, .n_expert = 8, .n_expert_used = 2, .n_ff_exp = 256, .n_ff = 256,
       .n_vocab = 512, .rope_theta = 150000, .n_ctx = 4096, .rms_eps = 1e-5, .yarn_factor = 32,
       .yarn_orig_ctx = 4096, .norm_topk_prob = true, .oai_moe = true, .sliding_window = 16,
       .expert_type = "MXFP4", .notes = "gpt-oss-shaped test model (CI)"},
  };
  return kPresets;
}

std::string preset_names(bool runnable_only) {
  std::string s;
  for (const ModelPreset& p : model_presets())
    if (p.runnable || !runnable_only) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

const ModelPreset& find_preset(const std::string& name) {
  const std::string want = normalise(name);
  for (const ModelPreset& p : model_presets())
    if (p.name == want) return p;
  fail(ErrorCode::kInvalidArgument, "unknown model preset '{}' (known: {})", name, preset_names(false));
}

const ModelPreset& require_runnable_preset(const std::string& name) {
  const ModelPreset& p = find_preset(name);
  if (!p.runnable)
    fail(ErrorCode::kUnsupported,
         "model preset {}: architecture {} is not supported by the engine yet ({}); runnable presets: {}", p.name,
         p.gguf_arch, p.notes, preset_names(true));
  return p;
}

}  // namespace ft
