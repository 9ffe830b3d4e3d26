// gemm_nt_bf16: BF16 x BF16 -> fp32 GEMM blocks with AVX-512 BF16 (vdpbf16ps), register-blocked
// 4 tokens x 4 rows like the fp32 dot tiles: one accumulator per output element, pairs of products
// added in lane order, a fixed final reduction, so an element's result does not depend on the
// tile it is computed in (a token alone or in a batch gives the same bits).
#include <algorithm>

#include "backend/cpu/simd.h"
#include "backend/cpu/simd_level.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft::cpu {
namespace {

template <int TT, int RR>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void tile_bf16(const uint16_t* x, int64_t ldx, const uint16_t* w,
                                                                      int64_t ldw, int64_t n, float* y, int64_t ldy) {
  __m512 acc[TT][RR];
  for (int t = 0; t < TT; ++t)
    for (int r = 0; r < RR; ++r) acc[t][r] = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512bh xv[TT];
    for (int t = 0; t < TT; ++t) xv[t] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(x + t * ldx + i));
    for (int r = 0; r < RR; ++r) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + r * ldw + i));
      for (int t = 0; t < TT; ++t) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], xv[t], wv);
    }
  }
  if (i < n) {  // the tail's missing elements load as +0
    const __mmask32 m = static_cast<__mmask32>((uint64_t{1} << (n - i)) - 1);
    __m512bh xv[TT];
    for (int t = 0; t < TT; ++t) xv[t] = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m, x + t * ldx + i));
    for (int r = 0; r < RR; ++r) {
      const __m512bh wv = reinterpret_cast<__m512bh>(_mm512_maskz_loadu_epi16(m, w + r * ldw + i));
      for (int t = 0; t < TT; ++t) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], xv[t], wv);
    }
  }
  for (int t = 0; t < TT; ++t)
    for (int r = 0; r < RR; ++r) y[t * ldy + r] = _mm512_reduce_add_ps(acc[t][r]);
}

using TileFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*, int64_t);
#define FT_BF16_ROW(T) {tile_bf16<T, 1>, tile_bf16<T, 2>, tile_bf16<T, 3>, tile_bf16<T, 4>}
const TileFn kTiles[4][4] = {FT_BF16_ROW(1), FT_BF16_ROW(2), FT_BF16_ROW(3), FT_BF16_ROW(4)};

}  // namespace

bool has_bf16_dot() {
  static const bool yes = [] {
    __builtin_cpu_init();
    return simd_level_id() == SimdLevel::kAvx512 && __builtin_cpu_supports("avx512bf16");
  }();
  return yes;
}

void gemm_nt_bf16(const uint16_t* x, int64_t ldx, int64_t tokens, const uint16_t* w, int64_t ldw, int64_t rows,
                  int64_t n, float* y, int64_t ldy) {
  if (!has_bf16_dot()) fail(ErrorCode::kUnsupported, "gemm_nt_bf16: this CPU has no AVX-512 BF16 (or FT_CPU_SIMD caps it)");
  for (int64_t t = 0; t < tokens; t += 4) {
    const int nt = static_cast<int>(std::min<int64_t>(4, tokens - t));
    for (int64_t r = 0; r < rows; r += 4) {
      const int nr = static_cast<int>(std::min<int64_t>(4, rows - r));
      kTiles[nt - 1][nr - 1](x + t * ldx, ldx, w + r * ldw, ldw, n, y + t * ldy + r, ldy);
    }
  }
}

void to_bf16(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

}  // namespace ft::cpu
