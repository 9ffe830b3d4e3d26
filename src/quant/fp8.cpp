// FP8 E4M3 codes, the repacking of FP8 checkpoints' scaled weights into F8_E4M3_B32 rows, and that
// type's row kernels (see fp8.h).
#include "quant/fp8.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/blocks.h"
#include "quant/kernels.h"
#include "util/error.h"

namespace ft {
namespace {

// Every code's value (OCP OFP8 rev 1.0, E4M3: bias 7, subnormal m * 2^-9, S.1111.111 NaN).
std::array<float, 256> make_e4m3_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) {
    const int e = (c >> 3) & 0xf, m = c & 0x7;
    float mag;
    if (e == 0xf && m == 0x7) mag = std::numeric_limits<float>::quiet_NaN();
    else if (e == 0) mag = std::ldexp(static_cast<float>(m), -9);
    else mag = std::ldexp(static_cast<float>(8 + m), e - 10);
    t[c] = (c & 0x80) ? -mag : mag;
  }
  return t;
}

const std::array<float, 256>& e4m3_table() {
  static const std::array<float, 256> t = make_e4m3_table();
  return t;
}

void check_grid(const char* what, int64_t N, int64_t K, Fp8ScaleGrid g) {
  if (N < 0 || K < 0) fail(ErrorCode::kInvalidArgument, "{}: negative shape [{}, {}]", what, N, K);
  if (g.block_rows < 1 || g.block_cols < 1)
    fail(ErrorCode::kInvalidArgument, "{}: scale block [{}, {}] is not positive", what, g.block_rows, g.block_cols);
}

}  // namespace

float e4m3_to_f32(uint8_t code) { return e4m3_table()[code]; }

uint8_t f32_to_e4m3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return 0x7f;
  const float a = std::fabs(x);
  if (a >= 448.0f) return sign | 0x7e;
  // Codes 0x00..0x7e are increasing in value: find the first not below a, compare with its neighbour.
  const auto& t = e4m3_table();
  const float* first = t.data();
  const float* hi = std::lower_bound(first, first + 0x7f, a);
  int code = static_cast<int>(hi - first);
  if (code > 0 && *hi != a) {
    const double up = static_cast<double>(*hi) - a, down = a - static_cast<double>(t[code - 1]);
    if (down < up || (down == up && ((code - 1) & 1) == 0)) code -= 1;
  }
  return static_cast<uint8_t>(sign | code);
}

DType fp8_row_type(int64_t K) {
  if (K > 0 && K % 32 == 0) return DType::F8_E4M3_B32;
  if (K > 0 && K % 16 == 0) return DType::F8_E4M3_B16;
  fail(ErrorCode::kUnsupported, "FP8 rows of {} values: FreeToken keeps FP8 weights in blocks of 32 or 16 values a row",
       K);
}

namespace {

int block_of(DType type, const char* what) {
  if (type == DType::F8_E4M3_B32) return 32;
  if (type == DType::F8_E4M3_B16) return 16;
  fail(ErrorCode::kInvalidArgument, "{}: {} is not an FP8 row type", what, dtype_name(type));
}

template <typename Block, int kB>
void repack(const uint8_t* w, const float* scales, int64_t N, int64_t K, Fp8ScaleGrid g, uint8_t* dst) {
  const int64_t scale_cols = (K + g.block_cols - 1) / g.block_cols;
  Block b;
  for (int64_t r = 0; r < N; ++r) {
    const float* srow = scales + (r / g.block_rows) * scale_cols;
    for (int64_t j = 0; j < K / kB; ++j) {
      b.d = srow[(j * kB) / g.block_cols];
      std::memcpy(b.qs, w + r * K + j * kB, kB);
      quant::store_block(dst, r * (K / kB) + j, b);
    }
  }
}

template <typename Block, int kB>
void dequant_rows(const uint8_t* src, float* dst, int64_t n_blocks) {
  const auto& t = e4m3_table();
  for (int64_t i = 0; i < n_blocks; ++i) {
    const auto b = quant::load_block<Block>(src, i);
    for (int k = 0; k < kB; ++k) dst[i * kB + k] = t[b.qs[k]] * b.d;
  }
}

template <typename Block, int kB>
void quant_rows(const float* src, uint8_t* dst, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    Block b;
    fp8_quantize_scaled(src + i * kB, 1, kB, Fp8ScaleGrid{1, kB}, b.qs, &b.d);
    quant::store_block(dst, i, b);
  }
}

