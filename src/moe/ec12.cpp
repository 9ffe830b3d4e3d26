#include "moe/ec12.h"

// GCC 12's AVX-512 headers self-initialise _mm512_undefined_*() values, which -Wuninitialized flags
// at every inlined use (a known false positive).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/simd.h"
#include "util/error.h"

namespace ft::ec12 {
namespace {

constexpr std::array<uint8_t, kGroup> kPosition = [] {
  std::array<uint8_t, kGroup> p{};
  for (int n = 0; n < kGroup; ++n) p[n] = static_cast<uint8_t>(position(n));
  return p;
}();

void put_u32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
uint32_t get_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

/** code_of[b]: the first table entry equal to b, or -1. */
std::array<int, 256> code_map(const uint8_t* table) {
  std::array<int, 256> code_of;
  code_of.fill(-1);
  for (int c = kTableSize - 1; c >= 0; --c) code_of[table[c]] = c;
  return code_of;
}

// ---- group decoders: `groups` consecutive groups at g into dst, 64 BF16 values per group ----

void decode_scalar(const uint8_t* table, const uint8_t* g, int64_t groups, uint16_t* dst) {
  uint16_t high[kTableSize];
  for (int c = 0; c < kTableSize; ++c) high[c] = static_cast<uint16_t>(table[c] << 8);
  for (int64_t i = 0; i < groups; ++i, g += kGroupBytes, dst += kGroup) {
    const uint8_t* low = g + 32;
    uint8_t code[kGroup];  // by low-byte position
    for (int p = 0; p < 32; ++p) {
      code[p] = g[p] & 0x0f;
      code[p + 32] = g[p] >> 4;
    }
    for (int n = 0; n < kGroup; ++n) dst[n] = high[code[kPosition[n]]] | low[kPosition[n]];
  }
}

__attribute__((target("avx2"))) void decode_avx2(const uint8_t* table, const uint8_t* g, int64_t groups,
                                                 uint16_t* dst) {
  const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  const __m256i nib = _mm256_set1_epi8(0x0f);
  for (int64_t i = 0; i < groups; ++i, g += kGroupBytes, dst += kGroup) {
    const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g));
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 32));  // positions 0..31
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g + 64));  // positions 32..63
    const __m256i h0 = _mm256_shuffle_epi8(tab, _mm256_and_si256(codes, nib));
    const __m256i h1 = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srli_epi16(codes, 4), nib));
    __m256i* d = reinterpret_cast<__m256i*>(dst);
    _mm256_storeu_si256(d + 0, _mm256_unpacklo_epi8(l0, h0));  // elements 0..15
    _mm256_storeu_si256(d + 1, _mm256_unpacklo_epi8(l1, h1));  // 16..31
    _mm256_storeu_si256(d + 2, _mm256_unpackhi_epi8(l0, h0));  // 32..47
    _mm256_storeu_si256(d + 3, _mm256_unpackhi_epi8(l1, h1));  // 48..63
  }
}

__attribute__((target("avx512f,avx512bw"))) void decode_avx512(const uint8_t* table, const uint8_t* g,
                                                                int64_t groups, uint16_t* dst) {
  const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
  const __m512i nib = _mm512_set1_epi8(0x0f);
  for (int64_t i = 0; i < groups; ++i, g += kGroupBytes, dst += kGroup) {
    const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(g));
    // Byte p: the code of position p (low nibbles for 0..31, high nibbles for 32..63).
    const __m512i idx = _mm512_and_si512(
        _mm512_inserti64x4(_mm512_castsi256_si512(codes), _mm256_srli_epi16(codes, 4), 1), nib);
    const __m512i high = _mm512_shuffle_epi8(tab, idx);
    const __m512i low = _mm512_loadu_si512(g + 32);
    _mm512_storeu_si512(dst, _mm512_unpacklo_epi8(low, high));       // elements 0..31
    _mm512_storeu_si512(dst + 32, _mm512_unpackhi_epi8(low, high));  // 32..63
  }
}

/** The BF16 -> fp32 widening of 16 values, as cpu/block_rows.cpp's widen_bf16_16. */
__attribute__((target("avx512f"))) inline __m512 widen16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/** Fused decode + dot of RR rows from `rows` (consecutive coded rows, row_bytes apart): per group,
 *  per row, four 16-value chunks in order into one accumulator per row, then _mm512_reduce_add_ps,
 *  which is cpu/block_rows.cpp's dot_bf16_avx512 chunk for chunk. Exceptions of row r are patched
 *  in the group they fall in (through a 128-byte buffer). The next tile's bytes are prefetched. */
