// Stored weight rows on the CPU: to_f32 (every stored type to float32) and the fused decode + dot
// (dot_rows_stored) for BF16, the hot GGUF block types (Q4_K, Q6_K, Q8_0, MXFP4) and FreeToken's FP8
// and NVFP4 checkpoint forms (F8_E4M3_B32/B16, NVFP4_G64/G16), on the AVX-512 and AVX2 levels. Decoding
// follows quant/'s scalar dequantizers operation for operation, so the floats are the same bit for
// bit (this file is compiled with -ffp-contract=off).
#include "backend/cpu/simd.h"

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "backend/cpu/simd_level.h"
#include "quant/blocks.h"
#include "quant/quant.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft::cpu {
namespace {

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = f16_to_f32(s[i]);
}

// ---- BF16 rows ----

__attribute__((target("avx512f"))) inline __m512 widen_bf16_16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx2"))) inline __m256 widen_bf16_8(__m128i h) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

__attribute__((target("avx512f,avx2"))) void bf16_to_f32_avx512(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(d + i, widen_bf16_16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i))));
  for (; i < n; ++i) d[i] = bf16_to_f32(s[i]);
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, widen_bf16_8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = bf16_to_f32(s[i]);
}

// ---- GGUF block rows. Each block type has a kernel class: prep() forms a block's scales; group16()
// (AVX-512) and group8() (AVX2) decode group g of its elements, kGroup16 vectors of 16 or kGroup8 of
// 8 in element order (a group is what one load of quant bytes serves), following
// quant/'s scalar dequantizer (ggml-quants.c dequantize_row_*) operation for operation: Q4_K
// y = (d * sc) * q - (dmin * m), Q6_K y = (d * sc) * q, Q8_0 y = q * d, MXFP4 y = kv[q] * d. This
// file is compiled with -ffp-contract=off, so a product and a difference stay two roundings and
// the floats equal quant::dequantize_row's bit for bit (tested on every level). One decoder and one fused dot per
// SIMD level serve every kernel class. The expert executor and the float matmul decode every
// weight row through them: the scalar Q4_K decoder cost 3.4x the dot product itself there (perf, CPU
// strategy, q4_k), and the scalar Q6_K path ran at 0.7 GB/s per core. ----

/** The f16 value at byte 2k of a block (Q8_0: d, k = 0; Q4_K: d, dmin, k = 0, 1; Q6_K: d, k = 104). */
inline float block_f16(const uint8_t* blk, int k) {
  uint16_t h;
  std::memcpy(&h, blk + 2 * k, 2);
  return f16_to_f32(h);
}

/** Q8_0: blocks of 32, y = q * d. */
struct Q8_0Rows {
  static constexpr int64_t kElems = 32, kBytes = sizeof(quant::BlockQ8_0);
  struct Prep {
    float d;
  };
  static Prep prep(const uint8_t* blk) { return {block_f16(blk, 0)}; }
  static const uint8_t* qs(const uint8_t* blk) { return blk + offsetof(quant::BlockQ8_0, qs); }
  static constexpr int kGroup16 = 2, kGroup8 = 4;  // a group is one block
  __attribute__((target("avx512f"))) static void group16(const uint8_t* blk, const Prep& p, int, __m512* out) {
    for (int c = 0; c < 2; ++c) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs(blk) + 16 * c));
      out[c] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), _mm512_set1_ps(p.d));
    }
  }
  __attribute__((target("avx2"))) static void group8(const uint8_t* blk, const Prep& p, int, __m256* out) {
    for (int c = 0; c < 4; ++c) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs(blk) + 8 * c));
      out[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), _mm256_set1_ps(p.d));
    }
  }
};

/** Q4_K: blocks of 256 in 8 sub-blocks of 32 with 6-bit scales and mins. Elements 64j .. 64j + 31
 *  are the low nibbles of qs[32j .. 32j + 31] (sub-block 2j), elements 64j + 32 .. 64j + 63 their
 *  high nibbles (sub-block 2j + 1). */
