#pragma once
// NVIDIA NVFP4 as ModelOpt writes it in safetensors, and FreeToken's stored form of it.
//
// A ModelOpt NVFP4 linear weight [N, K] is three tensors (modelopt/torch/quantization/qtensor/
// nvfp4_tensor.py, vLLM's ModelOptNvFp4LinearMethod):
//   weight          U8 [N, K/2]      E2M1 codes, two a byte, value 2j in the low nibble and 2j+1 in the
//                                    high nibble (NVFP4QTensor.quantize: q[..., 1::2] << 4 | q[..., 0::2])
//   weight_scale    F8_E4M3 [N, K/16] one scale per 16 values along K
//   weight_scale_2  F32 [] or [1]    one global scale per tensor
// and dequantizes (NVFP4QTensor.dequantize) as e2m1(q) * (float(weight_scale) * weight_scale_2), the
// block's scale product formed first, in float32. E2M1 codes: quant/mxfp4.h e2m1_to_f32.
//
// Stored forms (no widening to 6 bits a value: the E4M3 scale byte stays a byte):
//   NVFP4_G64 (quant::BlockNVFP4G64, 40 bytes for 64 values, 5 bits a value): float32 global scale g,
//     4 E4M3 block scales (one per 16 values), 32 bytes of the checkpoint's codes in its nibble order.
//   NVFP4_G16 (quant::BlockNVFP4G16, 13 bytes for 16 values) for rows of 16k values that are not 64k.
// value = e2m1(q) * (e4m3(s) * g), the same two float32 products as ModelOpt's, so the decode equals
// NVFP4QTensor.dequantize in float32 bit for bit. compressed-tensors' nvfp4-pack-quantized divides by its
// global scale instead (value = e2m1(q) * (e4m3(s) / weight_global_scale), compressed_tensors'
// dequantize); such blocks store g = -weight_global_scale, the sign bit selecting the division (global
// scales are positive), so those decode exactly too. The per-tensor g rides in each block (4 bytes per
// 64 values) because a row must be decodable on its own (quant.h's dequantize_row has no per-tensor
// state) and g cannot be folded into the E4M3 scales exactly (e4m3(s) * g needs up to 28 significant
// bits); GGUF's NVFP4 (UE4M3 scales, no global scale) cannot hold these weights exactly for the same
// reason.
#include <cstdint>

#include "tensor/dtype.h"

namespace ft {

/** float32 -> E2M1 code, round to nearest with ties to the even code (the rounding of ModelOpt's
 *  NVFP4QTensor._cast_fp4: 0.25 -> 0, 0.75 -> 1, 2.5 -> 2, 5 -> 4); |x| above 6 saturates to 6; the sign
 *  bit follows x's sign bit (-0.0 gives 8). NaN gives 0. For tests and tools. */
uint8_t f32_to_e2m1(float x);

/** The stored type for NVFP4 rows of K values: NVFP4_G64 when K is a multiple of 64, else NVFP4_G16
 *  when a multiple of 16. Throws ft::Error(kUnsupported) naming K otherwise (or K <= 0). */
DType nvfp4_row_type(int64_t K);

/** Repacks NVFP4 rows into `type` (NVFP4_G64 or NVFP4_G16) at `dst` (dtype_bytes(type, K) bytes a row):
 *  `packed` [N, K/2] codes and `scales` [N, K/16] E4M3 bytes copied, the global scale set in each block.
 *  Lossless: dequantize_row of a row equals e2m1(q) * (e4m3(s) * global_scale) element by element
 *  (ModelOpt), or e2m1(q) * (e4m3(s) / global_scale) when `global_divides` (compressed-tensors). Throws
 *  ft::Error(kInvalidArgument) for another type, K not a positive multiple of the type's block, N < 0 or a
 *  null buffer; kInvalidFile for a NaN block scale (E4M3 0x7f / 0xff; naming its row and block), a global
 *  scale that is not finite, negative (or -0.0), or zero when it divides. */
void nvfp4_rows_from_modelopt(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t N,
                              int64_t K, uint8_t* dst, DType type, bool global_divides = false);

/** Repacks rows of GGUF NVFP4 (quant::BlockNVFP4: 4 UE4M3 scales of 16 values, then 32 bytes whose
 *  sub-block k holds value j in the low nibble and value j + 8 in the high nibble of byte 8k + j; the
 *  layout llama.cpp's converter writes for ModelOpt checkpoints) with their per-tensor scale
 *  `global_scale` (llama.cpp's `<weight>.scale`, which it multiplies into the matmul output) into
 *  NVFP4_G64 at `dst` (dtype_bytes(NVFP4_G64, K) bytes a row): the same E2M1 codes in ModelOpt's nibble
 *  order, each scale byte with bit 7 cleared (UE4M3 ignores it) and the UE4M3 code 0x7f, which GGUF
 *  decodes as 0, stored as 0. dequantize_row of a row then equals GGUF's decode times global_scale up
 *  to the float32 rounding of e4m3(s) * global_scale. Throws ft::Error(kInvalidArgument) for K not a
 *  positive multiple of 64, N < 0 or a null buffer; kInvalidFile for a global scale that is not finite
 *  or is negative (or -0.0), or a scale byte 0xff (ggml decodes it as 480, which E4M3 cannot hold;
 *  the converter clears bit 7, so it never writes one), naming its row and values. */
void nvfp4_rows_from_gguf(const uint8_t* blocks, float global_scale, int64_t N, int64_t K, uint8_t* dst);

/** Quantizes float32 x [N, K] (K a multiple of 16) the way ModelOpt's NVFP4QTensor.quantize does:
 *  global_scale = amax(|x|) / (6 * 448) (1 for an all-zero x), block scale = e4m3(amax(|block|) / (6 *
 *  global_scale)) (1 for an all-zero block), codes f32_to_e2m1(x / (e4m3(scale) * global_scale)), packed
 *  low nibble first into `packed` [N, K/2], E4M3 bytes into `scales` [N, K/16]. For tests and tools.
 *  Throws ft::Error(kInvalidArgument) for N < 0, K not a positive multiple of 16 or a null buffer. */
void nvfp4_quantize_modelopt(const float* x, int64_t N, int64_t K, uint8_t* packed, uint8_t* scales,
                             float* global_scale);

}  // namespace ft
