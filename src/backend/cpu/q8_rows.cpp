#include "backend/cpu/q8_rows.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "backend/cpu/simd.h"
#include "backend/cpu/simd_level.h"
#include "quant/blocks.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft::cpu {
namespace {

constexpr int64_t kBlock = 256, kSub = 32, kSub16 = 16;

/** round(v) clamped to [-127, 127]; NaN gives 0 (no undefined float-to-int conversion). */
int8_t round_clamp(float v) {
  if (!(v == v)) return 0;
  if (v <= -127.0f) return -127;
  if (v >= 127.0f) return 127;
  return static_cast<int8_t>(std::nearbyint(v));
}

/** int16 lane indexes for vpermw: lanes 0-31 take value base[l / run] (run = 16 or 8). */
struct ScaleIdx {
  alignas(64) int16_t v[32];
};
constexpr ScaleIdx scale_idx(int first, int run) {
  ScaleIdx s{};
  for (int l = 0; l < 32; ++l) s.v[l] = static_cast<int16_t>(first + l / run);
  return s;
}

/** idx[k] = scale_idx(k * kStep, kRun): the vpermw indexes of the 4 vectors of 64 elements. */
template <int kRun, int kStep>
__attribute__((target("avx512f"))) inline void load_scale_idx(__m512i (&idx)[4]) {
  static constexpr ScaleIdx kIdx[4] = {scale_idx(0, kRun), scale_idx(kStep, kRun), scale_idx(2 * kStep, kRun),
                                       scale_idx(3 * kStep, kRun)};
  for (int k = 0; k < 4; ++k) idx[k] = _mm512_load_si512(kIdx[k].v);
}

#define FT_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma")))

/** Q4_K against int8 rows. Per 64 elements (a 32-byte load of qs: low nibbles sub-block 2k, high
 *  2k + 1, joined in element order) the 4-bit values (as u8) times q1 and q2 in 16-bit pair sums
 *  (vpmaddubsw: at most 2 * 15 * 127), then those times the sub-block's 6-bit scale summed into int32
 *  lanes (vpdpwssd: at most 1.9M per lane over a block); the mins' term is dmin * sum_j m_j sums_j. */
struct Q4KVnni {
  static constexpr int64_t kBytes = sizeof(quant::BlockQ4_K);
  FT_VNNI_TARGET static void load_idx(__m512i (&idx)[4]) { load_scale_idx<16, 2>(idx); }  // sub-blocks 2k, 2k + 1
  /** A block's 16-bit sub-block scales (sc16, for the scale permutes), d_min x its 6-bit mins (dmins,
   *  times the row's 8 sub-block sums gives the mins' term) and d_w. */
  struct Parts {
    __m512i sc16;
    __m256 dmins;
    float dw;
  };
  FT_VNNI_TARGET static Parts parts(const uint8_t* blk) {
    uint16_t dh[2];
    std::memcpy(dh, blk, 4);
    const Q4KScales u = unpack_q4k_scales(blk + offsetof(quant::BlockQ4_K, scales));
    const __m512i sc16 = _mm512_castsi128_si512(
        _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, static_cast<int>(u.sc_hi), static_cast<int>(u.sc_lo))));
    const __m256 mins = _mm256_cvtepi32_ps(
        _mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, static_cast<int>(u.m_hi), static_cast<int>(u.m_lo))));
    return {sc16, _mm256_mul_ps(_mm256_set1_ps(f16_to_f32(dh[1])), mins), f16_to_f32(dh[0])};
  }
  /** The 64 4-bit values of quarter k of a block (32 bytes of qs: low nibbles, then high), as u8. */
  FT_VNNI_TARGET static __m512i nibbles(const uint8_t* blk, int k) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + offsetof(quant::BlockQ4_K, qs) + 32 * k));
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(qb, low)),
                              _mm256_and_si256(_mm256_srli_epi16(qb, 4), low), 1);
  }
  /** Block blk's int32 sums into a1 (q1) and a2 (q2), its mins' term into accm; returns d_w. */
  FT_VNNI_TARGET static float block(const uint8_t* blk, const Q8Row& x, int64_t b, const __m512i (&idx)[4],
                                    const __m512i (&x1)[4], const __m512i (&x2)[4], __m512i& a1, __m512i& a2,
                                    __m512& accm) {
    const Parts p = parts(blk);
    const __m256 term = _mm256_mul_ps(p.dmins, _mm256_loadu_ps(x.sums + 8 * b));
    accm = _mm512_add_ps(accm, _mm512_zextps256_ps512(term));
    for (int k = 0; k < 4; ++k) {
      const __m512i wq = nibbles(blk, k);
      const __m512i sc = _mm512_permutexvar_epi16(idx[k], p.sc16);
      a1 = _mm512_dpwssd_epi32(a1, _mm512_maddubs_epi16(wq, x1[k]), sc);
      a2 = _mm512_dpwssd_epi32(a2, _mm512_maddubs_epi16(wq, x2[k]), sc);
    }
    return p.dw;
  }
};

