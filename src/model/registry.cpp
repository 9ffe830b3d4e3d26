#include "model/registry.h"

#include <algorithm>

#include "model/architectures.h"
#include "util/error.h"
#include "util/log.h"
#include "util/progress.h"

namespace ft {

const std::vector<ArchEntry>& architectures() {
  static const std::vector<ArchEntry> kArchs = {
      {"llama", {"llama", "mistral"}, {"llama"}, build_llama},
      {"qwen2", {"qwen2"}, {"qwen2"}, build_qwen2},
      {"qwen3", {"qwen3"}, {"qwen3"}, build_qwen3},
      {"qwen3_moe", {"qwen3_moe"}, {"qwen3moe"}, build_qwen3_moe},
      {"mixtral", {"mixtral"}, {}, build_mixtral},
      {"qwen2_moe", {"qwen2_moe"}, {"qwen2moe"}, build_qwen2_moe},
      {"olmoe", {"olmoe"}, {"olmoe"}, build_olmoe},
      // Defaults of transformers 5.17's Glm4MoeConfig, MiniMaxM2Config and DeepseekV3Config.
      {"glm4_moe", {"glm4_moe"}, {"glm4moe"}, build_glm4_moe,
       R"({"partial_rotary_factor": 0.5, "first_k_dense_replace": 1, "n_shared_experts": 1, "norm_topk_prob": true,
           "routed_scaling_factor": 1.0, "n_group": 1, "topk_group": 1})"},
      {"minimax_m2", {"minimax_m2"}, {"minimax-m2"}, build_minimax_m2, R"({"rope_theta": 5000000.0})"},
      {"deepseek_v3", {"deepseek_v3", "kimi_k2"}, {"deepseek2"}, build_deepseek_v3,
       R"({"first_k_dense_replace": 3, "n_shared_experts": 1, "norm_topk_prob": true, "routed_scaling_factor": 2.5,
           "n_group": 8, "topk_group": 4})"},
      // DeepSeek-V4 (model/deepseek_v4.cpp reads its own fields from config.json).
      {"deepseek_v4", {"deepseek_v4"}, {}, build_deepseek_v4},
      // Qwen3-Next (layer_types default: every full_attention_interval-th layer attends, config.cpp).
      {"qwen3_next", {"qwen3_next"}, {"qwen3next"}, build_qwen3_next,
       R"({"partial_rotary_factor": 0.25, "norm_topk_prob": true, "linear_conv_kernel_dim": 4,
           "full_attention_interval": 4})"},
      // Qwen3.5 text models (dense and MoE), as their configs' text part names them.
      {"qwen3_5", {"qwen3_5_text"}, {"qwen35"}, build_qwen3_next,
       R"({"partial_rotary_factor": 0.25, "linear_conv_kernel_dim": 4})"},
      {"qwen3_5_moe", {"qwen3_5_moe_text"}, {"qwen35moe"}, build_qwen3_next,
       R"({"partial_rotary_factor": 0.25, "linear_conv_kernel_dim": 4})"},
      // Defaults of transformers 5.17's GptOssConfig (layer_types default: gpt_oss.cpp).
      {"gpt_oss", {"gpt_oss"}, {"gpt-oss"}, build_gpt_oss,
       R"({"num_hidden_layers": 36, "num_local_experts": 128, "vocab_size": 201088, "hidden_size": 2880,
           "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64, "num_key_value_heads": 8,
           "sliding_window": 128, "tie_word_embeddings": false, "max_position_embeddings": 131072,
           "rms_norm_eps": 1e-5, "num_experts_per_tok": 4, "swiglu_alpha": 1.702, "swiglu_limit": 7.0,
           "attention_bias": true, "rope_theta": 150000.0,
           "rope_parameters": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                               "truncate": false, "original_max_position_embeddings": 4096}})"},
      // Gemma 4 text models (transformers 5.17 Gemma4TextConfig; defaults read in gemma4.cpp).
      {"gemma4", {"gemma4_text"}, {}, build_gemma4},
      // Qwen3.8-Flash-Next preview (transformers 5.17 Qwen4ExpTextConfig; its own fields read in qwen4_exp.cpp).
      {"qwen4_exp", {"qwen4_exp_text"}, {}, build_qwen4_exp, R"({"norm_topk_prob": true})"},
  };
  return kArchs;
}

