#pragma once
// Internal: the per-type row kernels behind quant.h's dispatch. Each dequantizer turns
// `n_blocks` packed blocks at `src` (any alignment) into n_blocks * block_size floats at `dst`;
// each quantizer does the reverse. Callers (quant.cpp) have validated the counts.
#include <cstdint>

namespace ft::quant {

using DequantFn = void (*)(const uint8_t* src, float* dst, int64_t n_blocks);
using QuantFn = void (*)(const float* src, uint8_t* dst, int64_t n_blocks);

// plain.cpp: element types (a "block" is one element)
void dequant_f32(const uint8_t* src, float* dst, int64_t n);
void dequant_f16(const uint8_t* src, float* dst, int64_t n);
void dequant_bf16(const uint8_t* src, float* dst, int64_t n);
void dequant_f64(const uint8_t* src, float* dst, int64_t n);
void dequant_i8(const uint8_t* src, float* dst, int64_t n);
void dequant_i16(const uint8_t* src, float* dst, int64_t n);
void dequant_i32(const uint8_t* src, float* dst, int64_t n);
void dequant_i64(const uint8_t* src, float* dst, int64_t n);
void dequant_u8(const uint8_t* src, float* dst, int64_t n);
void dequant_bool(const uint8_t* src, float* dst, int64_t n);
void dequant_f8_e4m3(const uint8_t* src, float* dst, int64_t n);
void dequant_f8_e5m2(const uint8_t* src, float* dst, int64_t n);
void quant_f32(const float* src, uint8_t* dst, int64_t n);
void quant_f16(const float* src, uint8_t* dst, int64_t n);
void quant_bf16(const float* src, uint8_t* dst, int64_t n);

// legacy.cpp: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q1_0, Q2_0
void dequant_q4_0(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q4_1(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q5_0(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q5_1(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q8_0(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q1_0(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q2_0(const uint8_t* src, float* dst, int64_t n_blocks);
void quant_q4_0(const float* src, uint8_t* dst, int64_t n_blocks);
void quant_q8_0(const float* src, uint8_t* dst, int64_t n_blocks);

// k_quants.cpp: Q2_K .. Q6_K, and the Q4_K quantizer
void dequant_q2_k(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q3_k(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q4_k(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q5_k(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_q6_k(const uint8_t* src, float* dst, int64_t n_blocks);
void quant_q4_k(const float* src, uint8_t* dst, int64_t n_blocks);

// ternary_fp4.cpp: TQ1_0, TQ2_0, MXFP4, NVFP4
void dequant_tq1_0(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_tq2_0(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_mxfp4(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_nvfp4(const uint8_t* src, float* dst, int64_t n_blocks);

// iq_quants.cpp: codebook types
void dequant_iq2_xxs(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_iq2_xs(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_iq2_s(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_iq3_xxs(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_iq3_s(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_iq1_s(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_iq1_m(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_iq4_nl(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_iq4_xs(const uint8_t* src, float* dst, int64_t n_blocks);

// fp8.cpp: FreeToken's F8_E4M3_B32 / F8_E4M3_B16 (32 or 16 E4M3 codes + a float32 scale)
void dequant_f8_e4m3_b32(const uint8_t* src, float* dst, int64_t n_blocks);
void quant_f8_e4m3_b32(const float* src, uint8_t* dst, int64_t n_blocks);
void dequant_f8_e4m3_b16(const uint8_t* src, float* dst, int64_t n_blocks);
void quant_f8_e4m3_b16(const float* src, uint8_t* dst, int64_t n_blocks);

// nvfp4.cpp: FreeToken's NVFP4_G64 / NVFP4_G16 (ModelOpt NVFP4 with the global scale in each block)
void dequant_nvfp4_g64(const uint8_t* src, float* dst, int64_t n_blocks);
void dequant_nvfp4_g16(const uint8_t* src, float* dst, int64_t n_blocks);

}  // namespace ft::quant