/** Q6_K against int8 rows. Per half block (128 elements: ql 64 bytes, qh 32) the 6-bit values q + 32
 *  (as u8, 0..63: low nibbles of ql with qh bits 0-1 and 2-3, then high nibbles with bits 4-5 and
 *  6-7, in element order) times q1 and q2 in 16-bit pair sums (at most 2 * 63 * 127), times the
 *  16-element groups' int8 scales into int32 (at most 16.4M per lane over a block); the offset's
 *  term is 32 d_w sum_g sc_g sums16_g. */
struct Q6KVnni {
  static constexpr int64_t kBytes = sizeof(quant::BlockQ6_K);
  FT_VNNI_TARGET static void load_idx(__m512i (&idx)[4]) { load_scale_idx<8, 4>(idx); }  // groups 4k .. 4k + 3
  FT_VNNI_TARGET static float block(const uint8_t* blk, const Q8Row& x, int64_t b, const __m512i (&idx)[4],
                                    const __m512i (&x1)[4], const __m512i (&x2)[4], __m512i& a1, __m512i& a2,
                                    __m512& accm) {
    uint16_t dh;
    std::memcpy(&dh, blk + offsetof(quant::BlockQ6_K, d), 2);
    const float dw = f16_to_f32(dh);
    const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + offsetof(quant::BlockQ6_K, scales)));
    const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
    const __m512 scf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8));
    accm = _mm512_fmadd_ps(_mm512_set1_ps(32.0f * dw), _mm512_mul_ps(scf, _mm512_loadu_ps(x.sums16 + 16 * b)), accm);
    const __m512i low = _mm512_set1_epi8(0x0f), three = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(blk + offsetof(quant::BlockQ6_K, ql) + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + offsetof(quant::BlockQ6_K, qh) + 32 * h));
      const __m512i qh01 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      const __m512i qh23 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(qh, 4)), _mm256_srli_epi16(qh, 6), 1);
      const __m512i w01 = _mm512_or_si512(_mm512_and_si512(ql, low), _mm512_slli_epi16(_mm512_and_si512(qh01, three), 4));
      const __m512i w23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low),
                                          _mm512_slli_epi16(_mm512_and_si512(qh23, three), 4));
      const __m512i s01 = _mm512_permutexvar_epi16(idx[2 * h], sc16), s23 = _mm512_permutexvar_epi16(idx[2 * h + 1], sc16);
      a1 = _mm512_dpwssd_epi32(a1, _mm512_maddubs_epi16(w01, x1[2 * h]), s01);
      a1 = _mm512_dpwssd_epi32(a1, _mm512_maddubs_epi16(w23, x1[2 * h + 1]), s23);
      a2 = _mm512_dpwssd_epi32(a2, _mm512_maddubs_epi16(w01, x2[2 * h]), s01);
      a2 = _mm512_dpwssd_epi32(a2, _mm512_maddubs_epi16(w23, x2[2 * h + 1]), s23);
    }
    return dw;
  }
};

