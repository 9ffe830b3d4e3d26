#include "util/format.h"

#include <cstdlib>

#include <fmt/format.h>

namespace ft {

std::string format_bytes(int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (std::llabs(bytes) >= (int64_t{1} << 40)) return fmt::format("{:.2f} TiB", b / static_cast<double>(int64_t{1} << 40));
  if (std::llabs(bytes) >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", b / (1 << 30));
  if (std::llabs(bytes) >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", b / (1 << 20));
  if (std::llabs(bytes) >= (int64_t{1} << 10)) return fmt::format("{:.1f} KiB", b / (1 << 10));
  return fmt::format("{} B", bytes);
}

}  // namespace ft
