#pragma once
// MXFP4 as the OCP Microscaling Formats (MX) Specification v1.0 (Open Compute Project, September
// 2023) defines it, and its two byte layouts: blocks of k = 32 elements, each an FP4 E2M1 value
// (section 5.3.3), sharing one E8M0 scale X (section 5.4.1); element i of a block is X * P_i.
//
// Layouts:
//  - OCP release layout (OpenAI's gpt-oss checkpoints, read by Hugging Face transformers,
//    integrations/mxfp4.py convert_moe_packed_tensors): a tensor `*_blocks` U8 [..., rows, cols / 32,
//    16] and a separate `*_scales` U8 [..., rows, cols / 32]; byte j of a block holds element 2j in
//    its LOW nibble and element 2j + 1 in its high nibble. The scale byte is the raw E8M0 exponent.
//  - GGUF MXFP4 (ggml type 39, ggml-common.h block_mxfp4 = quant::BlockMXFP4 {e, qs[16]}): the
//    scale byte first, then byte j holds element j in its low nibble and element j + 16 in its high
//    nibble; ggml decodes kvalues_mxfp4[q] (E2M1 times two) * ggml_e8m0_to_fp32_half(e) (X / 2), the
//    same value. llama.cpp's convert_hf_to_gguf.py (GptOssModel.transform_nibble_layout,
//    repack_mxfp4) makes exactly this repacking, so mxfp4_rows_from_ocp writes the bytes of a GGUF
//    converted by it.
#include <cstdint>

namespace ft {

/** Value of an FP4 E2M1 code (its low 4 bits; the high bits are ignored). OCP MX v1.0 section
 *  5.3.3: sign bit 3, exponent bits 2-1 with bias 1, mantissa bit 0; exponent 0 is subnormal
 *  (0.5 * mantissa). Codes 0..7 are 0, 0.5, 1, 1.5, 2, 3, 4, 6; codes 8..15 their negatives, code 8
 *  being -0.0. E2M1 has no infinity and no NaN. */
float e2m1_to_f32(uint8_t code);

/** Value of an E8M0 scale byte, 2^(e - 127) (OCP MX v1.0 section 5.4.1: unsigned exponent, bias
 *  127, no sign, no mantissa, no zero, no infinity): e = 0 gives 2^-127 (a float32 subnormal),
 *  e = 254 gives 2^127, e = 255 is NaN. */
float e8m0_to_f32(uint8_t e);

/** Decodes MXFP4 rows in the OCP release layout to float32, value = e8m0_to_f32(scale) *
 *  e2m1_to_f32(code), as OCP MX v1.0 section 6 defines an MX block's values (and as transformers'
 *  convert_moe_packed_tensors computes them before its transpose; a product overflowing float32 is
 *  an infinity, scale 255 gives NaNs). `blocks`: U8 [rows, cols / 32, 16]; `scales`: U8 [rows, cols /
 *  32]; `dst`: F32 [rows, cols]. Throws ft::Error(kInvalidArgument) for cols not a positive multiple
 *  of 32, negative rows or a null buffer. The reference the converters and kernels are tested
 *  against. */
void mxfp4_ocp_to_f32(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t cols, float* dst);

/** Repacks MXFP4 rows from the OCP release layout (see the header comment; `blocks` U8 [rows, cols /
 *  32, 16], `scales` U8 [rows, cols / 32]) into GGUF MXFP4 rows at `dst` (rows * cols / 32 blocks of
 *  quant::BlockMXFP4, 17 bytes each, row after row: dtype_bytes(DType::MXFP4, cols) bytes a row).
 *  Lossless: dequantize_row(DType::MXFP4) of the result equals mxfp4_ocp_to_f32 of the input bit for
 *  bit, and the bytes equal those llama.cpp's converter writes for the same tensor. Throws
 *  ft::Error: kInvalidArgument for cols not a positive multiple of 32, negative rows or a null
 *  buffer; kInvalidFile for a scale byte 255 (NaN in OCP MX, which GGUF's E8M0 decoder would read as
 *  2^127), naming its row and block. */
void mxfp4_rows_from_ocp(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t cols, uint8_t* dst);

/** Quantizes float32 rows to MXFP4 in the OCP release layout (`blocks` U8 [rows, cols / 32, 16],
 *  `scales` U8 [rows, cols / 32]) with the conversion of OCP MX v1.0 section 6.3: per block of 32,
 *  shared exponent = floor(log2(max |x|)) - 2 (2 = emax of E2M1), clamped to E8M0's [-127, 127]
 *  (an all-zero block takes -127), then each x / 2^exponent rounded to the nearest E2M1 value, ties
 *  to even (to the code with mantissa 0), saturating at +-6. Throws ft::Error(kInvalidArgument) for
 *  cols not a positive multiple of 32, negative rows, a null buffer or a non-finite input (which OCP
 *  leaves implementation-defined), naming its row and column. (tests/model/gen_gpt_oss_mxfp4.py
 *  quantizes with the same section 6.3 rule in torch but breaks ties down and writes -0.) */
void mxfp4_ocp_quantize(const float* x, int64_t rows, int64_t cols, uint8_t* blocks, uint8_t* scales);

}  // namespace ft