/** RR rows of kernel class K against x: per 256-element block, x's q1 and q2 loaded once for all
 *  rows (and the next RR rows prefetched: prefetch_next, simd_level.h), K::block's int32 sums
 *  converted to float (two conversions, one per term) and scaled by d_w * d_x; the offset or mins'
 *  terms summed apart and subtracted at the end. */
template <class K, int RR>
FT_VNNI_TARGET void dot_vnni(const Q8Row& x, const uint8_t* w, int64_t rb, float* out) {
  __m512i idx[4];
  K::load_idx(idx);
  const __m512 inv254 = _mm512_set1_ps(1.0f / 254.0f);
  __m512 acc[RR], accm[RR];
  for (int r = 0; r < RR; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < x.n / kBlock; ++b) {
    __m512i x1[4], x2[4];
    for (int k = 0; k < 4; ++k) {
      x1[k] = _mm512_loadu_si512(x.q1 + b * kBlock + 64 * k);
      x2[k] = _mm512_loadu_si512(x.q2 + b * kBlock + 64 * k);
    }
    prefetch_next(w + RR * rb, b * K::kBytes * RR, K::kBytes * RR);
    for (int r = 0; r < RR; ++r) {
      __m512i a1 = _mm512_setzero_si512(), a2 = _mm512_setzero_si512();
      const float dw = K::block(w + r * rb + b * K::kBytes, x, b, idx, x1, x2, a1, a2, accm[r]);
      const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a2), inv254, _mm512_cvtepi32_ps(a1));
      acc[r] = _mm512_fmadd_ps(f, _mm512_set1_ps(dw * x.d[b]), acc[r]);
    }
  }
  for (int r = 0; r < RR; ++r) out[r] = _mm512_reduce_add_ps(acc[r]) - _mm512_reduce_add_ps(accm[r]);
}

/** MXFP4 against int8 rows (the int8 scheme of ggml-cpu quants.c ggml_vec_dot_mxfp4_q8_0, with two
 *  activation terms). Per chunk of 4 weight blocks (128 elements, within one 256-element activation
 *  block; a row's last chunk may hold 1 to 3, the others read as zeros): the 16 quant bytes of
 *  block k in 128-bit lane k; their low nibbles (elements 0..15 of each block) and high nibbles
 *  (16..31) looked up (vpshufb) as the magnitudes |kvalues_mxfp4| = 2|E2M1| (u8, 0..12), the E2M1
 *  sign bit (bit 3) moved onto the activations (negated under a mask; |q| <= 127, so no overflow);
 *  vpdpbusd sums 4 products a lane (at most 4 * 12 * 127 a term and nibble half), so lane group k
 *  of the int32 sums is block k. Converted to float (the q2 term divided by 254) and scaled per lane
 *  group by d_x * e8m0_half(e_k). */
