#include "tools/synthetic_weights.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "quant/fp8.h"
#include "quant/nvfp4.h"
#include "quant/quant.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft {
namespace {

/** Where a block type keeps its scales. Elements decode as d * f(codes) (- dmin * g(codes)), so
 *  random code bytes are always a valid block; only the fp16 scale fields need finite values. */
struct BlockSpec {
  DType type;
  int d_off;          // fp16 d (or the E8M0 exponent byte for MXFP4)
  int min_off;        // fp16 dmin / m, -1 if none
  float min_ratio;    // dmin = min_ratio * d (K-quants: x = d*sc*q - dmin*m) or m = -min_ratio * d (Q4_1, Q5_1)
  bool e8m0;          // MXFP4: the scale is an E8M0 exponent byte
  bool clamp_q8;      // Q8_0: keep codes in [-127, 127] like ggml's quantizer
};

// The min ratios centre the elements: E[sc] = E[m] for the K-quants, so dmin = E[q] * d.
const std::array<BlockSpec, 13> kBlocks = {{
    {DType::Q4_0, 0, -1, 0, false, false},
    {DType::Q4_1, 0, 2, 7.5f, false, false},
    {DType::Q5_0, 0, -1, 0, false, false},
    {DType::Q5_1, 0, 2, 15.5f, false, false},
    {DType::Q8_0, 0, -1, 0, false, true},
    {DType::Q2_K, 80, 82, 1.5f, false, false},
    {DType::Q3_K, 108, -1, 0, false, false},
    {DType::Q4_K, 0, 2, 7.5f, false, false},
    {DType::Q5_K, 0, 2, 15.5f, false, false},
    {DType::Q6_K, 208, -1, 0, false, false},
    {DType::IQ4_NL, 0, -1, 0, false, false},
    {DType::IQ4_XS, 0, -1, 0, false, false},
    {DType::MXFP4, 0, -1, 0, true, false},
}};

const BlockSpec* block_spec(DType t) {
  for (const BlockSpec& b : kBlocks)
    if (b.type == t) return &b;
  return nullptr;
}

void put_f16(uint8_t* p, float v) {
  const uint16_t h = f32_to_f16(v);
  std::memcpy(p, &h, 2);
}

/** Random blocks with scale `d` (for MXFP4: exponent byte `e`). */
void fill_blocks(const BlockSpec& s, uint8_t* dst, int64_t n_blocks, float d, uint8_t e, SynthRng& rng) {
  const int64_t bb = dtype_info(s.type).block_bytes;
  uint64_t words[32];  // 256 bytes >= the largest supported block (Q6_K, 210 bytes)
  const int64_t nw = (bb + 7) / 8;
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* b = dst + i * bb;
    for (int64_t w = 0; w < nw; ++w) words[w] = rng.next();
    std::memcpy(b, words, static_cast<size_t>(bb));
    if (s.clamp_q8)
      for (int j = 2; j < 34; ++j)
        if (b[j] == 0x80) b[j] = 0x81;  // -128 -> -127
    if (s.e8m0) {
      b[s.d_off] = e;
    } else {
      put_f16(b + s.d_off, d);
      if (s.min_off >= 0) put_f16(b + s.min_off, s.type == DType::Q4_1 || s.type == DType::Q5_1 ? -s.min_ratio * d
                                                                                                : s.min_ratio * d);
    }
  }
}

/** RMS of the dequantized elements of random blocks with d = 1 (MXFP4: e = 127), per spec. */
float unit_rms(const BlockSpec& s) {
  const int64_t n_blocks = 64, bs = dtype_info(s.type).block_size;
  std::vector<uint8_t> raw(static_cast<size_t>(n_blocks * dtype_info(s.type).block_bytes));
  SynthRng rng(0x5eed);
  fill_blocks(s, raw.data(), n_blocks, 1.0f, 127, rng);
  std::vector<float> x(static_cast<size_t>(n_blocks * bs));
  dequantize_row(s.type, raw.data(), x.data(), n_blocks * bs);
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  return static_cast<float>(std::sqrt(ss / static_cast<double>(x.size())));
}

float calibrated_unit_rms(DType t) {
  static const std::array<float, kBlocks.size()> table = [] {
    std::array<float, kBlocks.size()> r{};
    for (size_t i = 0; i < kBlocks.size(); ++i) r[i] = unit_rms(kBlocks[i]);
    return r;
  }();
  for (size_t i = 0; i < kBlocks.size(); ++i)
    if (kBlocks[i].type == t) return table[i];
  return 1.0f;
}

