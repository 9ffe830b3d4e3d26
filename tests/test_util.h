#pragma once
// Helpers shared by all test folders: where ../shared is, reading small binary files, random floats,
// random Q6_K blocks (quant/ has no Q6_K quantizer).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "quant/blocks.h"
#include "tensor/half.h"

namespace ft::testing {

/** $FT_SOURCE_DIR (a checkout copied elsewhere, as on a GPU machine), else the source tree baked in at
 *  configure time: where the repository's own fixtures (tests/model/fixtures) are read from. */
inline std::string source_dir() {
  if (const char* env = std::getenv("FT_SOURCE_DIR"); env && *env) return env;
  return FT_SOURCE_DIR;
}

/** $FT_SHARED_DIR, else the ../shared next to the source tree (baked in at configure time). */
inline std::string shared_dir() {
  if (const char* env = std::getenv("FT_SHARED_DIR"); env && *env) return env;
  return FT_SHARED_DEFAULT;
}

/** A path `name` under the system temp dir that is this process's own (the pid is in it): ctest runs
 *  each test in its own process, several at once, so a fixed scratch name is shared between tests
 *  that run together and one removes or overwrites what the other is using. */
inline std::string scratch_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("ft_" + std::to_string(::getpid()) + "_" + name)).string();
}

/** Reads a whole file as little-endian float32 values. Returns empty if it cannot be read. */
inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return {};
  auto size = static_cast<size_t>(in.tellg());
  std::vector<float> v(size / 4);
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

/** Reads a whole file as bytes. */
inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/** n floats drawn uniformly from [lo, hi) by mt19937(seed). */
inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/** n_blocks random Q6_K blocks at dst: random 6-bit values and int8 scales, d such that the weights
 *  stay within about [-a, a] (|q| <= 32, |scale| <= 128). */
inline void random_q6_k(std::mt19937& rng, uint8_t* dst, int64_t n_blocks, float a) {
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t b = 0; b < n_blocks; ++b) {
    quant::BlockQ6_K blk;
    auto* raw = reinterpret_cast<uint8_t*>(&blk);
    for (size_t i = 0; i < sizeof(blk); ++i) raw[i] = static_cast<uint8_t>(byte(rng));
    blk.d = f32_to_f16(a / 4096.0f);
    std::memcpy(dst + b * static_cast<int64_t>(sizeof(blk)), &blk, sizeof(blk));
  }
}

}  // namespace ft::testing
