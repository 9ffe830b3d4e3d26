// Pinned, mapped host memory for what the kernels read in place (expert banks): allocated as ordinary anonymous pages, filled
// by the caller, then page-locked and mapped with cudaHostRegister ("pin after fill": the fill is
// the only pass that touches the pages, where cudaHostAlloc would zero them first). Kernels read
// the memory through the device pointer cudaHostGetDevicePointer returns (UVA).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/host_allocator.h"

namespace ft {
namespace {

class PinnedAllocator final : public HostAllocator {
 public:
  explicit PinnedAllocator(int device) : device_(device) {}
  const char* name() const override { return "cuda-pinned"; }

  Buffer allocate(int64_t bytes) override {
    // Unregister before unmapping; memory that was never pinned makes the call fail harmlessly.
    return allocate_host_pages(bytes, [](void* p) {
      if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError();
    });
  }

  void* pin(Buffer& buffer) override {
    int prev = 0;  // the caller's current device is restored on every path out
    FT_CUDA_CHECK(cudaGetDevice(&prev));
    FT_CUDA_CHECK(cudaSetDevice(device_));
    struct Restore {
      int device;
      ~Restore() { cudaSetDevice(device); }
    } restore{prev};
    const cudaError_t err = cudaHostRegister(buffer.data(), static_cast<size_t>(buffer.bytes()),
                                             cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      fail(ErrorCode::kOutOfMemory, "expert banks: cannot pin {:.1f} MiB of host memory for cuda device {} ({}); "
           "raise the locked-memory limit (ulimit -l) or free host RAM",
           static_cast<double>(buffer.bytes()) / (1 << 20), device_, cudaGetErrorString(err));
    }
    void* dev = nullptr;
    FT_CUDA_CHECK(cudaHostGetDevicePointer(&dev, buffer.data(), 0));
    return dev;
  }

 private:
  int device_;
};

}  // namespace

std::unique_ptr<HostAllocator> make_pinned_host_allocator(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || device < 0 || device >= n) {
    (void)cudaGetLastError();
    fail(ErrorCode::kInvalidArgument, "pinned expert banks: cuda device {} is not one of the {} visible devices", device,
         n);
  }
  return std::make_unique<PinnedAllocator>(device);
}

std::unique_ptr<HostAllocator> CudaOps::host_allocator() const { return make_pinned_host_allocator(device_); }

}  // namespace ft