template <int RR, bool kBf16 = false>
__attribute__((target("avx512f,avx512bw,avx512vl,avx2,avx512bf16"))) void dot_avx512(const void* xv, const uint8_t* matrix,
                                                                                     const MatrixGeometry& g, int64_t r0,
                                                                                     float* y) {
  const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(matrix)));
  const __m512i nib = _mm512_set1_epi8(0x0f);
  const int64_t rb = g.row_bytes(), groups = g.cols / kGroup;
  const uint8_t* rows = matrix + kHeaderBytes + r0 * rb;
  // The next tile's bytes into L1 as this one is dotted (rows are consecutive). H200 host, cpu
  // strategy, qwen3-30b-a3b: 26.7 tok/s with it, 20.4 without, 20.8 into L2, 24.1 two tiles ahead
  // into L2 (stored BF16: 23.0): one core's outstanding misses, not the decode, bound the executor.
  const uint8_t* next_tile = rows + RR * rb;
  const bool prefetch = r0 + 2 * RR <= g.rows;
  const uint8_t* index = matrix + g.row_index_offset();
  const uint8_t* exc = matrix + g.exceptions_offset();
  uint32_t e[RR], e_end[RR];
  int64_t next[RR];  // column of row r's next exception (cols: none left)
  for (int r = 0; r < RR; ++r) {
    e[r] = get_u32(index + 4 * (r0 + r)), e_end[r] = get_u32(index + 4 * (r0 + r + 1));
    next[r] = e[r] < e_end[r] ? get_u32(exc + 8 * e[r]) - (r0 + r) * g.cols : g.cols;
  }
  __m512 acc[RR];
  for (int r = 0; r < RR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t gi = 0; gi < groups; ++gi) {
    if (prefetch)
      for (int64_t o = 0; o < RR * kGroupBytes; o += 64)
        _mm_prefetch(reinterpret_cast<const char*>(next_tile + gi * RR * kGroupBytes + o), _MM_HINT_T0);
    // fp32 x: four 16-value chunks; BF16 x (kBf16): two 32-value chunks for vdpbf16ps.
    __m512 x0, x1, x2, x3;
    __m512bh xb0, xb1;
    if constexpr (kBf16) {
      const uint16_t* xg = static_cast<const uint16_t*>(xv) + gi * kGroup;
      xb0 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xg)), xb1 = reinterpret_cast<__m512bh>(_mm512_loadu_si512(xg + 32));
    } else {
      const float* xg = static_cast<const float*>(xv) + gi * kGroup;
      x0 = _mm512_loadu_ps(xg), x1 = _mm512_loadu_ps(xg + 16), x2 = _mm512_loadu_ps(xg + 32), x3 = _mm512_loadu_ps(xg + 48);
    }
    for (int r = 0; r < RR; ++r) {
      const uint8_t* grp = rows + r * rb + gi * kGroupBytes;
      const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(grp));
      const __m512i idx = _mm512_and_si512(
          _mm512_inserti64x4(_mm512_castsi256_si512(codes), _mm256_srli_epi16(codes, 4), 1), nib);
      const __m512i high = _mm512_shuffle_epi8(tab, idx), low = _mm512_loadu_si512(grp + 32);
      __m512i v0 = _mm512_unpacklo_epi8(low, high), v1 = _mm512_unpackhi_epi8(low, high);  // values 0..31, 32..63
      if (next[r] < (gi + 1) * kGroup) {
        alignas(64) uint16_t buf[kGroup];
        _mm512_store_si512(buf, v0);
        _mm512_store_si512(buf + 32, v1);
        for (; next[r] < (gi + 1) * kGroup;) {
          buf[next[r] - gi * kGroup] = static_cast<uint16_t>(get_u32(exc + 8 * e[r] + 4));
          ++e[r];
          next[r] = e[r] < e_end[r] ? get_u32(exc + 8 * e[r]) - (r0 + r) * g.cols : g.cols;
        }
        v0 = _mm512_load_si512(buf), v1 = _mm512_load_si512(buf + 32);
      }
      if constexpr (kBf16) {  // cpu::gemm_nt_bf16's sequence: 32-value chunks in order
        acc[r] = _mm512_dpbf16_ps(acc[r], xb0, reinterpret_cast<__m512bh>(v0));
        acc[r] = _mm512_dpbf16_ps(acc[r], xb1, reinterpret_cast<__m512bh>(v1));
      } else {
        acc[r] = _mm512_fmadd_ps(x0, widen16(_mm512_castsi512_si256(v0)), acc[r]);
        acc[r] = _mm512_fmadd_ps(x1, widen16(_mm512_extracti64x4_epi64(v0, 1)), acc[r]);
        acc[r] = _mm512_fmadd_ps(x2, widen16(_mm512_castsi512_si256(v1)), acc[r]);
        acc[r] = _mm512_fmadd_ps(x3, widen16(_mm512_extracti64x4_epi64(v1, 1)), acc[r]);
      }
    }
  }
  for (int r = 0; r < RR; ++r) y[r] = _mm512_reduce_add_ps(acc[r]);
}