struct Q4_KRows {
  static constexpr int64_t kElems = 256, kBytes = sizeof(quant::BlockQ4_K);
  /** ds[j] = d * sc[j], dm[j] = dmin * m[j], one rounding each, as the scalar dequantizer forms them. */
  struct Prep {
    float ds[8], dm[8];
  };
  /** The 6-bit scales and mins unpacked (unpack_q4k_scales, simd_level.h), then widened and scaled
   *  in one vector multiply each. */
  __attribute__((target("avx2"))) static Prep prep(const uint8_t* blk) {
    const Q4KScales u = unpack_q4k_scales(blk + offsetof(quant::BlockQ4_K, scales));
    Prep p;
    _mm256_storeu_ps(p.ds, _mm256_mul_ps(_mm256_set1_ps(block_f16(blk, 0)), widen(u.sc_lo, u.sc_hi)));
    _mm256_storeu_ps(p.dm, _mm256_mul_ps(_mm256_set1_ps(block_f16(blk, 1)), widen(u.m_lo, u.m_hi)));
    return p;
  }
  /** The 8 bytes lo, hi (little-endian) widened to floats. */
  __attribute__((target("avx2"))) static __m256 widen(uint32_t lo, uint32_t hi) {
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, static_cast<int>(hi), static_cast<int>(lo))));
  }
  static constexpr int kGroup16 = 4, kGroup8 = 8;  // a group is 64 elements: sub-blocks 2j, 2j + 1
  /** The 4-bit values of group j's quarters (16 elements each): low nibbles of qs[32j ..], of
   *  qs[32j + 16 ..], then the high nibbles of both. */
  __attribute__((target("avx2"))) static void quarters(const uint8_t* blk, int j, __m128i q[4]) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + offsetof(quant::BlockQ4_K, qs) + 32 * j));
    const __m256i lo = _mm256_and_si256(qb, low), hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), low);
    q[0] = _mm256_castsi256_si128(lo), q[1] = _mm256_extracti128_si256(lo, 1);
    q[2] = _mm256_castsi256_si128(hi), q[3] = _mm256_extracti128_si256(hi, 1);
  }
  /** Each sub-block's 16 possible values, formed exactly as group8 forms each one; an element is
   *  then a vpermps lookup instead of convert, multiply and subtract (~10% faster). */
  __attribute__((target("avx512f,avx2"))) static void group16(const uint8_t* blk, const Prep& p, int j, __m512* out) {
    const __m512 levels = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512 table[2];
    for (int s = 0; s < 2; ++s)
      table[s] = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(p.ds[2 * j + s]), levels), _mm512_set1_ps(p.dm[2 * j + s]));
    __m128i q[4];
    quarters(blk, j, q);
    for (int i = 0; i < 4; ++i) out[i] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(q[i]), table[i / 2]);
  }
  __attribute__((target("avx2"))) static void group8(const uint8_t* blk, const Prep& p, int j, __m256* out) {
    __m128i q[4];
    quarters(blk, j, q);
    for (int i = 0; i < 4; ++i) {
      const __m256 d = _mm256_set1_ps(p.ds[2 * j + i / 2]), m = _mm256_set1_ps(p.dm[2 * j + i / 2]);
      for (int h = 0; h < 2; ++h) {
        const __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(h ? _mm_srli_si128(q[i], 8) : q[i]));
        out[2 * i + h] = _mm256_sub_ps(_mm256_mul_ps(d, v), m);
      }
    }
  }
};

/** Q6_K (ggml-quants.c dequantize_row_q6_K): blocks of 256 in two halves of 128; in half h, the 16
 *  elements 128h + 16c .. + 15 (c = 0..7) have scale index 8h + c and 6-bit values from a nibble of
 *  ql (low nibbles of ql[64h + 32(q & 1) + 16s ..] for quarter q = c / 2 < 2, high nibbles for
 *  q >= 2, s = c % 2) and 2 bits of qh[32h + 16s ..] (bits 2q, 2q + 1), minus 32; y = (d * sc) * q. */
