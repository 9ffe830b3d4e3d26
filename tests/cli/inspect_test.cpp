// `ft inspect` run as a user would (the FT_BINARY executable through popen): JSON facts of
// stories260K (from the file's own metadata, see shared/data/MANIFEST.md), every shared checkpoint
// inspects, broken input exits 2 with one line on stderr, and `--dump` of every tensor of the quant
// fixture equals the expected float32 file within manifest.json's tolerance.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/run_ft.h"
#include "test_util.h"

namespace ft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string shared(const std::string& rel) { return ::ft::testing::shared_dir() + "/" + rel; }

TEST(Inspect, Stories260KJson) {
  Result r = run_ft("inspect " + quote(shared("data/models/stories260K.gguf")) + " --json");
  ASSERT_EQ(r.code, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["block_count"], 5);
  EXPECT_EQ(j["embedding_length"], 64);
  EXPECT_EQ(j["head_count"], 8);
  EXPECT_EQ(j["head_count_kv"], 4);
  EXPECT_EQ(j["vocab_size"], 512);
  EXPECT_EQ(j["context_length"], 2048);
  EXPECT_EQ(j["expert_count"], 0);
  EXPECT_EQ(j["expert_used_count"], 0);
  EXPECT_EQ(j["head_dim"], 8);
  EXPECT_EQ(j["tokenizer"]["bos_token_id"], 1);
  EXPECT_EQ(j["tokenizer"]["eos_token_id"], 2);
  ASSERT_EQ(j["tensors"].size(), 48u);
  EXPECT_EQ(j["tensors"][0], json::parse(R"({"name": "token_embd.weight", "dtype": "F32", "shape": [512, 64],
                                             "bytes": 131072})"));
  EXPECT_EQ(j["tensors"][4]["shape"], json::parse("[32, 64]"));  // blk.0.attn_k.weight, ne = [64, 32]
  EXPECT_EQ(j["total_bytes"], 1185376 - 14176);                   // file size - data offset: all tensor data
  EXPECT_EQ(j["bytes_per_dtype"]["F32"], 1185376 - 14176);
}

TEST(Inspect, MoeGgufAndHfFolder) {
  Result g = run_ft("inspect " + quote(shared("fixtures/gguf/qwen3_moe/qwen3_moe-q8_0.gguf")) + " --json");
  ASSERT_EQ(g.code, 0) << g.err;
  json j = json::parse(g.out);
  EXPECT_EQ(j["architecture"], "qwen3moe");
  EXPECT_EQ(j["expert_count"], 8);
  EXPECT_EQ(j["expert_used_count"], 2);
  EXPECT_EQ(j["vocab_size"], 512);  // length of tokenizer.ggml.tokens
  EXPECT_EQ(j["rope_freq_base"], 10000.0);

  Result h = run_ft("inspect " + quote(shared("fixtures/hf/qwen3_moe_64e")) + " --json");
  ASSERT_EQ(h.code, 0) << h.err;
  j = json::parse(h.out);
  EXPECT_EQ(j["architecture"], "qwen3_moe");
  EXPECT_EQ(j["block_count"], 4);
  EXPECT_EQ(j["embedding_length"], 128);
  EXPECT_EQ(j["expert_count"], 64);
  EXPECT_EQ(j["expert_used_count"], 8);
  EXPECT_EQ(j["tensors"].size(), 807u);
  EXPECT_EQ(j["total_bytes"], 10160640);
  EXPECT_EQ(j["bytes_per_dtype"]["BF16"], 10160640);

  // Mixtral-style configs give the experts' width as intermediate_size (MiniMax-M2: 96 here).
  for (const char* name : {"mixtral", "minimax_m2"}) {
    Result x = run_ft("inspect " + quote(shared(std::string("fixtures/hf/") + name)) + " --json");
    ASSERT_EQ(x.code, 0) << x.err;
    EXPECT_EQ(json::parse(x.out)["expert_feed_forward_length"], 96) << name;
  }

  // gpt-oss: a 8-token window on one of its two layers (layer_types), no window on qwen3.
  j = json::parse(run_ft("inspect " + quote(shared("fixtures/hf/gpt_oss")) + " --json").out);
  EXPECT_EQ(j["sliding_window"], 8);
  EXPECT_EQ(j["sliding_layers"], 1);
  Result go = run_ft("inspect " + quote(shared("fixtures/hf/gpt_oss")));
  EXPECT_NE(go.out.find("8 tokens on 1 of 2 layers"), std::string::npos) << go.out;
  EXPECT_EQ(json::parse(run_ft("inspect " + quote(shared("fixtures/hf/qwen3")) + " --json").out)["sliding_window"], 0);
  // Qwen3.5: three of its four layers are linear attention (layer_types).
  j = json::parse(run_ft("inspect " + quote(shared("fixtures/hf/qwen3_5")) + " --json").out);
  EXPECT_EQ(j["linear_attention_layers"], 3);
  // One shared expert of shared_expert_intermediate_size (Qwen3-Next, Qwen2-MoE), as the GGUF says.
  for (const char* name : {"qwen3_next", "qwen3_5_moe", "qwen2_moe"})
    EXPECT_EQ(json::parse(run_ft("inspect " + quote(shared(std::string("fixtures/hf/") + name)) + " --json").out)
                  ["expert_shared_count"], 1) << name;
  Result q = run_ft("inspect " + quote(shared("fixtures/hf/qwen3_5")));
  EXPECT_NE(q.out.find("3 of 4 layers (Gated DeltaNet"), std::string::npos) << q.out;
  // Qwen4-Exp: its residual streams, per-layer n-gram embeddings and sparse attention are named.
  j = json::parse(run_ft("inspect " + quote(shared("fixtures/hf/qwen4_exp")) + " --json").out);
  EXPECT_EQ(j["linear_attention_layers"], 3);
  EXPECT_EQ(j["features"].size(), 3u) << j["features"].dump();
  Result q4 = run_ft("inspect " + quote(shared("fixtures/hf/qwen4_exp")));
  EXPECT_NE(q4.out.find("4 residual streams"), std::string::npos) << q4.out;
  EXPECT_NE(q4.out.find("n-gram embeddings on layers [1,3]"), std::string::npos) << q4.out;
  EXPECT_NE(q4.out.find("8 indexed tokens a query in blocks of 4"), std::string::npos) << q4.out;
  EXPECT_TRUE(json::parse(run_ft("inspect " + quote(shared("fixtures/hf/qwen3_5")) + " --json").out)["features"].empty());

  Result t = run_ft("inspect " + quote(shared("data/models/llama-2-tiny-random.gguf")));
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("architecture"), std::string::npos);
  EXPECT_NE(t.out.find("blk.0.ffn_down.weight"), std::string::npos);
  EXPECT_NE(t.out.find("bytes per dtype"), std::string::npos);
}

