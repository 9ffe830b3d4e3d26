#pragma once
// Human-readable quantities for logs, tables and error messages, and hex digits.
#include <cstdint>
#include <string>

namespace ft {

/** Binary units: "1.50 GiB" / "9.0 MiB" / "3.5 KiB" / "512 B" (negative values keep their sign). */
std::string format_bytes(int64_t bytes);

/** The value of hex digit `c` (0-9, a-f, A-F), or -1 for any other character. */
constexpr int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace ft
