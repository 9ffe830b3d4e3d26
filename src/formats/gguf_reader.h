#pragma once
// GGUF reader: versions 2 and 3, typed metadata, tensor infos, memory-mapped tensor data, and
// split sets (`name-00001-of-00003.gguf`). Source of the format: ggml/docs/gguf.md and
// ggml/src/gguf.cpp (validation rules: max 4 dims, offsets aligned, ne[0] a whole number of blocks).
// Every malformed input throws ft::Error(kInvalidFile) "<file>: <field> at offset <n>: <why>".
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "formats/gguf_value.h"
#include "util/mmap_file.h"

namespace ft {

/** Default data alignment when `general.alignment` is absent (gguf.md). */
inline constexpr uint32_t kGgufDefaultAlignment = 32;
/** Most dims a GGUF tensor may have (GGML_MAX_DIMS). */
inline constexpr uint32_t kGgufMaxDims = 4;

/** One tensor as stored in a GGUF file. */
struct GgufTensor {
  TensorInfo info;            // shape row-major (reverse of ne); data points into the mapped split
                              // (nullptr for a tensor of 0 bytes)
  std::vector<int64_t> ne;    // GGUF dim order, fastest first: ne[0] = columns
  uint64_t offset = 0;        // bytes from the start of its file's data section
  uint32_t split = 0;         // 0-based index of the split file holding it
};

/** One parsed GGUF file (no split merging). Immutable after construction. */
class GgufFile {
 public:
  /** Maps and parses `path`. Throws ft::Error(kNotFound) for a missing file, kInvalidFile for any malformed
   *  field (naming the field and its byte offset). Allocates only after checking counts against the bytes left. */
  explicit GgufFile(const std::string& path);
  /** Parses an in-memory copy of a file (tests and fuzzing: an exact-size heap buffer lets ASan see any
   *  read past the end). `name` is used in error messages. Same errors as above. */
  GgufFile(const std::string& name, std::vector<uint8_t> bytes);

  const std::string& path() const { return name_; }
  uint32_t version() const { return version_; }
  /** Data alignment in bytes (general.alignment or 32). */
  uint32_t alignment() const { return alignment_; }
  /** Absolute file offset of the data section. */
  uint64_t data_offset() const { return data_offset_; }
  /** Absolute file offset just past the last tensor info (before alignment padding). */
  uint64_t header_end() const { return header_end_; }
  size_t file_size() const { return size_; }
  const uint8_t* file_data() const { return data_; }
  /** Metadata key/values in file order. */
  const std::vector<GgufKV>& kvs() const { return kvs_; }
  /** The value for `key`, or nullptr. */
  const GgufValue* find(std::string_view key) const;
  /** Tensors in file (tensor-info) order. */
  const std::vector<GgufTensor>& tensors() const { return tensors_; }

 private:
  void parse();

  std::string name_;
  MappedFile map_;              // the file, when opened from a path
  std::vector<uint8_t> owned_;  // the bytes, when given in memory
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  uint64_t header_end_ = 0;
  std::vector<GgufKV> kvs_;
  std::unordered_map<std::string, size_t> kv_index_;
  std::vector<GgufTensor> tensors_;
};

/** Paths of a split set derived from one member's name: "a/x-00002-of-00003.gguf" -> the 3 paths in order.
 *  A name without the `-NNNNN-of-NNNNN.gguf` suffix gives {path}. */
std::vector<std::string> gguf_split_paths(const std::string& path);

/** A GGUF model: one file, or all files of a split set merged (metadata from split 1, tensors from all). */
class GgufReader {
 public:
  /** Opens `path`; a split name (any member) opens every split. Checks split.no / split.count /
   *  split.tensors.count when present and rejects a tensor name that appears in two splits.
   *  Throws ft::Error(kInvalidFile / kNotFound) naming the file. */
  explicit GgufReader(const std::string& path);

  /** Split files in order (one for an unsplit model). */
  const std::vector<GgufFile>& files() const { return files_; }
  /** Metadata of split 1, in file order. */
  const std::vector<GgufKV>& kvs() const { return files_.front().kvs(); }
  const GgufValue* find(std::string_view key) const { return files_.front().find(key); }
  /** All tensors: split 1's in order, then split 2's, ... */
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  /** Metadata of split 1 as one JSON object (key -> GgufValue::to_json()). */
  nlohmann::json metadata_json() const;

 private:
  std::vector<GgufFile> files_;
  std::vector<GgufTensor> tensors_;
};

}  // namespace ft
