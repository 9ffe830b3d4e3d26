#pragma once
// PageBytes: the bytes of one part of a lower-tier page (kv/page_store.h's PageContents): ordinary
// heap memory, or a block of a PageBlockPool, host memory from Ops::host_allocator() (page-locked on
// CUDA) that the backend's copy engine reads and writes in place, so page copies are queued on the
// stream without a host wait (backend/stream_copy.h, kv/kv_page_io.h). The host tier's pages live in
// the pool (--kv-host-gib); a pool that is full or cannot pin more memory hands out heap bytes, which
// KvPageIo copies synchronously.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "backend/host_allocator.h"

namespace ft {

class PageBlockPool {
 public:
  /** Blocks of any size, carved from chunks of about `chunk_bytes` (one block at least) that `alloc`
   *  allocates and pins as they are first needed, at most `cap_bytes` of chunks in all; a block freed
   *  goes back to its size's free list (chunks are kept until the pool goes). Throws kInvalidArgument
   *  for a cap or chunk size < 1. */
  PageBlockPool(std::unique_ptr<HostAllocator> alloc, int64_t cap_bytes, int64_t chunk_bytes = int64_t{64} << 20);
  PageBlockPool(const PageBlockPool&) = delete;
  PageBlockPool& operator=(const PageBlockPool&) = delete;

  /** A block of `bytes` (> 0; 256-byte aligned), or nullptr when the cap leaves no room for another
   *  chunk or pinning failed (warned about once; the pool then stops growing). Thread-safe. */
  void* take(size_t bytes);
  /** Gives back a block of `bytes` from take(): true; false (nothing done) when `p` is not one of the
   *  pool's. Thread-safe. */
  bool give(void* p, size_t bytes);
  /** Whether `p` lies in one of the pool's chunks. Thread-safe. */
  bool owns(const void* p) const;
  /** Bytes of chunks allocated (pinned on CUDA), and of blocks handed out now. */
  int64_t reserved_bytes() const;
  int64_t used_bytes() const;
  int64_t cap_bytes() const { return cap_; }
  /** "host" or "cuda-pinned": the allocator's name. */
  const char* kind() const { return alloc_->name(); }

 private:
  static size_t stride_of(size_t bytes) { return (bytes + 255) / 256 * 256; }
  bool grow_locked(size_t stride);

  std::unique_ptr<HostAllocator> alloc_;
  int64_t cap_, chunk_;
  mutable std::mutex mu_;
  std::vector<Buffer> chunks_;
  std::map<uintptr_t, uintptr_t> ranges_;          // chunk start -> end
  std::map<size_t, std::vector<void*>> free_;      // block stride -> free blocks
  int64_t reserved_ = 0, used_ = 0;
  bool failed_ = false;
};

/** A std allocator drawing from a PageBlockPool when it has one and room, else from the heap. Bytes
 *  are default-initialised (resize() does not zero them: copies overwrite them). Only the device
 *  writes pool blocks (KvPageIo's queued copies), so a block may go back to the pool while a queued
 *  copy still reads it: a copy of a container (construction or assignment) takes heap bytes. */
template <class T>
struct PageAllocator {
  using value_type = T;
  using propagate_on_container_copy_assignment = std::false_type;
  using propagate_on_container_move_assignment = std::true_type;
  using propagate_on_container_swap = std::true_type;

  PageAllocator() = default;
  explicit PageAllocator(std::shared_ptr<PageBlockPool> p) : pool(std::move(p)) {}
  template <class U>
  PageAllocator(const PageAllocator<U>& o) : pool(o.pool) {}  // NOLINT: rebinding converts implicitly

  T* allocate(size_t n) {
    void* p = pool ? pool->take(n * sizeof(T)) : nullptr;
    return static_cast<T*>(p ? p : ::operator new(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) {
    if (!pool || !pool->give(p, n * sizeof(T))) ::operator delete(p);
  }
  PageAllocator select_on_container_copy_construction() const { return PageAllocator(); }
  template <class U>
  void construct(U* p) {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... A>
  void construct(U* p, A&&... a) {
    ::new (static_cast<void*>(p)) U(std::forward<A>(a)...);
  }
  /** Whether `p` (this allocator's memory) is a pool block the backend copies without staging. */
  bool pooled(const void* p) const { return pool && p && pool->owns(p); }

  std::shared_ptr<PageBlockPool> pool;
};

template <class T, class U>
bool operator==(const PageAllocator<T>& a, const PageAllocator<U>& b) {
  return a.pool == b.pool;
}

using PageBytes = std::vector<uint8_t, PageAllocator<uint8_t>>;

}  // namespace ft