struct Mxfp4Vnni {
  static constexpr int64_t kChunk = 128, kBytes = sizeof(quant::BlockMXFP4);
  /** The chunk's activations of term t: xl[t] holds elements 0..15 of blocks 0..3 in its lanes, xh[t]
   *  elements 16..31 (a vshufi64x2 of two 64-element loads; `nblk` < 4 loads zeros past the row). */
  FT_VNNI_TARGET static void activations(const Q8Row& x, int64_t base, int64_t nblk, __m512i (&xl)[2], __m512i (&xh)[2]) {
    const __mmask64 m0 = nblk >= 2 ? ~__mmask64{0} : __mmask64{0xffffffff};
    const __mmask64 m1 = nblk == 4 ? ~__mmask64{0} : nblk == 3 ? __mmask64{0xffffffff} : __mmask64{0};
    for (int t = 0; t < 2; ++t) {
      const int8_t* q = (t == 0 ? x.q1 : x.q2) + base;
      const __m512i a = _mm512_maskz_loadu_epi8(m0, q), b = _mm512_maskz_loadu_epi8(m1, q + 64);
      xl[t] = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(2, 0, 2, 0));
      xh[t] = _mm512_shuffle_i64x2(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    }
  }
  /** A chunk of blocks decoded: magnitudes of the low and high nibbles, their sign bits, and the
   *  blocks' scales e8m0_half(e_k) in lanes 0..3. */
  struct Weights {
    __m512i wl, wh;
    __mmask64 neg_lo, neg_hi;
    __m128 half;
  };
  /** The chunk of blocks at `blk` (4, or nblk < 4 when !kFull: the others read as zeros), decoded. */
  template <bool kFull>
  FT_VNNI_TARGET static Weights weights(const uint8_t* blk, int64_t nblk) {
    const __m512i mag = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, 1, 2, 3, 4, 6, 8, 12));
    const __m512i low = _mm512_set1_epi8(0x0f);
    const auto q = [&](int k) {
      return kFull || k < nblk ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + k * kBytes + 1)) : _mm_setzero_si128();
    };
    const auto e = [&](int k) { return kFull || k < nblk ? int{blk[k * kBytes]} : 0; };
    const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_inserti128_si256(_mm256_castsi128_si256(q(0)), q(1), 1)),
                                         _mm256_inserti128_si256(_mm256_castsi128_si256(q(2)), q(3), 1), 1);
    const __m512i lo = _mm512_and_si512(v, low), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), low);
    Weights w;
    w.neg_lo = _mm512_test_epi8_mask(v, _mm512_set1_epi8(0x08));
    w.neg_hi = _mm512_test_epi8_mask(v, _mm512_set1_epi8(static_cast<char>(0x80)));
    w.wl = _mm512_shuffle_epi8(mag, lo), w.wh = _mm512_shuffle_epi8(mag, hi);
    // e8m0_half of the 4 scale bytes: e < 2 -> 0x00200000 << e, else (e - 1) << 23.
    const __m128i ev = _mm_setr_epi32(e(0), e(1), e(2), e(3));
    const __m128i big = _mm_slli_epi32(_mm_sub_epi32(ev, _mm_set1_epi32(1)), 23);
    const __m128i small = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), ev);
    w.half = _mm_castsi128_ps(_mm_blendv_epi8(small, big, _mm_cmpgt_epi32(ev, _mm_set1_epi32(1))));
    return w;
  }
  /** acc += the decoded chunk dotted with xl, xh, scaled by dx * e8m0_half(e_k). */
  FT_VNNI_TARGET static void apply(const Weights& w, const __m512i (&xl)[2], const __m512i (&xh)[2], __m128 dx,
                                   __m512& acc) {
    const __m512i zero = _mm512_setzero_si512();
    __m512i a[2];
    for (int t = 0; t < 2; ++t) {
      const __m512i sl = _mm512_mask_sub_epi8(xl[t], w.neg_lo, zero, xl[t]);
      const __m512i sh = _mm512_mask_sub_epi8(xh[t], w.neg_hi, zero, xh[t]);
      a[t] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, w.wl, sl), w.wh, sh);
    }
    const __m512i lane_block = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    const __m512 sv = _mm512_permutexvar_ps(lane_block, _mm512_castps128_ps512(_mm_mul_ps(dx, w.half)));
    const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a[1]), _mm512_set1_ps(1.0f / 254.0f), _mm512_cvtepi32_ps(a[0]));
    acc = _mm512_fmadd_ps(f, sv, acc);
  }
  /** acc += the chunk of blocks at `blk` (weights) dotted with xl, xh (apply). */
  template <bool kFull>
  FT_VNNI_TARGET static void chunk(const uint8_t* blk, int64_t nblk, const __m512i (&xl)[2], const __m512i (&xh)[2],
                                   __m128 dx, __m512& acc) {
    apply(weights<kFull>(blk, nblk), xl, xh, dx, acc);
  }
  /** One chunk of a row against TT tokens: decoded once, each token's activations loaded and applied. */
  template <bool kFull, int TT>
  FT_VNNI_TARGET static void chunk_tokens(const uint8_t* blk, const Q8Row* xs, int64_t base, int64_t nblk,
                                          __m512 (&acc)[TT]) {
    const Weights w = weights<kFull>(blk, nblk);
    for (int t = 0; t < TT; ++t) {
      __m512i xl[2], xh[2];
      activations(xs[t], base, nblk, xl, xh);
      apply(w, xl, xh, _mm_set1_ps(xs[t].d[base / kBlock]), acc[t]);
    }
  }
};