template <typename Block, int kB>
float dot_row(const float* x, const uint8_t* row, int64_t n) {
  const auto& t = e4m3_table();
  float sum = 0;
  for (int64_t i = 0; i < n / kB; ++i) {
    const auto b = quant::load_block<Block>(row, i);
    float acc[8] = {};  // 8 lanes: the compiler vectorizes the products
    for (int k = 0; k < kB; ++k) acc[k & 7] += x[i * kB + k] * t[b.qs[k]];
    float s = 0;
    for (float a : acc) s += a;
    sum += b.d * s;
  }
  return sum;
}

}  // namespace

void fp8_rows_from_scaled(const uint8_t* w, const float* scales, int64_t N, int64_t K, Fp8ScaleGrid g,
                          uint8_t* dst, DType type) {
  check_grid("fp8_rows_from_scaled", N, K, g);
  const int kb = block_of(type, "fp8_rows_from_scaled");
  if (K <= 0 || K % kb != 0)
    fail(ErrorCode::kInvalidArgument, "fp8_rows_from_scaled: rows of {} values are not whole blocks of {} ({})", K,
         kb, dtype_name(type));
  if (g.block_cols < K && g.block_cols % kb != 0)
    fail(ErrorCode::kInvalidArgument, "fp8_rows_from_scaled: scale block width {} is not a multiple of {}",
         g.block_cols, kb);
  if (N > 0 && (w == nullptr || scales == nullptr || dst == nullptr))
    fail(ErrorCode::kInvalidArgument, "fp8_rows_from_scaled: null buffer for [{}, {}]", N, K);
  if (kb == 32) repack<quant::BlockF8E4M3B32, 32>(w, scales, N, K, g, dst);
  else repack<quant::BlockF8E4M3B16, 16>(w, scales, N, K, g, dst);
}

void fp8_quantize_scaled(const float* x, int64_t N, int64_t K, Fp8ScaleGrid g, uint8_t* w, float* scales) {
  check_grid("fp8_quantize_scaled", N, K, g);
  if (N > 0 && K > 0 && (x == nullptr || w == nullptr || scales == nullptr))
    fail(ErrorCode::kInvalidArgument, "fp8_quantize_scaled: null buffer for [{}, {}]", N, K);
  const int64_t sr = (N + g.block_rows - 1) / g.block_rows, sc = (K + g.block_cols - 1) / g.block_cols;
  for (int64_t i = 0; i < sr; ++i)
    for (int64_t j = 0; j < sc; ++j) {
      const int64_t r0 = i * g.block_rows, r1 = std::min(N, r0 + g.block_rows);
      const int64_t c0 = j * g.block_cols, c1 = std::min(K, c0 + g.block_cols);
      float amax = 0;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * K + c]));
      const float s = amax > 0 ? amax / 448.0f : 1.0f;
      scales[i * sc + j] = s;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) w[r * K + c] = f32_to_e4m3(x[r * K + c] / s);
    }
}

namespace quant {

void dequant_f8_e4m3_b32(const uint8_t* src, float* dst, int64_t n) { dequant_rows<BlockF8E4M3B32, 32>(src, dst, n); }
void dequant_f8_e4m3_b16(const uint8_t* src, float* dst, int64_t n) { dequant_rows<BlockF8E4M3B16, 16>(src, dst, n); }
void quant_f8_e4m3_b32(const float* src, uint8_t* dst, int64_t n) { quant_rows<BlockF8E4M3B32, 32>(src, dst, n); }
void quant_f8_e4m3_b16(const float* src, uint8_t* dst, int64_t n) { quant_rows<BlockF8E4M3B16, 16>(src, dst, n); }

float dot_f8_e4m3_row(DType type, const float* x, const uint8_t* row, int64_t n) {
  const int kb = block_of(type, "dot_f8_e4m3_row");
  if (n < 0 || n % kb != 0)
    fail(ErrorCode::kInvalidArgument, "dot {}: {} elements are not whole blocks of {}", dtype_name(type), n, kb);
  return kb == 32 ? dot_row<BlockF8E4M3B32, 32>(x, row, n) : dot_row<BlockF8E4M3B16, 16>(x, row, n);
}

}  // namespace quant
}  // namespace ft
