#pragma once
// Reference (CPU, scalar-exact) dequantization of every GGUF block type to float32, and
// round-to-nearest quantizers for the types tests and tools write. Bit-exact with ggml's
// `to_float` (ggml-quants.c) and gguf-py `gguf.quants.dequantize`.
#include <cstdint>

#include "tensor/dtype.h"

namespace ft {

/** Dequantizes `n` elements of type `type` from `src` (packed blocks, as stored; any alignment)
 *  into `dst` (float32, n values). Supports every GGUF block type except the intermediate Q8_1/Q8_K,
 *  plus the element types F32, F16, BF16, F64, I8..I64, U8, BOOL, F8_E4M3, F8_E5M2, and FreeToken's
 *  F8_E4M3_B32 / F8_E4M3_B16 (quant/fp8.h) and NVFP4_G64 / NVFP4_G16 (quant/nvfp4.h).
 *  n must be a non-negative multiple of the block size (n = 0 does nothing). Throws
 *  ft::Error(kUnsupported) for a type without a dequantizer, kInvalidArgument for a bad n or a
 *  null buffer. Kernels: src/quant/{plain,legacy,k_quants,ternary_fp4,iq_quants}.cpp. */
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

/** True if dequantize_row supports `type`. */
bool can_dequantize(DType type);

/** Quantizes `n` floats into `type` blocks at `dst` (dtype_bytes(type, n) bytes), round to nearest.
 *  Supported: F32, F16, BF16, Q8_0, Q4_0 (ggml's reference quantizers, same bytes), Q4_K (own
 *  round-to-nearest scheme with scales rounded up; |error| <= half a sub-block step), F8_E4M3_B32 and
 *  F8_E4M3_B16 (per block: d = amax / 448, codes f32_to_e4m3(x / d), quant/fp8.h). Throws
 *  ft::Error(kUnsupported) for other types, kInvalidArgument for a bad n. */
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace ft
