#pragma once
// Device decoders (Dq<T>, dequant.cuh's chunk interface) of the 1- and 2-bit "0" types, the ternary
// types, NVFP4 and FreeToken's FP8 storage forms:
//   Q1_0   18 B / 128 elements: fp16 d, 1 bit each: set -> +d, clear -> -d        (chunk: 4 of qs's bytes)
//   Q2_0   18 B / 64 elements: fp16 d, 2-bit code q -> (q - 1) * d                 (chunk: 8 of qs's bytes)
//   TQ1_0  54 B / 256: 5 trits in each of qs[48] (4 in each of qh[4]), fp16 d; trit t -> (t - 1) * d
//   TQ2_0  66 B / 256: 2-bit codes in qs[64], fp16 d; q -> (q - 1) * d
//   NVFP4  36 B / 64: 4 UE4M3 scales (one per 16 values), 32 bytes of E2M1 codes
//   F8_E4M3_B32 36 B / 32, F8_E4M3_B16 20 B / 16: float32 d, E4M3 codes; x = e4m3(q) * d
//   NVFP4_G64 40 B / 64, NVFP4_G16 13 B / 16 (quant/nvfp4.h, ModelOpt / compressed-tensors NVFP4): float32
//     global scale g, one E4M3 scale s per 16 values, E2M1 codes (value 2j in the low nibble of byte j);
//     x = e2m1(q) * (e4m3(s) * g), or e2m1(q) * (e4m3(s) / -g) when g's sign bit is set
// Every type's chunk is 32 elements (one 16-element block for F8_E4M3_B16 and NVFP4_G16). Each load() performs the
// CPU reference's arithmetic per element (quant/legacy.cpp dequant_q1_0 / q2_0, quant/ternary_fp4.cpp
// dequant_tq1_0 / tq2_0 / nvfp4 after ggml-quants.c and ggml-impl.h's ggml_ue4m3_to_fp32, quant/fp8.cpp
// after the OCP OFP8 spec rev 1.0, quant/nvfp4.cpp dequant_nvfp4_g64 / g16), so CUDA values equal the CPU's bit for bit. Block layouts:
// quant/blocks.h (ggml-common.h block_q1_0, block_q2_0, block_tq1_0, block_tq2_0, block_nvfp4).
#include <cstdint>

#include "backend/cuda/dequant.cuh"

