#pragma once
// FP8 E4M3 (the OCP 8-bit Floating Point Specification (OFP8) rev 1.0, E4M3 as torch.float8_e4m3fn
// holds it: sign bit 7, exponent bits 6-3 with bias 7, mantissa bits 2-0; exponent 0 is subnormal,
// m * 2^-9; no infinities; S.1111.111 (0x7f, 0xff) is NaN, so the largest value is 0x7e = 448) and
// FreeToken's stored form of FP8 checkpoints, DType::F8_E4M3_B32.
//
// F8_E4M3_B32 (quant::BlockF8E4M3B32 {float d; uint8_t qs[32]}, 36 bytes): a row of K values in
// blocks of 32 E4M3 codes sharing one float32 scale, value = e4m3(q) * d, one float32 product
// (the value transformers' FP8 dequantization computes: w.to(float32) * scale). Checkpoints scale FP8
// weights per [128, 128] tile (DeepSeek / Qwen "fp8", weight_block_size), per tensor or per output
// channel (compressed-tensors); each of those scales covers whole 32-blocks of a row, so repacking
// copies the codes and replicates the tile's scale into each of its blocks: lossless, 1.125 bytes a
// value. A row needs K to be a multiple of 32 (not of 128: a ragged last tile is fine).
// F8_E4M3_B16 (quant::BlockF8E4M3B16, 20 bytes, 1.25 bytes a value) is the same with blocks of 16,
// for rows of 16k values that are not 32k (fp8_row_type picks).
#include <cstdint>

#include "tensor/dtype.h"

namespace ft {

/** Value of an FP8 E4M3 (e4m3fn) code, exactly: +-0, subnormals +-m * 2^-9 (m = 1..7), normals
 *  +-(1 + m/8) * 2^(e-7), +-448 at 0x7e / 0xfe, NaN at 0x7f / 0xff. Source: OCP OFP8 rev 1.0 table 1. */
float e4m3_to_f32(uint8_t code);

/** float32 -> E4M3 code, round to nearest, ties to even; |x| above 448 saturates to +-448 (0x7e /
 *  0xfe; torch's cast gives NaN beyond 464, callers that quantize scale into range first), NaN gives
 *  0x7f, -0.0 gives 0x80. A quantizer for tests and tools. */
uint8_t f32_to_e4m3(float x);

/** How an FP8 checkpoint's float32 scale covers a weight [N, K]: scale[r / block_rows][c / block_cols],
 *  the scale tensor being [ceil(N / block_rows), ceil(K / block_cols)] (a per-tensor scale is one
 *  block of [N, K], a per-channel scale blocks of [1, K]). */
struct Fp8ScaleGrid {
  int64_t block_rows = 128;
  int64_t block_cols = 128;
};

/** The stored type for FP8 rows of K values: F8_E4M3_B32 when K is a multiple of 32, else
 *  F8_E4M3_B16 when a multiple of 16. Throws ft::Error(kUnsupported) naming K otherwise (or K <= 0). */
DType fp8_row_type(int64_t K);

/** Repacks an FP8 E4M3 weight `w` [N, K] (row-major codes) with its float32 `scales` laid out as
 *  `grid` says into rows of `type` (F8_E4M3_B32 or F8_E4M3_B16, block b = 32 or 16) at `dst`
 *  (dtype_bytes(type, K) bytes a row): codes copied, each b-block given the scale of its tile.
 *  Lossless: dequantize_row of a row equals e4m3_to_f32(w) * scale per element bit for bit. Ragged
 *  edges (N or K not multiples of the grid's blocks) take the last, partial tile's scale. Throws
 *  ft::Error(kInvalidArgument) for another type, K not a positive multiple of b, grid block_cols not a
 *  multiple of b (unless >= K), a grid block < 1, N < 0 or a null buffer. */
void fp8_rows_from_scaled(const uint8_t* w, const float* scales, int64_t N, int64_t K, Fp8ScaleGrid grid,
                          uint8_t* dst, DType type = DType::F8_E4M3_B32);

/** Quantizes float32 x [N, K] to E4M3 codes `w` [N, K] with float32 scales per `grid` tile
 *  ([ceil(N/br), ceil(K/bc)] at `scales`), the way transformers' FineGrainedFP8 quantizer does it:
 *  scale = amax(|tile|) / 448 (1 for an all-zero tile), code = f32_to_e4m3(x / scale). For tests and
 *  tools. Throws ft::Error(kInvalidArgument) for N, K < 0, a grid block < 1 or a null buffer. */
void fp8_quantize_scaled(const float* x, int64_t N, int64_t K, Fp8ScaleGrid grid, uint8_t* w, float* scales);

namespace quant {

/** Dot product of float32 x[n] with one row of `type` (F8_E4M3_B32 or F8_E4M3_B16): the sum over
 *  blocks of d * (sum of x * e4m3 value), accumulated in float32 per block. n must be a whole number
 *  of blocks (ft::Error kInvalidArgument otherwise, or for another type). */
float dot_f8_e4m3_row(DType type, const float* x, const uint8_t* row, int64_t n);

}  // namespace quant
}  // namespace ft
