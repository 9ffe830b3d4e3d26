#include "tensor/tensor.h"

#include <cstdlib>
#include <utility>

#include <fmt/format.h>

#include "util/error.h"

namespace ft {

const char* device_name(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

namespace {

void check_row_blocks(DType dtype, int64_t cols, const char* what) {
  const int64_t bs = dtype_info(dtype).block_size;
  if (bs > 1 && cols % bs != 0)
    fail(ErrorCode::kInvalidArgument, "{}: last dim {} is not a multiple of the {} block size {}", what, cols,
         dtype_name(dtype), bs);
}

}  // namespace

Tensor::Tensor(void* d, DType t, std::initializer_list<int64_t> s, Device dev)
    : Tensor(d, t, s.begin(), static_cast<int>(s.size()), dev) {}

Tensor::Tensor(void* d, DType t, const int64_t* s, int n, Device dev) : data(d), dtype(t), device(dev), ndim(n) {
  if (n < 0 || n > kMaxDims) fail(ErrorCode::kInvalidArgument, "tensor: {} dims (at most {} supported)", n, kMaxDims);
  for (int i = 0; i < n; ++i) {
    if (s[i] < 0) fail(ErrorCode::kInvalidArgument, "tensor: negative dim {} at index {}", s[i], i);
    shape[i] = s[i];
  }
}

int64_t Tensor::dim(int i) const {
  const int j = i < 0 ? ndim + i : i;
  FT_CHECK(j >= 0 && j < ndim);
  return shape[j];
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

int64_t Tensor::rows() const {
  int64_t n = 1;
  for (int i = 0; i + 1 < ndim; ++i) n *= shape[i];
  return n;
}

int64_t Tensor::row_bytes() const { return dtype_bytes(dtype, cols()); }

int64_t Tensor::bytes() const { return rows() * row_bytes(); }

Tensor Tensor::reshape(std::initializer_list<int64_t> s) const {
  Tensor t(data, dtype, s, device);
  if (t.numel() != numel())
    fail(ErrorCode::kInvalidArgument, "reshape {} -> {}: element counts differ", shape_str(), t.shape_str());
  check_row_blocks(dtype, t.cols(), "reshape");
  return t;
}

Tensor Tensor::slice(int64_t start, int64_t count) const {
  if (ndim < 1 || start < 0 || count < 0 || start + count > shape[0])
    fail(ErrorCode::kInvalidArgument, "slice [{}, {}) of tensor {}: out of range", start, start + count, str());
  Tensor t = *this;
  t.shape[0] = count;
  const int64_t stride = ndim == 1 ? dtype_bytes(dtype, 1) : bytes() / (shape[0] == 0 ? 1 : shape[0]);
  if (ndim == 1 && dtype_info(dtype).block_size > 1)
    fail(ErrorCode::kInvalidArgument, "slice of 1-D block-quantized tensor {}", str());
  t.data = data ? static_cast<uint8_t*>(data) + start * stride : nullptr;
  return t;
}

Tensor Tensor::index(int64_t i) const {
  if (ndim < 2) fail(ErrorCode::kInvalidArgument, "index {} of tensor {}: needs at least 2 dims", i, str());
  Tensor s = slice(i, 1);
  Tensor t(s.data, dtype, s.shape.data() + 1, ndim - 1, device);
  return t;
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Tensor::str() const { return shape_str() + " " + dtype_name(dtype); }

bool Tensor::has_shape(std::initializer_list<int64_t> s) const {
  if (static_cast<int>(s.size()) != ndim) return false;
  int i = 0;
  for (int64_t d : s)
    if (shape[i++] != d) return false;
  return true;
}

// ---- Buffer ----

Buffer::Buffer(void* data, int64_t bytes, Device device, Deleter deleter)
    : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)) {}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)), device_(o.device_),
      deleter_(std::move(o.deleter_)) {}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = o.device_;
    deleter_ = std::move(o.deleter_);
  }
  return *this;
}

void Buffer::release() {
  if (data_ && deleter_) deleter_(data_);
  data_ = nullptr;
  bytes_ = 0;
}

Buffer Buffer::host(int64_t bytes) {
  if (bytes < 0) fail(ErrorCode::kInvalidArgument, "host buffer of {} bytes", bytes);
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!p) fail(ErrorCode::kOutOfMemory, "cannot allocate {} bytes of host memory", bytes);
  return Buffer(p, bytes, Device::kCpu, [](void* q) { std::free(q); });
}

Tensor Buffer::view(DType dtype, std::initializer_list<int64_t> shape, int64_t offset) const {
  Tensor t(nullptr, dtype, shape, device_);
  check_row_blocks(dtype, t.cols(), "buffer view");
  const int64_t need = t.bytes();
  if (offset < 0 || offset + need > bytes_)
    fail(ErrorCode::kInvalidArgument, "buffer view {} at offset {} needs {} bytes; buffer has {}", t.str(), offset,
         need, bytes_);
  t.data = static_cast<uint8_t*>(data_) + offset;
  return t;
}

}  // namespace ft
