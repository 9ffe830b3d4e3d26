#include "quant/kv_quant.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "quant/fp8.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft {
namespace {

constexpr int64_t kQ8Block = 32;  // llama.cpp's QK8_0
constexpr float kE4m3Max = 448.0f;

/** e4m3_to_f32 of every code, built once (the read path's per-value lookup). */
const float* e4m3_values() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

float amax(const float* x, int64_t n) {
  float m = 0.0f;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

}  // namespace

DType kv_code_dtype(DType kv_dtype) {
  if (kv_dtype == DType::F8_E4M3) return DType::F8_E4M3;
  if (kv_dtype == DType::Q8_0) return DType::I8;
  return kv_dtype;
}

DType kv_dtype_of_codes(DType code_dtype) { return code_dtype == DType::I8 ? DType::Q8_0 : code_dtype; }

bool kv_is_quantized(DType kv_dtype) { return kv_dtype == DType::F8_E4M3 || kv_dtype == DType::Q8_0; }

DType kv_scale_dtype(DType kv_dtype) {
  if (kv_dtype == DType::F8_E4M3) return DType::F32;
  if (kv_dtype == DType::Q8_0) return DType::F16;
  fail(ErrorCode::kInternal, "KV dtype {} has no scales", dtype_name(kv_dtype));
}

int64_t kv_scales_per_head(DType kv_dtype, int64_t dim) {
  if (kv_dtype == DType::F8_E4M3) return 1;
  if (kv_dtype == DType::Q8_0) return (dim + kQ8Block - 1) / kQ8Block;
  return 0;
}

int64_t kv_row_bytes(DType kv_dtype, int64_t heads, int64_t dim) {
  switch (kv_dtype) {
    case DType::F32: return heads * dim * 4;
    case DType::BF16:
    case DType::F16: return heads * dim * 2;
    case DType::F8_E4M3: return heads * (dim + 4);
    case DType::Q8_0: return heads * (dim + 2 * kv_scales_per_head(kv_dtype, dim));
    default: fail(ErrorCode::kInvalidArgument, "KV cache: dtype {} is not a KV cache type", dtype_name(kv_dtype));
  }
}

void kv_quantize_head(DType kv_dtype, const float* x, int64_t dim, uint8_t* codes, void* scales) {
  if (kv_dtype == DType::F8_E4M3) {
    const float m = amax(x, dim);
    const float s = m > 0.0f ? m / kE4m3Max : 1.0f;
    const float inv = 1.0f / s;
    for (int64_t i = 0; i < dim; ++i) codes[i] = f32_to_e4m3(x[i] * inv);
    std::memcpy(scales, &s, 4);
    return;
  }
  FT_CHECK(kv_dtype == DType::Q8_0);
  auto* d_out = static_cast<uint16_t*>(scales);
  for (int64_t b = 0; b * kQ8Block < dim; ++b) {
    const int64_t lo = b * kQ8Block, n = std::min(kQ8Block, dim - lo);
    const float d = amax(x + lo, n) / 127.0f;  // as ggml's quantize_row_q8_0_ref
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int64_t i = 0; i < n; ++i)
      codes[lo + i] = static_cast<uint8_t>(static_cast<int8_t>(std::lround(std::clamp(x[lo + i] * id, -127.0f, 127.0f))));
    d_out[b] = f32_to_f16(d);
  }
}

void kv_dequantize_head(DType kv_dtype, const uint8_t* codes, const void* scales, int64_t dim, float* out) {
  if (kv_dtype == DType::F8_E4M3) {
    float s;
    std::memcpy(&s, scales, 4);
    const float* value = e4m3_values();
    for (int64_t i = 0; i < dim; ++i) out[i] = value[codes[i]] * s;
    return;
  }
  FT_CHECK(kv_dtype == DType::Q8_0);
  const auto* d_in = static_cast<const uint16_t*>(scales);
  for (int64_t b = 0; b * kQ8Block < dim; ++b) {
    const int64_t lo = b * kQ8Block, n = std::min(kQ8Block, dim - lo);
    const float d = f16_to_f32(d_in[b]);
    for (int64_t i = 0; i < n; ++i) out[lo + i] = static_cast<float>(static_cast<int8_t>(codes[lo + i])) * d;
  }
}

}  // namespace ft
