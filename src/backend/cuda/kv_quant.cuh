#pragma once
// Quantized KV pages on the device (--kv-cache-dtype fp8 / q8_0; quant/kv_quant.h holds the layout
// and the CPU's reference): a head row of D values is D one-byte codes (KvLayer::k / ::v) plus its
// scales (KvLayer::k_scale / ::v_scale, [n_pages, page_size, heads, sph]): fp8 one F32 scale a row
// (E4M3 codes), q8_0 one F16 scale per 32 values (int8 codes). The functions here give the CPU's
// codes, scales and values bit for bit (kv_write.cu quantizes, the attention kernels dequantize in
// registers; compress_kv.cu, attention_compressed.cu and attention_qsa.cu read single values through
// kv_page_value). Only included from src/backend/cuda/*.cu.
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/attention_args.h"
#include "backend/cuda/common.cuh"

namespace ft::cuda {

/** The value of an E4M3 (e4m3fn) code, as quant/fp8.cpp's table: the code's exponent and mantissa
 *  bits placed in a float's (an exact float, subnormal for exponent 0) scaled by 2^120, exact (the
 *  build keeps denormals: no -ftz). Code 0x7f / 0xff (NaN) is never written (kv_write saturates) and
 *  reads as 480 here. */
__device__ __forceinline__ float e4m3_value(uint32_t c) {
  return __uint_as_float(((c & 0x80u) << 24) | ((c & 0x7fu) << 20)) * 0x1p120f;
}

/** f32_to_e4m3 of quant/fp8.cpp: round to nearest, ties to the even code, |x| >= 448 saturates to
 *  +-448 (0x7e / 0xfe), NaN to 0x7f, the sign kept on zero. */
__device__ __forceinline__ uint8_t f32_to_e4m3_code(float x) {
  const uint32_t bits = __float_as_uint(x);
  const uint32_t sign = (bits >> 24) & 0x80u;
  if (isnan(x)) return 0x7f;
  const float a = fabsf(x);
  if (a >= 448.0f) return static_cast<uint8_t>(sign | 0x7eu);
  uint32_t code;
  if (a < 0x1p-6f) {  // subnormal codes m * 2^-9 (m = 8 is the first normal code, 0x08): exact scaling
    code = static_cast<uint32_t>(rintf(a * 512.0f));
  } else {  // a in [2^e, 2^(e+1)), e in -6 .. 8: 8 + m = a * 2^(3 - e) rounded (16: the next exponent's 8)
    const int e = static_cast<int>((__float_as_uint(a) >> 23) & 0xffu) - 127;
    const uint32_t r = static_cast<uint32_t>(rintf(a * __uint_as_float(static_cast<uint32_t>(127 + 3 - e) << 23)));
    code = (static_cast<uint32_t>(e + 7) << 3) + (r - 8);
  }
  return static_cast<uint8_t>(sign | code);
}

/** N consecutive values (N = 1, 2, 4, 8 or 16) of a quantized head row: dims d0 .. d0 + N - 1 of row
 *  `row` (the row's index in [n_pages * page_size * heads]) of a D-wide page of codes and its scales
 *  (sph a row). FORM kKvFp8 or kKvQ8; N divides 32 and d0 is a multiple of N (the run lies in one
 *  32-value block), and row * D + d0 is a multiple of N (aligned vector loads of the codes). */
template <int FORM, int N>
__device__ __forceinline__ void load_kv_quant(const void* codes, const void* scales, int64_t row, int D, int sph,
                                              int d0, float* v) {
  static_assert(FORM == kKvFp8 || FORM == kKvQ8, "load_kv_quant: a quantized form");
  static_assert(N == 1 || N == 2 || N == 4 || N == 8 || N == 16, "load_kv_quant: N");
  const uint8_t* p = static_cast<const uint8_t*>(codes) + row * D + d0;
  uint32_t w[(N + 3) / 4];
  if constexpr (N == 1) {
    w[0] = __ldg(p);
  } else if constexpr (N == 2) {
    w[0] = __ldg(reinterpret_cast<const unsigned short*>(p));
  } else if constexpr (N == 4) {
    w[0] = __ldg(reinterpret_cast<const unsigned int*>(p));
  } else if constexpr (N == 8) {
    const uint2 u = __ldg(reinterpret_cast<const uint2*>(p));
    w[0] = u.x, w[1] = u.y;
  } else {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    w[0] = u.x, w[1] = u.y, w[2] = u.z, w[3] = u.w;
  }
  float s;
  if constexpr (FORM == kKvFp8) s = __ldg(static_cast<const float*>(scales) + row);
  else s = __half2float(__ldg(static_cast<const __half*>(scales) + row * sph + d0 / 32));
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const uint32_t c = (w[i / 4] >> (8 * (i % 4))) & 0xffu;
    if constexpr (FORM == kKvFp8) v[i] = e4m3_value(c) * s;
    else v[i] = static_cast<float>(static_cast<int8_t>(c)) * s;
  }
}