namespace ft::cuda {
namespace lowbit {

/** Trit n (0 = most significant) of a TQ1_0 byte: (uint8(byte * 3^n) * 3) >> 8, as (trit - 1) * d. */
__device__ __forceinline__ float trit(int byte, int pow3, float d) {
  const int q = (byte * pow3) & 0xff;
  return i2f(((q * 3) >> 8) - 1) * d;
}
__device__ __forceinline__ int pow3(int n) { return n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81; }

/** UE4M3 scale byte -> value / 2 (bit 7 ignored; 0x00 and 0x7f decode to 0, as in ggml). Exact:
 *  m * 2^-10 for exponent 0, else (8 + m) * 2^(e - 11). */
__device__ __forceinline__ float ue4m3_half(int x) {
  if (x == 0 || x == 0x7f) return 0.0f;
  const int e = (x >> 3) & 15, m = x & 7;
  return e == 0 ? i2f(m) * 0x1p-10f : i2f(8 + m) * __uint_as_float(static_cast<uint32_t>(e - 11 + 127) << 23);
}

/** E4M3 (e4m3fn) code -> float, exactly (quant/fp8.h e4m3_to_f32): normals by their bits, subnormals
 *  m * 2^-9, NaN for S.1111.111, the sign applied last (so 0x80 is -0). */
__device__ __forceinline__ float e4m3(int c) {
  const int e = (c >> 3) & 15, m = c & 7;
  float mag = e == 0 ? i2f(m) * 0x1p-9f
                     : __uint_as_float(static_cast<uint32_t>(e + 120) << 23 | static_cast<uint32_t>(m) << 20);
  if ((c & 0x7f) == 0x7f) mag = __uint_as_float(0x7fc00000u);
  return (c & 0x80) ? -mag : mag;
}

/** v[0..kB) = e4m3(qs[k]) * d for one FP8 block (float32 d, then kB codes) at b, which is 4-byte
 *  aligned (blocks of 20 / 36 bytes from 4-byte aligned rows): word loads, not bytes. */
template <int kB>
__device__ __forceinline__ void fp8_block(const uint8_t* b, float* v) {
  const uint32_t* w4 = reinterpret_cast<const uint32_t*>(b);
  const float d = __uint_as_float(w4[0]);
FT_UNROLL
  for (int k = 0; k < kB; k += 4) {
    const uint32_t w = w4[1 + k / 4];
FT_UNROLL
    for (int i = 0; i < 4; ++i) v[k + i] = e4m3(static_cast<int>((w >> (8 * i)) & 0xff)) * d;
  }
}

/** E2M1 code (low 4 bits of q) -> float, exactly as quant/nvfp4.cpp's table: 0, 0.5, 1, 1.5, 2, 3, 4, 6,
 *  then the same negated (code 8 is -0.0, which kv_mxfp4 alone would give as +0). */
__device__ __forceinline__ float e2m1(int q) {
  const float m = kv_mxfp4(q & 7) * 0.5f;
  return (q & 8) ? -m : m;
}

/** The per-16-values scale of an NVFP4_G64 / G16 block with E4M3 scale byte s and global scale bits
 *  gbits: e4m3(s) * g (ModelOpt), or e4m3(s) / -g where g's sign bit is set (compressed-tensors),
 *  one IEEE rounding each (nvcc's default -prec-div=true), as quant/nvfp4.cpp forms it. */
__device__ __forceinline__ float nvfp4_scale(int s, uint32_t gbits) {
  const float e = e4m3(s), g = __uint_as_float(gbits);
  return (gbits >> 31) ? e / -g : e * g;
}

/** v[0..16) = e2m1(q) * d for the 8 code bytes at q (low nibble first). */
__device__ __forceinline__ void nvfp4_16(const uint8_t* q, float d, float* v) {
FT_UNROLL
  for (int k = 0; k < 8; k += 4) {
    const uint32_t w = ld_u32_bytes(q + k);
FT_UNROLL
    for (int i = 0; i < 4; ++i) {
      const int b = static_cast<int>((w >> (8 * i)) & 0xff);
      v[2 * (k + i)] = e2m1(b & 15) * d;
      v[2 * (k + i) + 1] = e2m1(b >> 4) * d;
    }
  }
}

}  // namespace lowbit

template <>
struct Dq<DType::Q1_0> {
  static constexpr int kBlock = 128, kBytes = 18, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 2) * kBytes;
    const float d = ld_f16(b), neg_d = -d;
    const uint32_t bits = ld_u32_bytes(b + 2 + 4 * (c & 3));  // elements 32 (c % 4) .. + 31
FT_UNROLL
    for (int j = 0; j < 32; ++j) v[j] = (bits >> j) & 1 ? d : neg_d;
  }
};

template <>
struct Dq<DType::Q2_0> {
  static constexpr int kBlock = 64, kBytes = 18, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 1) * kBytes;
    const float d = ld_f16(b);
    const uint8_t* q = b + 2 + 8 * (c & 1);  // elements 32 (c % 2) .. + 31, 4 a byte