struct Q6_KRows {
  static constexpr int64_t kElems = 256, kBytes = sizeof(quant::BlockQ6_K);
  /** ds[i] = d * scale[i], one rounding each. */
  struct Prep {
    float ds[16];
  };
  __attribute__((target("avx2"))) static Prep prep(const uint8_t* blk) {
    const __m256 d = _mm256_set1_ps(block_f16(blk, offsetof(quant::BlockQ6_K, d) / 2));
    const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + offsetof(quant::BlockQ6_K, scales)));
    Prep p;
    _mm256_storeu_ps(p.ds, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sc))));
    _mm256_storeu_ps(p.ds + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sc, 8)))));
    return p;
  }
  static constexpr int kGroup16 = 1, kGroup8 = 2;  // a group is 16 elements
  /** The values q - 32 (int8) of elements 16c .. 16c + 15 (c = 0..15 over the whole block). */
  __attribute__((target("avx2"))) static __m128i values(const uint8_t* blk, int c) {
    const int half = c / 8, q = (c % 8) / 2, s = c % 2;
    __m128i lo = _mm_loadu_si128(
        reinterpret_cast<const __m128i*>(blk + offsetof(quant::BlockQ6_K, ql) + 64 * half + 32 * (q & 1) + 16 * s));
    if (q >= 2) lo = _mm_srli_epi16(lo, 4);
    const __m128i hb =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + offsetof(quant::BlockQ6_K, qh) + 32 * half + 16 * s));
    const __m128i hi = _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(hb, _mm_cvtsi32_si128(2 * q)), _mm_set1_epi8(3)), 4);
    return _mm_sub_epi8(_mm_or_si128(_mm_and_si128(lo, _mm_set1_epi8(0x0f)), hi), _mm_set1_epi8(32));
  }
  __attribute__((target("avx512f,avx2"))) static void group16(const uint8_t* blk, const Prep& p, int c, __m512* out) {
    out[0] = _mm512_mul_ps(_mm512_set1_ps(p.ds[c]), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(values(blk, c))));
  }
  __attribute__((target("avx2"))) static void group8(const uint8_t* blk, const Prep& p, int c, __m256* out) {
    const __m128i q = values(blk, c);
    const __m256 d = _mm256_set1_ps(p.ds[c]);
    out[0] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    out[1] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q, 8))));
  }
};

/** E8M0 exponent byte -> 2^(e - 127) / 2, as quant/'s MXFP4 dequantizer (ggml-impl.h
 *  ggml_e8m0_to_fp32_half) forms it: the half compensates kvalues_mxfp4 being E2M1 times two. */
inline float e8m0_half(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

/** MXFP4 (ggml block_mxfp4; OCP MX v1.0 E2M1 elements with an E8M0 scale): blocks of 32, scale byte
 *  e then 16 bytes, element j in the low nibble of qs[j] and element j + 16 in its high nibble;
 *  y = kvalues_mxfp4[q] * e8m0_half(e), one rounding (exact: the table holds small integers and
 *  the scale is a power of two). */
struct MXFP4Rows {
  static constexpr int64_t kElems = 32, kBytes = sizeof(quant::BlockMXFP4);
  struct Prep {
    float d;
  };
  static Prep prep(const uint8_t* blk) { return {e8m0_half(blk[0])}; }
  static constexpr int kGroup16 = 2, kGroup8 = 4;  // a group is one block
  /** The 16 low and the 16 high nibbles of the block's quant bytes. */
  __attribute__((target("avx2"))) static void nibbles(const uint8_t* blk, __m128i& lo, __m128i& hi) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + offsetof(quant::BlockMXFP4, qs)));
    lo = _mm_and_si128(q, _mm_set1_epi8(0x0f));
    hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(0x0f));
  }
  /** The block's 16 possible values kvalues_mxfp4[c] * d (each formed as the scalar decoder forms
   *  it), then an element is a vpermps lookup. */
  __attribute__((target("avx512f,avx2"))) static void group16(const uint8_t* blk, const Prep& p, int, __m512* out) {
    const __m512 kv = _mm512_setr_ps(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m512 table = _mm512_mul_ps(kv, _mm512_set1_ps(p.d));
    __m128i lo, hi;
    nibbles(blk, lo, hi);
    out[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(lo), table);
    out[1] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(hi), table);
  }
  /** The int8 values kvalues_mxfp4[c] by vpshufb, widened and scaled. */
  __attribute__((target("avx2"))) static void group8(const uint8_t* blk, const Prep& p, int, __m256* out) {
    const __m128i kv = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    __m128i lo, hi;
    nibbles(blk, lo, hi);
    const __m128i v[2] = {_mm_shuffle_epi8(kv, lo), _mm_shuffle_epi8(kv, hi)};
    const __m256 d = _mm256_set1_ps(p.d);
    for (int i = 0; i < 2; ++i) {
      out[2 * i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v[i])), d);
      out[2 * i + 1] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(v[i], 8))), d);
    }
  }
};

