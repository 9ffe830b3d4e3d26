#pragma once
// Helpers shared by all test folders: where ../shared is, and reading small binary files.
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace ft::testing {

/** $FT_SHARED_DIR, else the ../shared next to the source tree (baked in at configure time). */
inline std::string shared_dir() {
  if (const char* env = std::getenv("FT_SHARED_DIR"); env && *env) return env;
  return FT_SHARED_DEFAULT;
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

}  // namespace ft::testing
