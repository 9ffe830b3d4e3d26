// Loading validates every weight: a checkpoint with a missing tensor, a wrong shape or a wrong
// dtype fails at load with an ft::Error naming the tensor and the expected vs found shape. The
// checkpoints are tiny HF folders (config.json + model.safetensors) written here.
#include <filesystem>
#include <fstream>
#include <map>
#include <random>

#include "../model/fixture_util.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;

struct StTensor {
  std::string dtype;  // "F32", "I32", ...
  std::vector<int64_t> shape;
};

/** Writes `dir`/config.json (a 1-layer llama, hidden 32, 2 heads of 16, 1 KV head, FFN 48, vocab 64)
 *  and `dir`/model.safetensors with `tensors` (small random values). */
void write_checkpoint(const std::string& dir, const std::map<std::string, StTensor>& tensors) {
  fs::create_directories(dir);
  std::ofstream(dir + "/config.json") << R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
    "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 2,
    "num_key_value_heads": 1, "head_dim": 16, "vocab_size": 64, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 128, "rope_theta": 10000.0, "tie_word_embeddings": false})";
  nlohmann::json header = nlohmann::json::object();
  std::string data;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-0.1f, 0.1f);
  for (const auto& [name, t] : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    const size_t begin = data.size();
    for (int64_t i = 0; i < n; ++i) {
      const float v = dist(rng);
      data.append(reinterpret_cast<const char*>(&v), 4);  // F32 and I32 are both 4 bytes
    }
    header[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  const uint64_t len = h.size();
  std::ofstream out(dir + "/model.safetensors", std::ios::binary);
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << h << data;
}

std::map<std::string, StTensor> good_tensors() {
  return {
      {"model.embed_tokens.weight", {"F32", {64, 32}}},
      {"model.norm.weight", {"F32", {32}}},
      {"lm_head.weight", {"F32", {64, 32}}},
      {"model.layers.0.input_layernorm.weight", {"F32", {32}}},
      {"model.layers.0.post_attention_layernorm.weight", {"F32", {32}}},
      {"model.layers.0.self_attn.q_proj.weight", {"F32", {32, 32}}},
      {"model.layers.0.self_attn.k_proj.weight", {"F32", {16, 32}}},
      {"model.layers.0.self_attn.v_proj.weight", {"F32", {16, 32}}},
      {"model.layers.0.self_attn.o_proj.weight", {"F32", {32, 32}}},
      {"model.layers.0.mlp.gate_proj.weight", {"F32", {48, 32}}},
      {"model.layers.0.mlp.up_proj.weight", {"F32", {48, 32}}},
      {"model.layers.0.mlp.down_proj.weight", {"F32", {32, 48}}},
  };
}

/** Loads `tensors`; returns the error message ("" if it loaded). */
std::string load_error(const std::string& name, const std::map<std::string, StTensor>& tensors, ErrorCode* code) {
  const std::string dir = ::testing::TempDir() + "/ft_bad_ckpt_" + name;
  fs::remove_all(dir);
  write_checkpoint(dir, tensors);
  try {
    auto engine = Engine::load(dir, small_engine_options());
    generate(*engine, {greedy_request({1, 2, 3}, 2)});  // a well-formed checkpoint also runs
    return "";
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
}

TEST(BadCheckpoint, WellFormedLoadsAndRuns) { EXPECT_EQ(load_error("good", good_tensors(), nullptr), ""); }

TEST(BadCheckpoint, MissingTensorIsNamedWithExpectedShape) {
  auto t = good_tensors();
  t.erase("model.layers.0.self_attn.k_proj.weight");
  ErrorCode code{};
  const std::string msg = load_error("missing", t, &code);
  EXPECT_EQ(code, ErrorCode::kNotFound);
  EXPECT_NE(msg.find("missing tensor model.layers.0.self_attn.k_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected shape [16, 32]"), std::string::npos) << msg;
}

TEST(BadCheckpoint, WrongShapeIsNamedWithExpectedAndFound) {
  auto t = good_tensors();
  t["model.layers.0.mlp.down_proj.weight"].shape = {48, 32};  // transposed
  ErrorCode code{};
  const std::string msg = load_error("shape", t, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(msg.find("model.layers.0.mlp.down_proj.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected shape [32, 48], found [48, 32]"), std::string::npos) << msg;
}

TEST(BadCheckpoint, WrongDtypeIsNamed) {
  auto t = good_tensors();
  t["model.layers.0.input_layernorm.weight"].dtype = "I32";
  ErrorCode code{};
  const std::string msg = load_error("dtype", t, &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(msg.find("model.layers.0.input_layernorm.weight [32]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dtype I32"), std::string::npos) << msg;
}

TEST(BadCheckpoint, MissingLayerInConfigTermsIsNamed) {
  // A config that promises more layers than the file holds: the first absent tensor is named.
  auto t = good_tensors();
  for (auto it = t.begin(); it != t.end();)
    it = it->first.find("post_attention_layernorm") != std::string::npos ? t.erase(it) : std::next(it);
  const std::string msg = load_error("layer", t, nullptr);
  EXPECT_NE(msg.find("model.layers.0.post_attention_layernorm.weight"), std::string::npos) << msg;
  EXPECT_NE(msg.find("loading llama model"), std::string::npos) << msg;
}

}  // namespace
}  // namespace ft::testing