/** F8_E4M3_B32 / F8_E4M3_B16 (quant/fp8.h: kB E4M3 codes sharing a float32 scale d, the block's
 *  first 4 bytes): y = e4m3(q) * d, one rounding, as quant/'s dequantizer forms it. A code's value is
 *  formed exactly through FP16: the code's sign to bit 15 and its 7 exponent + mantissa bits to bits
 *  13..7 give an FP16 of the value times 2^-8 (exponent bias 15 against E4M3's 7; E4M3 subnormals
 *  m * 2^-9 land on FP16 subnormals, which vcvtph2ps widens exactly, MXCSR.DAZ not applying), then
 *  times 256 (exact). The NaN codes 0x7f / 0xff (which that form would read as +-480) are replaced
 *  by quant/'s NaN (0x7fc00000 with the code's sign). */
template <class Block, int kB>
struct F8Rows {
  static constexpr int64_t kElems = kB, kBytes = sizeof(Block);
  struct Prep {
    float d;
  };
  static Prep prep(const uint8_t* blk) {
    Prep p;
    std::memcpy(&p.d, blk + offsetof(Block, d), 4);
    return p;
  }
  static constexpr int kGroup16 = kB / 16, kGroup8 = kB / 8;  // a group is one block
  static const uint8_t* qs(const uint8_t* blk) { return blk + offsetof(Block, qs); }
  /** The FP16 bits of 16 codes (see above): each sign-extended to 16 bits and shifted left by 7, so bits
   *  7..13 hold its exponent and mantissa and bits 14..15 its sign, then bit 14 cleared. */
  __attribute__((target("avx2"))) static __m256i f16_bits(__m128i q) {
    return _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(q), 7), _mm256_set1_epi16(static_cast<short>(0xbf80)));
  }
  /** Whether any of the block's codes is NaN (0x7f / 0xff): one test per block, the rare NaN lanes
   *  then replaced by with_nan. */
  __attribute__((target("avx2"))) static bool any_nan(const uint8_t* blk) {
    if constexpr (kB == 32) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs(blk)));
      return _mm256_movemask_epi8(_mm256_cmpeq_epi8(_mm256_and_si256(q, _mm256_set1_epi8(0x7f)), _mm256_set1_epi8(0x7f))) != 0;
    } else {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs(blk)));
      return _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(q, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f))) != 0;
    }
  }
  /** v with the lanes of NaN codes among the 16 codes q set to quant/'s NaN (0x7fc00000, the code's sign). */
  __attribute__((target("avx512f,avx2"))) static __m512 with_nan(__m512 v, __m128i q) {
    const auto nan = static_cast<__mmask16>(
        _mm_movemask_epi8(_mm_cmpeq_epi8(_mm_and_si128(q, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f))));
    const __m512i bits = _mm512_or_si512(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)),
                                         _mm512_set1_epi32(0x7fc00000));
    return _mm512_mask_blend_ps(nan, v, _mm512_castsi512_ps(bits));
  }
  __attribute__((target("avx2"))) static __m256 with_nan(__m256 v, __m128i q8) {
    const __m128i n = _mm_cmpeq_epi8(_mm_and_si128(q8, _mm_set1_epi8(0x7f)), _mm_set1_epi8(0x7f));
    const __m256i bits = _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(INT32_MIN)),
                                         _mm256_set1_epi32(0x7fc00000));
    return _mm256_blendv_ps(v, _mm256_castsi256_ps(bits), _mm256_castsi256_ps(_mm256_cvtepi8_epi32(n)));
  }
  __attribute__((target("avx512f,avx2"))) static void group16(const uint8_t* blk, const Prep& p, int, __m512* out) {
    const __m512 d = _mm512_set1_ps(p.d);
    const bool nan = any_nan(blk);
    for (int c = 0; c < kGroup16; ++c) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs(blk) + 16 * c));
      __m512 v = _mm512_mul_ps(_mm512_cvtph_ps(f16_bits(q)), _mm512_set1_ps(256.0f));
      if (nan) [[unlikely]] v = with_nan(v, q);
      out[c] = _mm512_mul_ps(v, d);
    }
  }
  __attribute__((target("avx2,f16c"))) static void group8(const uint8_t* blk, const Prep& p, int, __m256* out) {
    const __m256 d = _mm256_set1_ps(p.d);
    const bool nan = any_nan(blk);
    for (int c = 0; c < kGroup8; c += 2) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs(blk) + 8 * c));
      const __m256i f16 = f16_bits(q);
      for (int k = 0; k < 2; ++k) {
        const __m128i f = k ? _mm256_extracti128_si256(f16, 1) : _mm256_castsi256_si128(f16);
        __m256 v = _mm256_mul_ps(_mm256_cvtph_ps(f), _mm256_set1_ps(256.0f));
        if (nan) [[unlikely]] v = with_nan(v, k ? _mm_srli_si128(q, 8) : q);
        out[c + k] = _mm256_mul_ps(v, d);
      }
    }
  }
};

