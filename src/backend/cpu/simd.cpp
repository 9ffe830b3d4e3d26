#include "backend/cpu/simd.h"

// GCC 12's AVX-512 headers self-initialise _mm512_undefined_*() values, which -Wuninitialized flags
// at every inlined use (a known false positive); silence it for this file only.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "quant/quant.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft::cpu {
namespace {

enum class Level { kScalar, kAvx2, kAvx512 };

Level detect() {
  __builtin_cpu_init();
  const bool avx2 =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  if (avx2 && __builtin_cpu_supports("avx512f")) return Level::kAvx512;
  if (avx2) return Level::kAvx2;
  return Level::kScalar;
}

const Level kLevel = detect();

// ---- dot_rows: per row, two accumulators over alternating chunks, then a fixed reduction ----

template <int R>
void dot_rows_scalar(const float* x, const float* w, int64_t ldw, int64_t n, float* out) {
  for (int r = 0; r < R; ++r) {
    const float* wr = w + r * ldw;
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
      for (int j = 0; j < 8; ++j) acc[j] += x[i + j] * wr[i + j];
    for (int j = 0; i < n; ++i, ++j) acc[j] += x[i] * wr[i];
    out[r] = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  }
}

__attribute__((target("avx2,fma"))) inline float hsum256(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v), hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}

template <int R>
__attribute__((target("avx2,fma"))) void dot_rows_avx2(const float* x, const float* w, int64_t ldw, int64_t n,
                                                        float* out) {
  __m256 a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
    for (int r = 0; r < R; ++r) {
      a0[r] = _mm256_fmadd_ps(x0, _mm256_loadu_ps(w + r * ldw + i), a0[r]);
      a1[r] = _mm256_fmadd_ps(x1, _mm256_loadu_ps(w + r * ldw + i + 8), a1[r]);
    }
  }
  for (int r = 0; r < R; ++r) {
    float s = hsum256(_mm256_add_ps(a0[r], a1[r]));
    for (int64_t j = i; j < n; ++j) s += x[j] * w[r * ldw + j];
    out[r] = s;
  }
}

template <int R>
__attribute__((target("avx512f"))) void dot_rows_avx512(const float* x, const float* w, int64_t ldw, int64_t n,
                                                         float* out) {
  __m512 a0[R], a1[R];
  for (int r = 0; r < R; ++r) a0[r] = a1[r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
    for (int r = 0; r < R; ++r) {
      a0[r] = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w + r * ldw + i), a0[r]);
      a1[r] = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w + r * ldw + i + 16), a1[r]);
    }
  }
  for (; i < n; i += 16) {
    const int64_t left = n - i;
    const __mmask16 m = left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1);
    const __m512 xv = _mm512_maskz_loadu_ps(m, x + i);
    for (int r = 0; r < R; ++r) a0[r] = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(m, w + r * ldw + i), a0[r]);
  }
  for (int r = 0; r < R; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(a0[r], a1[r]));
}

template <int R>
void dot_rows_n(const float* x, const float* w, int64_t ldw, int64_t n, float* out) {
  switch (kLevel) {
    case Level::kAvx512: return dot_rows_avx512<R>(x, w, ldw, n, out);
    case Level::kAvx2: return dot_rows_avx2<R>(x, w, ldw, n, out);
    default: return dot_rows_scalar<R>(x, w, ldw, n, out);
  }
}

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

}  // namespace

const char* simd_level() {
  switch (kLevel) {
    case Level::kAvx512: return "avx512";
    case Level::kAvx2: return "avx2";
    default: return "scalar";
  }
}

void dot_rows(const float* x, const float* w, int64_t ldw, int rows, int64_t n, float* out) {
  switch (rows) {
    case 4: return dot_rows_n<4>(x, w, ldw, n, out);
    case 3: return dot_rows_n<3>(x, w, ldw, n, out);
    case 2: return dot_rows_n<2>(x, w, ldw, n, out);
    case 1: return dot_rows_n<1>(x, w, ldw, n, out);
    default: FT_CHECK(rows >= 1 && rows <= 4);
  }
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
    default: dequantize_row(type, src, dst, n);
  }
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace ft::cpu
