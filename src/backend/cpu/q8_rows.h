#pragma once
// Integer-dot decode kernels of the CPU expert executor: an activation row in an int8 form (Q8Row)
// dotted with Q4_K, Q6_K or MXFP4 weight rows as stored, with AVX-512 VNNI. The fp32 path (simd.h,
// dot_rows_stored) decodes every weight element to a float, which bounds it by compute; here the
// 4- or 6-bit values meet int8 activations in 16-bit products (vpmaddubsw) summed under the
// sub-block scales into int32 (vpdpwssd), as llama.cpp's Q4_K / Q6_K x Q8_K dots do (ggml-cpu
// quants.c ggml_vec_dot_q4_K_q8_K, ggml_vec_dot_q6_K_q8_K), with two int8 terms per activation
// instead of one, as the CUDA backend's q8_act.cuh has (which scales per 32 elements; here per
// 256): x ~= d * (q1 + q2 / 254), ~15 bits of the block's largest magnitude. MXFP4 (32-element
// blocks with a power-of-two scale each; ggml-cpu ggml_vec_dot_mxfp4_q8_0 dots them with int8 Q8_0
// activations) meets the same per-256 form: its E2M1 values times two are integers in [-12, 12]
// (vpshufb lookup), their int8 dots are summed per 32-element block and scaled by the block's
// scale times the activation block's d; a row of gpt-oss (2880 = 11 * 256 + 64) ends in a shorter
// activation block, which the form allows for any multiple of 32.
#include <cstdint>

#include "tensor/dtype.h"

namespace ft::cpu {

/** Bytes of the int8 form of n activations (n % 32 == 0): q1 and q2 int8 [n], d F32 [ceil(n / 256)],
 *  sums F32 [n / 32], sums16 F32 [n / 16]. */
int64_t q8_row_bytes(int64_t n);

/** View of one quantized activation row inside a buffer of q8_row_bytes(n) bytes, in element
 *  order. Blocks of 256 elements, the last one n - 256 * floor((n - 1) / 256) (32 .. 256). Per block
 *  b: scale d[b]; sums16[16b + g] = the sum of elements 16g .. 16g + 15
 *  of the block as quantized, d * (q1 + q2 / 254) (Q6_K's scale groups); sums[8b + j] = sums16[16b
 *  + 2j] + sums16[16b + 2j + 1] (Q4_K's sub-blocks of 32). */
struct Q8Row {
  const int8_t* q1;
  const int8_t* q2;
  const float* d;
  const float* sums;
  const float* sums16;
  int64_t n;
};

/** Quantizes x[0, n) (n a positive multiple of 32) into `buf` (q8_row_bytes(n) bytes, 4-byte
 *  aligned) and returns its view: d = max |x| / 127 over each block (256 elements, the last maybe
 *  fewer), q1 = round(x / d), q2 = round((x -
 *  d q1) * 254 / d) clamped to [-127, 127]. A block of zeros gives d = 0 and zero terms; a block
 *  holding a NaN or an infinity gives d = NaN and NaN sums (zero terms), so a dot with it is NaN, as
 *  the fp32 dot would be; a block whose 254 / d overflows (max |x| below ~1e-34) keeps q1 alone
 *  (q2 = 0). Throws kInvalidArgument for n. */
Q8Row quantize_q8_row(const float* x, int64_t n, void* buf);

/** Whether dot_rows_q8 has a kernel for weights of `type` on this machine: Q4_K, Q6_K and MXFP4
 *  with AVX-512 (F, BW, VL) and VNNI, unless FT_CPU_SIMD caps the level below AVX-512. */
bool has_q8_dot(DType type);

/** has_q8_dot(type) for rows of n elements: n also a positive multiple of 32 (quantize_q8_row) and of
 *  the type's block (256 for Q4_K and Q6_K, 32 for MXFP4). The predicate the expert executor asks
 *  (CpuExpertExecutor::int8_weight, with n = the weight's K). */
bool has_q8_dot(DType type, int64_t n);

/** out[r] = sum_i x_i w_r[i] for r < rows (1..4), w_r = row r of x.n elements of `type` stored at
 *  w + r * row_bytes, x in int8 form. Equals the exact sum of dequantized weight times quantized
 *  activation up to float rounding (the int8 products and their scaled sums are exact in int32; two
 *  float conversions per block, one per term; MXFP4: per 32-element weight block, scaled by
 *  d_x * 2^(e - 128), which overflows float only for scale bytes near 254). Throws kUnsupported where
 *  has_q8_dot(type) is false; FT_CHECK fails where has_q8_dot(type, x.n) is (an empty x, or one that
 *  is not whole blocks of the type) or for rows shorter than x. */
void dot_rows_q8(DType type, const Q8Row& x, const void* w, int64_t row_bytes, int rows, float* out);

/** out[t * ldo + r] = dot_rows_q8's result for x = xs[t] and row r, for t < tokens and r < rows (any
 *  counts), the same bits: a GEMM block on int8 activations. Q4_K and MXFP4 rows are unpacked once
 *  per block (MXFP4: per 4 blocks) for up to 4 tokens at a time; Q6_K runs token by token. Throws as dot_rows_q8; every
 *  xs[t] must have the same n. */
void gemm_q8(DType type, const Q8Row* xs, int64_t tokens, const void* w, int64_t row_bytes, int64_t rows, float* out,
             int64_t ldo);

}  // namespace ft::cpu
