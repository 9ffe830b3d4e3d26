#include "moe/host_memory.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "util/error.h"
#include "util/format.h"

namespace ft {

int64_t host_memory_available() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return -1;
}

void check_bank_host_memory(int64_t bank_bytes, int64_t in_flight_bytes, bool source_released, int64_t available) {
  if (available < 0 || bank_bytes <= 0) return;
  const char* help =
      "Use a smaller weight type, fewer layers (--dummy-layers for a synthetic model), --moe-strategy fused with a "
      "--gpu-memory-limit that holds every expert, or a machine with more RAM";
  if (source_released) {
    const int64_t need = in_flight_bytes + kBankHostReserve;
    if (need > available)
      fail(ErrorCode::kOutOfMemory,
           "expert banks: filling {} of routed experts from a checkpoint that frees each layer once it is copied "
           "needs {} of free host memory ({} for the layers copied at once, {} reserve), but MemAvailable is {}. {}",
           format_bytes(bank_bytes), format_bytes(need), format_bytes(in_flight_bytes),
           format_bytes(kBankHostReserve), format_bytes(available), help);
    return;
  }
  const int64_t need = bank_bytes + kBankHostReserve;
  if (need > available)
    fail(ErrorCode::kOutOfMemory,
         "expert banks need {} of host memory ({} of routed experts, {} reserve), but MemAvailable is {}: banks of "
         "at most {} would fit. {}",
         format_bytes(need), format_bytes(bank_bytes), format_bytes(kBankHostReserve), format_bytes(available),
         format_bytes(std::max<int64_t>(0, available - kBankHostReserve)), help);
}

std::unique_ptr<HostAllocator> make_bank_allocator(Ops& ops) { return ops.host_allocator(); }

}  // namespace ft
