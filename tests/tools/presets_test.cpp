// Presets of the DeepSeek-V3 (MLA), GLM-4.5 and MiniMax-M2 shape families: the real presets' parameter
// counts against the published totals and against the synthetic tensors themselves, the synthetic
// layout and metadata of the real shapes (planned, not generated), `--dummy-layers` keeping a MoE
// layer, and the tiny CI presets loading, generating, surviving a GGUF round trip and running
// `ft bench` on the CPU.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "cli/run_ft.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "tools/greedy_request.h"
#include "tools/preset_util.h"
#include "tools/model_presets.h"
#include "tools/synthetic_checkpoint.h"
#include "tools/synthetic_weights.h"
#include "formats/checkpoint.h"
#include "model/config.h"
#include "model/fixture_util.h"

namespace ft {
namespace {

constexpr const char* kTinyFamilies[] = {"tiny-deepseek", "tiny-glm-moe", "tiny-minimax"};



double rel(double got, double want) { return std::abs(got - want) / want; }

TEST(ModelPresets, NewFamiliesGiveThePublishedParameterCounts) {
  // Totals as the model cards state them (MTP layers not counted, as the cards do not). Active counts
  // follow each card's convention: DeepSeek-V3's 37B (36.6B "including 0.9B for the output head") is
  // active_params(): the LM head, not the embedding table; GLM-4.5's 12B and MiniMax-M2's 10B count
  // neither the table nor the head.
  const ModelPreset& ds = find_preset("DeepSeek_V3");
  EXPECT_LT(rel(static_cast<double>(ds.total_params()), 671e9), 0.02) << ds.total_params();
  EXPECT_LT(rel(static_cast<double>(ds.active_params()), 37e9), 0.02) << ds.active_params();
  const ModelPreset& glm = find_preset("glm-4.5-air");
  const int64_t glm_head = glm.n_vocab * glm.n_embd;
  EXPECT_LT(rel(static_cast<double>(glm.total_params()), 106e9), 0.02) << glm.total_params();
  EXPECT_LT(rel(static_cast<double>(glm.active_params() - glm_head), 12e9), 0.02) << glm.active_params();
  const ModelPreset& mm = find_preset("minimax-m2");
  const int64_t mm_head = mm.n_vocab * mm.n_embd;
  EXPECT_LT(rel(static_cast<double>(mm.total_params()), 230e9), 0.02) << mm.total_params();
  EXPECT_LT(rel(static_cast<double>(mm.active_params() - mm_head), 10e9), 0.02) << mm.active_params();
  const ModelPreset& lite = find_preset("deepseek-v2-lite");
  EXPECT_LT(rel(static_cast<double>(lite.total_params()), 15.7e9), 0.01) << lite.total_params();
  // Leading dense layers of a shortened model: a MoE layer stays.
  EXPECT_EQ(ds.dense_layers(), 3);
  EXPECT_EQ(ds.dense_layers(61), 3);
  EXPECT_EQ(ds.dense_layers(3), 2);
  EXPECT_EQ(ds.dense_layers(2), 1);
  EXPECT_EQ(ds.dense_layers(1), 0);
  EXPECT_EQ(mm.dense_layers(), 0);
}

TEST(ModelPresets, ParameterCountsMatchTheSyntheticTensors) {
  // The count formula and the writer's tensors agree for every runnable preset at 2 layers (one
  // dense layer where the preset has leading dense layers).
  for (const ModelPreset& p : model_presets()) {
    if (!p.runnable) continue;
    const SyntheticLayout l = synthetic_layout(spec_of(p.name, DType::Q8_0, 2));
    int64_t n = 0;
    for (const TensorInfo& t : l.tensors) n += t.numel();
    const int64_t moe_layers = 2 - p.dense_layers(2);
    const int64_t extra = p.is_mla() && !p.router_bias ? moe_layers * p.n_expert : 0;
    EXPECT_EQ(n, p.total_params(2) + extra) << p.name;
  }
}

TEST(SyntheticLayout, DeepSeekV3HasRealShapesAndDummyLayersKeepAMoeLayer) {
  const SyntheticLayout two = synthetic_layout(spec_of("deepseek-v3", DType::Q4_K, 2));
  EXPECT_EQ(two.n_layer, 2);
  expect_tensor(two, "blk.0.attn_q_a.weight", {1536, 7168}, DType::Q4_K);
  expect_tensor(two, "blk.0.attn_q_a_norm.weight", {1536}, DType::F32);
  expect_tensor(two, "blk.0.attn_q_b.weight", {128 * 192, 1536}, DType::Q4_K);
  expect_tensor(two, "blk.0.attn_kv_a_mqa.weight", {576, 7168}, DType::Q4_K);
  expect_tensor(two, "blk.0.attn_kv_a_norm.weight", {512}, DType::F32);
  expect_tensor(two, "blk.0.attn_k_b.weight", {128, 512, 128}, DType::BF16);
  expect_tensor(two, "blk.0.attn_v_b.weight", {128, 128, 512}, DType::BF16);
  expect_tensor(two, "blk.0.attn_output.weight", {7168, 128 * 128}, DType::Q4_K);
  expect_tensor(two, "blk.0.ffn_gate.weight", {18432, 7168}, DType::Q4_K);
  expect_tensor(two, "blk.0.ffn_down.weight", {7168, 18432}, DType::Q4_K);
  EXPECT_EQ(find(two, "blk.0.ffn_gate_inp.weight"), nullptr);
  expect_tensor(two, "blk.1.ffn_gate_inp.weight", {256, 7168}, DType::F32);
  expect_tensor(two, "blk.1.exp_probs_b.bias", {256}, DType::F32);
  expect_tensor(two, "blk.1.ffn_gate_exps.weight", {256, 2048, 7168}, DType::Q4_K);
  expect_tensor(two, "blk.1.ffn_down_exps.weight", {256, 7168, 2048}, DType::Q4_K);
  expect_tensor(two, "blk.1.ffn_up_shexp.weight", {2048, 7168}, DType::Q4_K);
  expect_tensor(two, "blk.1.ffn_down_shexp.weight", {7168, 2048}, DType::Q4_K);
  EXPECT_EQ(find(two, "blk.1.ffn_gate.weight"), nullptr);
  EXPECT_EQ(find(two, "blk.0.attn_k.weight"), nullptr);

  // The metadata reads back (llama.cpp's keys, as config_from_gguf takes them) as the model.
  const ModelConfig c = config_from_gguf(two.metadata, "deepseek2", "deepseek_v3");
  EXPECT_EQ(c.n_layer, 2);
  EXPECT_EQ(c.first_k_dense, 1);
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(1));
  EXPECT_EQ(c.q_lora_rank, 1536);
  EXPECT_EQ(c.kv_lora_rank, 512);
  EXPECT_EQ(c.qk_nope_dim, 128);
  EXPECT_EQ(c.qk_rope_dim, 64);
  EXPECT_EQ(c.v_head_dim, 128);
  EXPECT_EQ(c.n_ff, 18432);
  EXPECT_EQ(c.n_ff_exp, 2048);
  EXPECT_EQ(c.n_ff_shexp, 2048);
  EXPECT_EQ(c.n_expert, 256);
  EXPECT_EQ(c.n_expert_used, 8);
  EXPECT_EQ(c.router_scoring, RouterScoring::kSigmoid);
  EXPECT_TRUE(c.norm_topk_prob);
  EXPECT_DOUBLE_EQ(c.routed_scaling, 2.5);
  EXPECT_EQ(c.n_group, 8);
  EXPECT_EQ(c.topk_group, 4);
  EXPECT_EQ(c.n_vocab, 129280);
  EXPECT_EQ(c.rope_scaling.type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 40.0);
  EXPECT_EQ(c.rope_scaling.original_max_position, 4096);
  EXPECT_NEAR(c.rope_scaling.mscale_all_dim, 1.0, 1e-6);

