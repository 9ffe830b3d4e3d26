#include "engine/model_presets.h"

#include <algorithm>
#include <cctype>

#include "util/error.h"

namespace ft {
namespace {

std::string normalise(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

int64_t ModelPreset::total_params() const {
  const int64_t attn = n_embd * (n_head + 2 * n_head_kv) * head_dim + n_head * head_dim * n_embd;
  const int64_t layer = attn + n_expert * 3 * n_embd * n_ff_exp + n_expert * n_embd + 2 * n_embd;
  return 2 * n_vocab * n_embd + n_layer * layer + n_embd;
}

int64_t ModelPreset::active_params() const {
  const int64_t attn = n_embd * (n_head + 2 * n_head_kv) * head_dim + n_head * head_dim * n_embd;
  const int64_t layer = attn + n_expert_used * 3 * n_embd * n_ff_exp + n_expert * n_embd + 2 * n_embd;
  return n_vocab * n_embd + n_layer * layer + n_embd;
}

const std::vector<ModelPreset>& model_presets() {
  // Shapes from the models' config.json on Hugging Face (num_hidden_layers, hidden_size,
  // num_attention_heads, num_key_value_heads, head_dim, num_experts / num_local_experts /
  // n_routed_experts, num_experts_per_tok, moe_intermediate_size, intermediate_size, vocab_size,
  // rope_theta, max_position_embeddings, rms_norm_eps).
  static const std::vector<ModelPreset> kPresets = {
      {"qwen3-30b-a3b", "Qwen/Qwen3-30B-A3B", "qwen3moe", true, 48, 2048, 32, 4, 128, 128, 8, 768, 6144, 151936,
       1e6, 40960, 1e-6, "QK-norm per head, all 48 layers MoE, no shared expert"},
      {"qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B", "qwen3moe", true, 94, 4096, 64, 4, 128, 128, 8, 1536, 12288, 151936,
       1e6, 40960, 1e-6, "QK-norm per head, all 94 layers MoE, no shared expert"},
      {"mixtral-8x7b", "mistralai/Mixtral-8x7B-v0.1", "llama", true, 32, 4096, 32, 8, 128, 8, 2, 14336, 14336, 32000,
       1e6, 32768, 1e-5, "GGUF architecture llama with experts (as llama.cpp stores Mixtral)"},
      {"tiny-moe", "", "qwen3moe", true, 2, 256, 4, 2, 64, 8, 2, 256, 512, 512, 1e6, 4096, 1e-6,
       "Qwen3-MoE-shaped test model (CI)"},
      {"tiny-mixtral", "", "llama", true, 2, 256, 4, 2, 64, 4, 2, 256, 256, 512, 1e6, 4096, 1e-5,
       "Mixtral-shaped test model (CI)"},
      {"gpt-oss-20b", "openai/gpt-oss-20b", "gpt-oss", false, 24, 2880, 64, 8, 64, 32, 4, 2880, 2880, 201088, 150000,
       131072, 1e-5,
       "attention sinks, QKV/expert biases, sliding window 128 on alternate layers, clamped SwiGLU, YaRN x32; "
       "experts in MXFP4 upstream"},
      {"gpt-oss-120b", "openai/gpt-oss-120b", "gpt-oss", false, 36, 2880, 64, 8, 64, 128, 4, 2880, 2880, 201088,
       150000, 131072, 1e-5,
       "attention sinks, QKV/expert biases, sliding window 128 on alternate layers, clamped SwiGLU, YaRN x32; "
       "experts in MXFP4 upstream"},
      {"deepseek-v2-lite", "deepseek-ai/DeepSeek-V2-Lite", "deepseek2", false, 27, 2048, 16, 16, 192, 64, 6, 1408,
       10944, 102400, 10000, 163840, 1e-6,
       "MLA attention (kv_lora_rank 512, qk_nope 128 + qk_rope 64, v_head_dim 128), 2 shared experts, layer 0 "
       "dense (ffn 10944); parameter counts here ignore MLA and shared experts"},
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
