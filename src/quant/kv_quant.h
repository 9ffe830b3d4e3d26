#pragma once
// Quantized KV cache rows (issue 39, --kv-cache-dtype fp8 / q8_0). Each (token, head) row of `dim`
// values is stored as one code a value plus its scales, the codes and the scales in two arrays
// (KvLayer::k / ::k_scale):
//   fp8:  codes F8_E4M3 (e4m3fn), one F32 scale a head a token: s = amax / 448 (1 for a zero row),
//         code = e4m3(x / s), x = e4m3_value(code) * s.
//   q8_0: llama.cpp's Q8_0 quantization in blocks of 32 along the head (the last one shorter when
//         dim is not a multiple of 32): d = amax / 127 stored as F16, code = round(x / d) as int8,
//         x = code * f16(d). Codes I8, scales F16.
#include <cstdint>

#include "tensor/dtype.h"

namespace ft {

/** The page element type of a KV dtype: F8_E4M3 -> F8_E4M3, Q8_0 -> I8, else the dtype itself. */
DType kv_code_dtype(DType kv_dtype);

/** The KV dtype whose pages hold `code_dtype` (the inverse of kv_code_dtype): I8 -> Q8_0, else itself. */
DType kv_dtype_of_codes(DType code_dtype);

/** True when `kv_dtype` (KvCacheConfig::dtype) is stored as codes + scales (F8_E4M3 or Q8_0). */
bool kv_is_quantized(DType kv_dtype);

/** The scale type of a quantized KV dtype (F32 for F8_E4M3, F16 for Q8_0). kInternal otherwise. */
DType kv_scale_dtype(DType kv_dtype);

/** Scales of one head row of `dim` values: 1 for F8_E4M3, ceil(dim / 32) for Q8_0, 0 unquantized. */
int64_t kv_scales_per_head(DType kv_dtype, int64_t dim);

/** Bytes of `heads` head rows of `dim` values, scales included (F32 4, BF16/F16 2, F8_E4M3 1 + 4 /
 *  dim, Q8_0 1 + 2 / 32 a value). kInvalidArgument for another dtype. */
int64_t kv_row_bytes(DType kv_dtype, int64_t heads, int64_t dim);

/** Quantizes one head row x[dim] to `codes` (dim bytes) and `scales` (kv_scales_per_head values of
 *  kv_scale_dtype). `kv_dtype` is F8_E4M3 or Q8_0 (kInternal otherwise). Non-finite inputs are not
 *  expected (activations); they saturate. */
void kv_quantize_head(DType kv_dtype, const float* x, int64_t dim, uint8_t* codes, void* scales);

/** The inverse: out[dim] from a head row's codes and scales. */
void kv_dequantize_head(DType kv_dtype, const uint8_t* codes, const void* scales, int64_t dim, float* out);

}  // namespace ft
