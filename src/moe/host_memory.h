#pragma once
// HostAllocator: where expert banks get their host memory. The CPU build uses page-aligned
// anonymous memory; a CUDA build uses the same memory and page-locks + maps it once it is filled
// ("pin after fill": the pages are touched once, by the fill, instead of being zeroed by
// cudaHostAlloc and then written again), so GPU kernels can read it over UVA.
// C++17-clean: included from CUDA sources.
#include <cstdint>
#include <functional>
#include <memory>

#include "backend/ops.h"
#include "tensor/tensor.h"

namespace ft {

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;

  /** "host" or "cuda-pinned". */
  virtual const char* name() const = 0;
  /** `bytes` (> 0) of uninitialised host memory, 4096-byte aligned, on Device::kCpu. Throws
   *  ft::Error(kOutOfMemory) naming the size. */
  virtual Buffer allocate(int64_t bytes) = 0;
  /** Called once `buffer` (from allocate()) is filled: pins it and returns the address device
   *  kernels read it at (a UVA device pointer), or nullptr when there is no device. Throws
   *  ft::Error(kOutOfMemory) when the memory cannot be pinned. */
  virtual void* pin(Buffer& buffer) = 0;
};

/** Page-aligned anonymous host memory (transparent huge pages advised for large blocks); pin()
 *  does nothing and returns nullptr. Never throws. */
std::unique_ptr<HostAllocator> make_host_allocator();

/** Host memory registered with CUDA device `device` as pinned + mapped after the fill
 *  (cudaHostRegister with cudaHostRegisterMapped; released with cudaHostUnregister). Throws
 *  ft::Error(kUnsupported) in a build without CUDA. Defined in backend/cuda/moe_cache_host.cu. */
std::unique_ptr<HostAllocator> make_pinned_host_allocator(int device);

/** The allocator expert banks for backend `ops` need: pinned for its device when `ops` is the CUDA
 *  backend, make_host_allocator() otherwise. */
std::unique_ptr<HostAllocator> make_bank_allocator(Ops& ops);

/** Page-aligned anonymous host memory of `bytes` (the allocation both allocators use);
 *  `before_unmap`, when set, runs on the address just before the memory is returned to the OS
 *  (the pinned allocator unregisters there). Throws ft::Error(kOutOfMemory) naming the size. */
Buffer allocate_host_pages(int64_t bytes, std::function<void(void*)> before_unmap = nullptr);

/** MemAvailable of /proc/meminfo in bytes (what can be allocated without swapping, reclaimable page
 *  cache included), or -1 where it cannot be read. */
int64_t host_memory_available();

/** Host memory set aside, beyond the banks, for the runtime's own host allocations (staging and
 *  exchange buffers, the CUDA context) when checking that banks fit: 1 GiB. */
inline constexpr int64_t kBankHostReserve = int64_t{1} << 30;

/** Checks, before any bank memory is touched, that expert banks of `bank_bytes` can be filled with
 *  `available` bytes of MemAvailable (host_memory_available(); < 0: unknown, no check). A
 *  checkpoint in anonymous memory (`source_released`: a synthetic model) hands each layer's pages
 *  back once its bank holds them, so the fill needs only `in_flight_bytes` (the layers copied at
 *  once) beyond what the checkpoint holds; a mapped file's pages are page cache, already counted in
 *  MemAvailable, so the banks need all of `bank_bytes`. kBankHostReserve is added either way.
 *  Throws ft::Error(kOutOfMemory) naming what is needed and available (and, for a mapped file, the
 *  largest banks that would fit) with the flags that help: without it the kernel's OOM killer ends
 *  the process mid-fill (seen: qwen3-235b-a22b, 123 GiB of q4_k weights, on a 128 GiB host). */
void check_bank_host_memory(int64_t bank_bytes, int64_t in_flight_bytes, bool source_released, int64_t available);

}  // namespace ft
