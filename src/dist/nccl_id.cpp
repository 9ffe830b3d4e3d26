#include "dist/nccl_id.h"

#include "util/error.h"
#include "util/format.h"

namespace ft::dist {

std::string NcclId::to_hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * kBytes, '0');
  for (size_t i = 0; i < kBytes; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  return out;
}

NcclId NcclId::from_hex(std::string_view hex) {
  if (hex.size() != 2 * kBytes)
    fail(ErrorCode::kInvalidArgument, "an NCCL unique id is {} hex digits, not {}", 2 * kBytes, hex.size());
  NcclId id;
  for (size_t i = 0; i < hex.size(); ++i) {
    const int v = hex_value(hex[i]);
    if (v < 0)
      fail(ErrorCode::kInvalidArgument, "an NCCL unique id is hex digits; character {} is '{}'", i, hex[i]);
    id.bytes[i / 2] = static_cast<uint8_t>(i % 2 == 0 ? v << 4 : id.bytes[i / 2] | v);
  }
  return id;
}

}  // namespace ft::dist
