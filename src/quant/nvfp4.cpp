// ModelOpt NVFP4: E2M1 codes, the repacking of checkpoint rows into NVFP4_G64 / NVFP4_G16, those
// types' decoders, and a ModelOpt-style quantizer for tests (see nvfp4.h).
#include "quant/nvfp4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp8.h"
#include "quant/kernels.h"
#include "util/error.h"

namespace ft {
namespace {

constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                             -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

int block_of(DType type, const char* what) {
  if (type == DType::NVFP4_G64) return 64;
  if (type == DType::NVFP4_G16) return 16;
  fail(ErrorCode::kInvalidArgument, "{}: {} is not an NVFP4 row type", what, dtype_name(type));
}

/** Block of kB values: global scale, kB / 16 E4M3 scales, kB / 2 code bytes (the two layouts share it). */
template <int kB>
struct Parts {
  float g;
  uint8_t s[kB / 16];
  uint8_t qs[kB / 2];
};

template <typename Block, int kB>
Parts<kB> load(const uint8_t* src, int64_t i) {
  Parts<kB> p;
  const uint8_t* b = src + i * static_cast<int64_t>(sizeof(Block));
  std::memcpy(&p.g, b + offsetof(Block, g), 4);
  std::memcpy(p.s, b + offsetof(Block, s), kB / 16);
  std::memcpy(p.qs, b + offsetof(Block, qs), kB / 2);
  return p;
}

template <typename Block, int kB>
void store(uint8_t* dst, int64_t i, const Parts<kB>& p) {
  uint8_t* b = dst + i * static_cast<int64_t>(sizeof(Block));
  std::memcpy(b + offsetof(Block, g), &p.g, 4);
  std::memcpy(b + offsetof(Block, s), p.s, kB / 16);
  std::memcpy(b + offsetof(Block, qs), p.qs, kB / 2);
}

template <typename Block, int kB>
void repack(const uint8_t* packed, const uint8_t* scales, float g, int64_t N, int64_t K, uint8_t* dst) {
  Parts<kB> p;
  p.g = g;
  for (int64_t r = 0; r < N; ++r)
    for (int64_t j = 0; j < K / kB; ++j) {
      const uint8_t* s = scales + r * (K / 16) + j * (kB / 16);
      for (int k = 0; k < kB / 16; ++k)
        if ((s[k] & 0x7f) == 0x7f)
          fail(ErrorCode::kInvalidFile, "NVFP4 block scale of row {}, values {}..{} is NaN (E4M3 {:#04x})", r,
               j * kB + k * 16, j * kB + k * 16 + 15, s[k]);
      std::memcpy(p.s, s, kB / 16);
      std::memcpy(p.qs, packed + r * (K / 2) + j * (kB / 2), kB / 2);
      store<Block, kB>(dst, r * (K / kB) + j, p);
    }
}

template <typename Block, int kB>
void dequant_rows(const uint8_t* src, float* y, int64_t n_blocks) {
  for (int64_t i = 0; i < n_blocks; ++i) {
    const Parts<kB> p = load<Block, kB>(src, i);
    for (int k = 0; k < kB / 16; ++k, y += 16) {
      // ModelOpt: per_block_scale = scale.float() * scale_2; compressed-tensors (g < 0): scale / global_scale.
      const float s = e4m3_to_f32(p.s[k]);
      const float d = std::signbit(p.g) ? s / -p.g : s * p.g;
      for (int j = 0; j < 8; ++j) {
        const uint8_t q = p.qs[8 * k + j];
        y[2 * j] = kE2M1[q & 0x0f] * d;
        y[2 * j + 1] = kE2M1[q >> 4] * d;
      }
    }
  }
}

}  // namespace

uint8_t f32_to_e2m1(float x) {
  if (std::isnan(x)) return 0;
  const uint8_t sign = std::signbit(x) ? 8 : 0;
  const float a = std::fabs(x);
  int code = 7;
  for (int c = 0; c < 7; ++c) {
    const float mid = (kE2M1[c] + kE2M1[c + 1]) / 2;  // exact: the magnitudes have 2 significant bits
    if (a < mid || (a == mid && c % 2 == 0)) {
      code = c;
      break;
    }
  }
  return static_cast<uint8_t>(sign | code);
}

DType nvfp4_row_type(int64_t K) {
  if (K > 0 && K % 64 == 0) return DType::NVFP4_G64;
  if (K > 0 && K % 16 == 0) return DType::NVFP4_G16;
  fail(ErrorCode::kUnsupported, "NVFP4 rows of {} values: NVFP4 scales cover 16 values, so rows must be a multiple of 16",
       K);
}

void nvfp4_rows_from_modelopt(const uint8_t* packed, const uint8_t* scales, float global_scale, int64_t N,
                              int64_t K, uint8_t* dst, DType type, bool global_divides) {
  const int kb = block_of(type, "nvfp4_rows_from_modelopt");
  if (N < 0 || K <= 0 || K % kb != 0)
    fail(ErrorCode::kInvalidArgument, "nvfp4_rows_from_modelopt: [{}, {}] is not whole rows of {} blocks of {}", N,
         K, dtype_name(type), kb);
  if (N > 0 && (packed == nullptr || scales == nullptr || dst == nullptr))
    fail(ErrorCode::kInvalidArgument, "nvfp4_rows_from_modelopt: null buffer for [{}, {}]", N, K);
  if (!std::isfinite(global_scale) || std::signbit(global_scale) || (global_divides && global_scale == 0))
    fail(ErrorCode::kInvalidFile, "NVFP4 global scale {} is not a {} finite number", global_scale,
         global_divides ? "positive" : "non-negative");
  const float g = global_divides ? -global_scale : global_scale;  // the sign bit selects the division
  if (kb == 64) repack<quant::BlockNVFP4G64, 64>(packed, scales, g, N, K, dst);
  else repack<quant::BlockNVFP4G16, 16>(packed, scales, g, N, K, dst);
}

void nvfp4_rows_from_gguf(const uint8_t* blocks, float global_scale, int64_t N, int64_t K, uint8_t* dst) {
  if (N < 0 || K <= 0 || K % 64 != 0)
    fail(ErrorCode::kInvalidArgument, "nvfp4_rows_from_gguf: [{}, {}] is not whole rows of NVFP4 blocks of 64", N, K);
  if (N > 0 && (blocks == nullptr || dst == nullptr))
    fail(ErrorCode::kInvalidArgument, "nvfp4_rows_from_gguf: null buffer for [{}, {}]", N, K);
  if (!std::isfinite(global_scale) || std::signbit(global_scale))
    fail(ErrorCode::kInvalidFile, "NVFP4 global scale {} is not a non-negative finite number", global_scale);
  Parts<64> p;
  p.g = global_scale;
  for (int64_t i = 0; i < N * (K / 64); ++i) {
    const auto b = quant::load_block<quant::BlockNVFP4>(blocks, i);
    for (int k = 0; k < 4; ++k) {
      // ggml's UE4M3: 0x7f decodes as 0 (E4M3 0x7f would be NaN: store 0); 0xff as 480, above E4M3's 448.
      if (b.d[k] == 0xff)
        fail(ErrorCode::kInvalidFile, "NVFP4 block scale of row {}, values {}..{} is UE4M3 0xff (480, which llama.cpp's "
             "converter never writes and E4M3 cannot hold)", i / (K / 64), (i % (K / 64)) * 64 + k * 16,
             (i % (K / 64)) * 64 + k * 16 + 15);
      const uint8_t s = b.d[k] & 0x7f;
      p.s[k] = s == 0x7f ? 0 : s;
      uint8_t code[16];
      for (int j = 0; j < 8; ++j) {
        code[j] = b.qs[8 * k + j] & 0x0f;
        code[j + 8] = b.qs[8 * k + j] >> 4;
      }
      for (int j = 0; j < 8; ++j) p.qs[8 * k + j] = static_cast<uint8_t>(code[2 * j] | (code[2 * j + 1] << 4));
    }
    store<quant::BlockNVFP4G64, 64>(dst, i, p);
  }
}

void nvfp4_quantize_modelopt(const float* x, int64_t N, int64_t K, uint8_t* packed, uint8_t* scales,
                             float* global_scale) {
  if (N < 0 || K <= 0 || K % 16 != 0)
    fail(ErrorCode::kInvalidArgument, "nvfp4_quantize_modelopt: [{}, {}] is not rows of 16k values", N, K);
  if (N > 0 && (x == nullptr || packed == nullptr || scales == nullptr || global_scale == nullptr))
    fail(ErrorCode::kInvalidArgument, "nvfp4_quantize_modelopt: null buffer for [{}, {}]", N, K);
  float amax = 0;
  for (int64_t i = 0; i < N * K; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float g = amax > 0 ? amax / (6.0f * 448.0f) : 1.0f;
  if (global_scale) *global_scale = g;
  for (int64_t r = 0; r < N; ++r)
    for (int64_t b = 0; b < K / 16; ++b) {
      const float* v = x + r * K + b * 16;
      float bmax = 0;
      for (int k = 0; k < 16; ++k) bmax = std::max(bmax, std::fabs(v[k]));
      float s = bmax / (6.0f * g);
      if (s == 0) s = 1.0f;
      const uint8_t code = f32_to_e4m3(std::clamp(s, 0x1p-9f, 448.0f));
      scales[r * (K / 16) + b] = code;
      const float d = e4m3_to_f32(code) * g;
      for (int k = 0; k < 16; k += 2)
        packed[r * (K / 2) + b * 8 + k / 2] =
            static_cast<uint8_t>(f32_to_e2m1(v[k] / d) | (f32_to_e2m1(v[k + 1] / d) << 4));
    }
}

namespace quant {

void dequant_nvfp4_g64(const uint8_t* src, float* dst, int64_t n) { dequant_rows<BlockNVFP4G64, 64>(src, dst, n); }
void dequant_nvfp4_g16(const uint8_t* src, float* dst, int64_t n) { dequant_rows<BlockNVFP4G16, 16>(src, dst, n); }

}  // namespace quant
}  // namespace ft
