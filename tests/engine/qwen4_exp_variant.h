#pragma once
// The qwen4_exp fixture's embedding-table bytes, and the fixture rewritten with its n-gram shards
// apart in the file (and optionally a tied LM head), for the --embed-weights tests (CPU and CUDA).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/safetensors.h"
#include "test_util.h"

namespace ft::testing {

/** The stored bytes of the qwen4_exp checkpoint at `dir`: its token table and its n-gram tables (every
 *  PLE layer's shards). */
inline std::pair<int64_t, int64_t> qwen4_exp_table_bytes(const std::string& dir) {
  const auto ck = open_checkpoint(dir);
  int64_t ngram = 0;
  for (const TensorInfo& t : ck->tensors()) ngram += t.name.find(".ngram_embedding.") != std::string::npos ? t.bytes : 0;
  return {ck->find("model.embed_tokens.weight")->bytes, ngram};
}

/** The qwen4_exp fixture rewritten into a scratch folder (removed with it): tensors in reverse order,
 *  so each n-gram table's shards no longer follow each other in the file (stacked at load); with
 *  `tied`, the LM head left out and tie_word_embeddings set. */
class Qwen4ExpVariant {
 public:
  Qwen4ExpVariant(const std::string& tag, bool tied) : dir_(scratch_path("qwen4_exp_" + tag)) {
    const std::string src = shared_dir() + "/fixtures/hf/qwen4_exp";
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    nlohmann::json cfg = nlohmann::json::parse(read_file(src + "/config.json"));
    if (tied) cfg["tie_word_embeddings"] = true;
    std::ofstream(dir_ + "/config.json") << cfg.dump();
    const auto ck = open_checkpoint(src);
    std::vector<SafetensorsTensor> ts;
    for (const TensorInfo& t : ck->tensors())
      if (!tied || t.name != "lm_head.weight") ts.push_back({t.name, t.dtype, t.shape, t.data});
    std::reverse(ts.begin(), ts.end());
    write_safetensors(dir_ + "/model.safetensors", ts);
  }
  Qwen4ExpVariant(const Qwen4ExpVariant&) = delete;
  Qwen4ExpVariant& operator=(const Qwen4ExpVariant&) = delete;
  ~Qwen4ExpVariant() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
};

}  // namespace ft::testing
