#include "formats/gguf_value.h"

#include <bit>
#include <limits>

#include "util/error.h"

static_assert(std::endian::native == std::endian::little, "GGUF values are stored little-endian");

namespace ft {

std::string gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return fmt::format("type {}", static_cast<uint32_t>(t));
}

size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: case GgufType::ARRAY: return 0;
  }
  return 0;
}

GgufValue GgufValue::from_bits(GgufType t, uint64_t bits) {
  size_t n = gguf_scalar_size(t);
  FT_CHECK(n != 0);
  GgufValue v;
  v.type_ = t;
  v.bits_ = n == 8 ? bits : bits & ((uint64_t{1} << (8 * n)) - 1);
  return v;
}

GgufValue GgufValue::f32(float x) { return from_bits(GgufType::F32, std::bit_cast<uint32_t>(x)); }
GgufValue GgufValue::f64(double x) { return from_bits(GgufType::F64, std::bit_cast<uint64_t>(x)); }

GgufValue GgufValue::string(std::string s) {
  GgufValue v;
  v.type_ = GgufType::STRING;
  v.str_ = std::move(s);
  return v;
}

GgufValue GgufValue::numeric_array(GgufType elem, const void* raw, size_t count) {
  size_t n = gguf_scalar_size(elem);
  FT_CHECK(n != 0);
  GgufValue v;
  v.type_ = GgufType::ARRAY;
  v.elem_ = elem;
  const auto* p = static_cast<const uint8_t*>(raw);
  v.raw_.assign(p, p + count * n);
  return v;
}

GgufValue GgufValue::string_array(std::vector<std::string> s) {
  GgufValue v;
  v.type_ = GgufType::ARRAY;
  v.elem_ = GgufType::STRING;
  v.strs_ = std::move(s);
  return v;
}

GgufValue GgufValue::array_of_arrays(std::vector<GgufValue> a) {
  for (const auto& x : a) FT_CHECK(x.is_array());
  GgufValue v;
  v.type_ = GgufType::ARRAY;
  v.elem_ = GgufType::ARRAY;
  v.arrays_ = std::move(a);
  return v;
}

bool GgufValue::is_integer() const {
  switch (type_) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

int64_t GgufValue::as_int() const {
  switch (type_) {
    case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::BOOL:
      return static_cast<int64_t>(bits_);
    case GgufType::I8: return static_cast<int8_t>(bits_);
    case GgufType::I16: return static_cast<int16_t>(bits_);
    case GgufType::I32: return static_cast<int32_t>(bits_);
    case GgufType::I64: return static_cast<int64_t>(bits_);
    case GgufType::U64:
      if (bits_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(ErrorCode::kInvalidArgument, "u64 value {} does not fit in int64", bits_);
      return static_cast<int64_t>(bits_);
    default: fail(ErrorCode::kInvalidArgument, "expected an integer, got {}", gguf_type_name(type_));
  }
}

double GgufValue::as_double() const {
  switch (type_) {
    case GgufType::F32: return std::bit_cast<float>(static_cast<uint32_t>(bits_));
    case GgufType::F64: return std::bit_cast<double>(bits_);
    case GgufType::U64: return static_cast<double>(bits_);
    case GgufType::STRING: case GgufType::ARRAY:
      fail(ErrorCode::kInvalidArgument, "expected a number, got {}", gguf_type_name(type_));
    default: return static_cast<double>(as_int());
  }
}

bool GgufValue::as_bool() const {
  if (type_ != GgufType::BOOL) fail(ErrorCode::kInvalidArgument, "expected bool, got {}", gguf_type_name(type_));
  return bits_ != 0;
}

const std::string& GgufValue::as_string() const {
  if (type_ != GgufType::STRING) fail(ErrorCode::kInvalidArgument, "expected string, got {}", gguf_type_name(type_));
  return str_;
}

size_t GgufValue::size() const {
  if (type_ != GgufType::ARRAY) return 0;
  if (elem_ == GgufType::STRING) return strs_.size();
  if (elem_ == GgufType::ARRAY) return arrays_.size();
  return raw_.size() / gguf_scalar_size(elem_);
}

GgufValue GgufValue::element(size_t i) const {
  if (type_ != GgufType::ARRAY || i >= size())
    fail(ErrorCode::kInvalidArgument, "array element {} out of range ({} elements)", i, size());
  if (elem_ == GgufType::STRING) return string(strs_[i]);
  if (elem_ == GgufType::ARRAY) return arrays_[i];
  size_t n = gguf_scalar_size(elem_);
  uint64_t bits = 0;
  std::memcpy(&bits, raw_.data() + i * n, n);
  return from_bits(elem_, bits);
}

bool GgufValue::operator==(const GgufValue& o) const {
  return type_ == o.type_ && elem_ == o.elem_ && bits_ == o.bits_ && str_ == o.str_ && raw_ == o.raw_ &&
         strs_ == o.strs_ && arrays_ == o.arrays_;
}

nlohmann::json GgufValue::to_json() const {
  switch (type_) {
    case GgufType::STRING: return str_;
    case GgufType::BOOL: return bits_ != 0;
    case GgufType::F32: case GgufType::F64: return as_double();
    case GgufType::U64: return bits_;
    case GgufType::ARRAY: {
      nlohmann::json a = nlohmann::json::array();
      if (elem_ == GgufType::STRING) {
        for (const auto& s : strs_) a.push_back(s);
      } else if (elem_ == GgufType::ARRAY) {
        for (const auto& x : arrays_) a.push_back(x.to_json());
      } else {
        for (size_t i = 0, n = size(); i < n; ++i) a.push_back(element(i).to_json());
      }
      return a;
    }
    default: return as_int();
  }
}

}  // namespace ft
