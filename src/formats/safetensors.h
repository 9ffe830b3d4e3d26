#pragma once
// safetensors reader (one file, or shards listed by model.safetensors.index.json) and a small writer
// for tools/tests. Format (huggingface/safetensors docs): u64 little-endian header size N, N bytes of
// JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the
// data; offsets are relative to the byte after the header. Tensor data stays memory-mapped.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/checkpoint.h"
#include "util/mmap_file.h"

namespace ft {

/** The DType for a safetensors dtype string (F64 F32 F16 BF16 F8_E4M3 F8_E5M2 I64 I32 I16 I8 U8 BOOL), or nullopt. */
std::optional<DType> dtype_from_safetensors(std::string_view name);
/** The safetensors spelling of `t`. Throws ft::Error(kInvalidArgument) for a type safetensors cannot hold. */
const char* safetensors_dtype_name(DType t);

/** One .safetensors file, validated: header size within the file, JSON object, every dtype known, shapes
 *  non-negative, end - begin == numel * element size, offsets inside the data and non-overlapping. */
class SafetensorsFile {
 public:
  /** Throws ft::Error(kNotFound) for a missing file, kInvalidFile naming the file, tensor and field otherwise. */
  explicit SafetensorsFile(const std::string& path);
  /** Parses an in-memory copy of a file (tests and fuzzing: an exact-size heap buffer lets ASan see any
   *  read past the end). `name` is used in error messages. Same errors as above. */
  SafetensorsFile(const std::string& name, std::vector<uint8_t> bytes);

  const std::string& path() const { return name_; }
  /** Tensors in data-offset order; data points into the mapping. */
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  /** The "__metadata__" object (string -> string), or an empty object. */
  const nlohmann::json& metadata() const { return metadata_; }
  /** Absolute file offset of the data section (8 + header size). */
  uint64_t data_offset() const { return data_offset_; }

 private:
  void parse(const uint8_t* data, uint64_t size);

  std::string name_;
  MappedFile map_;              // the file, when opened from a path
  std::vector<uint8_t> owned_;  // the bytes, when given in memory
  nlohmann::json metadata_ = nlohmann::json::object();
  std::vector<TensorInfo> tensors_;
  uint64_t data_offset_ = 0;
};

/** A safetensors checkpoint: one file or the shards named by an index. */
class SafetensorsSet {
 public:
  /** `path` is a .safetensors file, a *.safetensors.index.json, or a folder holding model.safetensors or
   *  model.safetensors.index.json. For an index, every shard in weight_map is opened (once), each listed
   *  tensor must be in the shard the map names, and a name in two shards is an error.
   *  Throws ft::Error(kNotFound / kInvalidFile) naming the file. */
  explicit SafetensorsSet(const std::string& path);

  const std::vector<SafetensorsFile>& files() const { return files_; }
  /** All tensors: shards in file-name order (model-00001-of-N first), each in data-offset order. */
  const std::vector<TensorInfo>& tensors() const { return tensors_; }

 private:
  std::vector<SafetensorsFile> files_;
  std::vector<TensorInfo> tensors_;
};

/** One tensor to write with write_safetensors(). */
struct SafetensorsTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;  // row-major
  const void* data = nullptr;  // numel * element size bytes
};

/** Writes a .safetensors file (tensors in the given order, header padded with spaces to 8 bytes).
 *  Throws ft::Error(kInvalidArgument) for a dtype safetensors cannot hold, kIo if the file cannot be written. */
void write_safetensors(const std::string& path, const std::vector<SafetensorsTensor>& tensors,
                       const nlohmann::json& metadata = nlohmann::json::object());

}  // namespace ft