  // Every layer: the first 3 dense; one layer: MoE.
  const SyntheticLayout all = synthetic_layout(spec_of("deepseek-v3", DType::Q4_K));
  EXPECT_EQ(all.metadata["deepseek2.leading_dense_block_count"], 3);
  EXPECT_NE(find(all, "blk.2.ffn_gate.weight"), nullptr);
  EXPECT_NE(find(all, "blk.3.ffn_gate_exps.weight"), nullptr);
  EXPECT_NE(find(all, "blk.60.ffn_gate_exps.weight"), nullptr);
  EXPECT_GT(all.bytes, int64_t{340} << 30);  // ~353 GiB of Q4_K
  const SyntheticLayout one = synthetic_layout(spec_of("deepseek-v3", DType::Q4_K, 1));
  EXPECT_FALSE(one.metadata.contains("deepseek2.leading_dense_block_count"));
  EXPECT_NE(find(one, "blk.0.ffn_gate_exps.weight"), nullptr);
}

TEST(SyntheticLayout, GlmAndMiniMaxHaveRealShapes) {
  const SyntheticLayout glm = synthetic_layout(spec_of("glm-4.5-air", DType::Q4_K, 2));
  expect_tensor(glm, "blk.0.attn_q.weight", {96 * 128, 4096}, DType::Q4_K);
  expect_tensor(glm, "blk.0.attn_k.weight", {8 * 128, 4096}, DType::Q4_K);
  expect_tensor(glm, "blk.0.attn_q.bias", {96 * 128}, DType::F32);
  expect_tensor(glm, "blk.0.attn_v.bias", {8 * 128}, DType::F32);
  expect_tensor(glm, "blk.0.post_attention_norm.weight", {4096}, DType::F32);
  expect_tensor(glm, "blk.0.ffn_down.weight", {4096, 10944}, DType::Q8_0);  // 10944 is no whole number of 256
  expect_tensor(glm, "blk.1.ffn_gate_exps.weight", {128, 1408, 4096}, DType::Q4_K);
  expect_tensor(glm, "blk.1.ffn_down_exps.weight", {128, 4096, 1408}, DType::Q8_0);
  expect_tensor(glm, "blk.1.ffn_gate_shexp.weight", {1408, 4096}, DType::Q4_K);
  EXPECT_EQ(find(glm, "blk.0.attn_q_norm.weight"), nullptr);  // use_qk_norm false
  const ModelConfig g = config_from_gguf(glm.metadata, "glm4moe", "glm4_moe");
  EXPECT_EQ(g.n_rot, 64);
  EXPECT_EQ(g.head_dim, 128);
  EXPECT_EQ(g.n_head_kv, 8);
  EXPECT_EQ(g.first_k_dense, 1);
  EXPECT_EQ(g.n_ff_shexp, 1408);
  EXPECT_EQ(g.router_scoring, RouterScoring::kSigmoid);
  EXPECT_EQ(g.n_group, 1);

  const SyntheticLayout mm = synthetic_layout(spec_of("minimax-m2", DType::Q4_K, 2));
  expect_tensor(mm, "blk.1.attn_q_norm.weight", {48 * 128}, DType::F32);
  expect_tensor(mm, "blk.1.attn_k_norm.weight", {8 * 128}, DType::F32);
  expect_tensor(mm, "blk.0.ffn_gate_exps.weight", {256, 1536, 3072}, DType::Q4_K);
  expect_tensor(mm, "blk.0.exp_probs_b.bias", {256}, DType::F32);
  EXPECT_EQ(find(mm, "blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(find(mm, "blk.0.ffn_gate_shexp.weight"), nullptr);
  const ModelConfig m = config_from_gguf(mm.metadata, "minimax-m2", "minimax_m2");
  EXPECT_EQ(m.n_rot, 64);
  EXPECT_EQ(m.first_k_dense, 0);
  EXPECT_EQ(m.n_ff_shexp, 0);
  EXPECT_DOUBLE_EQ(m.rope_theta, 5e6);
}

TEST(SyntheticCheckpoint, NewShapeFamiliesLoadAndGenerateDeterministically) {
  for (const char* preset : kTinyFamilies) {
    const SyntheticSpec s = spec_of(preset, DType::Q8_0);
    auto e1 = cpu_engine(std::make_unique<SyntheticCheckpoint>(s));
    auto e2 = cpu_engine(std::make_unique<SyntheticCheckpoint>(s));
    const ModelPreset& p = find_preset(preset);
    const ModelConfig& c = e1->config();
    EXPECT_EQ(c.is_mla(), p.is_mla()) << preset;
    EXPECT_EQ(c.first_k_dense, p.n_dense_lead) << preset;
    EXPECT_EQ(c.n_ff_shexp, p.n_shared_exp * p.n_ff_exp) << preset;
    EXPECT_EQ(c.router_scoring, RouterScoring::kSigmoid) << preset;
    EXPECT_EQ(c.n_group, p.n_group) << preset;
    EXPECT_EQ(c.qk_norm, p.qk_norm) << preset;
    if (!p.is_mla()) {
      EXPECT_EQ(c.n_rot, p.n_rot) << preset;
    }
    const GenerateRequest req = greedy(ids(20, 3), 6);
    const GenerateResult r1 = generate(*e1, {req})[0], r2 = generate(*e2, {req})[0];
    ASSERT_EQ(r1.tokens.size(), 6u) << preset;
    EXPECT_EQ(r1.tokens, r2.tokens) << preset;
    EXPECT_EQ(r1.step_logits, r2.step_logits) << preset;
    for (float v : r1.step_logits) ASSERT_TRUE(std::isfinite(v)) << preset;
  }
  EXPECT_EQ(find_preset("tiny-deepseek").q_lora_rank, 128);
  EXPECT_TRUE(find_preset("tiny-glm-moe").attn_bias);
  // One layer of a preset with a dense lead: a MoE layer, no dense one.
  auto one = cpu_engine(std::make_unique<SyntheticCheckpoint>(spec_of("tiny-deepseek", DType::Q8_0, 1)));
  EXPECT_EQ(one->config().first_k_dense, 0);
  EXPECT_TRUE(one->config().is_moe_layer(0));
}

TEST(SyntheticCheckpoint, MlaExpertsOffloadedEqualFused) {
  // MLA, a shared expert and group-limited sigmoid routing through the expert banks and cache.
  const SyntheticSpec s = spec_of("tiny-deepseek", DType::Q4_K);
  auto fused = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kFused);
  auto off = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kOffload);
  const GenerateRequest req = greedy(ids(24, 7), 5);
  const GenerateResult a = generate(*fused, {req})[0], b = generate(*off, {req})[0];
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.step_logits, b.step_logits);
}

