#include "moe/host_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "util/error.h"
#include "util/format.h"

namespace ft {

Buffer allocate_host_pages(int64_t bytes, std::function<void(void*)> before_unmap) {
  if (bytes <= 0) fail(ErrorCode::kInvalidArgument, "host memory: cannot allocate {} bytes", bytes);
  void* p = mmap(nullptr, static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail(ErrorCode::kOutOfMemory, "host memory: cannot map {:.1f} MiB ({})", static_cast<double>(bytes) / (1 << 20),
         std::strerror(errno));
  if (bytes >= (int64_t{2} << 20)) madvise(p, static_cast<size_t>(bytes), MADV_HUGEPAGE);  // advice only
  const size_t len = static_cast<size_t>(bytes);
  return Buffer(p, bytes, Device::kCpu, [len, before_unmap](void* q) {
    if (before_unmap) before_unmap(q);
    munmap(q, len);
  });
}

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

namespace {

class PageAllocator final : public HostAllocator {
 public:
  const char* name() const override { return "host"; }
  Buffer allocate(int64_t bytes) override { return allocate_host_pages(bytes); }
  void* pin(Buffer&) override { return nullptr; }
};

}  // namespace

std::unique_ptr<HostAllocator> make_host_allocator() { return std::make_unique<PageAllocator>(); }

#ifndef FT_HAVE_CUDA
std::unique_ptr<HostAllocator> make_bank_allocator(Ops&) { return make_host_allocator(); }

std::unique_ptr<HostAllocator> make_pinned_host_allocator(int device) {
  fail(ErrorCode::kUnsupported, "pinned expert banks for cuda device {} requested, but this build of FreeToken has no "
       "CUDA backend", device);
}
#endif

}  // namespace ft
