#pragma once
// Read-only memory map of a whole file (POSIX mmap). Move-only.
#include <cstddef>
#include <cstdint>
#include <string>

namespace ft {

class MappedFile {
 public:
  MappedFile() = default;
  /** Maps `path` read-only. Throws ft::Error(kNotFound) if it does not exist, kIo if it cannot be mapped. */
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }  // bytes
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace ft