TEST(SyntheticCheckpoint, NewShapeFamiliesSurviveAGgufRoundTrip) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ft_presets_" + std::to_string(::getpid()) + ".gguf")).string();
  for (const char* preset : kTinyFamilies) {
    auto mem = std::make_unique<SyntheticCheckpoint>(spec_of(preset, DType::Q4_K));
    mem->write_gguf(path);
    auto file = open_checkpoint(path);
    std::filesystem::remove(path);  // mapped: stays readable
    ASSERT_EQ(file->tensors().size(), mem->tensors().size()) << preset;
    for (size_t i = 0; i < mem->tensors().size(); ++i) {
      const TensorInfo &a = mem->tensors()[i], &b = file->tensors()[i];
      EXPECT_EQ(a.name, b.name);
      EXPECT_EQ(a.shape, b.shape) << a.name;
      ASSERT_EQ(a.bytes, b.bytes) << a.name;
      EXPECT_EQ(std::memcmp(a.data, b.data, static_cast<size_t>(a.bytes)), 0) << a.name;
    }
    EXPECT_EQ(file->metadata(), mem->metadata()) << preset;
    auto e_mem = cpu_engine(std::move(mem)), e_file = cpu_engine(std::move(file));
    const GenerateRequest req = greedy(ids(17, 11), 3);
    EXPECT_EQ(generate(*e_mem, {req})[0].step_logits, generate(*e_file, {req})[0].step_logits) << preset;
  }
}

