// MXFP4 in the OCP MX v1.0 release layout: decoding (sections 5.3.3, 5.4.1), repacking into GGUF
// blocks (as llama.cpp's convert_hf_to_gguf.py GptOssModel.repack_mxfp4 does) and the section 6.3
// quantizer. See mxfp4.h.
#include "quant/mxfp4.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "quant/blocks.h"
#include "util/error.h"

namespace ft {
namespace {

constexpr int64_t kBlock = 32, kBlockBytes = 16;

void check_shape(const char* fn, const void* a, const void* b, const void* c, int64_t rows, int64_t cols) {
  if (cols <= 0 || cols % kBlock != 0)
    fail(ErrorCode::kInvalidArgument, "{}: {} columns are not a positive multiple of the MXFP4 block of {}", fn, cols,
         kBlock);
  if (rows < 0) fail(ErrorCode::kInvalidArgument, "{}: negative row count {}", fn, rows);
  if (rows > 0 && (a == nullptr || b == nullptr || c == nullptr))
    fail(ErrorCode::kInvalidArgument, "{}: null buffer", fn);
}

/** E2M1 magnitude (codes 0..7) times two: 0, 1, 2, 3, 4, 6, 8, 12. */
constexpr int kTwiceMagnitude[8] = {0, 1, 2, 3, 4, 6, 8, 12};

/** Code (0..7) of the E2M1 magnitude nearest to a >= 0, ties to the even code (mantissa bit 0),
 *  saturating at 6 (code 7). The midpoints between neighbours: 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5. */
uint8_t e2m1_magnitude_code(double a) {
  if (a <= 0.25) return 0;
  if (a < 0.75) return 1;
  if (a <= 1.25) return 2;
  if (a < 1.75) return 3;
  if (a <= 2.5) return 4;
  if (a < 3.5) return 5;
  if (a <= 5.0) return 6;
  return 7;
}

}  // namespace

float e2m1_to_f32(uint8_t code) {
  const float m = static_cast<float>(kTwiceMagnitude[code & 7]) * 0.5f;
  return (code & 8) ? -m : m;
}

float e8m0_to_f32(uint8_t e) {
  if (e == 255) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, static_cast<int>(e) - 127);  // 2^-127 is a float32 subnormal: exact
}

void mxfp4_ocp_to_f32(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t cols, float* dst) {
  check_shape("mxfp4_ocp_to_f32", blocks, scales, dst, rows, cols);
  const int64_t n_blocks = rows * (cols / kBlock);
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float x = e8m0_to_f32(scales[b]);
    const uint8_t* q = blocks + b * kBlockBytes;
    float* y = dst + b * kBlock;
    for (int j = 0; j < kBlockBytes; ++j) {
      y[2 * j] = x * e2m1_to_f32(q[j] & 0x0f);
      y[2 * j + 1] = x * e2m1_to_f32(q[j] >> 4);
    }
  }
}

void mxfp4_rows_from_ocp(const uint8_t* blocks, const uint8_t* scales, int64_t rows, int64_t cols, uint8_t* dst) {
  check_shape("mxfp4_rows_from_ocp", blocks, scales, dst, rows, cols);
  const int64_t per_row = cols / kBlock;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < per_row; ++i) {
      const int64_t b = r * per_row + i;
      if (scales[b] == 255)
        fail(ErrorCode::kInvalidFile,
             "MXFP4 row {} block {} (columns {}..{}): scale byte 255 is NaN in OCP MX (E8M0), not a usable scale", r, i,
             i * kBlock, i * kBlock + kBlock - 1);
      const uint8_t* q = blocks + b * kBlockBytes;
      // Element k of the block: OCP byte k / 2, low nibble for even k. GGUF: byte k % 16, low
      // nibble for k < 16.
      uint8_t code[kBlock];
      for (int j = 0; j < kBlockBytes; ++j) code[2 * j] = q[j] & 0x0f, code[2 * j + 1] = q[j] >> 4;
      quant::BlockMXFP4 out;
      out.e = scales[b];
      for (int j = 0; j < 16; ++j) out.qs[j] = static_cast<uint8_t>(code[j] | (code[j + 16] << 4));
      quant::store_block(dst, b, out);
    }
}

void mxfp4_ocp_quantize(const float* x, int64_t rows, int64_t cols, uint8_t* blocks, uint8_t* scales) {
  check_shape("mxfp4_ocp_quantize", x, blocks, scales, rows, cols);
  const int64_t per_row = cols / kBlock;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < per_row; ++i) {
      const int64_t b = r * per_row + i;
      const float* v = x + r * cols + i * kBlock;
      float amax = 0.0f;
      for (int k = 0; k < kBlock; ++k) {
        if (!std::isfinite(v[k]))
          fail(ErrorCode::kInvalidArgument, "mxfp4_ocp_quantize: row {} column {} is not finite ({})", r,
               i * kBlock + k, v[k]);
        amax = std::fmax(amax, std::fabs(v[k]));
      }
      int shared = -127;  // an all-zero block: the smallest scale, every code 0
      if (amax > 0.0f) {
        int e2;
        std::frexp(amax, &e2);  // amax = m * 2^e2, m in [0.5, 1): floor(log2(amax)) = e2 - 1, exactly
        shared = e2 - 1 - 2;
        if (shared < -127) shared = -127;
        if (shared > 127) shared = 127;
      }
      scales[b] = static_cast<uint8_t>(shared + 127);
      uint8_t* q = blocks + b * kBlockBytes;
      std::memset(q, 0, kBlockBytes);
      for (int k = 0; k < kBlock; ++k) {
        const double s = std::ldexp(static_cast<double>(v[k]), -shared);  // exact in double
        uint8_t c = e2m1_magnitude_code(std::fabs(s));
        if (c != 0 && s < 0) c |= 8;  // a magnitude rounded to zero is +0 (code 0)
        q[k / 2] |= static_cast<uint8_t>((k % 2) ? c << 4 : c);
      }
    }
}

}  // namespace ft