std::string supported_architectures() {
  std::string s;
  for (const ArchEntry& a : architectures()) {
    for (const std::string& t : a.hf_model_types) s += (s.empty() ? "" : ", ") + t;
    for (const std::string& t : a.gguf_archs)
      if (std::find(a.hf_model_types.begin(), a.hf_model_types.end(), t) == a.hf_model_types.end())
        s += ", " + t + " (GGUF)";
  }
  return s;
}

ModelConfig read_model_config(const Checkpoint& ckpt, const ArchEntry** entry_out) {
  const nlohmann::json& meta = ckpt.metadata();
  const bool gguf = ckpt.format() == "gguf";
  const char* key = gguf ? "general.architecture" : "model_type";
  const nlohmann::json& src = gguf ? meta : meta.value("config", nlohmann::json::object());
  auto it = src.find(key);
  if (it == src.end() || !it->is_string())
    fail(ErrorCode::kInvalidFile, "{}: no '{}' naming the architecture ({})", ckpt.path(), key,
         gguf ? "GGUF metadata" : "config.json");
  std::string name = it->get<std::string>();
  std::string lookup = name;
  if (gguf && name == "llama") {
    auto ec = meta.find("llama.expert_count");
    if (ec != meta.end() && ec->is_number_integer() && ec->get<int64_t>() > 0) lookup = "mixtral";
  }
  for (const ArchEntry& a : architectures()) {
    const auto& names = gguf ? a.gguf_archs : a.hf_model_types;
    const bool hit = std::find(names.begin(), names.end(), lookup) != names.end() || (gguf && lookup == a.name);
    if (!hit) continue;
    if (entry_out) *entry_out = &a;
    if (gguf) return config_from_gguf(meta, name, a.name);
    if (!a.hf_defaults) return config_from_hf(src, a.name);
    nlohmann::json merged = nlohmann::json::parse(a.hf_defaults);
    for (const auto& [k, v] : src.items()) merged[k] = v;
    return config_from_hf(merged, a.name);
  }
  fail(ErrorCode::kUnsupported, "{}: unsupported architecture '{}' (supported: {})", ckpt.path(), name,
       supported_architectures());
}

std::unique_ptr<Model> load_model(const Checkpoint& ckpt, Ops& ops, ProgressSink* progress) {
  return load_model(ckpt, ops, dist::TpShard{}, progress);
}

std::unique_ptr<Model> load_model(const Checkpoint& ckpt, Ops& ops, const dist::TpShard& tp, ProgressSink* progress) {
  const ArchEntry* entry = nullptr;
  ModelConfig config = read_model_config(ckpt, &entry);
  WeightLoader ld(ckpt, ops, progress);
  if (!ld.quant_config().note.empty()) spdlog::info("{}", ld.quant_config().note);  // once a load
  dist::check_shard(tp);
  ld.set_tensor_parallel(tp);
  try {
    ProgressPhase phase(progress, "weights", ld.load_bytes_estimate());
    std::unique_ptr<Model> model = entry->build(std::move(config), ld, ops);
    if (model->tensor_parallel().size != tp.size)  // an architecture that does not load by the shard
      fail(ErrorCode::kUnsupported, "tensor parallelism (size {}) is not supported for this architecture yet",
           tp.size);
    model->add_unloaded_weight_bytes(ld.tp_unloaded_bytes());
    phase.finish();
    return model;
  } catch (const Error& e) {
    throw e.with_context(fmt::format("loading {} model from {}", entry->name, ckpt.path()));
  }
}

}  // namespace ft