/** RR MXFP4 rows against x (Mxfp4Vnni): per chunk, x's terms loaded once for all rows and the next
 *  RR rows prefetched. */
template <int RR>
FT_VNNI_TARGET void dot_mxfp4_vnni(const Q8Row& x, const uint8_t* w, int64_t rb, float* out) {
  using K = Mxfp4Vnni;
  __m512 acc[RR];
  for (int r = 0; r < RR; ++r) acc[r] = _mm512_setzero_ps();
  const int64_t full = x.n / K::kChunk;
  __m512i xl[2], xh[2];
  for (int64_t c = 0; c < full; ++c) {
    const int64_t base = c * K::kChunk, off = (base / kSub) * K::kBytes;  // the chunk's first block in a row
    K::activations(x, base, 4, xl, xh);
    prefetch_next(w + RR * rb, off * RR, 4 * K::kBytes * RR);
    const __m128 dx = _mm_set1_ps(x.d[base / kBlock]);
    for (int r = 0; r < RR; ++r) K::chunk<true>(w + r * rb + off, 4, xl, xh, dx, acc[r]);
  }
  if (const int64_t nblk = (x.n - full * K::kChunk) / kSub; nblk > 0) {  // 1 to 3 blocks
    const int64_t base = full * K::kChunk, off = (base / kSub) * K::kBytes;
    K::activations(x, base, nblk, xl, xh);
    const __m128 dx = _mm_set1_ps(x.d[base / kBlock]);
    for (int r = 0; r < RR; ++r) K::chunk<false>(w + r * rb + off, nblk, xl, xh, dx, acc[r]);
  }
  for (int r = 0; r < RR; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

/** One MXFP4 row against TT int8 rows xs[0 .. TT): dot_mxfp4_vnni<1>'s arithmetic for each token (the
 *  same instructions on the same values, so the same bits), each chunk of the row decoded once for all
 *  TT tokens. out[t * ldo] for t < TT. */
template <int TT>
FT_VNNI_TARGET void dot_mxfp4_tokens(const Q8Row* xs, const uint8_t* w, float* out, int64_t ldo) {
  using K = Mxfp4Vnni;
  __m512 acc[TT];
  for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps();
  const int64_t n = xs[0].n, full = n / K::kChunk;
  for (int64_t c = 0; c < full; ++c) {
    const int64_t base = c * K::kChunk;
    K::chunk_tokens<true, TT>(w + (base / kSub) * K::kBytes, xs, base, 4, acc);
  }
  if (const int64_t nblk = (n - full * K::kChunk) / kSub; nblk > 0) {  // 1 to 3 blocks
    const int64_t base = full * K::kChunk;
    K::chunk_tokens<false, TT>(w + (base / kSub) * K::kBytes, xs, base, nblk, acc);
  }
  for (int t = 0; t < TT; ++t) out[t * ldo] = _mm512_reduce_add_ps(acc[t]);
}

/** One Q4_K row against TT int8 rows xs[0 .. TT): dot_vnni<Q4KVnni, 1>'s arithmetic for each token
 *  (the same instructions on the same values, so the same bits), with the row's nibbles and scales
 *  unpacked once per block for all TT tokens. out[t * ldo] for t < TT. */
template <int TT>
FT_VNNI_TARGET void dot_q4k_tokens(const Q8Row* xs, const uint8_t* w, float* out, int64_t ldo) {
  __m512i idx[4];
  Q4KVnni::load_idx(idx);
  const __m512 inv254 = _mm512_set1_ps(1.0f / 254.0f);
  __m512 acc[TT], accm[TT];
  for (int t = 0; t < TT; ++t) acc[t] = _mm512_setzero_ps(), accm[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < xs[0].n / kBlock; ++b) {
    const uint8_t* blk = w + b * Q4KVnni::kBytes;
    const Q4KVnni::Parts p = Q4KVnni::parts(blk);
    __m512i a1[TT], a2[TT];
    for (int t = 0; t < TT; ++t) {
      const __m256 term = _mm256_mul_ps(p.dmins, _mm256_loadu_ps(xs[t].sums + 8 * b));
      accm[t] = _mm512_add_ps(accm[t], _mm512_zextps256_ps512(term));
      a1[t] = _mm512_setzero_si512(), a2[t] = _mm512_setzero_si512();
    }
    for (int k = 0; k < 4; ++k) {
      const __m512i wq = Q4KVnni::nibbles(blk, k);
      const __m512i sc = _mm512_permutexvar_epi16(idx[k], p.sc16);
      for (int t = 0; t < TT; ++t) {
        const __m512i x1 = _mm512_loadu_si512(xs[t].q1 + b * kBlock + 64 * k);
        const __m512i x2 = _mm512_loadu_si512(xs[t].q2 + b * kBlock + 64 * k);
        a1[t] = _mm512_dpwssd_epi32(a1[t], _mm512_maddubs_epi16(wq, x1), sc);
        a2[t] = _mm512_dpwssd_epi32(a2[t], _mm512_maddubs_epi16(wq, x2), sc);
      }
    }
    for (int t = 0; t < TT; ++t) {
      const __m512 f = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a2[t]), inv254, _mm512_cvtepi32_ps(a1[t]));
      acc[t] = _mm512_fmadd_ps(f, _mm512_set1_ps(p.dw * xs[t].d[b]), acc[t]);
    }
  }
  for (int t = 0; t < TT; ++t) out[t * ldo] = _mm512_reduce_add_ps(acc[t]) - _mm512_reduce_add_ps(accm[t]);
}