// ---- FP8 and NVFP4 checkpoints' stored forms (quant/fp8.h, quant/nvfp4.h). Random bytes would hit
// the NaN codes and give E4M3's wide exponent range, so the codes are those a checkpoint's quantizer
// writes for uniform weights: E4M3 codes of uniform values over [-448, 448] (a tile scaled by
// amax / 448, as DeepSeek / Qwen FP8 checkpoints are), E2M1 codes of uniform values over [-6, 6] with
// E4M3 block scales in [0.75, 1] * 448 (ModelOpt's amax / 6 per 16 values, amax / (6 * 448) global).

bool is_f8(DType t) { return t == DType::F8_E4M3_B32 || t == DType::F8_E4M3_B16; }
bool is_nvfp4(DType t) { return t == DType::NVFP4_G64 || t == DType::NVFP4_G16; }

/** E4M3 code of the uniform value (u - 32767.5) / 32768 * 448 for 16 random bits u (never NaN). */
const std::array<uint8_t, 65536>& e4m3_uniform_codes() {
  static const std::array<uint8_t, 65536> table = [] {
    std::array<uint8_t, 65536> t{};
    for (size_t u = 0; u < t.size(); ++u) t[u] = f32_to_e4m3((static_cast<float>(u) - 32767.5f) / 32768.0f * 448.0f);
    return t;
  }();
  return table;
}

/** For 8 random bits r: [r] the E2M1 code of (r + 0.5) / 128 - 1 times 6, [256 + r] the E4M3 code of
 *  (0.75 + 0.25 (r + 0.5) / 256) * 448. */
const std::array<uint8_t, 512>& nvfp4_codes() {
  static const std::array<uint8_t, 512> table = [] {
    std::array<uint8_t, 512> t{};
    for (int r = 0; r < 256; ++r) {
      t[static_cast<size_t>(r)] = f32_to_e2m1(((static_cast<float>(r) + 0.5f) / 128.0f - 1.0f) * 6.0f);
      t[static_cast<size_t>(256 + r)] = f32_to_e4m3((0.75f + 0.25f * (static_cast<float>(r) + 0.5f) / 256.0f) * 448.0f);
    }
    return t;
  }();
  return table;
}

/** Random FP8 / NVFP4 blocks of `t` whose float32 scale (FP8: d; NVFP4: global g) is `scale`. */
void fill_checkpoint_blocks(DType t, uint8_t* dst, int64_t n_blocks, float scale, SynthRng& rng) {
  const int64_t bs = dtype_info(t).block_size, bb = dtype_info(t).block_bytes;
  for (int64_t i = 0; i < n_blocks; ++i) {
    uint8_t* b = dst + i * bb;
    std::memcpy(b, &scale, 4);
    if (is_f8(t)) {
      const auto& codes = e4m3_uniform_codes();
      for (int64_t j = 0; j < bs; j += 4) {
        const uint64_t r = rng.next();
        for (int k = 0; k < 4; ++k) b[4 + j + k] = codes[(r >> (16 * k)) & 0xffff];
      }
    } else {
      const auto& codes = nvfp4_codes();
      const int64_t n_scales = bs / 16;
      const uint64_t rs = rng.next();
      for (int64_t j = 0; j < n_scales; ++j) b[4 + j] = codes[256 + ((rs >> (8 * j)) & 0xff)];
      uint8_t* qs = b + 4 + n_scales;
      for (int64_t j = 0; j < bs / 2; j += 4) {  // 4 bytes (8 codes) per 64 random bits
        const uint64_t r = rng.next();
        for (int k = 0; k < 4; ++k)
          qs[j + k] = static_cast<uint8_t>(codes[(r >> (16 * k)) & 0xff] | codes[(r >> (16 * k + 8)) & 0xff] << 4);
      }
    }
  }
}

