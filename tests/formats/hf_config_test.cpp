// hf_config: typed fields from the HF fixtures' config.json (values as written in those files),
// the fallbacks (rope_parameters, text_config, defaults), generation_config and errors; and
// open_checkpoint over GGUF files and HF folders.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "format_test_util.h"
#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "test_util.h"
#include "util/error.h"

namespace ft {
namespace {

using ::ft::testing::TempDir;

std::string hf(const std::string& name) { return ::ft::testing::shared_dir() + "/fixtures/hf/" + name; }

TEST(HfConfig, Qwen3Moe) {
  HfConfig c = read_hf_config(hf("qwen3_moe"));
  EXPECT_EQ(c.model_type, "qwen3_moe");
  EXPECT_EQ(c.architectures, std::vector<std::string>{"Qwen3MoeForCausalLM"});
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.vocab_size, 512);
  EXPECT_EQ(c.max_position_embeddings, 1024);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);  // from rope_parameters.rope_theta
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{2});
  EXPECT_EQ(c.n_experts, 8);  // num_local_experts
  EXPECT_EQ(c.n_experts_used, 2);
  EXPECT_EQ(c.moe_intermediate_size, 32);
  EXPECT_EQ(c.raw["decoder_sparse_step"], 1);
  EXPECT_TRUE(c.generation_config.is_null());
  EXPECT_TRUE(c.tokenizer_config.is_null());
}

TEST(HfConfig, ExpertFieldSpellingsAndRopeFallbacks) {
  HfConfig ds3 = read_hf_config(hf("deepseek_v3"));
  EXPECT_EQ(ds3.n_experts, 8);  // n_routed_experts
  EXPECT_EQ(ds3.head_dim, 8);
  HfConfig olmoe = read_hf_config(hf("olmoe"));
  EXPECT_EQ(olmoe.n_experts, 8);  // num_experts
  HfConfig ds4 = read_hf_config(hf("deepseek_v4"));
  EXPECT_DOUBLE_EQ(ds4.rope_theta, 10000.0);  // top-level rope_theta
  HfConfig gemma = read_hf_config(hf("gemma4"));
  EXPECT_DOUBLE_EQ(gemma.rope_theta, 1000000.0);  // rope_parameters.full_attention
  EXPECT_EQ(gemma.n_experts, 0);                  // enable_moe_block: false
  EXPECT_EQ(gemma.n_experts_used, 0);
  EXPECT_TRUE(read_hf_config(hf("qwen3_tied")).tie_word_embeddings);
  HfConfig llama = read_hf_config(hf("llama"));
  EXPECT_EQ(llama.n_experts, 0);
  EXPECT_EQ(llama.moe_intermediate_size, 0);
  // Every fixture parses with sane basics.
  for (const auto& e : std::filesystem::directory_iterator(::ft::testing::shared_dir() + "/fixtures/hf")) {
    HfConfig c = read_hf_config(e.path().string());
    EXPECT_EQ(c.vocab_size, 512) << e.path();
    EXPECT_GT(c.rope_theta, 0) << e.path();
    EXPECT_EQ(c.num_attention_heads % c.num_key_value_heads, 0) << e.path();
  }
}

TEST(HfConfig, DefaultsTextConfigAndGenerationConfig) {
  TempDir tmp("hfcfg");
  nlohmann::json cfg = {
      {"architectures", {"SomeVLM"}},
      {"model_type", "vlm"},
      {"text_config",
       {{"hidden_size", 128}, {"num_hidden_layers", 3}, {"num_attention_heads", 8}, {"vocab_size", 1000},
        {"rope_theta", 500000.0}, {"head_dim", nullptr}, {"eos_token_id", {5, 6}}}},
  };
  std::ofstream(tmp.file("config.json")) << cfg.dump();
  HfConfig c = read_hf_config(tmp.path().string());
  EXPECT_EQ(c.hidden_size, 128);
  EXPECT_EQ(c.num_key_value_heads, 8);  // defaults to heads
  EXPECT_EQ(c.head_dim, 16);            // null -> hidden / heads
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(c.bos_token_id, -1);
  std::ofstream(tmp.file("generation_config.json")) << R"({"bos_token_id": 4, "eos_token_id": [7, 8, 9]})";
  std::ofstream(tmp.file("tokenizer_config.json")) << R"({"add_bos_token": false})";
  c = read_hf_config(tmp.path().string());
  EXPECT_EQ(c.bos_token_id, 4);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(c.tokenizer_config["add_bos_token"], false);
}

TEST(HfConfig, Errors) {
  TempDir tmp("hfcfg_bad");
  try {
    read_hf_config(tmp.path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
  std::ofstream(tmp.file("config.json")) << R"({"hidden_size": 64, )";
  try {
    read_hf_config(tmp.path().string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
    EXPECT_NE(std::string(e.what()).find("invalid JSON at offset"), std::string::npos) << e.what();
  }
  auto expect_bad = [&](const nlohmann::json& j, const std::string& part) {
    try {
      parse_hf_config(j, "config.json");
      ADD_FAILURE() << part;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::kInvalidFile);
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  nlohmann::json ok = {{"hidden_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"vocab_size", 10}};
  EXPECT_EQ(parse_hf_config(ok, "config.json").head_dim, 16);
  nlohmann::json j = ok;
  j.erase("vocab_size");
  expect_bad(j, "missing vocab_size");
  j = ok;
  j["hidden_size"] = "64";
  expect_bad(j, "hidden_size: expected an integer");
  j = ok;
  j["num_attention_heads"] = 0;
  expect_bad(j, "num_attention_heads must be positive");
  j = ok;
  j["rms_norm_eps"] = "small";
  expect_bad(j, "rms_norm_eps: expected a number");
  j = ok;
  j["num_experts"] = 4;
  j["num_experts_per_tok"] = 8;
  expect_bad(j, "experts per token 8 with 4 experts");
  j = ok;
  j["tie_word_embeddings"] = 1;
  expect_bad(j, "tie_word_embeddings");
  expect_bad(nlohmann::json::array(), "expected a JSON object");
}

TEST(Checkpoint, GgufAndHf) {
  auto g = open_checkpoint(::ft::testing::shared_dir() + "/data/models/stories260K.gguf");
  EXPECT_EQ(g->format(), "gguf");
  EXPECT_EQ(g->tensors().size(), 48u);
  EXPECT_EQ(g->metadata()["general.architecture"], "llama");
  EXPECT_EQ(g->get("output.weight").shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(g->find("nope"), nullptr);
  try {
    g->get("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("nope"), std::string::npos);
  }

  auto h = open_checkpoint(hf("mixtral"));
  EXPECT_EQ(h->format(), "safetensors");
  EXPECT_EQ(h->path(), hf("mixtral"));
  EXPECT_EQ(h->tensors().size(), 65u);
  EXPECT_EQ(h->metadata()["config"]["model_type"], "mixtral");
  EXPECT_TRUE(h->metadata()["generation_config"].is_null());
  const TensorInfo& emb = h->get("model.embed_tokens.weight");
  EXPECT_EQ(emb.dtype, DType::BF16);
  EXPECT_EQ(emb.shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(h->find("model.embed_tokens.weight"), &emb);

  try {
    open_checkpoint("/nonexistent/path");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
  }
  EXPECT_THROW(open_checkpoint(hf("mixtral") + "/model.safetensors"), Error);  // the folder is the checkpoint
  TempDir tmp("ck_empty");
  EXPECT_THROW(open_checkpoint(tmp.path().string()), Error);  // folder without config.json
}

}  // namespace
}  // namespace ft
