#pragma once
// Builders of the architecture files (model/<arch>.cpp), listed in registry.cpp.
#include <memory>

#include "model/registry.h"

namespace ft {

std::unique_ptr<Model> build_llama(ModelConfig config, WeightLoader& ld, Ops& ops);      // llama.cpp
std::unique_ptr<Model> build_qwen2(ModelConfig config, WeightLoader& ld, Ops& ops);      // qwen2.cpp
std::unique_ptr<Model> build_qwen3(ModelConfig config, WeightLoader& ld, Ops& ops);      // qwen3.cpp
std::unique_ptr<Model> build_qwen3_moe(ModelConfig config, WeightLoader& ld, Ops& ops);  // qwen3_moe.cpp
std::unique_ptr<Model> build_mixtral(ModelConfig config, WeightLoader& ld, Ops& ops);    // mixtral.cpp
std::unique_ptr<Model> build_qwen2_moe(ModelConfig config, WeightLoader& ld, Ops& ops);  // qwen2_moe.cpp
std::unique_ptr<Model> build_olmoe(ModelConfig config, WeightLoader& ld, Ops& ops);      // olmoe.cpp
std::unique_ptr<Model> build_glm4_moe(ModelConfig config, WeightLoader& ld, Ops& ops);   // glm4_moe.cpp
std::unique_ptr<Model> build_minimax_m2(ModelConfig config, WeightLoader& ld, Ops& ops); // minimax_m2.cpp
std::unique_ptr<Model> build_deepseek_v3(ModelConfig config, WeightLoader& ld, Ops& ops);  // deepseek_v3.cpp
std::unique_ptr<Model> build_gpt_oss(ModelConfig config, WeightLoader& ld, Ops& ops);      // gpt_oss.cpp
std::unique_ptr<Model> build_qwen3_next(ModelConfig config, WeightLoader& ld, Ops& ops);   // qwen3_next.cpp
std::unique_ptr<Model> build_deepseek_v4(ModelConfig config, WeightLoader& ld, Ops& ops);  // deepseek_v4.cpp
std::unique_ptr<Model> build_gemma4(ModelConfig config, WeightLoader& ld, Ops& ops);       // gemma4.cpp
std::unique_ptr<Model> build_qwen4_exp(ModelConfig config, WeightLoader& ld, Ops& ops);    // qwen4_exp.cpp

}  // namespace ft