Simd resolve(Simd s) {
  if (s != Simd::kAuto) return s;
  static const Simd level = [] {
    const std::string name = cpu::simd_level();
    return name == "avx512" ? Simd::kAvx512 : name == "avx2" ? Simd::kAvx2 : Simd::kScalar;
  }();
  return level;
}

}  // namespace

const char* simd_name(Simd s) {
  switch (s) {
    case Simd::kAuto: return "auto";
    case Simd::kScalar: return "scalar";
    case Simd::kAvx2: return "avx2";
    case Simd::kAvx512: return "avx512";
  }
  return "?";
}

MatrixStats analyze(const uint16_t* bf16, int64_t n) {
  int64_t count[256] = {};
  for (int64_t i = 0; i < n; ++i) ++count[bf16[i] >> 8];
  std::array<int, 256> order;
  for (int b = 0; b < 256; ++b) order[b] = b;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return count[a] > count[b]; });
  MatrixStats s;
  int64_t covered = 0;
  for (int c = 0; c < kTableSize && count[order[c]] > 0; ++c) {
    s.table[c] = static_cast<uint8_t>(order[c]);
    covered += count[order[c]];
  }
  s.exceptions = n - covered;
  return s;
}

void encode(const uint16_t* src, const MatrixGeometry& g, const MatrixStats& stats, uint8_t* dst) {
  if (!supports(g.cols)) fail(ErrorCode::kInvalidArgument, "ec12: cols {} is not a positive multiple of {}", g.cols, kGroup);
  if (g.rows < 0 || g.capacity < 0)
    fail(ErrorCode::kInvalidArgument, "ec12: invalid geometry rows {}, capacity {}", g.rows, g.capacity);
  // Unused table entries (fewer than 16 distinct high bytes) are 0 and harmless: every high byte
  // present is then a used entry, so the first matching entry is the right code.
  const std::array<int, 256> code_of = code_map(stats.table);
  const int64_t n = g.rows * g.cols;
  int64_t exceptions = 0;
  for (int64_t i = 0; i < n; ++i) exceptions += code_of[src[i] >> 8] < 0;
  if (exceptions != stats.exceptions)
    fail(ErrorCode::kInvalidArgument, "ec12: stats give {} exceptions, the {} x {} values have {}", stats.exceptions,
         g.rows, g.cols, exceptions);
  if (exceptions > g.capacity)
    fail(ErrorCode::kInvalidArgument, "ec12: {} exceptions exceed the capacity of {}", exceptions, g.capacity);

  std::memset(dst, 0, static_cast<size_t>(g.bytes()));
  std::memcpy(dst, stats.table, kTableSize);
  put_u32(dst + 16, static_cast<uint32_t>(exceptions));
  uint8_t* index = dst + g.row_index_offset();
  uint8_t* exc = dst + g.exceptions_offset();
  uint32_t e = 0;
  for (int64_t r = 0; r < g.rows; ++r) {
    put_u32(index + 4 * r, e);
    uint8_t* grp = dst + kHeaderBytes + r * g.row_bytes();
    for (int64_t c0 = 0; c0 < g.cols; c0 += kGroup, grp += kGroupBytes) {
      const uint16_t* v = src + r * g.cols + c0;
      for (int k = 0; k < kGroup; ++k) {
        const int p = kPosition[k];
        const int code = code_of[v[k] >> 8];
        grp[32 + p] = static_cast<uint8_t>(v[k] & 0xff);
        if (code < 0) {
          put_u32(exc + 8 * e, static_cast<uint32_t>(r * g.cols + c0 + k));
          put_u32(exc + 8 * e + 4, v[k]);
          ++e;
        } else if (p < 32) {
          grp[p] |= static_cast<uint8_t>(code);
        } else {
          grp[p - 32] |= static_cast<uint8_t>(code << 4);
        }
      }
    }
  }
  put_u32(index + 4 * g.rows, e);
}

bool simd_available(Simd s) {
  switch (s) {
    case Simd::kAuto:
    case Simd::kScalar: return true;
    case Simd::kAvx2: return __builtin_cpu_supports("avx2");
    case Simd::kAvx512: return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  }
  return false;
}

