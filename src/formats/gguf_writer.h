#pragma once
// GGUF writer (for tools and tests): typed metadata plus tensors, each tensor's data aligned to
// general.alignment (default 32). Writes what GgufReader reads: a file written from a reader's
// kvs() and tensors() re-reads with equal metadata and tensor bytes. Format: ggml/docs/gguf.md.
#include <cstdint>
#include <string>
#include <vector>

#include "formats/gguf_value.h"
#include "tensor/dtype.h"

namespace ft {

class GgufWriter {
 public:
  /** `version` is 2 or 3 (both have the same layout with 64-bit counts). */
  explicit GgufWriter(uint32_t version = 3);

  /** Adds a metadata key (file order = call order). Throws ft::Error(kInvalidArgument) on a duplicate key or a
   *  `general.alignment` that is not a u32 power of two. */
  void add(const std::string& key, GgufValue value);
  /** Adds a tensor; `shape` is row-major (written to the file reversed, as ne). `data` holds exactly
   *  dtype_bytes(type, numel) bytes and is copied. Throws ft::Error(kInvalidArgument) on a duplicate name,
   *  a non-GGUF dtype, more than 4 dims, a last dim that is not a whole number of blocks, or a wrong byte count. */
  void add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                  int64_t bytes);
  /** Like add_tensor, but keeps a pointer to `data` instead of a copy (for multi-GB tensors): the
   *  caller keeps the bytes alive and unchanged until write()/serialize() returns. */
  void add_tensor_ref(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                      int64_t bytes);

  /** Writes the file, streaming tensor data (no copy of the whole file in memory). Throws
   *  ft::Error(kIo) if it cannot be written. */
  void write(const std::string& path) const;
  /** The file's bytes (what write() writes). */
  std::string serialize() const;

 private:
  struct Tensor {
    std::string name;
    DType type;
    std::vector<int64_t> shape;  // row-major
    std::vector<uint8_t> data;    // owned bytes (add_tensor)
    const uint8_t* ref = nullptr;  // borrowed bytes (add_tensor_ref)
    int64_t bytes = 0;
    const uint8_t* ptr() const { return ref ? ref : data.data(); }
  };
  /** Checks a tensor's name, type, shape and byte count (add_tensor's rules). */
  void check_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, int64_t bytes) const;
  /** Everything before the first tensor's data (header, metadata, tensor infos, padding). */
  std::string header() const;
  uint32_t version_;
  uint32_t alignment_ = 32;
  std::vector<GgufKV> kvs_;
  std::vector<Tensor> tensors_;
};

}  // namespace ft
