#include "backend/host_allocator.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "util/error.h"

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

namespace {

class PageAllocator final : public HostAllocator {
 public:
  const char* name() const override { return "host"; }
  Buffer allocate(int64_t bytes) override { return allocate_host_pages(bytes); }
  void* pin(Buffer&) override { return nullptr; }
};

}  // namespace

std::unique_ptr<HostAllocator> make_host_allocator() { return std::make_unique<PageAllocator>(); }

}  // namespace ft