/** Every E4M3 code's value as quant/fp8.h e4m3_to_f32 gives it (OCP OFP8: bias 7, subnormals
 *  m * 2^-9, S.1111.111 NaN), built at compile time (exact: small integers times powers of two) so a
 *  block's scales are plain loads. */
struct E4M3Table {
  float v[256];
  constexpr E4M3Table() : v() {
    for (int c = 0; c < 256; ++c) {
      const int e = (c >> 3) & 0xf, m = c & 0x7;
      float mag;
      if (e == 0xf && m == 0x7) {
        mag = std::numeric_limits<float>::quiet_NaN();
      } else {
        mag = static_cast<float>(e == 0 ? m : 8 + m);
        for (int k = 0; k < (e == 0 ? 9 : 10 - e); ++k) mag *= 0.5f;
        for (int k = 0; k < e - 10; ++k) mag *= 2.0f;
      }
      v[c] = (c & 0x80) ? -mag : mag;
    }
  }
};
constexpr E4M3Table kE4M3;

/** NVFP4_G64 / NVFP4_G16 (quant/nvfp4.h: float32 global scale g, kB / 16 E4M3 scales, kB / 2 bytes of
 *  E2M1 codes, value 2j in the low nibble of byte j and 2j + 1 in its high nibble): per 16 values
 *  d = e4m3(s) * g (or e4m3(s) / -g when g < 0: compressed-tensors), y = e2m1(q) * d, each product
 *  one rounding as quant/'s dequantizer forms it. */
template <class Block, int kB>
struct NVFP4Rows {
  static constexpr int64_t kElems = kB, kBytes = sizeof(Block);
  struct Prep {
    float d[kB / 16];
  };
  static Prep prep(const uint8_t* blk) {
    float g;
    std::memcpy(&g, blk + offsetof(Block, g), 4);
    Prep p;
    for (int k = 0; k < kB / 16; ++k) {
      const float s = kE4M3.v[blk[offsetof(Block, s) + k]];
      p.d[k] = std::signbit(g) ? s / -g : s * g;
    }
    return p;
  }
  static constexpr int kGroup16 = 1, kGroup8 = 2;  // a group is 16 values: one scale
  /** The 16 codes of group j in value order, a byte each (low nibble: the code; the high nibble of an
   *  even byte holds the next code, which the table lookups below ignore). */
  __attribute__((target("avx2"))) static __m128i codes(const uint8_t* blk, int j) {
    const __m128i h = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(blk + offsetof(Block, qs) + 8 * j)));
    return _mm_or_si128(h, _mm_slli_epi16(h, 4));
  }
  /** E2M1 values times d, formed as the scalar decoder forms each, then an element is a vpermps lookup. */
  __attribute__((target("avx512f,avx2"))) static void group16(const uint8_t* blk, const Prep& p, int j, __m512* out) {
    const __m512 kv = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f,
                                     -3.0f, -4.0f, -6.0f);
    const __m512 table = _mm512_mul_ps(kv, _mm512_set1_ps(p.d[j]));
    out[0] = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes(blk, j)), table);
  }
  /** The 8-entry halves of the table looked up by the code's low 3 bits, the half picked by its bit 3. */
  __attribute__((target("avx2"))) static void group8(const uint8_t* blk, const Prep& p, int j, __m256* out) {
    const __m256 d = _mm256_set1_ps(p.d[j]);
    const __m256 lo = _mm256_mul_ps(_mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f), d);
    const __m256 hi = _mm256_mul_ps(_mm256_setr_ps(-0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f), d);
    const __m128i q = codes(blk, j);
    for (int k = 0; k < 2; ++k) {
      const __m256i idx = _mm256_cvtepu8_epi32(k ? _mm_srli_si128(q, 8) : q);
      out[k] = _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, idx), _mm256_permutevar8x32_ps(hi, idx),
                                _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    }
  }
};

using F8B32Rows = F8Rows<quant::BlockF8E4M3B32, 32>;
using F8B16Rows = F8Rows<quant::BlockF8E4M3B16, 16>;
using NVFP4G64Rows = NVFP4Rows<quant::BlockNVFP4G64, 64>;
using NVFP4G16Rows = NVFP4Rows<quant::BlockNVFP4G16, 16>;

