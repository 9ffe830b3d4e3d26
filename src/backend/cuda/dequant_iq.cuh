#pragma once
// Device decoders (Dq<T>, dequant.cuh's chunk interface) of ggml's codebook I-quants: IQ2_XXS (66
// bytes), IQ2_XS (74), IQ2_S (82), IQ3_XXS (98), IQ3_S (110), IQ1_S (50), IQ1_M (56), all 256-element
// super-blocks of eight 32-element sub-blocks; chunk c = sub-block (c % 8) of super-block (c / 8).
// Each load() performs quant/iq_quants.cpp's arithmetic per element in the same order (the
// dequantize_row_iq* of ggml-quants.c / gguf-py quants.py), so the CUDA values equal the CPU's bit for
// bit: db = d * (0.5 + s) * 0.25 (IQ2), d * (0.5 + s) * 0.5 (IQ3_XXS), d * (1 + 2 s) (IQ3_S), then
// db * grid * (+-1); IQ1: dl * (grid + delta). Block layouts: quant/blocks.h (ggml-common.h).
//
// The codebooks live in device memory, read through the read-only cache (__ldg), one 8-byte (or
// 4-byte) entry per grid lookup, unpacked at compile time from quant/iq_grid_data.h (the data the CPU
// tables come from). The build has no relocatable device code, so each translation unit that
// includes this header holds its own copy (~33 KB): only the instantiation files of these types
// (gemv_iq.cu, dequant_ext.cu, moe_grouped_gemm_iq.cu) include it.
#include <cstdint>

#include "backend/cuda/dequant.cuh"
#include "quant/iq_grid_data.h"
#include "quant/iq_grids.h"

namespace ft::cuda {
namespace iq {

template <size_t N>
struct U64Table {
  uint64_t v[N];
};
template <size_t N>
struct U32Table {
  uint32_t v[N];
};

/** Grid entries of 8 byte-sized elements as little-endian 64-bit words (ggml's uint64 tables). */
template <typename T, size_t N>
constexpr U64Table<N> pack8(const std::array<std::array<T, 8>, N>& g) {
  U64Table<N> o{};
  for (size_t e = 0; e < N; ++e) {
    uint64_t x = 0;
    for (size_t j = 0; j < 8; ++j) x |= static_cast<uint64_t>(static_cast<uint8_t>(g[e][j])) << (8 * j);
    o.v[e] = x;
  }
  return o;
}
/** Grid entries of 4 byte-sized elements as little-endian 32-bit words. */
template <size_t N>
constexpr U32Table<N> pack4(const std::array<std::array<uint8_t, 4>, N>& g) {
  U32Table<N> o{};
  for (size_t e = 0; e < N; ++e) {
    uint32_t x = 0;
    for (size_t j = 0; j < 4; ++j) x |= static_cast<uint32_t>(g[e][j]) << (8 * j);
    o.v[e] = x;
  }
  return o;
}

namespace gsrc = ::ft::quant::iq_data;
static __device__ const U64Table<256> kIq2xxs =
    pack8(gsrc::unpack_grid<uint8_t, 256, 8>(gsrc::kIq2xxsHex, gsrc::kMap2));
static __device__ const U64Table<512> kIq2xs = pack8(gsrc::unpack_grid<uint8_t, 512, 8>(gsrc::kIq2xsHex, gsrc::kMap2));
static __device__ const U64Table<1024> kIq2s = pack8(gsrc::unpack_grid<uint8_t, 1024, 8>(gsrc::kIq2sHex, gsrc::kMap2));
static __device__ const U32Table<256> kIq3xxs =
    pack4(gsrc::unpack_grid<uint8_t, 256, 4>(gsrc::kIq3xxsHex, gsrc::kMapIq3xxs));
static __device__ const U32Table<512> kIq3s = pack4(gsrc::unpack_grid<uint8_t, 512, 4>(gsrc::kIq3sHex, gsrc::kMapIq3s));
static __device__ const U64Table<2048> kIq1s =
    pack8(gsrc::unpack_grid<int8_t, 2048, 8>(gsrc::kIq1sHex, gsrc::kMapIq1s));

__device__ __forceinline__ int ld_u16(const uint8_t* p) { return p[0] | (p[1] << 8); }
/** ksigns_iq2xs[s7]: the 7 sign bits plus an 8th that makes the count of set bits even. */
__device__ __forceinline__ int ksigns(uint32_t s7) { return static_cast<int>(s7 | (__popc(s7) & 1) << 7); }
/** Element j of a packed grid entry, as float (unsigned bytes). */
__device__ __forceinline__ float gu(uint64_t g, int j) { return i2f(static_cast<int>((g >> (8 * j)) & 0xff)); }
/** Element j of a packed IQ1 grid entry (signed bytes -1, 0, 1), as float. */
__device__ __forceinline__ float gs(uint64_t g, int j) {
  return i2f(static_cast<int>(static_cast<int8_t>(static_cast<uint8_t>((g >> (8 * j)) & 0xff))));
}
__device__ __forceinline__ float sgn(int signs, int j) { return (signs >> j) & 1 ? -1.0f : 1.0f; }

/** v[0..7] = db * grid[j] * sign_j (iq_quants.cpp emit8). */
__device__ __forceinline__ void emit8(float* v, float db, uint64_t g, int signs) {
FT_UNROLL
  for (int j = 0; j < 8; ++j) v[j] = db * gu(g, j) * sgn(signs, j);
}
/** v[0..7] from two 4-element entries sharing a sign byte (iq_quants.cpp emit4x2). */
__device__ __forceinline__ void emit4x2(float* v, float db, uint32_t g1, uint32_t g2, int signs) {
FT_UNROLL
  for (int j = 0; j < 4; ++j) {
    v[j] = db * gu(g1, j) * sgn(signs, j);
    v[j + 4] = db * gu(g2, j) * sgn(signs, j + 4);
  }
}

}  // namespace iq

template <>
struct Dq<DType::IQ2_XXS> {
  static constexpr int kBlock = 256, kBytes = 66, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int ib = static_cast<int>(c & 7);
    const float d = ld_f16(b);
    const uint8_t* q = b + 2 + 8 * ib;  // 4 grid indices, then 4 x 7 sign bits + a 4-bit scale
    const uint32_t aux = ld_u32_bytes(q + 4);
    const float db = d * (0.5f + i2f(static_cast<int>(aux >> 28))) * 0.25f;
FT_UNROLL
    for (int l = 0; l < 4; ++l)
      iq::emit8(v + 8 * l, db, __ldg(&iq::kIq2xxs.v[q[l]]), iq::ksigns((aux >> (7 * l)) & 127));
  }
};

