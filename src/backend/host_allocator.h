#pragma once
// HostAllocator: host memory that a backend's kernels can read (expert banks, staging pools). The
// CPU backend uses page-aligned anonymous memory; the CUDA backend uses the same memory and
// page-locks + maps it once it is filled ("pin after fill": the pages are touched once, by the fill,
// instead of being zeroed by cudaHostAlloc and then written again), so GPU kernels read it over UVA.
// C++17-clean: included from CUDA sources.
#include <cstdint>
#include <functional>
#include <memory>

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
 *  ft::Error(kUnsupported) in a build without CUDA, kInvalidArgument for a device that is not
 *  visible. Defined in backend/cuda/pinned_host_allocator.cu. */
std::unique_ptr<HostAllocator> make_pinned_host_allocator(int device);

/** Page-aligned anonymous host memory of `bytes` (the allocation both allocators use);
 *  `before_unmap`, when set, runs on the address just before the memory is returned to the OS
 *  (the pinned allocator unregisters there). Throws ft::Error(kOutOfMemory) naming the size. */
Buffer allocate_host_pages(int64_t bytes, std::function<void(void*)> before_unmap = nullptr);

}  // namespace ft
