#pragma once
// BF16 GEMM blocks on Intel AMX tiles (Sapphire Rapids and later): TDPBF16PS multiplies a 16 x 32
// BF16 tile of weight rows by a 32 x 16 tile of activations (VNNI pairs) into 16 x 16 fp32
// accumulators, 8x the multiply-adds per cycle of AVX-512 BF16. The activations are packed once
// into the B-tile order (amx_pack_bf16); the weight rows load straight from memory as A tiles.
// Source: Intel Architecture Instruction Set Extensions Programming Reference, ch. 3 (AMX: TILECFG,
// TILELOADD, TDPBF16PS), and the Linux kernel's arch_prctl(ARCH_REQ_XCOMP_PERM) for XTILEDATA.
//
// Arithmetic: an output element y[t, r] sums x[t, 2i] * w[r, 2i] + x[t, 2i + 1] * w[r, 2i + 1] over
// the pairs i in order into one fp32 accumulator (BF16 inputs' denormals read as zero), so its bits
// depend on x[t] and w[r] alone: a token alone or in a block of any size gives the same result. Not
// the bits of gemm_nt_bf16 (AVX-512: 16 lane accumulators reduced at the end): both are within fp32
// rounding of the exact sum of the BF16 products.
#include <cstdint>

namespace ft::cpu {

/** Whether this CPU has AMX-TILE and AMX-BF16 (CPUID), FT_CPU_SIMD does not cap the SIMD level below
 *  AVX-512, and FT_CPU_AMX is not "off" (which keeps the AVX-512 BF16 blocks). Asks the kernel for
 *  nothing. Checked once (thread-safe; the environment is read at the first call). */
bool cpu_reports_amx_bf16();

/** Whether the AMX kernels run here: cpu_reports_amx_bf16() and the kernel grants this process the
 *  tile data state (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA; from then on its signal frames are
 *  sized for the 8 KiB of tiles). Requested at the first call only (thread-safe): the code that will
 *  run the kernels calls it, not a command that only parses flags. */
bool has_amx_bf16();

/** Elements (uint16) amx_pack_bf16 writes for `tokens` rows of `n` values: ceil(tokens / 16) blocks
 *  of n / 32 tiles of 16 x 32. `n` a multiple of 32. */
inline int64_t amx_packed_elems(int64_t tokens, int64_t n) { return (tokens + 15) / 16 * (n / 32) * 512; }

/** Index in amx_pack_bf16's layout of x[t, i] (n values a row): block t / 16, tile i / 32, tile row
 *  (i % 32) / 2 (a pair of values), column t % 16, element i % 2. */
inline int64_t amx_packed_index(int64_t t, int64_t i, int64_t n) {
  return ((t / 16 * (n / 32) + i / 32) * 16 + (i % 32) / 2) * 32 + (t % 16) * 2 + (i % 2);
}

/** Packs `tokens` rows of x (BF16, row stride ldx elements, n values a row) into AMX B-tile order
 *  (amx_packed_index) in xp (amx_packed_elems(tokens, n) elements): token t is x's row t, or row[t]
 *  when `row` is given (a gather: an expert's tokens straight from the step's activations). The
 *  columns of tokens past the last are zero. Throws kInvalidArgument when n is not a multiple of 32. */
void amx_pack_bf16(const uint16_t* x, int64_t ldx, int64_t tokens, int64_t n, uint16_t* xp,
                   const int32_t* row = nullptr);

/** y[t * ldy + r] = sum_i x[t, i] * w[r * ldw + i] for t < tokens, r < rows: x given packed by
 *  amx_pack_bf16 (xp), w [rows, n] BF16 with row stride ldw, y fp32. Any rows and tokens >= 0; n a
 *  multiple of 32. Per 16 weight rows, up to 64 tokens share each A tile load. Throws kUnsupported
 *  where has_amx_bf16() is false, kInvalidArgument when n is not a multiple of 32. */
void gemm_nt_amx_bf16(const uint16_t* xp, int64_t tokens, const uint16_t* w, int64_t ldw, int64_t rows, int64_t n,
                      float* y, int64_t ldy);

}  // namespace ft::cpu