using TokensFn = void (*)(const Q8Row*, const uint8_t*, float*, int64_t);
const TokensFn kQ4KTokens[4] = {dot_q4k_tokens<1>, dot_q4k_tokens<2>, dot_q4k_tokens<3>, dot_q4k_tokens<4>};
const TokensFn kMxfp4Tokens[4] = {dot_mxfp4_tokens<1>, dot_mxfp4_tokens<2>, dot_mxfp4_tokens<3>,
                                     dot_mxfp4_tokens<4>};

using Q8DotFn = void (*)(const Q8Row&, const uint8_t*, int64_t, float*);
#define FT_VNNI_DOTS(K) {dot_vnni<K, 1>, dot_vnni<K, 2>, dot_vnni<K, 3>, dot_vnni<K, 4>}
const Q8DotFn kQ4KDots[4] = FT_VNNI_DOTS(Q4KVnni);
const Q8DotFn kQ6KDots[4] = FT_VNNI_DOTS(Q6KVnni);
const Q8DotFn kMxfp4Dots[4] = {dot_mxfp4_vnni<1>, dot_mxfp4_vnni<2>, dot_mxfp4_vnni<3>, dot_mxfp4_vnni<4>};
#undef FT_VNNI_DOTS
#undef FT_VNNI_TARGET

bool vnni() {
  static const bool v = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") != 0;
  }();
  return v;
}

/** One block of quantize_q8_row (len elements: 256, or 32 .. 224 for a row's last block), scalar:
 *  the same q1, q2 and d as the AVX-512 form (IEEE division, one rounding per operation: the file is
 *  compiled with -ffp-contract=off, and nearbyint rounds half to even as vroundscaleps does);
 *  16-element sums in element order, each 32-element sum the sum of its two halves'. */
