#include "tensor/dtype.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <limits>

#include "util/error.h"

namespace ft {
namespace {

// Block sizes and bytes from ggml's type traits (ggml.c `type_traits`) / gguf-py `GGML_QUANT_SIZES`.
constexpr std::array kTypes = {
    DTypeInfo{DType::F32, "F32", 1, 4, true, false},
    DTypeInfo{DType::F16, "F16", 1, 2, true, false},
    DTypeInfo{DType::Q4_0, "Q4_0", 32, 18, false, true},
    DTypeInfo{DType::Q4_1, "Q4_1", 32, 20, false, true},
    DTypeInfo{DType::Q5_0, "Q5_0", 32, 22, false, true},
    DTypeInfo{DType::Q5_1, "Q5_1", 32, 24, false, true},
    DTypeInfo{DType::Q8_0, "Q8_0", 32, 34, false, true},
    DTypeInfo{DType::Q8_1, "Q8_1", 32, 36, false, true},
    DTypeInfo{DType::Q2_K, "Q2_K", 256, 84, false, true},
    DTypeInfo{DType::Q3_K, "Q3_K", 256, 110, false, true},
    DTypeInfo{DType::Q4_K, "Q4_K", 256, 144, false, true},
    DTypeInfo{DType::Q5_K, "Q5_K", 256, 176, false, true},
    DTypeInfo{DType::Q6_K, "Q6_K", 256, 210, false, true},
    DTypeInfo{DType::Q8_K, "Q8_K", 256, 292, false, true},
    DTypeInfo{DType::IQ2_XXS, "IQ2_XXS", 256, 66, false, true},
    DTypeInfo{DType::IQ2_XS, "IQ2_XS", 256, 74, false, true},
    DTypeInfo{DType::IQ3_XXS, "IQ3_XXS", 256, 98, false, true},
    DTypeInfo{DType::IQ1_S, "IQ1_S", 256, 50, false, true},
    DTypeInfo{DType::IQ4_NL, "IQ4_NL", 32, 18, false, true},
    DTypeInfo{DType::IQ3_S, "IQ3_S", 256, 110, false, true},
    DTypeInfo{DType::IQ2_S, "IQ2_S", 256, 82, false, true},
    DTypeInfo{DType::IQ4_XS, "IQ4_XS", 256, 136, false, true},
    DTypeInfo{DType::I8, "I8", 1, 1, false, false},
    DTypeInfo{DType::I16, "I16", 1, 2, false, false},
    DTypeInfo{DType::I32, "I32", 1, 4, false, false},
    DTypeInfo{DType::I64, "I64", 1, 8, false, false},
    DTypeInfo{DType::F64, "F64", 1, 8, true, false},
    DTypeInfo{DType::IQ1_M, "IQ1_M", 256, 56, false, true},
    DTypeInfo{DType::BF16, "BF16", 1, 2, true, false},
    DTypeInfo{DType::TQ1_0, "TQ1_0", 256, 54, false, true},
    DTypeInfo{DType::TQ2_0, "TQ2_0", 256, 66, false, true},
    DTypeInfo{DType::MXFP4, "MXFP4", 32, 17, false, true},
    DTypeInfo{DType::NVFP4, "NVFP4", 64, 36, false, true},
    // Q1_0: 128 elements = fp16 d + 16 bytes of sign bits (ggml-common.h block_q1_0, QK1_0 = 128).
    // Q2_0: 64 elements = fp16 d + 16 bytes of 2-bit codes (ggml-common.h block_q2_0, QK2_0 = 64);
    // gguf-py GGML_QUANT_SIZES agrees: Q1_0 (128, 2 + 16), Q2_0 (64, 2 + 16).
    DTypeInfo{DType::Q1_0, "Q1_0", 128, 18, false, true},
    DTypeInfo{DType::Q2_0, "Q2_0", 64, 18, false, true},
    DTypeInfo{DType::F8_E4M3, "F8_E4M3", 1, 1, true, false},
    DTypeInfo{DType::F8_E5M2, "F8_E5M2", 1, 1, true, false},
    DTypeInfo{DType::U8, "U8", 1, 1, false, false},
    DTypeInfo{DType::BOOL, "BOOL", 1, 1, false, false},
    DTypeInfo{DType::EC12, "EC12", 64, 96, false, false},  // moe/ec12.h: 64 values in 96 bytes
    DTypeInfo{DType::F8_E4M3_B32, "F8_E4M3_B32", 32, 36, false, true},  // quant/fp8.h: float32 d + 32 E4M3
    DTypeInfo{DType::F8_E4M3_B16, "F8_E4M3_B16", 16, 20, false, true},  // quant/fp8.h: float32 d + 16 E4M3
    DTypeInfo{DType::NVFP4_G64, "NVFP4_G64", 64, 40, false, true},  // quant/nvfp4.h: g + 4 E4M3 + 32 B E2M1
    DTypeInfo{DType::NVFP4_G16, "NVFP4_G16", 16, 13, false, true},  // quant/nvfp4.h: g + 1 E4M3 + 8 B E2M1
};

const DTypeInfo* find(DType t) {
  for (const auto& info : kTypes)
    if (info.type == t) return &info;
  return nullptr;
}

}  // namespace

const DTypeInfo& dtype_info(DType t) {
  const DTypeInfo* info = find(t);
  if (!info) fail(ErrorCode::kInternal, "not a dtype: {}", static_cast<uint32_t>(t));
  return *info;
}

DType dtype_from_gguf_id(uint32_t id) {
  if (id < 1000) {
    if (const DTypeInfo* info = find(static_cast<DType>(id))) return info->type;
  }
  if (id == 4 || id == 5 || (id >= 31 && id <= 33) || (id >= 36 && id <= 38))
    fail(ErrorCode::kInvalidFile, "tensor type id {} was removed from ggml and is not supported", id);
  fail(ErrorCode::kInvalidFile, "unknown tensor type id {}", id);
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return std::toupper(c); });
  for (const auto& info : kTypes)
    if (upper == info.name && info.type != DType::EC12) return info.type;  // EC12: an internal form
  return std::nullopt;
}

int64_t dtype_bytes(DType t, int64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n < 0 || n % info.block_size != 0)
    fail(ErrorCode::kInvalidArgument, "{} elements is not a whole number of {} blocks of {}", n, info.name,
         info.block_size);
  int64_t blocks = n / info.block_size;
  if (blocks > std::numeric_limits<int64_t>::max() / info.block_bytes)
    fail(ErrorCode::kInvalidArgument, "{} elements of {} overflow a 64-bit byte count", n, info.name);
  return blocks * info.block_bytes;
}

}  // namespace ft
