#pragma once
// Tensor: a non-owning, row-major, contiguous view (data pointer, DType, up to 4 dims, device).
// Buffer: owning memory (host here; device memory comes from a backend's Ops::alloc with its own
// deleter). Views never outlive the Buffer or the mapped checkpoint they point into.
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>

#include "tensor/dtype.h"

namespace ft {

/** Where a tensor's bytes live. CUDA memory is only dereferenced by the CUDA backend. */
enum class Device : uint8_t { kCpu = 0, kCuda = 1 };

const char* device_name(Device d);

/** A view of `shape` (row-major, last index fastest, 0..4 dims) elements of `dtype` at `data`.
 *  Rows are contiguous; for block-quantized dtypes the last dim must be a whole number of blocks.
 *  An empty view (data == nullptr) stands for "absent" in optional arguments. */
struct Tensor {
  static constexpr int kMaxDims = 4;

  void* data = nullptr;
  DType dtype = DType::F32;
  Device device = Device::kCpu;
  int ndim = 0;
  std::array<int64_t, kMaxDims> shape{};  // shape[i] for i < ndim

  Tensor() = default;
  /** View of `data` with `shape`. Throws ft::Error(kInvalidArgument) for > 4 dims or a negative dim. */
  Tensor(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = Device::kCpu);
  /** Same, shape from an array (first `ndim` entries). */
  Tensor(void* data, DType dtype, const int64_t* shape, int ndim, Device device = Device::kCpu);

  bool empty() const { return data == nullptr; }
  explicit operator bool() const { return data != nullptr; }
  /** Size of dim `i`; negative i counts from the end (dim(-1) = last). Throws kInternal out of range. */
  int64_t dim(int i) const;
  int64_t numel() const;
  /** Product of all dims but the last (1 for a 1-D or 0-D tensor). */
  int64_t rows() const;
  /** Last dim (1 for a 0-D tensor). */
  int64_t cols() const { return ndim == 0 ? 1 : shape[ndim - 1]; }
  /** Bytes of one row (the last dim) in the stored dtype. */
  int64_t row_bytes() const;
  /** Bytes of the whole view. */
  int64_t bytes() const;

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  uint8_t* bytes_ptr() const { return static_cast<uint8_t*>(data); }

  /** Same bytes, new shape with equal numel (last dim must stay whole blocks). Throws kInvalidArgument. */
  Tensor reshape(std::initializer_list<int64_t> new_shape) const;
  /** Sub-view of `count` entries starting at `start` along dim 0 (rows of a 2-D tensor, experts of a
   *  3-D stack). Throws kInvalidArgument when out of range. */
  Tensor slice(int64_t start, int64_t count) const;
  /** Entry `i` along dim 0 with that dim dropped ([E, N, K] -> [N, K]). Throws kInvalidArgument. */
  Tensor index(int64_t i) const;

  /** "[37, 64] BF16" style description for error messages. */
  std::string str() const;
  /** "[37, 64]". */
  std::string shape_str() const;
  /** True if ndim and all dims equal `s`. */
  bool has_shape(std::initializer_list<int64_t> s) const;
};

/** Owning, move-only memory block. Host buffers are 64-byte aligned and uninitialised. */
class Buffer {
 public:
  using Deleter = std::function<void(void*)>;

  Buffer() = default;
  /** Takes ownership of `data` (`bytes` long, on `device`); `deleter` frees it. */
  Buffer(void* data, int64_t bytes, Device device, Deleter deleter);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  /** `bytes` of 64-byte-aligned host memory. Throws ft::Error(kOutOfMemory) naming the size. */
  static Buffer host(int64_t bytes);

  void* data() const { return data_; }
  int64_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool empty() const { return data_ == nullptr; }

  /** A view of `shape` x `dtype` at byte `offset`. Throws ft::Error(kInvalidArgument) when it does not fit. */
  Tensor view(DType dtype, std::initializer_list<int64_t> shape, int64_t offset = 0) const;

 private:
  void release();
  void* data_ = nullptr;
  int64_t bytes_ = 0;
  Device device_ = Device::kCpu;
  Deleter deleter_;
};

}  // namespace ft
