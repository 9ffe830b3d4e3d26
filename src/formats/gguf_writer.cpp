#include "formats/gguf_writer.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "util/error.h"

namespace ft {
namespace {

template <typename T>
void put(std::string& out, T v) {
  char buf[sizeof(T)];
  std::memcpy(buf, &v, sizeof(T));
  out.append(buf, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out += s;
}

void put_value(std::string& out, const GgufValue& v);

void put_array_body(std::string& out, const GgufValue& v) {
  put<uint32_t>(out, static_cast<uint32_t>(v.elem_type()));
  put<uint64_t>(out, v.size());
  if (v.elem_type() == GgufType::STRING) {
    for (const auto& s : v.strings()) put_string(out, s);
  } else if (v.elem_type() == GgufType::ARRAY) {
    for (const auto& a : v.arrays()) put_array_body(out, a);
  } else {
    out.append(reinterpret_cast<const char*>(v.raw().data()), v.raw().size());
  }
}

void put_value(std::string& out, const GgufValue& v) {
  if (v.type() == GgufType::STRING) {
    put_string(out, v.as_string());
  } else if (v.type() == GgufType::ARRAY) {
    put_array_body(out, v);
  } else {
    uint64_t bits = v.bits();
    char buf[8];
    std::memcpy(buf, &bits, 8);
    out.append(buf, gguf_scalar_size(v.type()));
  }
}

void pad_to(std::string& out, uint64_t alignment) {
  out.append((alignment - out.size() % alignment) % alignment, '\0');
}

}  // namespace

GgufWriter::GgufWriter(uint32_t version) : version_(version) {
  if (version != 2 && version != 3) fail(ErrorCode::kInvalidArgument, "GGUF version {} cannot be written (2 or 3)", version);
}

void GgufWriter::add(const std::string& key, GgufValue value) {
  for (const auto& kv : kvs_)
    if (kv.key == key) fail(ErrorCode::kInvalidArgument, "GGUF writer: duplicate metadata key {}", key);
  if (key == "general.alignment") {
    if (!value.is_integer() || value.bits() == 0 || !std::has_single_bit(value.bits()) || value.bits() > (1u << 30))
      fail(ErrorCode::kInvalidArgument, "GGUF writer: general.alignment must be a power of two");
    alignment_ = static_cast<uint32_t>(value.bits());
  }
  kvs_.push_back(GgufKV{key, std::move(value)});
}

void GgufWriter::check_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape,
                              int64_t bytes) const {
  for (const auto& t : tensors_)
    if (t.name == name) fail(ErrorCode::kInvalidArgument, "GGUF writer: duplicate tensor {}", name);
  if (!dtype_is_gguf(type)) fail(ErrorCode::kInvalidArgument, "GGUF writer: {}: {} has no GGUF type id", name, dtype_name(type));
  if (shape.size() > 4) fail(ErrorCode::kInvalidArgument, "GGUF writer: {}: {} dims (max 4)", name, shape.size());
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) fail(ErrorCode::kInvalidArgument, "GGUF writer: {}: negative dim {}", name, d);
    numel *= d;
  }
  int64_t cols = shape.empty() ? 1 : shape.back();
  if (cols % dtype_info(type).block_size != 0)
    fail(ErrorCode::kInvalidArgument, "GGUF writer: {}: last dim {} is not a multiple of the {} block size", name, cols,
         dtype_name(type));
  int64_t expect = dtype_bytes(type, numel);
  if (bytes != expect)
    fail(ErrorCode::kInvalidArgument, "GGUF writer: {}: {} bytes given, {} {} elements need {}", name, bytes, numel,
         dtype_name(type), expect);
}

void GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape, const void* data,
                            int64_t bytes) {
  check_tensor(name, type, shape, bytes);
  const auto* p = static_cast<const uint8_t*>(data);
  tensors_.push_back(Tensor{name, type, shape, std::vector<uint8_t>(p, p + bytes), nullptr, bytes});
}

void GgufWriter::add_tensor_ref(const std::string& name, DType type, const std::vector<int64_t>& shape,
                                const void* data, int64_t bytes) {
  check_tensor(name, type, shape, bytes);
  tensors_.push_back(Tensor{name, type, shape, {}, static_cast<const uint8_t*>(data), bytes});
}

std::string GgufWriter::header() const {
  std::string out;
  out.append("GGUF", 4);
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kvs_.size());
  for (const auto& kv : kvs_) {
    put_string(out, kv.key);
    put<uint32_t>(out, static_cast<uint32_t>(kv.value.type()));
    put_value(out, kv.value);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(out, static_cast<uint64_t>(*it));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += (static_cast<uint64_t>(t.bytes) + alignment_ - 1) / alignment_ * alignment_;
  }
  pad_to(out, alignment_);
  return out;
}

std::string GgufWriter::serialize() const {
  std::string out = header();
  for (const auto& t : tensors_) {
    out.append(reinterpret_cast<const char*>(t.ptr()), static_cast<size_t>(t.bytes));
    pad_to(out, alignment_);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) fail(ErrorCode::kIo, "{}: cannot open for writing: {}", path, std::strerror(errno));
  const std::string head = header();
  f.write(head.data(), static_cast<std::streamsize>(head.size()));
  const char zeros[64] = {};
  for (const auto& t : tensors_) {
    f.write(reinterpret_cast<const char*>(t.ptr()), static_cast<std::streamsize>(t.bytes));
    int64_t pad = (alignment_ - t.bytes % alignment_) % alignment_;
    for (; pad > 0; pad -= 64) f.write(zeros, static_cast<std::streamsize>(std::min<int64_t>(pad, 64)));
  }
  f.close();
  if (!f) fail(ErrorCode::kIo, "{}: write failed: {}", path, std::strerror(errno));
}

}  // namespace ft