void decode_rows(const uint8_t* matrix, int64_t rows, int64_t cols, int64_t r0, int64_t nr, uint16_t* dst,
                 Simd simd) {
  if (!supports(cols)) fail(ErrorCode::kInvalidArgument, "ec12: cols {} is not a positive multiple of {}", cols, kGroup);
  if (rows < 0 || r0 < 0 || nr < 0 || r0 + nr > rows)
    fail(ErrorCode::kInvalidArgument, "ec12: rows [{}, {}) out of range for a matrix of {} rows", r0, r0 + nr, rows);
  const Simd s = resolve(simd);
  if (!simd_available(s)) fail(ErrorCode::kUnsupported, "ec12: this CPU lacks {}", simd_name(s));
  const MatrixGeometry g{rows, cols, 0};
  const uint8_t* groups = matrix + kHeaderBytes + r0 * g.row_bytes();
  const int64_t n_groups = nr * (cols / kGroup);
  switch (s) {
    case Simd::kAvx512: decode_avx512(matrix, groups, n_groups, dst); break;
    case Simd::kAvx2: decode_avx2(matrix, groups, n_groups, dst); break;
    default: decode_scalar(matrix, groups, n_groups, dst); break;
  }
  const uint8_t* index = matrix + g.row_index_offset();
  const uint32_t e0 = get_u32(index + 4 * r0), e1 = get_u32(index + 4 * (r0 + nr));
  const uint8_t* exc = matrix + g.exceptions_offset();
  const int64_t base = r0 * cols, end = (r0 + nr) * cols;
  for (uint32_t e = e0; e < e1; ++e) {
    const int64_t flat = get_u32(exc + 8 * e);
    FT_CHECK(flat >= base && flat < end);
    dst[flat - base] = static_cast<uint16_t>(get_u32(exc + 8 * e + 4));
  }
}

void dot_rows(const float* x, const uint8_t* matrix, int64_t rows, int64_t cols, int64_t r0, int nr, float* y) {
  if (nr < 1 || nr > 4) fail(ErrorCode::kInvalidArgument, "ec12: dot of {} rows (1..4)", nr);
  if (!supports(cols)) fail(ErrorCode::kInvalidArgument, "ec12: cols {} is not a positive multiple of {}", cols, kGroup);
  if (r0 < 0 || r0 + nr > rows)
    fail(ErrorCode::kInvalidArgument, "ec12: rows [{}, {}) out of range for a matrix of {} rows", r0, r0 + nr, rows);
  const MatrixGeometry g{rows, cols, 0};
  if (resolve(Simd::kAuto) == Simd::kAvx512) {
    switch (nr) {
      case 1: return dot_avx512<1>(x, matrix, g, r0, y);
      case 2: return dot_avx512<2>(x, matrix, g, r0, y);
      case 3: return dot_avx512<3>(x, matrix, g, r0, y);
      default: return dot_avx512<4>(x, matrix, g, r0, y);
    }
  }
  // Decoded, widened, dotted: what dot_rows_stored(BF16) equals by its contract (and what the CPU
  // backend does at the scalar level, which has no fused kernel).
  thread_local std::vector<uint16_t> buf;
  thread_local std::vector<float> wf;
  if (static_cast<int64_t>(buf.size()) < nr * cols) buf.resize(static_cast<size_t>(nr * cols));
  if (static_cast<int64_t>(wf.size()) < nr * cols) wf.resize(static_cast<size_t>(nr * cols));
  decode_rows(matrix, rows, cols, r0, nr, buf.data());
  cpu::to_f32(DType::BF16, buf.data(), wf.data(), nr * cols);
  cpu::dot_rows(x, wf.data(), cols, nr, cols, y);
}

void dot_rows_bf16(const uint16_t* x, const uint8_t* matrix, int64_t rows, int64_t cols, int64_t r0, int nr, float* y) {
  if (nr < 1 || nr > 4) fail(ErrorCode::kInvalidArgument, "ec12: dot of {} rows (1..4)", nr);
  if (!supports(cols)) fail(ErrorCode::kInvalidArgument, "ec12: cols {} is not a positive multiple of {}", cols, kGroup);
  if (r0 < 0 || r0 + nr > rows)
    fail(ErrorCode::kInvalidArgument, "ec12: rows [{}, {}) out of range for a matrix of {} rows", r0, r0 + nr, rows);
  if (!cpu::has_bf16_dot() || resolve(Simd::kAuto) != Simd::kAvx512)
    fail(ErrorCode::kUnsupported, "ec12: dot_rows_bf16 needs AVX-512 BF16");
  const MatrixGeometry g{rows, cols, 0};
  switch (nr) {
    case 1: return dot_avx512<1, true>(x, matrix, g, r0, y);
    case 2: return dot_avx512<2, true>(x, matrix, g, r0, y);
    case 3: return dot_avx512<3, true>(x, matrix, g, r0, y);
    default: return dot_avx512<4, true>(x, matrix, g, r0, y);
  }
}

}  // namespace ft::ec12