/** Decodes `n_blocks` blocks of kernel class K at `src` into y (AVX-512). */
template <class K>
__attribute__((target("avx512f,avx2"))) void decode_blocks_avx512(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const uint8_t* blk = src + i * K::kBytes;
    const typename K::Prep p = K::prep(blk);
#pragma GCC unroll 16
    for (int g = 0; g < K::kElems / (16 * K::kGroup16); ++g) {
      __m512 v[K::kGroup16];
      K::group16(blk, p, g, v);
      for (int i = 0; i < K::kGroup16; ++i, y += 16) _mm512_storeu_ps(y, v[i]);
    }
  }
}

/** Decodes `n_blocks` blocks of kernel class K at `src` into y (AVX2). */
template <class K>
__attribute__((target("avx2,f16c"))) void decode_blocks_avx2(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const uint8_t* blk = src + i * K::kBytes;
    const typename K::Prep p = K::prep(blk);
#pragma GCC unroll 16
    for (int g = 0; g < K::kElems / (8 * K::kGroup8); ++g) {
      __m256 v[K::kGroup8];
      K::group8(blk, p, g, v);
      for (int i = 0; i < K::kGroup8; ++i, y += 8) _mm256_storeu_ps(y, v[i]);
    }
  }
}

// ---- fused decode + dot: each 16- (AVX-512) or 8-element (AVX2) chunk of a stored row is decoded
// in registers exactly as the decoders above decode it and meets the same FMA as in tile_avx512<1,
// RR> / tile_avx2<1, RR>, chunk by chunk in order, with the same final reduction and tail, so the
// result equals to_f32 followed by dot_rows bit for bit, without writing the decoded row out and
// reading it back. Rows r < RR start at w + r * rb. ----

constexpr int64_t kShortBf16Row = 4096;  // bytes: shorter BF16 rows are prefetched (prefetch_next)

template <int RR>
__attribute__((target("avx512f,avx512bw,avx512vl,avx2"))) void dot_bf16_avx512(const float* x, const uint8_t* w,
                                                                               int64_t rb, int64_t n, float* y) {
  __m512 acc[RR];
  for (int r = 0; r < RR; ++r) acc[r] = _mm512_setzero_ps();
  const bool short_rows = rb < kShortBf16Row;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    if (short_rows) prefetch_next(w + RR * rb, i * 2 * RR, 32 * RR);
    const __m512 xv = _mm512_loadu_ps(x + i);
    for (int r = 0; r < RR; ++r) {
      const auto* row = reinterpret_cast<const uint16_t*>(w + r * rb);
      acc[r] = _mm512_fmadd_ps(xv, widen_bf16_16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + i))), acc[r]);
    }
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    for (int r = 0; r < RR; ++r) {
      const auto* row = reinterpret_cast<const uint16_t*>(w + r * rb);
      acc[r] = _mm512_fmadd_ps(xv, widen_bf16_16(_mm256_maskz_loadu_epi16(m, row + i)), acc[r]);
    }
  }
  for (int r = 0; r < RR; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

template <int RR>
__attribute__((target("avx2,fma"))) void dot_bf16_avx2(const float* x, const uint8_t* w, int64_t rb, int64_t n,
                                                       float* y) {
  __m256 acc[RR];
  for (int r = 0; r < RR; ++r) acc[r] = _mm256_setzero_ps();
  const bool short_rows = rb < kShortBf16Row;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    if (short_rows) prefetch_next(w + RR * rb, i * 2 * RR, 16 * RR);
    const __m256 xv = _mm256_loadu_ps(x + i);
    for (int r = 0; r < RR; ++r) {
      const auto* row = reinterpret_cast<const uint16_t*>(w + r * rb);
      acc[r] = _mm256_fmadd_ps(xv, widen_bf16_8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i))), acc[r]);
    }
  }
  for (int r = 0; r < RR; ++r) {
    const auto* row = reinterpret_cast<const uint16_t*>(w + r * rb);
    float s = hsum256(acc[r]);
    for (int64_t j = i; j < n; ++j) s += x[j] * bf16_to_f32(row[j]);
    y[r] = s;
  }
}


/** y[r] = x . row r for rows of kernel class K (AVX-512): per block the rows' scales, then per
 *  group the x vectors loaded once for all rows. */
