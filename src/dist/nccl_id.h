#pragma once
// NcclId: the 128 bytes of an ncclUniqueId (NCCL_UNIQUE_ID_BYTES) as a plain value, with a hex text
// form for handing it to child processes or other nodes (a command-line flag, an environment
// variable). Compiles in every build, NCCL or not; dist/cuda/nccl_collective.h makes one
// (nccl_unique_id) and takes one (make_nccl_rank).
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace ft::dist {

struct NcclId {
  static constexpr size_t kBytes = 128;  // NCCL_UNIQUE_ID_BYTES
  std::array<uint8_t, kBytes> bytes{};

  /** 256 lowercase hex digits, two per byte in order. */
  std::string to_hex() const;
  /** The inverse of to_hex (either case). Throws ft::Error(kInvalidArgument) naming what is wrong when
   *  `hex` is not exactly 256 hex digits. */
  static NcclId from_hex(std::string_view hex);

  bool operator==(const NcclId&) const = default;
};

}  // namespace ft::dist