void quantize_block(const float* x, int64_t len, int8_t* q1, int8_t* q2, float* d, float* sums, float* sums16) {
  float amax = 0.0f;
  bool finite = true;
  for (int64_t i = 0; i < len; ++i) amax = std::fmax(amax, std::fabs(x[i])), finite = finite && std::isfinite(x[i]);
  const float db = amax / 127.0f;
  const bool live = db > 0.0f && finite;
  *d = finite ? (live ? db : 0.0f) : std::numeric_limits<float>::quiet_NaN();
  const bool fine = std::isfinite(254.0f / db);  // false below ~1e-36: q1 alone (both forms)
  for (int g = 0; g < len / kSub16; ++g) {
    float s = 0.0f;
    for (int64_t t = g * kSub16; t < (g + 1) * kSub16; ++t) {
      int8_t a = 0, c = 0;
      if (live) {
        a = round_clamp(x[t] / db);
        c = fine ? round_clamp((x[t] - db * static_cast<float>(a)) * (254.0f / db)) : 0;
      }
      q1[t] = a, q2[t] = c;
      s += *d * (static_cast<float>(a) + static_cast<float>(c) * (1.0f / 254.0f));
    }
    sums16[g] = finite ? s : *d;
  }
  for (int j = 0; j < len / kSub; ++j) sums[j] = sums16[2 * j] + sums16[2 * j + 1];
}

/** round(v) clamped to [-127, 127] on 16 lanes (NaN lanes: 0), as int8. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) inline __m128i round_clamp16(__m512 v) {
  const __m512 r = _mm512_roundscale_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 c = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
  const __m512 z = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), c);  // NaN -> 0
  return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(z));
}

/** quantize_block on AVX-512, 16 lanes (one 16-element group) at a time; each group's sum by
 *  _mm512_reduce_add_ps. */
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_block_avx512(const float* x, int64_t len,
                                                                                int8_t* q1, int8_t* q2, float* d,
                                                                                float* sums, float* sums16) {
  __m512 m = _mm512_setzero_ps();
  __mmask16 nan = 0;
  // vmaxps returns its second operand when either is NaN, so a NaN lane leaves m as it was (as fmax).
  for (int64_t i = 0; i < len; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    m = _mm512_max_ps(_mm512_abs_ps(v), m);
    nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  }
  const float db = _mm512_reduce_max_ps(m) / 127.0f;
  const bool finite = nan == 0 && std::isfinite(db);  // an infinity makes the max infinite
  const bool live = db > 0.0f && finite;
  *d = finite ? (live ? db : 0.0f) : std::numeric_limits<float>::quiet_NaN();
  const __m512 vd = _mm512_set1_ps(db), vr = _mm512_set1_ps(254.0f / db), inv254 = _mm512_set1_ps(1.0f / 254.0f);
  const bool fine = std::isfinite(254.0f / db);  // false below ~1e-36: q1 alone (as the scalar form)
  for (int g = 0; g < len / kSub16; ++g) {
    const int64_t t = g * kSub16;
    if (!live) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q1 + t), _mm_setzero_si128());
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q2 + t), _mm_setzero_si128());
      sums16[g] = *d;
      continue;
    }
    const __m512 v = _mm512_loadu_ps(x + t);
    const __m128i a = round_clamp16(_mm512_div_ps(v, vd));
    const __m512 af = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(a));
    const __m128i c = fine ? round_clamp16(_mm512_mul_ps(_mm512_sub_ps(v, _mm512_mul_ps(vd, af)), vr)) : _mm_setzero_si128();
    const __m512 cf = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q1 + t), a);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q2 + t), c);
    sums16[g] = _mm512_reduce_add_ps(_mm512_mul_ps(vd, _mm512_add_ps(af, _mm512_mul_ps(cf, inv254))));
  }
  for (int j = 0; j < len / kSub; ++j) sums[j] = sums16[2 * j] + sums16[2 * j + 1];
}

}  // namespace

int64_t q8_row_bytes(int64_t n) {
  return 2 * n + ((n + kBlock - 1) / kBlock) * 4 + (n / kSub) * 4 + (n / kSub16) * 4;
}

