// quant.h entry points: validate the element count against the type's block size and call the
// row kernel of the type (kernels.h). One table lists every type with a dequantizer and/or a
// quantizer.
#include "quant/quant.h"

#include <array>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "util/error.h"

namespace ft {
namespace {

struct Codec {
  DType type;
  size_t block_bytes;        // sizeof the block struct the kernels read (checked against dtype_info)
  quant::DequantFn dequant;  // nullptr: no dequantizer
  quant::QuantFn quant;      // nullptr: no quantizer
};

// Q8_1 and Q8_K are ggml's intermediate dot-product types: not stored in model files.
constexpr std::array kCodecs = {
    Codec{DType::F32, 4, quant::dequant_f32, quant::quant_f32},
    Codec{DType::F16, 2, quant::dequant_f16, quant::quant_f16},
    Codec{DType::BF16, 2, quant::dequant_bf16, quant::quant_bf16},
    Codec{DType::F64, 8, quant::dequant_f64, nullptr},
    Codec{DType::I8, 1, quant::dequant_i8, nullptr},
    Codec{DType::I16, 2, quant::dequant_i16, nullptr},
    Codec{DType::I32, 4, quant::dequant_i32, nullptr},
    Codec{DType::I64, 8, quant::dequant_i64, nullptr},
    Codec{DType::U8, 1, quant::dequant_u8, nullptr},
    Codec{DType::BOOL, 1, quant::dequant_bool, nullptr},
    Codec{DType::F8_E4M3, 1, quant::dequant_f8_e4m3, nullptr},
    Codec{DType::F8_E5M2, 1, quant::dequant_f8_e5m2, nullptr},
    Codec{DType::Q4_0, sizeof(quant::BlockQ4_0), quant::dequant_q4_0, quant::quant_q4_0},
    Codec{DType::Q4_1, sizeof(quant::BlockQ4_1), quant::dequant_q4_1, nullptr},
    Codec{DType::Q5_0, sizeof(quant::BlockQ5_0), quant::dequant_q5_0, nullptr},
    Codec{DType::Q5_1, sizeof(quant::BlockQ5_1), quant::dequant_q5_1, nullptr},
    Codec{DType::Q8_0, sizeof(quant::BlockQ8_0), quant::dequant_q8_0, quant::quant_q8_0},
    Codec{DType::Q1_0, sizeof(quant::BlockQ1_0), quant::dequant_q1_0, nullptr},
    Codec{DType::Q2_0, sizeof(quant::BlockQ2_0), quant::dequant_q2_0, nullptr},
    Codec{DType::Q2_K, sizeof(quant::BlockQ2_K), quant::dequant_q2_k, nullptr},
    Codec{DType::Q3_K, sizeof(quant::BlockQ3_K), quant::dequant_q3_k, nullptr},
    Codec{DType::Q4_K, sizeof(quant::BlockQ4_K), quant::dequant_q4_k, quant::quant_q4_k},
    Codec{DType::Q5_K, sizeof(quant::BlockQ5_K), quant::dequant_q5_k, nullptr},
    Codec{DType::Q6_K, sizeof(quant::BlockQ6_K), quant::dequant_q6_k, nullptr},
    Codec{DType::TQ1_0, sizeof(quant::BlockTQ1_0), quant::dequant_tq1_0, nullptr},
    Codec{DType::TQ2_0, sizeof(quant::BlockTQ2_0), quant::dequant_tq2_0, nullptr},
    Codec{DType::MXFP4, sizeof(quant::BlockMXFP4), quant::dequant_mxfp4, nullptr},
    Codec{DType::NVFP4, sizeof(quant::BlockNVFP4), quant::dequant_nvfp4, nullptr},
    Codec{DType::IQ2_XXS, sizeof(quant::BlockIQ2_XXS), quant::dequant_iq2_xxs, nullptr},
    Codec{DType::IQ2_XS, sizeof(quant::BlockIQ2_XS), quant::dequant_iq2_xs, nullptr},
    Codec{DType::IQ2_S, sizeof(quant::BlockIQ2_S), quant::dequant_iq2_s, nullptr},
    Codec{DType::IQ3_XXS, sizeof(quant::BlockIQ3_XXS), quant::dequant_iq3_xxs, nullptr},
    Codec{DType::IQ3_S, sizeof(quant::BlockIQ3_S), quant::dequant_iq3_s, nullptr},
    Codec{DType::IQ1_S, sizeof(quant::BlockIQ1_S), quant::dequant_iq1_s, nullptr},
    Codec{DType::IQ1_M, sizeof(quant::BlockIQ1_M), quant::dequant_iq1_m, nullptr},
    Codec{DType::IQ4_NL, sizeof(quant::BlockIQ4_NL), quant::dequant_iq4_nl, nullptr},
    Codec{DType::IQ4_XS, sizeof(quant::BlockIQ4_XS), quant::dequant_iq4_xs, nullptr},
    Codec{DType::F8_E4M3_B32, sizeof(quant::BlockF8E4M3B32), quant::dequant_f8_e4m3_b32, quant::quant_f8_e4m3_b32},
    Codec{DType::F8_E4M3_B16, sizeof(quant::BlockF8E4M3B16), quant::dequant_f8_e4m3_b16, quant::quant_f8_e4m3_b16},
    Codec{DType::NVFP4_G64, sizeof(quant::BlockNVFP4G64), quant::dequant_nvfp4_g64, nullptr},
    Codec{DType::NVFP4_G16, sizeof(quant::BlockNVFP4G16), quant::dequant_nvfp4_g16, nullptr},
};

const Codec* find_codec(DType type) {
  for (const auto& c : kCodecs) {
    if (c.type != type) continue;
    FT_CHECK(static_cast<int64_t>(c.block_bytes) == dtype_info(type).block_bytes);
    return &c;
  }
  return nullptr;
}

// Number of blocks in n elements of `info`; throws naming the type for a bad count or pointer.
int64_t checked_blocks(const DTypeInfo& info, const void* src, const void* dst, int64_t n, const char* what) {
  if (n < 0) fail(ErrorCode::kInvalidArgument, "{} {}: negative element count {}", what, info.name, n);
  if (n % info.block_size != 0)
    fail(ErrorCode::kInvalidArgument, "{} {}: {} elements is not a multiple of the block size {}", what, info.name,
         n, info.block_size);
  if (n > 0 && (src == nullptr || dst == nullptr))
    fail(ErrorCode::kInvalidArgument, "{} {}: null buffer for {} elements", what, info.name, n);
  return n / info.block_size;
}

}  // namespace

bool can_dequantize(DType type) {
  const Codec* c = find_codec(type);
  return c != nullptr && c->dequant != nullptr;
}

void dequantize_row(DType type, const void* src, float* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  const Codec* c = find_codec(type);
  if (c == nullptr || c->dequant == nullptr)
    fail(ErrorCode::kUnsupported, "dequantize: no dequantizer for type {}", info.name);
  const int64_t blocks = checked_blocks(info, src, dst, n, "dequantize");
  if (blocks > 0) c->dequant(static_cast<const uint8_t*>(src), dst, blocks);
}

void quantize_row(DType type, const float* src, void* dst, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  const Codec* c = find_codec(type);
  if (c == nullptr || c->quant == nullptr)
    fail(ErrorCode::kUnsupported, "quantize: no quantizer for type {} (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, F8_E4M3_B32, F8_E4M3_B16)",
         info.name);
  const int64_t blocks = checked_blocks(info, src, dst, n, "quantize");
  if (blocks > 0) c->quant(src, static_cast<uint8_t*>(dst), blocks);
}

}  // namespace ft
