// Presets in the Hugging Face layout (ModelPreset::hf_config, tools/hf_synthetic.h): deepseek-v4-flash's and
// qwen3.8-flash-next's real configs (shapes, parameter counts against the model cards, the layer schedule
// for any --dummy-layers, a config.json the loader's config reader accepts; planned, not generated), and
// the tiny CI presets loading and generating deterministically on the CPU, offload equal to fused, and
// running `ft bench` (fused and hybrid).
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "cli/run_ft.h"
#include "engine/generate.h"
#include "model/registry.h"
#include "tools/hf_synthetic.h"
#include "tools/model_presets.h"
#include "tools/preset_util.h"
#include "tools/synthetic_checkpoint.h"
#include "util/error.h"

namespace ft {
namespace {

/** A checkpoint of a synthetic layout's metadata and tensor list only (no bytes): what
 *  read_model_config reads. */
class LayoutCheckpoint final : public Checkpoint {
 public:
  explicit LayoutCheckpoint(SyntheticLayout l) : l_(std::move(l)) {}
  std::string format() const override { return "safetensors"; }
  const std::string& path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override { return l_.tensors; }
  const nlohmann::json& metadata() const override { return l_.metadata; }

 private:
  SyntheticLayout l_;
  std::string path_ = "layout";
};

double rel(double got, double want) { return std::abs(got - want) / want; }

TEST(HfPresets, DeepSeekV4FlashHasTheModelCardsParameterCounts) {
  // DeepSeek-V4-Flash's model card: 284B total, 13B active (MTP layer not counted).
  const ModelPreset& p = find_preset("DeepSeek-V4-Flash");
  EXPECT_EQ(p.gguf_arch, "deepseek_v4");
  EXPECT_LT(rel(static_cast<double>(p.total_params()), 284e9), 0.01) << p.total_params();
  EXPECT_LT(rel(static_cast<double>(p.active_params()), 13e9), 0.05) << p.active_params();
}

TEST(HfPresets, DeepSeekV4FlashConfigIsTheRealOneAndTheLoaderAcceptsIt) {
  for (int64_t layers : {0, 1, 3}) {
    const SyntheticLayout l = synthetic_layout(spec_of("deepseek-v4-flash", DType::Q4_K, layers));
    const int64_t L = layers > 0 ? layers : 43;
    ASSERT_EQ(l.n_layer, L);
    EXPECT_TRUE(l.kvs.empty());
    const nlohmann::json& c = l.metadata.at("config");
    EXPECT_EQ(c["model_type"], "deepseek_v4");
    EXPECT_EQ(c["hidden_size"], 4096);
    EXPECT_EQ(c["num_hidden_layers"], L);
    EXPECT_EQ(c["head_dim"], 512);
    EXPECT_EQ(c["n_routed_experts"], 256);
    EXPECT_EQ(c["num_experts_per_tok"], 6);
    EXPECT_EQ(c["index_topk"], 512);
    EXPECT_EQ(c["index_n_heads"], 64);
    EXPECT_EQ(c["o_groups"], 8);
    EXPECT_EQ(c["compress_rates"]["compressed_sparse_attention"], 4);
    EXPECT_EQ(c["compress_rates"]["heavily_compressed_attention"], 128);
    // Upstream compress_ratios 0, 0, 4, 128, 4, ... (two sliding-window-only layers first); num_hash_layers 3.
    ASSERT_EQ(c["layer_types"].size(), static_cast<size_t>(L));
    for (int64_t i = 0; i < L; ++i) {
      EXPECT_EQ(c["layer_types"][i], i < 2               ? "sliding_attention"
                                     : i % 2 == 0        ? "compressed_sparse_attention"
                                                         : "heavily_compressed_attention");
      EXPECT_EQ(c["mlp_layer_types"][i], i < 3 ? "hash_moe" : "moe");
    }
    EXPECT_FALSE(c.contains("num_hash_layers"));
    // YaRN on the compressed layers (rope_scaling factor 16 over 65536 positions; DeepseekV4Config's
    // attention_factor 1.0), the plain RoPE on the sliding layers.
    EXPECT_EQ(c["rope_parameters"]["compress"]["rope_type"], "yarn");
    EXPECT_EQ(c["rope_parameters"]["compress"]["factor"], 16.0);
    EXPECT_EQ(c["rope_parameters"]["compress"]["original_max_position_embeddings"], 65536);
    EXPECT_EQ(c["rope_parameters"]["compress"]["attention_factor"], 1.0);
    EXPECT_EQ(c["rope_parameters"]["main"]["rope_type"], "default");
    const ModelConfig mc = read_model_config(LayoutCheckpoint(l));
    EXPECT_EQ(mc.arch, "deepseek_v4");
    EXPECT_EQ(mc.n_layer, L);
    EXPECT_EQ(mc.n_embd, 4096);
    EXPECT_EQ(mc.head_dim, 512);
    EXPECT_EQ(mc.n_rot, 64);
    EXPECT_EQ(mc.n_expert, 256);
    EXPECT_EQ(mc.n_expert_used, 6);
    EXPECT_EQ(mc.n_ff_exp, 2048);
    EXPECT_EQ(mc.n_ff_shexp, 2048);
    EXPECT_EQ(mc.n_vocab, 129280);
    EXPECT_EQ(mc.n_ctx_train, 1048576);
    if (layers == 3) {  // a CSA layer: its indexer; a hash layer: its table; experts per name, MXFP4 as released
      expect_tensor(l, "model.layers.2.attn.indexer.wq_b.weight", {64 * 128, 1024}, DType::Q4_K);
      expect_tensor(l, "model.layers.2.attn.compressor.wkv.weight", {1024, 4096}, DType::Q4_K);
      expect_tensor(l, "model.layers.2.attn.compressor.ape", {4, 1024}, DType::F32);
      EXPECT_EQ(find(l, "model.layers.1.attn.compressor.ape"), nullptr);  // sliding_attention: no compressor
      EXPECT_EQ(find(l, "model.layers.0.attn.compressor.wkv.weight"), nullptr);
      expect_tensor(l, "model.layers.0.ffn.gate.tid2eid", {129280, 6}, DType::I32);
      expect_tensor(l, "model.layers.0.ffn.experts.255.w2.weight", {4096, 2048}, DType::MXFP4);
      expect_tensor(l, "model.layers.1.attn.wo_a.weight", {8 * 1024, 64 * 512 / 8}, DType::BF16);
      expect_tensor(l, "model.layers.0.hc_attn_fn", {24, 4 * 4096}, DType::Q4_K);
      expect_tensor(l, "head.weight", {129280, 4096}, DType::Q4_K);
      EXPECT_EQ(find(l, "model.layers.1.attn.indexer.wq_b.weight"), nullptr);
    }
  }
  EXPECT_THROW(SyntheticCheckpoint(spec_of("tiny-deepseek-v4", DType::BF16)).write_gguf("/nonexistent/x.gguf"), Error);
}

TEST(HfPresets, Qwen38FlashNextHasTheModelCardsShapesAndTheLoaderAcceptsIt) {
  const ModelPreset& p = find_preset("qwen3.8-flash-next");
  EXPECT_EQ(p.gguf_arch, "qwen4_exp_text");
  // The card: about 6B active a token; the n-gram table 51B values (16 heads of about 20M rows x 160).
  EXPECT_LT(rel(static_cast<double>(p.active_params()), 6e9), 0.15) << p.active_params();
  for (int64_t layers : {0, 1, 4}) {
    const SyntheticLayout l = synthetic_layout(spec_of("qwen3.8-flash-next", DType::Q4_K, layers));
    const int64_t L = layers > 0 ? layers : 48;
    const nlohmann::json& c = l.metadata.at("config");
    EXPECT_EQ(c["model_type"], "qwen4_exp_text");
    EXPECT_EQ(c["hidden_size"], 2560);
    EXPECT_EQ(c["num_experts"], 512);
    EXPECT_EQ(c["hc_lowrank"], 320);
    EXPECT_EQ(c["indexer_budget"], 2048);
    ASSERT_EQ(c["layer_types"].size(), static_cast<size_t>(L));
    for (int64_t i = 0; i < L; ++i) EXPECT_EQ(c["layer_types"][i], (i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
    EXPECT_EQ(c["ple_layer_ids"], L >= 2 ? nlohmann::json::array({2}) : nlohmann::json::array());  // 1-based, within L
    const ModelConfig mc = read_model_config(LayoutCheckpoint(l));
    EXPECT_EQ(mc.arch, "qwen4_exp");
    EXPECT_EQ(mc.n_layer, L);
    EXPECT_EQ(mc.n_embd, 2560);
    EXPECT_EQ(mc.n_head, 24);
    EXPECT_EQ(mc.n_head_kv, 2);
    EXPECT_EQ(mc.head_dim, 256);
    EXPECT_EQ(mc.n_rot, 64);
    EXPECT_EQ(mc.n_expert_used, 10);
    EXPECT_EQ(mc.n_ff_exp, 640);
    EXPECT_EQ(mc.n_ff_shexp, 640);
    EXPECT_EQ(mc.n_vocab, 248320);
    EXPECT_EQ(mc.lin_n_v_heads, 48);
    if (layers == 4) {
      const TensorInfo* table = find(l, "model.layers.1.ple.ple_embedding.ngram_embedding.weight");
      ASSERT_NE(table, nullptr);
      EXPECT_EQ(table->dtype, DType::Q8_0);  // the token embedding's form of Q4_K; rows of 160 take Q8_0
      EXPECT_LT(rel(static_cast<double>(table->numel()), 51e9), 0.01) << table->numel();
      EXPECT_LT(l.bytes, int64_t{10} << 30);  // the table takes no generated host memory
      expect_tensor(l, "model.layers.3.self_attn.q_proj.weight", {2 * 24 * 256, 2560}, DType::Q4_K);
      expect_tensor(l, "model.layers.3.self_attn.indexer.index_qk_proj.weight", {5 * 128, 2560}, DType::Q4_K);
      expect_tensor(l, "model.layers.0.linear_attn.in_proj_qkv.weight", {2 * 16 * 128 + 48 * 128, 2560}, DType::Q4_K);
      expect_tensor(l, "model.layers.0.mlp.experts.511.down_proj.weight", {2560, 640}, DType::Q8_0);  // 640: no whole Q4_K blocks
      expect_tensor(l, "model.hyper_connection_mixer.input_mix_weight_down.weight", {320, 4 * 2560}, DType::Q4_K);
    }
  }
}

TEST(HfPresets, TinyQwen4ExpGeneratesDeterministicallyAndOffloadsExactly) {
  const SyntheticSpec s = spec_of("tiny-qwen4-exp", DType::BF16);
  auto a = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kFused);
  auto b = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kFused);
  auto off = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kOffload);
  EXPECT_EQ(a->config().arch, "qwen4_exp");
  const GenerateRequest req = greedy(ids(40, 7), 6);  // past the indexer budget of 16
  const GenerateResult r1 = generate(*a, {req})[0], r2 = generate(*b, {req})[0], r3 = generate(*off, {req})[0];
  ASSERT_EQ(r1.tokens.size(), 6u);
  EXPECT_EQ(r1.step_logits, r2.step_logits);
  EXPECT_EQ(r1.step_logits, r3.step_logits);
  for (float v : r1.step_logits) ASSERT_TRUE(std::isfinite(v));
  const Result r = run_ft("bench --model-preset tiny-qwen4-exp --dummy-weights --json --device cpu --prompt-tokens 24 "
                          "--gen-tokens 4 --batch 1,2 --copy-mib 8 --threads 1 --weight-type q8_0");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["arch"], "qwen4_exp");
  // The n-gram table (layer 2's) is a gathered table, not dense weights a step reads whole.
  const int64_t table = j["ngram_table_bytes"].get<int64_t>();
  EXPECT_GT(table, 0);
  EXPECT_EQ(j["weight_bytes"].get<int64_t>(), j["dense_bytes"].get<int64_t>() + j["embedding_bytes"].get<int64_t>() +
                                                  table + j["routed_expert_bytes"].get<int64_t>());
  for (const auto& x : j["results"]) {
    EXPECT_GT(x["decode_tokens_per_s"].get<double>(), 0.0);
    EXPECT_LT(x["weight_bytes_per_step"].get<int64_t>(), j["weight_bytes"].get<int64_t>() - table + table / 10);
  }
}