Q8Row quantize_q8_row(const float* x, int64_t n, void* buf) {
  if (n <= 0 || n % kSub != 0)
    fail(ErrorCode::kInvalidArgument,
         "quantize_q8_row: {} elements are not a positive multiple of {} (blocks of {}, the last one may be shorter)",
         n, kSub, kBlock);
  auto* base = static_cast<uint8_t*>(buf);
  auto* q1 = reinterpret_cast<int8_t*>(base);
  auto* q2 = q1 + n;
  auto* d = reinterpret_cast<float*>(base + 2 * n);
  float* sums = d + (n + kBlock - 1) / kBlock;
  float* sums16 = sums + n / kSub;
  const bool wide = simd_level_id() == SimdLevel::kAvx512;
  for (int64_t b = 0; b * kBlock < n; ++b) {
    int8_t *b1 = q1 + b * kBlock, *b2 = q2 + b * kBlock;
    const int64_t len = std::min(kBlock, n - b * kBlock);
    if (wide) quantize_block_avx512(x + b * kBlock, len, b1, b2, d + b, sums + 8 * b, sums16 + 16 * b);
    else quantize_block(x + b * kBlock, len, b1, b2, d + b, sums + 8 * b, sums16 + 16 * b);
  }
  return Q8Row{q1, q2, d, sums, sums16, n};
}

bool has_q8_dot(DType type) {
  return (type == DType::Q4_K || type == DType::Q6_K || type == DType::MXFP4) &&
         simd_level_id() == SimdLevel::kAvx512 && vnni();
}

bool has_q8_dot(DType type, int64_t n) {
  return has_q8_dot(type) && n > 0 && n % kSub == 0 && n % dtype_info(type).block_size == 0;
}

void dot_rows_q8(DType type, const Q8Row& x, const void* w, int64_t row_bytes, int rows, float* out) {
  FT_CHECK(rows >= 1 && rows <= 4);
  if (!has_q8_dot(type))
    fail(ErrorCode::kUnsupported, "dot_rows_q8: no int8 kernel for {} on this machine (SIMD level {})", dtype_name(type),
         simd_level());
  FT_CHECK(has_q8_dot(type, x.n) && row_bytes >= dtype_bytes(type, x.n));
  const Q8DotFn* fns = type == DType::Q4_K ? kQ4KDots : type == DType::Q6_K ? kQ6KDots : kMxfp4Dots;
  fns[rows - 1](x, static_cast<const uint8_t*>(w), row_bytes, out);
}

void gemm_q8(DType type, const Q8Row* xs, int64_t tokens, const void* w, int64_t row_bytes, int64_t rows, float* out,
             int64_t ldo) {
  if (tokens <= 0 || rows <= 0) return;
  if (!has_q8_dot(type))
    fail(ErrorCode::kUnsupported, "gemm_q8: no int8 kernel for {} on this machine (SIMD level {})", dtype_name(type),
         simd_level());
  for (int64_t t = 0; t < tokens; ++t) FT_CHECK(xs[t].n == xs[0].n);
  FT_CHECK(has_q8_dot(type, xs[0].n) && row_bytes >= dtype_bytes(type, xs[0].n));
  const auto* wb = static_cast<const uint8_t*>(w);
  if (type == DType::Q6_K) {  // one token at a time (the same kernels, so the same bits)
    float y[4];
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < rows; r += 4) {
        const int nr = static_cast<int>(std::min<int64_t>(4, rows - r));
        dot_rows_q8(type, xs[t], wb + r * row_bytes, row_bytes, nr, y);
        for (int i = 0; i < nr; ++i) out[t * ldo + r + i] = y[i];
      }
    return;
  }
  for (int64_t t = 0; t < tokens; t += 4) {
    const int nt = static_cast<int>(std::min<int64_t>(4, tokens - t));
    const TokensFn fn = (type == DType::Q4_K ? kQ4KTokens : kMxfp4Tokens)[nt - 1];
    for (int64_t r = 0; r < rows; ++r) fn(xs + t, wb + r * row_bytes, out + t * ldo + r, ldo);
  }
}

}  // namespace ft::cpu
