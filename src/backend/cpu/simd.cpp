#include "backend/cpu/simd.h"

// GCC 12's AVX-512 headers self-initialise _mm512_undefined_*() values, which -Wuninitialized flags
// at every inlined use (a known false positive); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdlib>
#include <cstring>

#include "quant/blocks.h"
#include "quant/quant.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft::cpu {
namespace {

enum class Level { kScalar, kAvx2, kAvx512 };

// FT_CPU_SIMD=scalar|avx2 caps the level (tests run every op on every path of one machine).
Level detect() {
  __builtin_cpu_init();
  const char* cap = std::getenv("FT_CPU_SIMD");
  if (cap && std::strcmp(cap, "scalar") == 0) return Level::kScalar;
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f") && !(cap && std::strcmp(cap, "avx2") == 0)) return Level::kAvx512;
  if (avx2) return Level::kAvx2;
  return Level::kScalar;
}

const Level kLevel = detect();

// ---- dot tiles: one accumulator per output element, lanes in order, a fixed final reduction ----
// Every (token, row) element runs the same instruction sequence whatever the tile size, so a
// token's result does not depend on how many tokens or rows are computed with it.

template <int TT, int RR>
void tile_scalar(const float* x, int64_t ldx, const float* w, int64_t ldw, int64_t n, float* y, int64_t ldy) {
  for (int t = 0; t < TT; ++t)
    for (int r = 0; r < RR; ++r) {
      const float* a = x + t * ldx;
      const float* b = w + r * ldw;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t i = 0;
      for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
      for (int j = 0; i < n; ++i, ++j) acc[j] += a[i] * b[i];
      y[t * ldy + r] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    }
}

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

template <int TT, int RR>
__attribute__((target("avx2,fma"))) void tile_avx2(const float* x, int64_t ldx, const float* w, int64_t ldw,
                                                    int64_t n, float* y, int64_t ldy) {
  if constexpr (RR > 2) {  // 16 ymm registers: at most TT x 2 accumulators at once
    tile_avx2<TT, 2>(x, ldx, w, ldw, n, y, ldy);
    tile_avx2<TT, RR - 2>(x, ldx, w + 2 * ldw, ldw, n, y + 2, ldy);
  } else {
    __m256 acc[TT][RR];
    for (int t = 0; t < TT; ++t)
      for (int r = 0; r < RR; ++r) acc[t][r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 xv[TT];
      for (int t = 0; t < TT; ++t) xv[t] = _mm256_loadu_ps(x + t * ldx + i);
      for (int r = 0; r < RR; ++r) {
        const __m256 wv = _mm256_loadu_ps(w + r * ldw + i);
        for (int t = 0; t < TT; ++t) acc[t][r] = _mm256_fmadd_ps(xv[t], wv, acc[t][r]);
      }
    }
    for (int t = 0; t < TT; ++t)
      for (int r = 0; r < RR; ++r) {
        float s = hsum256(acc[t][r]);
        for (int64_t j = i; j < n; ++j) s += x[t * ldx + j] * w[r * ldw + j];
        y[t * ldy + r] = s;
      }
  }
}

template <int TT, int RR>
__attribute__((target("avx512f"))) void tile_avx512(const float* x, int64_t ldx, const float* w, int64_t ldw,
                                                     int64_t n, float* y, int64_t ldy) {
  __m512 acc[TT][RR];
  for (int t = 0; t < TT; ++t)
    for (int r = 0; r < RR; ++r) acc[t][r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 xv[TT];
    for (int t = 0; t < TT; ++t) xv[t] = _mm512_loadu_ps(x + t * ldx + i);
    for (int r = 0; r < RR; ++r) {
      const __m512 wv = _mm512_loadu_ps(w + r * ldw + i);
      for (int t = 0; t < TT; ++t) acc[t][r] = _mm512_fmadd_ps(xv[t], wv, acc[t][r]);
    }
  }
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
    __m512 xv[TT];
    for (int t = 0; t < TT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * ldx + i);
    for (int r = 0; r < RR; ++r) {
      const __m512 wv = _mm512_maskz_loadu_ps(m, w + r * ldw + i);
      for (int t = 0; t < TT; ++t) acc[t][r] = _mm512_fmadd_ps(xv[t], wv, acc[t][r]);
    }
  }
  for (int t = 0; t < TT; ++t)
    for (int r = 0; r < RR; ++r) y[t * ldy + r] = _mm512_reduce_add_ps(acc[t][r]);
}