template <>
struct Dq<DType::IQ2_XS> {
  static constexpr int kBlock = 256, kBytes = 74, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int ib = static_cast<int>(c & 7);
    const float d = ld_f16(b);
    const int sc = b[66 + ib];
    const float db[2] = {d * (0.5f + i2f(sc & 15)) * 0.25f, d * (0.5f + i2f(sc >> 4)) * 0.25f};
FT_UNROLL
    for (int l = 0; l < 4; ++l) {
      const int q = iq::ld_u16(b + 2 + 8 * ib + 2 * l);  // 9-bit grid index, 7-bit sign index
      iq::emit8(v + 8 * l, db[l / 2], __ldg(&iq::kIq2xs.v[q & 511]), iq::ksigns(static_cast<uint32_t>(q) >> 9));
    }
  }
};

template <>
struct Dq<DType::IQ2_S> {
  static constexpr int kBlock = 256, kBytes = 82, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int ib = static_cast<int>(c & 7);
    const float d = ld_f16(b);
    const uint8_t* qs = b + 2 + 4 * ib;      // low 8 index bits
    const uint8_t* signs = b + 34 + 4 * ib;  // qs[32..63]: one sign byte per 8 weights
    const int qh = b[66 + ib], sc = b[74 + ib];
    const float db[2] = {d * (0.5f + i2f(sc & 15)) * 0.25f, d * (0.5f + i2f(sc >> 4)) * 0.25f};
FT_UNROLL
    for (int l = 0; l < 4; ++l) {
      const int idx = qs[l] | ((qh << (8 - 2 * l)) & 0x300);
      iq::emit8(v + 8 * l, db[l / 2], __ldg(&iq::kIq2s.v[idx]), signs[l]);
    }
  }
};

template <>
struct Dq<DType::IQ3_XXS> {
  static constexpr int kBlock = 256, kBytes = 98, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int ib = static_cast<int>(c & 7);
    const float d = ld_f16(b);
    const uint8_t* qs = b + 2 + 8 * ib;
    const uint32_t aux = ld_u32_bytes(b + 2 + 64 + 4 * ib);  // 4 x 7 sign bits + a 4-bit scale
    const float db = d * (0.5f + i2f(static_cast<int>(aux >> 28))) * 0.5f;
FT_UNROLL
    for (int l = 0; l < 4; ++l)
      iq::emit4x2(v + 8 * l, db, __ldg(&iq::kIq3xxs.v[qs[2 * l]]), __ldg(&iq::kIq3xxs.v[qs[2 * l + 1]]),
                  iq::ksigns((aux >> (7 * l)) & 127));
  }
};

