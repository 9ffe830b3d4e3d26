#pragma once
// Reference (CPU, scalar-exact) dequantization of every GGUF block type to float32, and
// round-to-nearest quantizers for the types tests and tools write. Bit-exact with ggml's
// `to_float` (ggml-quants.c) and gguf-py `gguf.quants.dequantize`.
#include <cstdint>

#include "tensor/dtype.h"

namespace ft {

/** Dequantizes `n` elements of type `type` from `src` (packed blocks, as stored) into `dst` (float32).
 *  n must be a multiple of the block size. Throws ft::Error(kUnsupported) for a type without a
 *  dequantizer (Q8_1/Q8_K intermediate types), kInvalidArgument for a bad n. */
void dequantize_row(DType type, const void* src, float* dst, int64_t n);

/** True if dequantize_row supports `type`. */
bool can_dequantize(DType type);

/** Quantizes `n` floats into `type` blocks at `dst` (dtype_bytes(type, n) bytes), round to nearest.
 *  Supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K. Throws ft::Error(kUnsupported) for other types. */
void quantize_row(DType type, const float* src, void* dst, int64_t n);

}  // namespace ft
