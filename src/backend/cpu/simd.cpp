#include "backend/cpu/simd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/simd_level.h"
#include "util/error.h"

namespace ft::cpu {

SimdLevel simd_level_id() {
  static const SimdLevel level = [] {
    __builtin_cpu_init();
    const char* cap = std::getenv("FT_CPU_SIMD");
    if (cap && std::strcmp(cap, "scalar") == 0) return SimdLevel::kScalar;
    const bool avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl");
    if (avx2 && avx512 && !(cap && std::strcmp(cap, "avx2") == 0)) return SimdLevel::kAvx512;
    if (avx2) return SimdLevel::kAvx2;
    return SimdLevel::kScalar;
  }();
  return level;
}

namespace {

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

}  // namespace

const char* simd_level() {
  switch (simd_level_id()) {
    case SimdLevel::kAvx512: return "avx512";
    case SimdLevel::kAvx2: return "avx2";
    default: return "scalar";
  }
}

void dot_tile(const float* x, int64_t ldx, int tokens, const float* w, int64_t ldw, int rows, int64_t n, float* y,
              int64_t ldy) {
  FT_CHECK(tokens >= 1 && tokens <= 4 && rows >= 1 && rows <= 4);
  const SimdLevel level = simd_level_id();
  const TileFn(*table)[4] = level == SimdLevel::kAvx512 ? kAvx512Tiles
                            : level == SimdLevel::kAvx2 ? kAvx2Tiles
                                                        : kScalarTiles;
  table[tokens - 1][rows - 1](x, ldx, w, ldw, n, y, ldy);
}

void gemm_nt(const float* x, int64_t ldx, int64_t tokens, const float* w, int64_t ldw, int64_t rows, int64_t n,
             float* y, int64_t ldy) {
  const SimdLevel level = simd_level_id();
  const TileFn(*table)[4] = level == SimdLevel::kAvx512 ? kAvx512Tiles
                            : level == SimdLevel::kAvx2 ? kAvx2Tiles
                                                        : kScalarTiles;
  for (int64_t t = 0; t < tokens; t += 4) {
    const int nt = static_cast<int>(std::min<int64_t>(4, tokens - t));
    for (int64_t r = 0; r < rows; r += 4) {
      const int nr = static_cast<int>(std::min<int64_t>(4, rows - r));
      table[nt - 1][nr - 1](x + t * ldx, ldx, w + r * ldw, ldw, n, y + t * ldy + r, ldy);
    }
  }
}

void dot_rows(const float* x, const float* w, int64_t ldw, int rows, int64_t n, float* out) {
  dot_tile(x, 0, 1, w, ldw, rows, n, out, 0);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace ft::cpu
