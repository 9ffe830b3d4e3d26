#pragma once
// Internal to the CPU backend's SIMD kernels (simd.cpp: level and dot tiles; block_rows.cpp: stored
// weight rows): the level this process runs at and helpers both use.

// GCC 12's AVX-512 headers self-initialise _mm512_undefined_*() values, which -Wuninitialized flags
// at every inlined use (a known false positive); silenced for the two files that include this.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

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

}  // namespace ft::cpu
