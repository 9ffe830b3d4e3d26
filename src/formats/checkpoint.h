#pragma once
// Checkpoint: one read-only interface over GGUF files and Hugging Face safetensors folders:
// "tensor name -> dtype, shape, bytes" plus metadata. Tensor data stays memory-mapped.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor/dtype.h"

namespace ft {

/** One stored tensor. `shape` is row-major (last index fastest): a GGUF tensor with ne = [512, 3]
 *  has shape [3, 512]. `data` points into the mapped file and lives as long as the Checkpoint. */
struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major
  int64_t bytes = 0;           // stored bytes
  const uint8_t* data = nullptr;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

class Checkpoint {
 public:
  virtual ~Checkpoint() = default;

  /** "gguf" or "safetensors". */
  virtual std::string format() const = 0;
  /** Path the checkpoint was opened from (file or folder). */
  virtual const std::string& path() const = 0;
  /** All tensors, in file order. */
  virtual const std::vector<TensorInfo>& tensors() const = 0;
  /** Metadata as JSON. GGUF: an object of every key/value (arrays as JSON arrays). HF: {"config": config.json,
   *  "generation_config": generation_config.json or null, "tokenizer_config": ... or null}. */
  virtual const nlohmann::json& metadata() const = 0;

  /** Says that nothing reads the tensor bytes in [data, data + bytes) any more (the expert banks
   *  hold their own copy), so memory only the checkpoint holds can go back to the OS. Default:
   *  nothing (a mapped file's pages are page cache, which the OS reclaims anyway); a synthetic
   *  checkpoint returns the whole pages inside the range, whose contents are then lost. Throws
   *  ft::Error(kInvalidArgument) for a range outside the checkpoint's memory. */
  virtual void release(const void* data, int64_t bytes) {
    (void)data, (void)bytes;
  }

  /** Whether release() gives memory back: the tensor bytes are anonymous memory the checkpoint
   *  holds (not page cache the OS reclaims on its own). Default: false. */
  virtual bool releases_memory() const { return false; }

  /** The tensor named `name`, or nullptr. */
  const TensorInfo* find(std::string_view name) const;
  /** The tensor named `name`. Throws ft::Error(kNotFound) naming it and the checkpoint. */
  const TensorInfo& get(std::string_view name) const;

 protected:
  /** Builds the name index find() uses (call once tensors() is final); without it find() scans linearly. */
  void index_tensors();

 private:
  std::unordered_map<std::string_view, size_t> index_;  // name -> position in tensors()
};

/** Opens a GGUF file (first split of a multi-file GGUF too) or a Hugging Face folder (config.json +
 *  model.safetensors or model.safetensors.index.json). Throws ft::Error naming the file, field and
 *  offset for malformed input, kNotFound for a missing path. */
std::unique_ptr<Checkpoint> open_checkpoint(const std::string& path);

}  // namespace ft