using TileFn = void (*)(const float*, int64_t, const float*, int64_t, int64_t, float*, int64_t);

#define FT_TILE_ROW(F, T) {F<T, 1>, F<T, 2>, F<T, 3>, F<T, 4>}
#define FT_TILE_TABLE(F) {FT_TILE_ROW(F, 1), FT_TILE_ROW(F, 2), FT_TILE_ROW(F, 3), FT_TILE_ROW(F, 4)}

const TileFn kScalarTiles[4][4] = FT_TILE_TABLE(tile_scalar);
const TileFn kAvx2Tiles[4][4] = FT_TILE_TABLE(tile_avx2);
const TileFn kAvx512Tiles[4][4] = FT_TILE_TABLE(tile_avx512);

// ---- conversions ----

__attribute__((target("avx512f"))) void bf16_to_f32_avx512(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    _mm512_storeu_ps(d + i, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  for (; i < n; ++i) d[i] = bf16_to_f32(s[i]);
}

__attribute__((target("avx2"))) void bf16_to_f32_avx2(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    _mm256_storeu_ps(d + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  for (; i < n; ++i) d[i] = bf16_to_f32(s[i]);
}

__attribute__((target("avx2,f16c"))) void f16_to_f32_f16c(const uint16_t* s, float* d, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i))));
  for (; i < n; ++i) d[i] = f16_to_f32(s[i]);
}

// ---- GGUF block decoders for the hot weight types. Each follows quant/'s scalar dequantizer
// (ggml-quants.c dequantize_row_*) operation for operation: Q4_K y = (d * sc) * q - (dmin * m),
// Q8_0 y = q * d. This file is compiled with -ffp-contract=off, so a product and a difference
// stay two roundings and the floats equal quant::dequantize_row's bit for bit (tested on every
// level). The expert executor and the float matmul decode every weight row through to_f32: the
// scalar Q4_K decoder cost 3.4x the dot product itself there (perf, CPU strategy, q4_k). ----

__attribute__((target("avx512f"))) inline void put16_avx512(__m128i bytes, __m512 d, __m512 m, float* y) {
  _mm512_storeu_ps(y, _mm512_sub_ps(_mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(bytes))), m));
}

__attribute__((target("avx512f,avx2"))) void q4_k_to_f32_avx512(const uint8_t* src, float* y, int64_t n_blocks) {
  const __m256i low = _mm256_set1_epi8(0x0f);
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = quant::load_block<quant::BlockQ4_K>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    const uint8_t* q = b.qs;
    for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
      int sc1, m1, sc2, m2;
      quant::scale_min_k4(is, b.scales, sc1, m1);
      quant::scale_min_k4(is + 1, b.scales, sc2, m2);
      const __m512 vd1 = _mm512_set1_ps(d * static_cast<float>(sc1)), vm1 = _mm512_set1_ps(dmin * static_cast<float>(m1));
      const __m512 vd2 = _mm512_set1_ps(d * static_cast<float>(sc2)), vm2 = _mm512_set1_ps(dmin * static_cast<float>(m2));
      const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
      const __m256i lo = _mm256_and_si256(qb, low), hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), low);
      put16_avx512(_mm256_castsi256_si128(lo), vd1, vm1, y);
      put16_avx512(_mm256_extracti128_si256(lo, 1), vd1, vm1, y + 16);
      put16_avx512(_mm256_castsi256_si128(hi), vd2, vm2, y + 32);
      put16_avx512(_mm256_extracti128_si256(hi, 1), vd2, vm2, y + 48);
    }
  }
}

__attribute__((target("avx2"))) inline void put8_avx2(__m128i bytes, __m256 d, __m256 m, float* y) {
  _mm256_storeu_ps(y, _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bytes))), m));
}

