#pragma once
// GgufValue: one typed GGUF metadata value (scalar, string or possibly nested array), kept exactly
// as stored so the writer can reproduce it byte for byte. Source of the format:
// ggml/docs/gguf.md (`gguf_metadata_value_type`, `gguf_metadata_value_t`).
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace ft {

/** GGUF metadata value type ids (gguf.md `enum gguf_metadata_value_type`). */
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

/** "u8", "string", "array", ...; "type <id>" for an id that is not a GgufType. */
std::string gguf_type_name(GgufType t);
/** True if `id` is a valid GgufType id (0..12). */
inline bool gguf_type_valid(uint32_t id) { return id <= 12; }
/** Bytes of a numeric or bool scalar of type `t` (1, 2, 4 or 8); 0 for STRING and ARRAY. */
size_t gguf_scalar_size(GgufType t);

class GgufValue {
 public:
  GgufValue() = default;

  // ---- construction (used by the reader and by tools/tests writing GGUF) ----
  /** A numeric or bool scalar of type `t` from its raw little-endian bits (zero-extended to 64). */
  static GgufValue from_bits(GgufType t, uint64_t bits);
  static GgufValue u8(uint8_t v) { return from_bits(GgufType::U8, v); }
  static GgufValue i8(int8_t v) { return from_bits(GgufType::I8, static_cast<uint8_t>(v)); }
  static GgufValue u16(uint16_t v) { return from_bits(GgufType::U16, v); }
  static GgufValue i16(int16_t v) { return from_bits(GgufType::I16, static_cast<uint16_t>(v)); }
  static GgufValue u32(uint32_t v) { return from_bits(GgufType::U32, v); }
  static GgufValue i32(int32_t v) { return from_bits(GgufType::I32, static_cast<uint32_t>(v)); }
  static GgufValue u64(uint64_t v) { return from_bits(GgufType::U64, v); }
  static GgufValue i64(int64_t v) { return from_bits(GgufType::I64, static_cast<uint64_t>(v)); }
  static GgufValue f32(float v);
  static GgufValue f64(double v);
  static GgufValue boolean(bool v) { return from_bits(GgufType::BOOL, v ? 1 : 0); }
  static GgufValue string(std::string v);
  /** An array of numeric/bool elements of type `elem`, from `count` packed little-endian elements at `raw`. */
  static GgufValue numeric_array(GgufType elem, const void* raw, size_t count);
  static GgufValue string_array(std::vector<std::string> v);
  /** An array whose elements are themselves arrays (each `v[i]` must have type ARRAY). */
  static GgufValue array_of_arrays(std::vector<GgufValue> v);

  // ---- inspection ----
  GgufType type() const { return type_; }
  /** ARRAY only: the element type. */
  GgufType elem_type() const { return elem_; }
  bool is_array() const { return type_ == GgufType::ARRAY; }
  bool is_integer() const;  // U8..I64 (not BOOL, not floats)

  /** Scalar value as int64. Throws ft::Error(kInvalidArgument) if not an integer/bool scalar or a u64 above INT64_MAX. */
  int64_t as_int() const;
  /** Scalar numeric (integer, float or bool) as double. Throws ft::Error(kInvalidArgument) otherwise. */
  double as_double() const;
  /** BOOL scalar. Throws ft::Error(kInvalidArgument) otherwise. */
  bool as_bool() const;
  /** STRING value. Throws ft::Error(kInvalidArgument) otherwise. */
  const std::string& as_string() const;
  /** Raw scalar bits (numeric/bool). */
  uint64_t bits() const { return bits_; }

  /** Number of array elements (0 for a non-array). */
  size_t size() const;
  /** Element i of a numeric/bool array as int64 / double (same rules as as_int/as_double). */
  int64_t int_at(size_t i) const { return element(i).as_int(); }
  double double_at(size_t i) const { return element(i).as_double(); }
  /** Element i of a numeric/bool/string array as a scalar GgufValue (copies). */
  GgufValue element(size_t i) const;
  /** String array storage (elem_type STRING). */
  const std::vector<std::string>& strings() const { return strs_; }
  /** Packed numeric array storage (elem_type numeric/bool). */
  const std::vector<uint8_t>& raw() const { return raw_; }
  /** Nested arrays (elem_type ARRAY). */
  const std::vector<GgufValue>& arrays() const { return arrays_; }

  /** Exact equality: same type, element type and bytes. */
  bool operator==(const GgufValue& o) const;

  /** JSON form: integers as JSON integers, floats as numbers, bool, string, arrays as JSON arrays. */
  nlohmann::json to_json() const;

 private:
  GgufType type_ = GgufType::U8;
  GgufType elem_ = GgufType::U8;
  uint64_t bits_ = 0;                // numeric/bool scalar: raw little-endian bits
  std::string str_;                  // STRING
  std::vector<uint8_t> raw_;         // ARRAY of numeric/bool: packed elements
  std::vector<std::string> strs_;    // ARRAY of STRING
  std::vector<GgufValue> arrays_;    // ARRAY of ARRAY
};

/** One metadata key/value pair, in file order. */
struct GgufKV {
  std::string key;
  GgufValue value;
};

}  // namespace ft
