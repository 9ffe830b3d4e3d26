#pragma once
// EC12: BF16 expert weights in 12 bits each, losslessly. A BF16 value's high byte (sign and the
// top 7 exponent bits) carries little information in trained or random weights (~3 bits of
// entropy; DFloat11, Zhang et al. 2025, "70% Size, 100% Accuracy", codes the exponent with Huffman
// for the same reason). EC12 keeps each value's low byte as is and replaces its high byte by a
// 4-bit code into a per-matrix table of the 16 most common high bytes; values whose high byte is
// not in the table are exceptions, stored whole in a side list and patched in after decoding.
// Decoding gives back the exact BF16 bits, so kernels that read the decoded weights compute the
// same function bit for bit. Expert banks hold their BF16 experts in this form (ExpertBanks with
// BankFormat::kEc12) to cut the host-memory and PCIe bytes per expert by ~25%.
//
// Matrix layout ([rows, cols] BF16, cols a multiple of 64, all offsets from the matrix start):
//   [0, 16)    table: code c stands for the high byte table[c]
//   [16, 20)   uint32 number of exceptions
//   [64, ...)  rows, each cols / 64 groups of 96 bytes: 32 code bytes, then 64 low bytes.
//              Natural element n of a group (0..63) sits at low-byte position p = position(n); its
//              code is the low nibble of code byte p for p < 32, the high nibble of byte p - 32
//              otherwise. This order makes SIMD decoding two byte unpacks (per 128-bit lane:
//              unpacklo gives elements 8L..8L+7, unpackhi 32+8L..32+8L+7, for lane L of the 64
//              low bytes), and lets a GPU thread decode half a group from three 16-byte loads.
//   row_index_offset(): uint32 [rows + 1], exceptions of row r are [index[r], index[r + 1])
//   exceptions_offset(): uint32 pairs [capacity]: (flat element index r * cols + c, BF16 bits),
//              sorted by index; the code stored for an exception's element is 0.
// C++17-clean: included from CUDA sources.
#include <cstdint>

namespace ft::ec12 {

constexpr int64_t kGroup = 64;        // elements per group
constexpr int64_t kGroupBytes = 96;   // 32 code bytes + 64 low bytes
constexpr int64_t kHeaderBytes = 64;  // table, exception count, padding
constexpr int kTableSize = 16;

/** Low-byte position (0..63) of natural element n (0..63) inside a group (layout above). */
constexpr int position(int n) { return n < 32 ? 16 * (n / 8) + n % 8 : 16 * ((n - 32) / 8) + 8 + (n - 32) % 8; }

/** Whether a BF16 matrix with `cols` columns can be coded (cols a positive multiple of 64). */
constexpr bool supports(int64_t cols) { return cols > 0 && cols % kGroup == 0; }

/** Offsets (bytes) of one coded [rows, cols] matrix with room for `capacity` exceptions. */
struct MatrixGeometry {
  int64_t rows = 0, cols = 0, capacity = 0;
  constexpr int64_t row_bytes() const { return cols / kGroup * kGroupBytes; }
  constexpr int64_t row_index_offset() const { return kHeaderBytes + rows * row_bytes(); }
  constexpr int64_t exceptions_offset() const { return (row_index_offset() + 4 * (rows + 1) + 15) / 16 * 16; }
  /** Whole matrix, a multiple of 16. */
  constexpr int64_t bytes() const { return (exceptions_offset() + 8 * capacity + 15) / 16 * 16; }
};

/** The code table of a matrix and how many of its values fall outside it. */
struct MatrixStats {
  uint8_t table[kTableSize] = {};
  int64_t exceptions = 0;
};

/** Counts the high bytes of `n` BF16 values (raw bits) and picks the 16 most common (ties: the
 *  smaller byte first; unused entries 0) as the table. */
MatrixStats analyze(const uint16_t* bf16, int64_t n);

/** Codes src [rows, cols] (BF16 bits, row-major) with `stats` (from analyze over the same values)
 *  into dst, g.bytes() bytes (unused exception room zeroed). Throws ft::Error(kInvalidArgument)
 *  when !supports(cols), or when stats.exceptions differs from the values' count or exceeds
 *  g.capacity. */
void encode(const uint16_t* src, const MatrixGeometry& g, const MatrixStats& stats, uint8_t* dst);

/** Instruction set of decode_rows: kAuto follows cpu::simd_level() (FT_CPU_SIMD caps it). */
enum class Simd { kAuto, kScalar, kAvx2, kAvx512 };

/** "auto", "scalar", "avx2" or "avx512". */
const char* simd_name(Simd s);

/** Whether this machine runs `s` (kAuto and kScalar always). */
bool simd_available(Simd s);

/** Decodes rows [r0, r0 + nr) of the coded matrix at `matrix` (geometry rows x cols) into dst
 *  [nr, cols] BF16 bits, exceptions patched: the exact values encode was given. The same bits with
 *  every Simd. Throws ft::Error(kInvalidArgument) for rows out of range or !supports(cols),
 *  kUnsupported for a Simd this machine lacks. */
void decode_rows(const uint8_t* matrix, int64_t rows, int64_t cols, int64_t r0, int64_t nr, uint16_t* dst,
                 Simd simd = Simd::kAuto);

/** y[r] = sum_i x[i] * w[r0 + r][i] for r < nr (1..4): rows of the coded matrix at `matrix` (rows x
 *  cols) dotted with fp32 x [cols], bit for bit what cpu::dot_rows_stored(BF16, ...) gives on the
 *  decoded rows. With AVX-512 each group is decoded in registers and meets the same FMAs in the same
 *  order as that kernel's (16-value chunks, one accumulator per row, one final reduction), with
 *  exceptions patched as their group comes; otherwise the rows are decoded and widened into
 *  per-thread buffers and dotted by cpu::dot_rows (which dot_rows_stored equals). Throws kInvalidArgument for rows out of range or nr outside 1..4. */
void dot_rows(const float* x, const uint8_t* matrix, int64_t rows, int64_t cols, int64_t r0, int nr, float* y);

/** dot_rows with BF16 x [cols]: each group decoded in registers and dotted by vdpbf16ps, bit for bit
 *  what cpu::gemm_nt_bf16 gives on the decoded rows (32-value chunks in order, one accumulator per
 *  row, one final reduction). Throws kInvalidArgument as dot_rows, kUnsupported where
 *  cpu::has_bf16_dot() is false or the ec12 SIMD level is below AVX-512. */
void dot_rows_bf16(const uint16_t* x, const uint8_t* matrix, int64_t rows, int64_t cols, int64_t r0, int nr, float* y);

}  // namespace ft::ec12