__attribute__((target("avx2"))) void q4_k_to_f32_avx2(const uint8_t* src, float* y, int64_t n_blocks) {
  const __m256i low = _mm256_set1_epi8(0x0f);
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = quant::load_block<quant::BlockQ4_K>(src, i);
    const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
    const uint8_t* q = b.qs;
    for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
      int sc1, m1, sc2, m2;
      quant::scale_min_k4(is, b.scales, sc1, m1);
      quant::scale_min_k4(is + 1, b.scales, sc2, m2);
      const __m256 vd1 = _mm256_set1_ps(d * static_cast<float>(sc1)), vm1 = _mm256_set1_ps(dmin * static_cast<float>(m1));
      const __m256 vd2 = _mm256_set1_ps(d * static_cast<float>(sc2)), vm2 = _mm256_set1_ps(dmin * static_cast<float>(m2));
      const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
      const __m256i lo = _mm256_and_si256(qb, low), hi = _mm256_and_si256(_mm256_srli_epi16(qb, 4), low);
      const __m128i parts[4] = {_mm256_castsi256_si128(lo), _mm256_extracti128_si256(lo, 1), _mm256_castsi256_si128(hi),
                                _mm256_extracti128_si256(hi, 1)};
      for (int p = 0; p < 4; ++p) {
        put8_avx2(parts[p], p < 2 ? vd1 : vd2, p < 2 ? vm1 : vm2, y + 16 * p);
        put8_avx2(_mm_srli_si128(parts[p], 8), p < 2 ? vd1 : vd2, p < 2 ? vm1 : vm2, y + 16 * p + 8);
      }
    }
  }
}

__attribute__((target("avx512f"))) void q8_0_to_f32_avx512(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += 32) {
    const auto b = quant::load_block<quant::BlockQ8_0>(src, i);
    const __m512 d = _mm512_set1_ps(f16_to_f32(b.d));
    for (int h = 0; h < 2; ++h) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16 * h));
      _mm512_storeu_ps(y + 16 * h, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d));
    }
  }
}

__attribute__((target("avx2"))) void q8_0_to_f32_avx2(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i, y += 32) {
    const auto b = quant::load_block<quant::BlockQ8_0>(src, i);
    const __m256 d = _mm256_set1_ps(f16_to_f32(b.d));
    for (int h = 0; h < 4; ++h) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * h));
      _mm256_storeu_ps(y + 8 * h, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

}  // namespace

const char* simd_level() {
  switch (kLevel) {
    case Level::kAvx512: return "avx512";
    case Level::kAvx2: return "avx2";
    default: return "scalar";
  }
}

void dot_tile(const float* x, int64_t ldx, int tokens, const float* w, int64_t ldw, int rows, int64_t n, float* y,
              int64_t ldy) {
  FT_CHECK(tokens >= 1 && tokens <= 4 && rows >= 1 && rows <= 4);
  const TileFn(*table)[4] = kLevel == Level::kAvx512 ? kAvx512Tiles : kLevel == Level::kAvx2 ? kAvx2Tiles : kScalarTiles;
  table[tokens - 1][rows - 1](x, ldx, w, ldw, n, y, ldy);
}

void dot_rows(const float* x, const float* w, int64_t ldw, int rows, int64_t n, float* out) {
  dot_tile(x, 0, 1, w, ldw, rows, n, out, 0);
}

void to_f32(DType type, const void* src, float* dst, int64_t n) {
  const auto* h = static_cast<const uint16_t*>(src);
  switch (type) {
    case DType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * 4); return;
    case DType::BF16:
      if (kLevel == Level::kAvx512) return bf16_to_f32_avx512(h, dst, n);
      if (kLevel == Level::kAvx2) return bf16_to_f32_avx2(h, dst, n);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
      return;
    case DType::F16:
      if (kLevel != Level::kScalar) return f16_to_f32_f16c(h, dst, n);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(h[i]);
      return;
    case DType::Q4_K:
    case DType::Q8_0: {
      const int64_t bs = type == DType::Q4_K ? 256 : 32;
      if (kLevel == Level::kScalar || n % bs != 0) return dequantize_row(type, src, dst, n);  // it names bad counts
      const auto* s = static_cast<const uint8_t*>(src);
      if (type == DType::Q4_K)
        return kLevel == Level::kAvx512 ? q4_k_to_f32_avx512(s, dst, n / bs) : q4_k_to_f32_avx2(s, dst, n / bs);
      return kLevel == Level::kAvx512 ? q8_0_to_f32_avx512(s, dst, n / bs) : q8_0_to_f32_avx2(s, dst, n / bs);
    }
    default: dequantize_row(type, src, dst, n);
  }
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace ft::cpu
