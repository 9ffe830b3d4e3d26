#pragma once
// Byte layouts of the GGUF block types, field for field as ggml stores them.
// Source: ggml/src/ggml-common.h (block_q4_0 ... block_iq4_xs, block_mxfp4, block_nvfp4,
// block_q1_0, block_q2_0); sizes cross-checked with gguf-py GGML_QUANT_SIZES.
// Multi-byte fields are little-endian; a block is read with load_block() (memcpy), so source
// pointers need no alignment.
#include <bit>
#include <cstdint>
#include <cstring>

namespace ft::quant {

static_assert(std::endian::native == std::endian::little, "the block readers assume a little-endian host");

inline constexpr int kQK_K = 256;  // super-block size of the K- and I-quants

// ---- legacy 32-element blocks: x = d * q (+ m) ----
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };                    // q = nibble - 8
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };                 // x = d * nibble + m
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };     // 5th bits in qh (uint32 LE)
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[32]; };                  // intermediate type (dot products)

// ---- 1- and 2-bit "0" types (ids 41, 42) ----
struct BlockQ1_0 { uint16_t d; uint8_t qs[16]; };  // 128 elements: bit set -> +d, clear -> -d
struct BlockQ2_0 { uint16_t d; uint8_t qs[16]; };  // 64 elements: 2-bit code c -> (c - 1) * d

// ---- K-quants (256-element super-blocks) ----
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };  // intermediate type

// ---- ternary ----
struct BlockTQ1_0 { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; };  // 5 (qs) or 4 (qh) trits per byte
struct BlockTQ2_0 { uint8_t qs[64]; uint16_t d; };                 // 2 bits per element

// ---- I-quants (codebook based) ----
struct BlockIQ2_XXS { uint16_t d; uint16_t qs[32]; };
struct BlockIQ2_XS { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; };
struct BlockIQ2_S { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; };  // qs[32..63] = signs
struct BlockIQ3_XXS { uint16_t d; uint8_t qs[96]; };  // qs[64..95] = 8 uint32 scale+sign words
struct BlockIQ3_S { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; };
struct BlockIQ1_S { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; };
struct BlockIQ1_M { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; };  // fp16 d in top nibbles of scales
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };

// ---- FP4 (E2M1 codes with a shared power-of-two or UE4M3 scale) ----
struct BlockMXFP4 { uint8_t e; uint8_t qs[16]; };     // 32 elements, E8M0 scale
struct BlockNVFP4 { uint8_t d[4]; uint8_t qs[32]; };  // 64 elements, 4 UE4M3 scales (16 each)

// ---- FreeToken's FP8 storage form (quant/fp8.h): 32 E4M3 codes sharing a float32 scale ----
struct BlockF8E4M3B32 { float d; uint8_t qs[32]; };  // x = e4m3(q) * d
struct BlockF8E4M3B16 { float d; uint8_t qs[16]; };  // rows of 16k values (not 32k)

// ---- FreeToken's NVFP4 storage form (quant/nvfp4.h): ModelOpt's E2M1 codes and E4M3 scales of 16 with
// the tensor's float32 global scale (little-endian bytes, so the 16-value block packs to 13 bytes) ----
struct BlockNVFP4G64 { uint8_t g[4]; uint8_t s[4]; uint8_t qs[32]; };  // x = e2m1(q) * (e4m3(s) * g); g < 0: / -g
struct BlockNVFP4G16 { uint8_t g[4]; uint8_t s[1]; uint8_t qs[8]; };   // rows of 16k values (not 64k)

static_assert(sizeof(BlockF8E4M3B32) == 36 && sizeof(BlockF8E4M3B16) == 20);
static_assert(sizeof(BlockNVFP4G64) == 40 && sizeof(BlockNVFP4G16) == 13);
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ1_0) == 18 && sizeof(BlockQ2_0) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockTQ1_0) == 54 && sizeof(BlockTQ2_0) == 66);
static_assert(sizeof(BlockIQ2_XXS) == 66 && sizeof(BlockIQ2_XS) == 74 && sizeof(BlockIQ2_S) == 82);
static_assert(sizeof(BlockIQ3_XXS) == 98 && sizeof(BlockIQ3_S) == 110 && sizeof(BlockIQ1_S) == 50);
static_assert(sizeof(BlockIQ1_M) == 56 && sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);
static_assert(sizeof(BlockMXFP4) == 17 && sizeof(BlockNVFP4) == 36);

/** Copies block `i` of type B out of a packed byte stream (any alignment). */
template <typename B>
inline B load_block(const uint8_t* src, int64_t i) {
  B b;
  std::memcpy(&b, src + i * static_cast<int64_t>(sizeof(B)), sizeof(B));
  return b;
}

/** 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes of Q4_K / Q5_K: j < 4: low
 *  6 bits of bytes j and j+4; j >= 4: a nibble of byte j+4 plus the top 2 bits of bytes j-4
 *  (scale) and j (min). Source: ggml-quants.c get_scale_min_k4. */
inline void scale_min_k4(int j, const uint8_t* q, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

/** Writes block `i` of type B into a packed byte stream (any alignment). */
template <typename B>
inline void store_block(uint8_t* dst, int64_t i, const B& b) {
  std::memcpy(dst + i * static_cast<int64_t>(sizeof(B)), &b, sizeof(B));
}

}  // namespace ft::quant
