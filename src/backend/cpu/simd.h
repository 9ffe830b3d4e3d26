#pragma once
// SIMD inner loops of the CPU backend with run-time dispatch: AVX-512 (F, BW, VL), AVX2+FMA+F16C, or scalar,
// chosen once from __builtin_cpu_supports (ft_core is compiled for x86-64-v2; the fast paths use
// target attributes); the environment variable FT_CPU_SIMD=scalar|avx2 caps the choice. Every
// function gives the same result for a given input on a given machine, whatever the surrounding
// batch, so batched and single-sequence runs agree bit for bit. simd.cpp holds the level and the
// float dot tiles, block_rows.cpp the stored weight rows (to_f32, dot_rows_stored).
#include <cstdint>

#include "tensor/dtype.h"

namespace ft::cpu {

/** Name of the selected instruction set: "avx512", "avx2" or "scalar". */
const char* simd_level();

/** y[t * ldy + r] = sum_i x[t * ldx + i] * w[r * ldw + i] for t < tokens, r < rows (both 1..4), fp32.
 *  Register-blocked: x and w loads are shared across the tile. Each element's result is the same
 *  whatever the tile size (one accumulator per element, fixed reduction). */
void dot_tile(const float* x, int64_t ldx, int tokens, const float* w, int64_t ldw, int rows, int64_t n, float* y,
              int64_t ldy);

/** y[t * ldy + r] = sum_i x[t * ldx + i] * w[r * ldw + i] for t < tokens, r < rows (any counts >= 0),
 *  fp32: a GEMM block (x [tokens, n] times w [rows, n]^T) run as register-blocked dot_tile
 *  kernels over 4 x 4 blocks, so every element has the bits dot_tile / dot_rows give it alone
 *  (the CPU backend's matmul and the CPU expert executor share it). */
void gemm_nt(const float* x, int64_t ldx, int64_t tokens, const float* w, int64_t ldw, int64_t rows, int64_t n,
             float* y, int64_t ldy);

/** Whether gemm_nt_bf16 runs here: AVX-512 BF16 (vdpbf16ps) at the AVX-512 level. */
bool has_bf16_dot();

/** gemm_nt with BF16 x and w (gemm_bf16.cpp): y[t * ldy + r] = sum_i x[t * ldx + i] * w[r * ldw + i],
 *  products exact in fp32, summed in pairs into one fp32 accumulator per element (vdpbf16ps) with a
 *  fixed final reduction: an element's bits do not depend on the block's size. Throws
 *  kUnsupported where has_bf16_dot() is false. */
void gemm_nt_bf16(const uint16_t* x, int64_t ldx, int64_t tokens, const uint16_t* w, int64_t ldw, int64_t rows,
                  int64_t n, float* y, int64_t ldy);

/** dst[i] = src[i] rounded to BF16 (nearest even; tensor/half.h f32_to_bf16). */
void to_bf16(const float* src, uint16_t* dst, int64_t n);

/** out[r] = sum_i x[i] * w[r * ldw + i] for r < rows (rows <= 4): dot_tile with one token. */
void dot_rows(const float* x, const float* w, int64_t ldw, int rows, int64_t n, float* out);

/** Converts `n` stored elements of `type` at `src` to float32: F32 copy, F16/BF16 exact widening,
 *  block types through quant/ dequantize_row (Q4_K, Q6_K, Q8_0, MXFP4, F8_E4M3_B32/B16 and NVFP4_G64/G16
 *  through SIMD decoders that give the same floats). Throws kUnsupported for a type without a dequantizer. */
void to_f32(DType type, const void* src, float* dst, int64_t n);

/** Whether dot_rows_stored has a fused kernel for `type` on this machine's level (AVX-512 and AVX2:
 *  BF16, Q4_K, Q6_K, Q8_0, MXFP4, F8_E4M3_B32, F8_E4M3_B16, NVFP4_G64, NVFP4_G16; none for scalar). */
bool has_fused_dot(DType type);

/** out[r] = sum_i x[i] * w_r[i] for r < rows (1..4), w_r being row r of n elements of `type` stored
 *  at w + r * row_bytes: each SIMD chunk is decoded in registers, and the result equals
 *  to_f32 of the rows followed by dot_rows bit for bit. Throws ft::Error: kUnsupported where
 *  has_fused_dot(type) is false, kInvalidArgument for a row that is not whole blocks. */
void dot_rows_stored(DType type, const float* x, const void* w, int64_t row_bytes, int rows, int64_t n, float* out);

/** y[i] += a * x[i]. */
void axpy(float a, const float* x, float* y, int64_t n);

}  // namespace ft::cpu
