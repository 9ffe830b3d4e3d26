#pragma once
// Human-readable quantities for logs, tables and error messages.
#include <cstdint>
#include <string>

namespace ft {

/** Binary units: "1.50 GiB" / "9.0 MiB" / "3.5 KiB" / "512 B" (negative values keep their sign). */
std::string format_bytes(int64_t bytes);

}  // namespace ft