TEST(BenchCli, NewShapeFamiliesRunOnTheCpu) {
  for (const char* preset : kTinyFamilies) {
    for (const char* strategy : {"fused", "hybrid --moe-cache-slots 16"}) {
      const auto t0 = std::chrono::steady_clock::now();
      const Result r = run_ft(std::string("bench --model-preset ") + preset +
                              " --dummy-weights --weight-type q4_k --json --device cpu --prompt-tokens 32 "
                              "--gen-tokens 4 --batch 1,2 --copy-mib 8 --threads 1 --moe-strategy " + strategy);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      ASSERT_EQ(r.code, 0) << preset << " " << strategy << ": " << r.err;
      EXPECT_LT(s, 10.0) << preset << " " << strategy;
      const nlohmann::json j = nlohmann::json::parse(r.out);
      EXPECT_EQ(j["synthetic"]["preset"], preset);
      EXPECT_EQ(j["arch"], find_preset(preset).is_mla()                 ? "deepseek_v3"
                           : std::string(preset) == "tiny-glm-moe" ? "glm4_moe"
                                                                   : "minimax_m2");
      ASSERT_EQ(j["results"].size(), 2u);
      for (const auto& b : j["results"]) {
        EXPECT_EQ(b["decode_steps"], 4);
        EXPECT_GT(b["decode_tokens_per_s"].get<double>(), 0.0);
      }
    }
  }
  const Result list = run_ft("bench --list-presets --weight-type q4_k --dummy-layers 18");
  ASSERT_EQ(list.code, 0) << list.err;
  for (const char* name : {"deepseek-v3", "glm-4.5-air", "minimax-m2", "tiny-deepseek", "tiny-glm-moe", "tiny-minimax"})
    EXPECT_NE(list.out.find(name), std::string::npos) << name;
  EXPECT_NE(list.out.find("Q4_K GiB"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find(" mla "), std::string::npos) << list.out;
  // fp8 / nvfp4 head the column with the name given, not the stored form's internal name.
  const Result nv = run_ft("bench --list-presets --weight-type nvfp4 --dummy-layers 2");
  ASSERT_EQ(nv.code, 0) << nv.err;
  EXPECT_NE(nv.out.find("nvfp4 GiB"), std::string::npos) << nv.out;
  EXPECT_EQ(nv.out.find("NVFP4_G64"), std::string::npos) << nv.out;
  // The GiB column counts every tensor, as the params column: Qwen3.8's never-written n-gram table too
  // (51B values in Q8_0 rows: ~50 GiB).
  const Result q = run_ft("bench --list-presets --weight-type q4_k --dummy-layers 3");
  ASSERT_EQ(q.code, 0) << q.err;
  const size_t at = q.out.find("qwen3.8-flash-next");
  ASSERT_NE(at, std::string::npos) << q.out;
  std::istringstream row(q.out.substr(at, q.out.find('\n', at) - at));
  std::vector<std::string> cols{std::istream_iterator<std::string>(row), std::istream_iterator<std::string>()};
  ASSERT_EQ(cols.size(), 19u) << q.out;
  EXPECT_GT(std::stod(cols[15]), 50.0) << q.out;  // Q4_K GiB
}

}  // namespace
}  // namespace ft