FT_UNROLL
    for (int j = 0; j < 32; ++j) v[j] = i2f(((q[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
  }
};

template <>
struct Dq<DType::TQ1_0> {
  static constexpr int kBlock = 256, kBytes = 54, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int s = static_cast<int>(c & 7);
    const float d = ld_f16(b + 52);
    if (s < 5) {  // elements 32 s + m: trit s of qs[m]
      const int p = lowbit::pow3(s);
FT_UNROLL
      for (int m = 0; m < 32; ++m) v[m] = lowbit::trit(b[m], p, d);
    } else if (s < 7) {  // elements 160 + 16 n + m: trit n of qs[32 + m], n = 2 (s - 5) and the next
      const int n = 2 * (s - 5), p0 = lowbit::pow3(n), p1 = lowbit::pow3(n + 1);
FT_UNROLL
      for (int m = 0; m < 16; ++m) {
        v[m] = lowbit::trit(b[32 + m], p0, d);
        v[16 + m] = lowbit::trit(b[32 + m], p1, d);
      }
    } else {  // elements 224..239: trit 4 of qs[32 + m]; 240 + 4 n + m: trit n of qh[m]
FT_UNROLL
      for (int m = 0; m < 16; ++m) v[m] = lowbit::trit(b[32 + m], 81, d);
FT_UNROLL
      for (int n = 0; n < 4; ++n)
FT_UNROLL
        for (int m = 0; m < 4; ++m) v[16 + 4 * n + m] = lowbit::trit(b[48 + m], lowbit::pow3(n), d);
    }
  }
};

template <>
struct Dq<DType::TQ2_0> {
  static constexpr int kBlock = 256, kBytes = 66, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int s = static_cast<int>(c & 7);
    const float d = ld_f16(b + 64);
    const uint8_t* q = b + 32 * (s >> 2);  // elements 128 (s / 4) + 32 (s % 4) + m: bits 2 (s % 4) of q[m]
    const int shift = 2 * (s & 3);
FT_UNROLL
    for (int m = 0; m < 32; ++m) v[m] = i2f(((q[m] >> shift) & 3) - 1) * d;
  }
};

template <>
struct Dq<DType::NVFP4> {
  static constexpr int kBlock = 64, kBytes = 36, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 1) * kBytes;
FT_UNROLL
    for (int k = 0; k < 2; ++k) {  // sub-blocks 2 (c % 2) + k of 16 values, each with its own scale
      const int s = 2 * static_cast<int>(c & 1) + k;
      const float d = lowbit::ue4m3_half(b[s]);
      const uint8_t* q = b + 4 + 8 * s;
FT_UNROLL
      for (int j = 0; j < 8; ++j) {
        v[16 * k + j] = kv_mxfp4(q[j] & 15) * d;
        v[16 * k + j + 8] = kv_mxfp4(q[j] >> 4) * d;
      }
    }
  }
};

template <>
struct Dq<DType::F8_E4M3_B32> {
  static constexpr int kBlock = 32, kBytes = 36, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) { lowbit::fp8_block<32>(row + c * kBytes, v); }
};

template <>
struct Dq<DType::F8_E4M3_B16> {
  static constexpr int kBlock = 16, kBytes = 20, kChunk = 16;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) { lowbit::fp8_block<16>(row + c * kBytes, v); }
};

/** NVFP4_G64: chunk c is values 32 (c % 2) .. + 31 of block c / 2, sub-blocks 2 (c % 2) and the next. */
template <>
struct Dq<DType::NVFP4_G64> {
  static constexpr int kBlock = 64, kBytes = 40, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 1) * kBytes;
    const uint32_t g = ld_u32_bytes(b);
FT_UNROLL
    for (int k = 0; k < 2; ++k) {
      const int s = 2 * static_cast<int>(c & 1) + k;
      lowbit::nvfp4_16(b + 8 + 8 * s, lowbit::nvfp4_scale(b[4 + s], g), v + 16 * k);
    }
  }
};

template <>
struct Dq<DType::NVFP4_G16> {
  static constexpr int kBlock = 16, kBytes = 13, kChunk = 16;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + c * kBytes;
    lowbit::nvfp4_16(b + 5, lowbit::nvfp4_scale(b[4], ld_u32_bytes(b)), v);
  }
};

}  // namespace ft::cuda