/** RMS of the dequantized elements of fill_checkpoint_blocks(t, ..., scale 1). */
float checkpoint_unit_rms(DType t) {
  auto rms = [](DType type) {
    const int64_t n_blocks = 256, bs = dtype_info(type).block_size;
    std::vector<uint8_t> raw(static_cast<size_t>(n_blocks * dtype_info(type).block_bytes));
    SynthRng rng(0x5eed);
    fill_checkpoint_blocks(type, raw.data(), n_blocks, 1.0f, rng);
    std::vector<float> x(static_cast<size_t>(n_blocks * bs));
    dequantize_row(type, raw.data(), x.data(), n_blocks * bs);
    double ss = 0;
    for (float v : x) ss += static_cast<double>(v) * v;
    return static_cast<float>(std::sqrt(ss / static_cast<double>(x.size())));
  };
  static const std::array<float, 4> table = {rms(DType::F8_E4M3_B32), rms(DType::F8_E4M3_B16), rms(DType::NVFP4_G64),
                                             rms(DType::NVFP4_G16)};
  switch (t) {
    case DType::F8_E4M3_B32: return table[0];
    case DType::F8_E4M3_B16: return table[1];
    case DType::NVFP4_G64: return table[2];
    default: return table[3];
  }
}

}  // namespace

SynthRng::SynthRng(uint64_t seed) {
  uint64_t z = seed;
  for (uint64_t& s : s_) {
    z += 0x9e3779b97f4a7c15ull;
    uint64_t x = z;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    s = x ^ (x >> 31);
  }
}

uint64_t SynthRng::next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ull + b + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

bool synthetic_type_supported(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || block_spec(t) != nullptr || is_f8(t) || is_nvfp4(t);
}

const char* user_type_name(DType t) {
  if (t == DType::F8_E4M3_B32 || t == DType::F8_E4M3_B16) return "fp8";
  if (t == DType::NVFP4_G64 || t == DType::NVFP4_G16) return "nvfp4";
  return dtype_name(t);
}

std::string synthetic_type_names() {
  std::string s = "F32, F16, BF16";
  for (const BlockSpec& b : kBlocks) s += std::string(", ") + dtype_name(b.type);
  return s + ", fp8 (E4M3 with a float32 scale per 32 values) and nvfp4 (ModelOpt NVFP4 as stored)";
}

void fill_random(DType t, void* dst, int64_t n, float rms, uint64_t seed) {
  if (!synthetic_type_supported(t))
    fail(ErrorCode::kUnsupported, "synthetic weights: type {} is not supported (supported: {})", user_type_name(t),
         synthetic_type_names());
  const int64_t bs = dtype_info(t).block_size;
  if (n < 0 || n % bs != 0)
    fail(ErrorCode::kInvalidArgument, "synthetic weights: {} elements are not a whole number of {} blocks", n,
         dtype_name(t));
  SynthRng rng(seed);
  const float a = std::sqrt(3.0f) * rms;  // uniform [-a, a] has RMS a / sqrt(3)
  if (t == DType::F32) {
    auto* p = static_cast<float*>(dst);
    for (int64_t i = 0; i < n; ++i) p[i] = (2.0f * rng.uniform() - 1.0f) * a;
  } else if (t == DType::F16 || t == DType::BF16) {
    // 16 random bits per element: x = (u - 32767.5) * a / 32768, u in [0, 65535].
    auto* p = static_cast<uint16_t*>(dst);
    const float step = a / 32768.0f;
    const bool bf = t == DType::BF16;
    float x[4];
    for (int64_t i = 0; i < n; i += 4) {
      const uint64_t r = rng.next();
      for (int j = 0; j < 4; ++j) x[j] = (static_cast<float>((r >> (16 * j)) & 0xffff) - 32767.5f) * step;
      const int64_t m = std::min<int64_t>(4, n - i);
      if (bf) {
        for (int64_t j = 0; j < m; ++j) p[i + j] = static_cast<uint16_t>(f32_to_bits(x[j]) >> 16);  // truncate
      } else {
        for (int64_t j = 0; j < m; ++j) p[i + j] = f32_to_f16(x[j]);
      }
    }
  } else if (is_f8(t) || is_nvfp4(t)) {
    fill_checkpoint_blocks(t, static_cast<uint8_t*>(dst), n / bs, rms / checkpoint_unit_rms(t), rng);
  } else {
    const BlockSpec& s = *block_spec(t);
    const float scale = rms / calibrated_unit_rms(t);
    uint8_t e = 127;
    if (s.e8m0) {
      const long k = std::lround(std::log2(std::max(scale, 1e-30f)));
      e = static_cast<uint8_t>(std::clamp(127L + k, 1L, 254L));
    }
    fill_blocks(s, static_cast<uint8_t*>(dst), n / bs, scale, e, rng);
  }
}

}  // namespace ft