template <class K, int RR>
__attribute__((target("avx512f,avx2"))) void dot_blocks_avx512(const float* x, const uint8_t* w, int64_t rb, int64_t n,
                                                               float* y) {
  __m512 acc[RR];
  for (int r = 0; r < RR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < n / K::kElems; ++b) {
    prefetch_next(w + RR * rb, b * RR * K::kBytes, RR * K::kBytes);
    typename K::Prep p[RR];
    for (int r = 0; r < RR; ++r) p[r] = K::prep(w + r * rb + b * K::kBytes);
    constexpr int G = K::kGroup16;
#pragma GCC unroll 16
    for (int g = 0; g < K::kElems / (16 * G); ++g) {
      __m512 xv[G];
      for (int i = 0; i < G; ++i) xv[i] = _mm512_loadu_ps(x + b * K::kElems + 16 * (G * g + i));
      for (int r = 0; r < RR; ++r) {
        __m512 v[G];
        K::group16(w + r * rb + b * K::kBytes, p[r], g, v);
        for (int i = 0; i < G; ++i) acc[r] = _mm512_fmadd_ps(xv[i], v[i], acc[r]);
      }
    }
  }
  for (int r = 0; r < RR; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

/** dot_blocks_avx512 with 8-element chunks (AVX2). */
template <class K, int RR>
__attribute__((target("avx2,fma,f16c"))) void dot_blocks_avx2(const float* x, const uint8_t* w, int64_t rb, int64_t n,
                                                         float* y) {
  __m256 acc[RR];
  for (int r = 0; r < RR; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / K::kElems; ++b) {
    prefetch_next(w + RR * rb, b * RR * K::kBytes, RR * K::kBytes);
    typename K::Prep p[RR];
    for (int r = 0; r < RR; ++r) p[r] = K::prep(w + r * rb + b * K::kBytes);
    constexpr int G = K::kGroup8;
#pragma GCC unroll 16
    for (int g = 0; g < K::kElems / (8 * G); ++g)
      for (int r = 0; r < RR; ++r) {
        __m256 v[G];
        K::group8(w + r * rb + b * K::kBytes, p[r], g, v);
        for (int i = 0; i < G; ++i)
          acc[r] = _mm256_fmadd_ps(_mm256_loadu_ps(x + b * K::kElems + 8 * (G * g + i)), v[i], acc[r]);
      }
  }
  for (int r = 0; r < RR; ++r) y[r] = hsum256(acc[r]);
}

using StoredDotFn = void (*)(const float*, const uint8_t*, int64_t, int64_t, float*);
#define FT_STORED_DOTS(F) {F<1>, F<2>, F<3>, F<4>}
#define FT_BLOCK_DOTS(D, K) {D<K, 1>, D<K, 2>, D<K, 3>, D<K, 4>}
// [level: 0 = AVX2, 1 = AVX-512][type: BF16, Q4_K, Q8_0, Q6_K, MXFP4, F8_E4M3_B32, F8_E4M3_B16, NVFP4_G64,
// NVFP4_G16][rows - 1]
const StoredDotFn kStoredDots[2][9][4] = {
    {FT_STORED_DOTS(dot_bf16_avx2), FT_BLOCK_DOTS(dot_blocks_avx2, Q4_KRows),
     FT_BLOCK_DOTS(dot_blocks_avx2, Q8_0Rows), FT_BLOCK_DOTS(dot_blocks_avx2, Q6_KRows),
     FT_BLOCK_DOTS(dot_blocks_avx2, MXFP4Rows), FT_BLOCK_DOTS(dot_blocks_avx2, F8B32Rows),
     FT_BLOCK_DOTS(dot_blocks_avx2, F8B16Rows), FT_BLOCK_DOTS(dot_blocks_avx2, NVFP4G64Rows),
     FT_BLOCK_DOTS(dot_blocks_avx2, NVFP4G16Rows)},
    {FT_STORED_DOTS(dot_bf16_avx512), FT_BLOCK_DOTS(dot_blocks_avx512, Q4_KRows),
     FT_BLOCK_DOTS(dot_blocks_avx512, Q8_0Rows), FT_BLOCK_DOTS(dot_blocks_avx512, Q6_KRows),
     FT_BLOCK_DOTS(dot_blocks_avx512, MXFP4Rows), FT_BLOCK_DOTS(dot_blocks_avx512, F8B32Rows),
     FT_BLOCK_DOTS(dot_blocks_avx512, F8B16Rows), FT_BLOCK_DOTS(dot_blocks_avx512, NVFP4G64Rows),
     FT_BLOCK_DOTS(dot_blocks_avx512, NVFP4G16Rows)}};
#undef FT_BLOCK_DOTS
#undef FT_STORED_DOTS

/** Index of `type` in kStoredDots, or -1. */
int stored_dot_type(DType type) {
  switch (type) {
    case DType::BF16: return 0;
    case DType::Q4_K: return 1;
    case DType::Q8_0: return 2;
    case DType::Q6_K: return 3;
    case DType::MXFP4: return 4;
    case DType::F8_E4M3_B32: return 5;
    case DType::F8_E4M3_B16: return 6;
    case DType::NVFP4_G64: return 7;
    case DType::NVFP4_G16: return 8;
    default: return -1;
  }
}

/** to_f32 of `type`, kernel class K: its SIMD decoder at the AVX-512 or AVX2 level, quant/'s
 *  dequantize_row at the scalar level or for n that is not whole blocks (it names bad counts). */
template <class K>
void decode_stored(DType type, const void* src, float* dst, int64_t n) {
  if (simd_level_id() == SimdLevel::kScalar || n % K::kElems != 0) return dequantize_row(type, src, dst, n);
  const auto* s = static_cast<const uint8_t*>(src);
  if (simd_level_id() == SimdLevel::kAvx512) return decode_blocks_avx512<K>(s, dst, n / K::kElems);
  decode_blocks_avx2<K>(s, dst, n / K::kElems);
}

}  // namespace

bool has_fused_dot(DType type) { return simd_level_id() != SimdLevel::kScalar && stored_dot_type(type) >= 0; }

void dot_rows_stored(DType type, const float* x, const void* w, int64_t row_bytes, int rows, int64_t n, float* out) {
  FT_CHECK(rows >= 1 && rows <= 4);
  if (!has_fused_dot(type))
    fail(ErrorCode::kUnsupported, "dot_rows_stored: no fused kernel for {} at SIMD level {}", dtype_name(type),
         simd_level());
  const int64_t bs = dtype_info(type).block_size;
  if (n % bs != 0)
    fail(ErrorCode::kInvalidArgument, "dot_rows_stored: {} {} elements are not whole blocks of {}", n,
         dtype_name(type), bs);
  kStoredDots[simd_level_id() == SimdLevel::kAvx512 ? 1 : 0][stored_dot_type(type)][rows - 1](x, static_cast<const uint8_t*>(w),
                                                                                  row_bytes, n, out);
}

void to_f32(DType type, const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  switch (type) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::BF16:
      if (simd_level_id() == SimdLevel::kAvx512) return bf16_to_f32_avx512(h, dst, n);
      if (simd_level_id() == SimdLevel::kAvx2) return bf16_to_f32_avx2(h, dst, n);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    case DType::F16:
      if (simd_level_id() != SimdLevel::kScalar) return f16_to_f32_f16c(h, dst, n);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    case DType::Q4_K:
    case DType::Q6_K:
    case DType::Q8_0:
    case DType::MXFP4: {
      const int64_t bs = dtype_info(type).block_size;
      if (simd_level_id() == SimdLevel::kScalar || n % bs != 0) return dequantize_row(type, src, dst, n);  // it names bad counts
      const auto* s = static_cast<const uint8_t*>(src);
      const bool wide = simd_level_id() == SimdLevel::kAvx512;
      if (type == DType::Q4_K)
        return wide ? decode_blocks_avx512<Q4_KRows>(s, dst, n / bs) : decode_blocks_avx2<Q4_KRows>(s, dst, n / bs);
      if (type == DType::Q6_K)
        return wide ? decode_blocks_avx512<Q6_KRows>(s, dst, n / bs) : decode_blocks_avx2<Q6_KRows>(s, dst, n / bs);
      if (type == DType::MXFP4)
        return wide ? decode_blocks_avx512<MXFP4Rows>(s, dst, n / bs) : decode_blocks_avx2<MXFP4Rows>(s, dst, n / bs);
      return wide ? decode_blocks_avx512<Q8_0Rows>(s, dst, n / bs) : decode_blocks_avx2<Q8_0Rows>(s, dst, n / bs);
    }
    case DType::F8_E4M3_B32: return decode_stored<F8B32Rows>(type, src, dst, n);
    case DType::F8_E4M3_B16: return decode_stored<F8B16Rows>(type, src, dst, n);
    case DType::NVFP4_G64: return decode_stored<NVFP4G64Rows>(type, src, dst, n);
    case DType::NVFP4_G16: return decode_stored<NVFP4G16Rows>(type, src, dst, n);
    default: dequantize_row(type, src, dst, n);
  }
}

}  // namespace ft::cpu
