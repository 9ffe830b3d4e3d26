#include "util/read_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "util/error.h"

namespace ft {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    if (!std::filesystem::exists(path)) fail(ErrorCode::kNotFound, "{}: no such file", path);
    fail(ErrorCode::kIo, "{}: cannot open: {}", path, std::strerror(errno));
  }
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace ft
