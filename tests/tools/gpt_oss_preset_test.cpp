// The gpt-oss presets: parameter counts against OpenAI's model card, the synthetic layout of the real
// shapes (MXFP4 experts by default, --expert-weight-type overriding it, llama.cpp's gpt-oss names and
// keys), and the tiny CI preset loading, generating deterministically, giving the same tokens through
// the expert banks as resident, surviving a GGUF round trip and running `ft bench` on the CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "cli/run_ft.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "formats/checkpoint.h"
#include "model/config.h"
#include "model/fixture_util.h"
#include "tools/greedy_request.h"
#include "tools/preset_util.h"
#include "tools/model_presets.h"
#include "tools/synthetic_checkpoint.h"
#include "tools/synthetic_weights.h"

namespace ft {
namespace {

TEST(GptOssPresets, GiveTheModelCardsParameterCounts) {
  // OpenAI's gpt-oss model card (Aug 2025), table 1: 116.83B total and 5.13B active for gpt-oss-120b,
  // 20.91B and 3.61B for gpt-oss-20b (active: the embedding table not counted, the unembedding is).
  const ModelPreset& big = find_preset("gpt-oss-120b");
  EXPECT_NEAR(static_cast<double>(big.total_params()) / 1e9, 116.83, 0.01);
  EXPECT_NEAR(static_cast<double>(big.active_params()) / 1e9, 5.13, 0.01);
  const ModelPreset& small = find_preset("gpt-oss-20b");
  EXPECT_NEAR(static_cast<double>(small.total_params()) / 1e9, 20.91, 0.01);
  EXPECT_NEAR(static_cast<double>(small.active_params()) / 1e9, 3.61, 0.01);
  EXPECT_TRUE(big.runnable);
  EXPECT_TRUE(big.oai_moe);
  EXPECT_EQ(big.sliding_window, 128);
}

TEST(GptOssPresets, SyntheticLayoutHasMxfp4ExpertsAndLlamaCppNames) {
  const SyntheticLayout l = synthetic_layout(spec_of("gpt-oss-120b", DType::BF16, 2));
  expect_tensor(l, "blk.0.ffn_gate_exps.weight", {128, 2880, 2880}, DType::MXFP4);
  expect_tensor(l, "blk.0.ffn_up_exps.weight", {128, 2880, 2880}, DType::MXFP4);
  expect_tensor(l, "blk.1.ffn_down_exps.weight", {128, 2880, 2880}, DType::MXFP4);
  expect_tensor(l, "blk.0.ffn_gate_exps.bias", {128, 2880}, DType::F32);
  expect_tensor(l, "blk.0.ffn_down_exps.bias", {128, 2880}, DType::F32);
  expect_tensor(l, "blk.0.ffn_gate_inp.weight", {128, 2880}, DType::F32);
  expect_tensor(l, "blk.0.ffn_gate_inp.bias", {128}, DType::F32);
  expect_tensor(l, "blk.0.attn_q.weight", {64 * 64, 2880}, DType::BF16);
  expect_tensor(l, "blk.0.attn_k.bias", {8 * 64}, DType::F32);
  expect_tensor(l, "blk.0.attn_output.bias", {2880}, DType::F32);
  expect_tensor(l, "blk.1.attn_sinks.weight", {64}, DType::F32);
  expect_tensor(l, "blk.1.post_attention_norm.weight", {2880}, DType::F32);
  EXPECT_EQ(find(l, "blk.1.ffn_norm.weight"), nullptr);
  EXPECT_EQ(l.metadata["gpt-oss.attention.sliding_window"], 128);
  EXPECT_EQ(l.metadata["gpt-oss.expert_feed_forward_length"], 2880);
  EXPECT_EQ(l.metadata["gpt-oss.rope.scaling.type"], "yarn");
  // MXFP4 (17 bytes a 32-block) experts: 128 x 3 x 2880 x 2880 x 17 / 32 bytes a layer.
  const int64_t expert_bytes = 128LL * 3 * 2880 * 2880 / 32 * 17;
  EXPECT_GT(l.bytes, 2 * expert_bytes);
  EXPECT_LT(l.bytes, 2 * expert_bytes + (int64_t{5} << 29));  // + BF16 embedding, output, attention

  SyntheticSpec q = spec_of("gpt-oss-120b", DType::Q8_0, 1);
  q.expert_type = DType::Q4_K;
  const SyntheticLayout lq = synthetic_layout(q);
  expect_tensor(lq, "blk.0.ffn_gate_exps.weight", {128, 2880, 2880}, DType::Q8_0);  // 2880 is not 256-divisible
  expect_tensor(lq, "blk.0.attn_q.weight", {64 * 64, 2880}, DType::Q8_0);
  // A preset without an upstream expert type keeps one type throughout.
  EXPECT_EQ(synthetic_expert_type(spec_of("tiny-moe", DType::Q4_K)), DType::Q4_K);
  EXPECT_EQ(synthetic_expert_type(spec_of("tiny-gpt-oss", DType::BF16)), DType::MXFP4);
}

TEST(GptOssPresets, TinyPresetGeneratesDeterministicallyAndOffloadsExactly) {
  const SyntheticSpec s = spec_of("tiny-gpt-oss", DType::BF16);
  auto a = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kFused);
  auto b = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kFused);
  auto off = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kOffload);
  EXPECT_EQ(a->config().arch, "gpt_oss");
  // 40 prompt tokens and 6 generated cross the tiny preset's window of 16 twice over.
  const GenerateRequest req = testing::greedy_with_logits(ids(40, 5), 6);
  const GenerateResult r1 = generate(*a, {req})[0], r2 = generate(*b, {req})[0], r3 = generate(*off, {req})[0];
  ASSERT_EQ(r1.tokens.size(), 6u);
  EXPECT_EQ(r1.tokens, r2.tokens);
  EXPECT_EQ(r1.step_logits, r2.step_logits);
  EXPECT_EQ(r1.tokens, r3.tokens);
  EXPECT_EQ(r1.step_logits, r3.step_logits);
  for (float v : r1.step_logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(GptOssPresets, TinyPresetSurvivesAGgufRoundTrip) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ft_gpt_oss_" + std::to_string(::getpid()) + ".gguf")).string();
  auto mem = std::make_unique<SyntheticCheckpoint>(spec_of("tiny-gpt-oss", DType::Q8_0));
  mem->write_gguf(path);
  auto file = open_checkpoint(path);
  std::filesystem::remove(path);  // mapped: stays readable
  ASSERT_EQ(file->tensors().size(), mem->tensors().size());
  EXPECT_EQ(file->metadata(), mem->metadata());
  auto e_mem = cpu_engine(std::move(mem)), e_file = cpu_engine(std::move(file));
  const GenerateRequest req = testing::greedy_with_logits(ids(21, 9), 3);
  EXPECT_EQ(generate(*e_mem, {req})[0].step_logits, generate(*e_file, {req})[0].step_logits);
}

TEST(GptOssPresets, BenchRunsTheTinyPresetOnTheCpu) {
  for (const char* strategy : {"fused", "hybrid --moe-cache-slots 16"}) {
    const Result r = run_ft(std::string("bench --model-preset tiny-gpt-oss --dummy-weights --json --device cpu "
                                        "--prompt-tokens 24 --gen-tokens 4 --batch 1,2 --copy-mib 8 --threads 1 "
                                        "--moe-strategy ") + strategy);
    ASSERT_EQ(r.code, 0) << strategy << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["arch"], "gpt_oss");
    EXPECT_EQ(j["synthetic"]["expert_type"], "MXFP4");
    ASSERT_EQ(j["results"].size(), 2u);
    for (const auto& b : j["results"]) EXPECT_GT(b["decode_tokens_per_s"].get<double>(), 0.0);
  }
  const Result bad = run_ft("bench --model-preset tiny-gpt-oss --dummy-weights --expert-weight-type q9_9");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--expert-weight-type q9_9"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace ft
