#include "kv/page_bytes.h"

#include <algorithm>

#include "util/error.h"
#include "util/log.h"

namespace ft {

PageBlockPool::PageBlockPool(std::unique_ptr<HostAllocator> alloc, int64_t cap_bytes, int64_t chunk_bytes)
    : alloc_(std::move(alloc)), cap_(cap_bytes), chunk_(chunk_bytes) {
  if (!alloc_) fail(ErrorCode::kInvalidArgument, "page block pool: no allocator");
  if (cap_bytes < 1 || chunk_bytes < 1)
    fail(ErrorCode::kInvalidArgument, "page block pool: cap {} and chunk {} bytes must be >= 1", cap_bytes, chunk_bytes);
}

bool PageBlockPool::grow_locked(size_t stride) {
  const auto s = static_cast<int64_t>(stride);
  const int64_t blocks = std::max<int64_t>(1, chunk_ / s);
  const int64_t bytes = std::min(blocks, std::max<int64_t>(1, (cap_ - reserved_) / s)) * s;
  if (failed_ || reserved_ + bytes > cap_) return false;
  Buffer b;
  try {
    b = alloc_->allocate(bytes);
    alloc_->pin(b);
  } catch (const Error& e) {
    failed_ = true;
    spdlog::warn("KV host tier: cannot add {:.1f} MiB of {} memory ({}); pages beyond the {:.1f} MiB held are kept "
                 "in pageable memory and copied synchronously",
                 static_cast<double>(bytes) / (1 << 20), alloc_->name(), e.what(),
                 static_cast<double>(reserved_) / (1 << 20));
    return false;
  }
  auto* base = static_cast<uint8_t*>(b.data());
  std::vector<void*>& list = free_[stride];
  for (int64_t i = bytes / s - 1; i >= 0; --i) list.push_back(base + i * s);
  ranges_[reinterpret_cast<uintptr_t>(base)] = reinterpret_cast<uintptr_t>(base) + static_cast<uintptr_t>(bytes);
  reserved_ += bytes;
  chunks_.push_back(std::move(b));
  return true;
}

void* PageBlockPool::take(size_t bytes) {
  if (bytes == 0) return nullptr;
  const size_t stride = stride_of(bytes);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = free_.find(stride);
  if ((it == free_.end() || it->second.empty()) && !grow_locked(stride)) return nullptr;
  std::vector<void*>& list = free_[stride];
  void* p = list.back();
  list.pop_back();
  used_ += static_cast<int64_t>(stride);
  return p;
}

bool PageBlockPool::give(void* p, size_t bytes) {
  if (!owns(p)) return false;
  const size_t stride = stride_of(bytes);
  std::lock_guard<std::mutex> lk(mu_);
  free_[stride].push_back(p);
  used_ -= static_cast<int64_t>(stride);
  return true;
}

bool PageBlockPool::owns(const void* p) const {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lk(mu_);
  auto it = ranges_.upper_bound(a);
  if (it == ranges_.begin()) return false;
  --it;
  return a >= it->first && a < it->second;
}

int64_t PageBlockPool::reserved_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return reserved_;
}

int64_t PageBlockPool::used_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return used_;
}

}  // namespace ft