/** One warp quantizes a head row of D values, x(d) for d < D, to codes[0, D) and its scales (fp8: the
 *  F32 at static_cast<float*>(scales)[row]; q8_0: the F16s at [row * sph, (row + 1) * sph)), as the
 *  CPU's kv_quantize_head: fp8 s = amax / 448 (1 for a zero row), code = e4m3(x * (1 / s)); q8_0 per
 *  32 values d = amax / 127, code = round-half-away(clamp(x * (1 / d), +-127)) (0 when d = 0), d
 *  stored as F16 (round to nearest even). Every lane of the warp calls it (warp-uniform row). */
template <int FORM, typename Load>
__device__ __forceinline__ void kv_quantize_row_warp(Load x, int D, uint8_t* codes, void* scales, int64_t row) {
  static_assert(FORM == kKvFp8 || FORM == kKvQ8, "kv_quantize_row_warp: a quantized form");
  const int lane = threadIdx.x & 31;
  if constexpr (FORM == kKvFp8) {
    float m = 0.0f;
    for (int d = lane; d < D; d += 32) m = fmaxf(m, fabsf(x(d)));
    m = warp_max(m);
    const float s = m > 0.0f ? m / 448.0f : 1.0f;
    const float inv = 1.0f / s;
    for (int d = lane; d < D; d += 32) codes[d] = f32_to_e4m3_code(x(d) * inv);
    if (lane == 0) static_cast<float*>(scales)[row] = s;
  } else {
    const int sph = (D + 31) / 32;
    for (int b = 0; b < sph; ++b) {
      const int d = b * 32 + lane;
      const float v = d < D ? x(d) : 0.0f;
      const float dq = warp_max(fabsf(v)) / 127.0f;
      const float id = dq != 0.0f ? 1.0f / dq : 0.0f;
      if (d < D)
        codes[d] = static_cast<uint8_t>(static_cast<int8_t>(static_cast<int>(roundf(fminf(fmaxf(v * id, -127.0f), 127.0f)))));
      if (lane == 0) static_cast<__half*>(scales)[row * sph + b] = __float2half_rn(dq);
    }
  }
}

/** KV pages [n_pages, page_size, heads, dim] as the kernels that read single values see them: P
 *  elements (FORM kKvFloat: F32 or BF16), or one-byte codes with their scales (kKvFp8 / kKvQ8). */
struct KvPages {
  const void* data;
  const void* scales;  // null for kKvFloat
  int heads, dim, sph;  // sph: scales a head row (kv_scales_per_head)
};

/** Column `c` (< heads * dim) of page slot `slot` (page * page_size + position in the page): the
 *  value as stored (P), or code * scale of its head row, as the CPU's kv_dequantize_head. */
template <int FORM, typename P>
__device__ __forceinline__ float kv_page_value(const KvPages& kv, int64_t slot, int c) {
  if constexpr (FORM == kKvFloat) {
    return to_f(static_cast<const P*>(kv.data)[slot * kv.heads * kv.dim + c]);
  } else {
    const int h = c / kv.dim;
    float v;
    load_kv_quant<FORM, 1>(kv.data, kv.scales, slot * kv.heads + h, kv.dim, kv.sph, c - h * kv.dim, &v);
    return v;
  }
}

}  // namespace ft::cuda

/** Runs the statement with `constexpr int F` (kKvFloat, kKvFp8 or kKvQ8) and `P` (the page element:
 *  F32 / BF16 for kKvFloat, else uint8_t) for pages of `form` (check_kv_pages' return) and `dtype`;
 *  kUnsupported naming op and arg for float pages of another dtype (FT_DISPATCH_PAGE). */
#define FT_DISPATCH_KV_FORM(op, arg, form, dtype, ...)        \
  do {                                                       \
    if ((form) == ::ft::cuda::kKvFp8) {                      \
      constexpr int F = ::ft::cuda::kKvFp8;                  \
      using P = uint8_t;                                     \
      __VA_ARGS__;                                           \
    } else if ((form) == ::ft::cuda::kKvQ8) {                \
      constexpr int F = ::ft::cuda::kKvQ8;                   \
      using P = uint8_t;                                     \
      __VA_ARGS__;                                           \
    } else {                                                 \
      FT_DISPATCH_PAGE(op, arg, dtype, {                     \
        constexpr int F = ::ft::cuda::kKvFloat;              \
        __VA_ARGS__;                                         \
      });                                                    \
    }                                                        \
  } while (0)