TEST(HfPresets, TinyDeepSeekV4GeneratesDeterministicallyAndOffloadsExactly) {
  for (DType t : {DType::BF16, DType::Q8_0}) {
    const SyntheticSpec s = spec_of("tiny-deepseek-v4", t);
    auto a = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kFused);
    auto b = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kFused);
    auto off = cpu_engine(std::make_unique<SyntheticCheckpoint>(s), MoeStrategy::kOffload);
    EXPECT_EQ(a->config().arch, "deepseek_v4");
    EXPECT_EQ(a->checkpoint().format(), "safetensors");
    // 40 prompt tokens and 6 generated: past the window of 16 and several compressed entries (rates 4 and 16).
    const GenerateRequest req = greedy(ids(40, 5), 6);
    const GenerateResult r1 = generate(*a, {req})[0], r2 = generate(*b, {req})[0], r3 = generate(*off, {req})[0];
    ASSERT_EQ(r1.tokens.size(), 6u);
    EXPECT_EQ(r1.tokens, r2.tokens);
    EXPECT_EQ(r1.step_logits, r2.step_logits);
    EXPECT_EQ(r1.tokens, r3.tokens);
    EXPECT_EQ(r1.step_logits, r3.step_logits);
    for (float v : r1.step_logits) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(HfPresets, BenchRunsTheTinyDeepSeekV4PresetOnTheCpu) {
  for (const char* strategy : {"fused", "hybrid --moe-cache-slots 16"}) {
    const Result r = run_ft(std::string("bench --model-preset tiny-deepseek-v4 --dummy-weights --json --device cpu "
                                        "--prompt-tokens 24 --gen-tokens 4 --batch 1,2 --copy-mib 8 --threads 1 "
                                        "--dummy-layers 3 --weight-type q8_0 --moe-strategy ") + strategy);
    ASSERT_EQ(r.code, 0) << strategy << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["arch"], "deepseek_v4");
    EXPECT_EQ(j["synthetic"]["layers"], 3);
    ASSERT_EQ(j["results"].size(), 2u);
    for (const auto& b : j["results"]) EXPECT_GT(b["decode_tokens_per_s"].get<double>(), 0.0);
  }
  const Result bad = run_ft("bench --model-preset tiny-deepseek-v4 --dummy-weights --write-gguf /tmp/never.gguf");
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("Hugging Face layout"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace ft