template <>
struct Dq<DType::IQ3_S> {
  static constexpr int kBlock = 256, kBytes = 110, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int ib = static_cast<int>(c & 7);
    const float d = ld_f16(b);
    const uint8_t* qs = b + 2 + 8 * ib;
    const uint8_t* signs = b + 74 + 4 * ib;
    const int sc = b[106 + ib / 2];
    const float db = d * i2f(1 + 2 * ((ib & 1) ? sc >> 4 : sc & 15));
    const int qh = b[66 + ib];  // 9th index bit of each of the 8 entries
FT_UNROLL
    for (int l = 0; l < 4; ++l) {
      const int i1 = qs[2 * l] | ((qh << (8 - 2 * l)) & 256);
      const int i2 = qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256);
      iq::emit4x2(v + 8 * l, db, __ldg(&iq::kIq3s.v[i1]), __ldg(&iq::kIq3s.v[i2]), signs[l]);
    }
  }
};

template <>
struct Dq<DType::IQ1_S> {
  static constexpr int kBlock = 256, kBytes = 50, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int ib = static_cast<int>(c & 7);
    const float d = ld_f16(b);
    const uint8_t* qs = b + 2 + 4 * ib;
    const int qh = iq::ld_u16(b + 34 + 2 * ib);  // 4 x 3 high index bits, a 3-bit scale, the delta's sign
    const float dl = d * i2f(2 * ((qh >> 12) & 7) + 1);
    const float delta = (qh & 0x8000) ? -quant::kIq1sDelta : quant::kIq1sDelta;
FT_UNROLL
    for (int l = 0; l < 4; ++l) {
      const uint64_t g = __ldg(&iq::kIq1s.v[qs[l] | (((qh >> (3 * l)) & 7) << 8)]);
FT_UNROLL
      for (int j = 0; j < 8; ++j) v[8 * l + j] = dl * (iq::gs(g, j) + delta);
    }
  }
};

template <>
struct Dq<DType::IQ1_M> {
  static constexpr int kBlock = 256, kBytes = 56, kChunk = 32;
  __device__ static void load(const uint8_t* row, int64_t c, float* v) {
    const uint8_t* b = row + (c >> 3) * kBytes;
    const int ib = static_cast<int>(c & 7);
    const int sc0 = iq::ld_u16(b + 48), sc1 = iq::ld_u16(b + 50), sc2 = iq::ld_u16(b + 52), sc3 = iq::ld_u16(b + 54);
    // The fp16 super-block scale is spread over the top nibbles of the four scale words.
    const int d16 = (sc0 >> 12) | ((sc1 >> 8) & 0x00f0) | ((sc2 >> 4) & 0x0f00) | (sc3 & 0xf000);
    const float d = __half2float(__ushort_as_half(static_cast<unsigned short>(d16)));
    const int sw = ib < 4 ? (ib < 2 ? sc0 : sc1) : (ib < 6 ? sc2 : sc3);  // sc[ib / 2]
    const int sh = 6 * (ib & 1);
    const float dl1 = d * i2f(2 * ((sw >> sh) & 7) + 1);
    const float dl2 = d * i2f(2 * ((sw >> (sh + 3)) & 7) + 1);
    const uint8_t* qs = b + 4 * ib;
    const int qh0 = b[32 + 2 * ib], qh1 = b[33 + 2 * ib];
    const int idx[4] = {qs[0] | ((qh0 << 8) & 0x700), qs[1] | ((qh0 << 4) & 0x700), qs[2] | ((qh1 << 8) & 0x700),
                        qs[3] | ((qh1 << 4) & 0x700)};
    const float dp = quant::kIq1sDelta;
    const float delta[4] = {(qh0 & 0x08) ? -dp : dp, (qh0 & 0x80) ? -dp : dp, (qh1 & 0x08) ? -dp : dp,
                            (qh1 & 0x80) ? -dp : dp};
FT_UNROLL
    for (int l = 0; l < 4; ++l) {
      const float dl = l < 2 ? dl1 : dl2;
      const uint64_t g = __ldg(&iq::kIq1s.v[idx[l]]);
FT_UNROLL
      for (int j = 0; j < 8; ++j) v[8 * l + j] = dl * (iq::gs(g, j) + delta[l]);
    }
  }
};

}  // namespace ft::cuda