TEST(Inspect, EverySharedCheckpoint) {
  std::vector<std::string> paths;
  for (const auto& e : fs::recursive_directory_iterator(shared("data")))
    if (e.path().extension() == ".gguf") paths.push_back(e.path().string());
  for (const auto& e : fs::directory_iterator(shared("fixtures/hf"))) paths.push_back(e.path().string());
  for (const auto& e : fs::recursive_directory_iterator(shared("fixtures/gguf")))
    if (e.path().extension() == ".gguf") paths.push_back(e.path().string());
  EXPECT_GE(paths.size(), 12u + 19u + 26u);
  for (const auto& p : paths) {
    Result r = run_ft("inspect " + quote(p) + " --json");
    ASSERT_EQ(r.code, 0) << p << ": " << r.err;
    json j = json::parse(r.out);
    EXPECT_FALSE(j["architecture"].get<std::string>().empty()) << p;
    EXPECT_GT(j["vocab_size"].get<int64_t>(), 0) << p;
    int64_t sum = 0;
    for (const auto& t : j["tensors"]) sum += t["bytes"].get<int64_t>();
    EXPECT_EQ(sum, j["total_bytes"].get<int64_t>()) << p;
  }
}

TEST(Inspect, BrokenFileExitsTwoWithOneLine) {
  std::string tmp = (fs::temp_directory_path() / ("ft_broken_" + std::to_string(::getpid()) + ".gguf")).string();
  std::string good = ::ft::testing::read_file(shared("data/models/stories260K.gguf"));
  for (size_t cut : {size_t{0}, size_t{3}, size_t{100}, size_t{14000}, good.size() - 1}) {
    std::ofstream(tmp, std::ios::binary | std::ios::trunc).write(good.data(), static_cast<std::streamsize>(cut));
    Result r = run_ft("inspect " + quote(tmp) + " --json");
    EXPECT_EQ(r.code, 2) << cut;
    EXPECT_TRUE(r.out.empty()) << cut;
    ASSERT_FALSE(r.err.empty()) << cut;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "not one line: " << r.err;
    EXPECT_NE(r.err.find(tmp), std::string::npos) << r.err;
  }
  fs::remove(tmp);
  Result missing = run_ft("inspect /nonexistent/model.gguf");
  EXPECT_EQ(missing.code, 2);
  Result no_tensor = run_ft("inspect " + quote(shared("data/models/stories260K.gguf")) + " --dump nope --out /dev/null");
  EXPECT_EQ(no_tensor.code, 2);
  EXPECT_NE(no_tensor.err.find("nope"), std::string::npos);
}

TEST(Inspect, DumpEveryQuantType) {
  std::string dir = shared("fixtures/quant");
  json m = json::parse(::ft::testing::read_file(dir + "/manifest.json"));
  std::string out = (fs::temp_directory_path() / ("ft_dump_" + std::to_string(::getpid()) + ".f32")).string();
  ASSERT_EQ(m["types"].size(), 26u);
  for (const auto& [type, t] : m["types"].items()) {
    SCOPED_TRACE(type);
    Result r = run_ft("inspect " + quote(dir + "/quant_types.gguf") + " --dump " + quote(t["tensor"].get<std::string>()) + " --out " + quote(out));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("[3, 512]"), std::string::npos) << r.out;
    std::vector<float> got = ::ft::testing::read_f32(out);
    std::vector<float> exp = ::ft::testing::read_f32(dir + "/" + t["expected"].get<std::string>());
    ASSERT_EQ(exp.size(), 1536u);
    ASSERT_EQ(got.size(), exp.size());
    const std::string kind = t["tolerance"]["kind"];
    const double rel = kind == "relative" ? t["tolerance"]["rel"].get<double>() : 0.0;
    ASSERT_TRUE(kind == "exact" || kind == "relative") << kind;
    int bad = 0;
    for (size_t i = 0; i < exp.size(); ++i) {
      bool ok = kind == "exact" ? got[i] == exp[i]
                                : std::fabs(static_cast<double>(got[i]) - exp[i]) <= rel * std::fabs(static_cast<double>(exp[i]));
      if (!ok && ++bad <= 3) ADD_FAILURE() << type << "[" << i << "]: got " << got[i] << " expected " << exp[i];
    }
    EXPECT_EQ(bad, 0);
  }
  fs::remove(out);
}

}  // namespace
}  // namespace ft
