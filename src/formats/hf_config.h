#pragma once
// Hugging Face config.json (+ generation_config.json, tokenizer_config.json) reader: the
// architecture-independent fields as a typed struct, plus the raw JSON for architecture code.
// Field names follow transformers' PretrainedConfig subclasses (LlamaConfig, Qwen3MoeConfig, ...).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft {

struct HfConfig {
  std::string model_type;                  // "qwen3_moe", "llama", ...
  std::vector<std::string> architectures;  // ["Qwen3MoeForCausalLM"]
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;           // dense FFN width (0 if absent)
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;         // absent -> num_attention_heads
  int64_t head_dim = 0;                    // absent -> hidden_size / num_attention_heads
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 0;                 // rms_norm_eps, else layer_norm_eps(ilon), else 0
  double rope_theta = 0;                   // rope_theta, else rope_parameters.rope_theta (or its
                                           // full_attention / main sub-object), else 0
  bool tie_word_embeddings = false;        // absent -> false (check for lm_head too)
  int64_t bos_token_id = -1;               // -1 if absent
  std::vector<int64_t> eos_token_ids;      // generation_config's if it has one, else config's; may be empty
  int64_t n_experts = 0;                   // num_experts / num_local_experts / n_routed_experts; 0 = dense
  int64_t n_experts_used = 0;              // num_experts_per_tok / top_k_experts; 0 = dense
  int64_t moe_intermediate_size = 0;       // per-expert FFN width (0 if absent)

  nlohmann::json raw;                // config.json as read (the text_config object is not flattened here)
  nlohmann::json generation_config;  // generation_config.json, or null
  nlohmann::json tokenizer_config;   // tokenizer_config.json, or null
};

/** Fills the typed fields from a parsed config.json. Fields of a nested "text_config" object are used when
 *  the top level lacks hidden_size (multimodal wrappers). `source` names the file in errors.
 *  Throws ft::Error(kInvalidFile) "<source>: <field>: expected ..., got ..." for a field of the wrong type
 *  and for a config without hidden_size / num_hidden_layers / num_attention_heads / vocab_size. */
HfConfig parse_hf_config(const nlohmann::json& config, const std::string& source);

/** Reads `folder`/config.json (required), generation_config.json and tokenizer_config.json (optional).
 *  Throws ft::Error(kNotFound) if config.json is missing, kInvalidFile for bad JSON (naming file and offset). */
HfConfig read_hf_config(const std::string& folder);

/** Parses a JSON file. Throws ft::Error(kNotFound) if missing, kInvalidFile with the byte offset of a syntax error. */
nlohmann::json read_json_file(const std::string& path);

}  // namespace ft
