#pragma once
// Helpers for the format tests: a scratch folder removed at the end, and a little-endian byte
// builder for hand-made (often deliberately malformed) GGUF headers.
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace ft::testing {

/** A fresh folder under the system temp dir, deleted with its contents on destruction. */
class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("ft_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/** Appends little-endian scalars and GGUF strings to a byte vector. */
struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    return raw(&v, sizeof(T));
  }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& str(const std::string& s) {
    u64(s.size());
    return raw(s.data(), s.size());
  }
  // resize + memcpy rather than insert: GCC 12 -O3 gives a false -Wstringop-overflow on the insert.
  Bytes& raw(const void* p, size_t n) {
    size_t old = b.size();
    b.resize(old + n);
    if (n) std::memcpy(b.data() + old, p, n);
    return *this;
  }
  Bytes& pad(size_t alignment) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  size_t size() const { return b.size(); }
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace ft::testing
