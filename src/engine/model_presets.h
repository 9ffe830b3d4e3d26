#pragma once
// Model presets: the real shapes of well-known MoE checkpoints (numbers from each model's Hugging
// Face config.json), for synthetic benchmark models (`--model-preset NAME --dummy-weights`, see
// engine/synthetic_checkpoint.h). A preset names the GGUF architecture its synthetic file is
// written as; presets whose architecture the engine cannot run yet are listed (so `ft bench
// --list-presets` shows them) but rejected by require_runnable_preset.
#include <cstdint>
#include <string>
#include <vector>

namespace ft {

struct ModelPreset {
  std::string name;          // "qwen3-30b-a3b"
  std::string hf_id;         // "Qwen/Qwen3-30B-A3B" (where the shapes come from); "" for test presets
  std::string gguf_arch;     // general.architecture of the synthetic GGUF: "qwen3moe", "llama", "gpt-oss", "deepseek2"
  bool runnable = false;     // the engine has this architecture (synthetic weights can be built)
  int64_t n_layer = 0;       // num_hidden_layers
  int64_t n_embd = 0;        // hidden_size
  int64_t n_head = 0;        // num_attention_heads
  int64_t n_head_kv = 0;     // num_key_value_heads
  int64_t head_dim = 0;      // head_dim (per query/key head)
  int64_t n_expert = 0;      // routed experts per MoE layer
  int64_t n_expert_used = 0; // experts per token (top-k)
  int64_t n_ff_exp = 0;      // per-expert FFN width (moe_intermediate_size)
  int64_t n_ff = 0;          // dense FFN width (intermediate_size; used by dense layers only)
  int64_t n_vocab = 0;       // vocab_size
  double rope_theta = 0;     // rope_theta
  int64_t n_ctx = 0;         // max_position_embeddings
  double rms_eps = 1e-6;     // rms_norm_eps
  std::string notes;         // what the synthetic model leaves out or why the preset is not runnable

  /** Parameters of the whole model and those read per token (dense + n_expert_used experts per
   *  layer, LM head, no embedding table), for the standard decoder this preset describes (GQA
   *  attention, SwiGLU experts, no shared expert). Approximate for presets with extra parts (MLA,
   *  attention sinks, shared experts), whose notes say so. */
  int64_t total_params() const;
  int64_t active_params() const;
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
