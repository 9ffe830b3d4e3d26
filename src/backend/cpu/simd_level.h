#pragma once
// Internal to the CPU backend's SIMD kernels (simd.cpp: level and dot tiles; block_rows.cpp: stored
// weight rows; q8_rows.cpp: int8 activations): the level this process runs at and helpers they use.

// GCC 12's AVX-512 headers self-initialise _mm512_undefined_*() values, which -Wuninitialized flags
// at every inlined use (a known false positive); silenced for the files that include this.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace ft::cpu {

enum class SimdLevel { kScalar, kAvx2, kAvx512 };

/** The SIMD level of this process, detected once: AVX-512 needs F, BW and VL (masked 16-bit loads
 *  in the BF16 tails; AVX-512F alone, as on Xeon Phi, takes AVX2), AVX2 needs FMA and F16C.
 *  FT_CPU_SIMD=scalar|avx2 caps it (tests run every kernel on every path of one machine). */
SimdLevel simd_level_id();

/** Sum of the 8 lanes of v, in a fixed order (the AVX2 dot tiles' final reduction). */
__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

/** Prefetches bytes [off, off + len) of `next`, the rows that follow the ones being dotted. A fused
 *  kernel over RR rows calls it once per step with len = the bytes per step of all RR rows, so the
 *  next RR rows are in cache when the caller reaches them: rows of experts are short (a Q4_K row of
 *  2048 is 1,152 bytes), and RR interleaved short streams defeat the hardware prefetcher (measured:
 *  a Q4_K tile from DRAM 2.1 GB/s per core without this against 2.75 for decode-then-dot; 4.6 with
 *  it). BF16 rows of 4 KB and more stream well on their own and lose ~8% to the extra instructions
 *  (kShortBf16Row); at 1.5 KB (an expert's down row) prefetching gains ~25%. */
inline void prefetch_next(const uint8_t* next, int64_t off, int64_t len) {
  for (int64_t o = off & ~int64_t{63}; o < off + len; o += 64) _mm_prefetch(reinterpret_cast<const char*>(next + o), _MM_HINT_T0);
}

/** A Q4_K block's 12 scale bytes q[0..11] unpacked (ggml-quants.c get_scale_min_k4): sc[0..3] and
 *  m[0..3] are the low 6 bits of q[0..3] and q[4..7]; sc[4..7] and m[4..7] the low and high nibbles
 *  of q[8..11] with their top 2 bits from the top 2 bits of q[0..3] and q[4..7]. Each result holds 4
 *  values as bytes (little-endian): sc_lo = sc[0..3], sc_hi = sc[4..7], likewise m. All 8 are
 *  unpacked at once with 32-bit word operations. */
struct Q4KScales {
  uint32_t sc_lo, sc_hi, m_lo, m_hi;
};
inline Q4KScales unpack_q4k_scales(const uint8_t* scales) {
  uint32_t q[3];
  std::memcpy(q, scales, 12);
  const uint32_t low6 = 0x3f3f3f3fu, nib = 0x0f0f0f0fu, top2 = 0x03030303u;
  return {q[0] & low6, (q[2] & nib) | (((q[0] >> 6) & top2) << 4), q[1] & low6,
          ((q[2] >> 4) & nib) | (((q[1] >> 6) & top2) << 4)};
}

}  // namespace ft::cpu
