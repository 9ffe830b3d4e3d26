#include "formats/checkpoint.h"

#include <algorithm>
#include <filesystem>

#include "formats/gguf_reader.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "util/error.h"

namespace ft {
namespace {

namespace fs = std::filesystem;

class GgufCheckpoint final : public Checkpoint {
 public:
  explicit GgufCheckpoint(const std::string& path) : path_(path), reader_(path) {
    tensors_.reserve(reader_.tensors().size());
    for (const GgufTensor& t : reader_.tensors()) tensors_.push_back(t.info);
    metadata_ = reader_.metadata_json();
    index_tensors();
  }
  std::string format() const override { return "gguf"; }
  const std::string& path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  const nlohmann::json& metadata() const override { return metadata_; }

 private:
  std::string path_;
  GgufReader reader_;
  std::vector<TensorInfo> tensors_;
  nlohmann::json metadata_;
};

/** A Hugging Face folder. A multimodal checkpoint in transformers 5's layout (config.json with a
 *  text_config, the language model's tensors under model.language_model.: Qwen3.5, Qwen3-VL, ...) is
 *  read as its text model: config.json's text_config is the config (top-level fields it lacks, such as
 *  tie_word_embeddings, are kept), model.language_model.X is named model.X, and the vision tower's
 *  (model.visual.*) and multi-token-prediction (mtp.*) tensors are left out. */
class SafetensorsCheckpoint final : public Checkpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& folder) : path_(folder), set_(folder) {
    HfConfig cfg = read_hf_config(folder);
    nlohmann::json config = cfg.raw;
    static const std::string kText = "model.language_model.";
    const auto text = config.find("text_config");
    const bool multimodal = text != config.end() && text->is_object() &&
                            std::any_of(set_.tensors().begin(), set_.tensors().end(),
                                        [](const TensorInfo& t) { return t.name.starts_with(kText); });
    if (multimodal) {
      nlohmann::json tc = *text;
      for (const auto& [k, v] : config.items())
        if (k != "text_config" && k != "vision_config" && k != "model_type" && !tc.contains(k)) tc[k] = v;
      config = std::move(tc);
      for (const TensorInfo& t : set_.tensors()) {
        if (t.name.starts_with("model.visual.") || t.name.starts_with("mtp.")) continue;
        TensorInfo r = t;
        if (r.name.starts_with(kText)) r.name = "model." + r.name.substr(kText.size());
        text_tensors_.push_back(std::move(r));
      }
    }
    metadata_ = {{"config", config}, {"generation_config", cfg.generation_config},
                 {"tokenizer_config", cfg.tokenizer_config}};
    index_tensors();
  }
  std::string format() const override { return "safetensors"; }
  const std::string& path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override {
    return text_tensors_.empty() ? set_.tensors() : text_tensors_;
  }
  const nlohmann::json& metadata() const override { return metadata_; }

 private:
  std::string path_;
  SafetensorsSet set_;
  std::vector<TensorInfo> text_tensors_;  // the text model's view of a multimodal checkpoint (else empty)
  nlohmann::json metadata_;
};

}  // namespace

void Checkpoint::index_tensors() {
  index_.clear();
  const auto& ts = tensors();
  index_.reserve(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) index_.emplace(ts[i].name, i);
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
  const auto& ts = tensors();
  if (!index_.empty()) {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &ts[it->second];
  }
  for (const auto& t : ts)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& Checkpoint::get(std::string_view name) const {
  if (const TensorInfo* t = find(name)) return *t;
  fail(ErrorCode::kNotFound, "{}: no tensor named {}", path(), name);
}

std::unique_ptr<Checkpoint> open_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(ErrorCode::kNotFound, "{}: no such file or folder", path);
  if (fs::is_directory(path, ec)) {
    if (!fs::exists(fs::path(path) / "config.json"))
      fail(ErrorCode::kNotFound, "{}: folder has no config.json (expected a Hugging Face checkpoint)", path);
    return std::make_unique<SafetensorsCheckpoint>(path);
  }
  if (fs::path(path).extension() == ".safetensors" || fs::path(path).filename() == "model.safetensors.index.json")
    fail(ErrorCode::kInvalidArgument, "{}: open the Hugging Face folder holding it and config.json, not the file", path);
  return std::make_unique<GgufCheckpoint>(path);
}

}  // namespace ft
