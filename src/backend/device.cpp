#include "backend/device.h"

#include <fmt/format.h>

#ifdef FT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace ft {

int cuda_device_count() {
#ifdef FT_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

int64_t cuda_free_memory(int device) {
#ifdef FT_HAVE_CUDA
  int prev = 0;
  size_t free_b = 0, total_b = 0;
  if (cudaGetDevice(&prev) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  const bool ok = cudaSetDevice(device) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess;
  if (!ok) cudaGetLastError();
  cudaSetDevice(prev);  // the caller's device, on both paths
  if (!ok) return 0;
  return static_cast<int64_t>(free_b);
#else
  (void)device;
  return 0;
#endif
}

std::string cuda_device_name(int device) {
#ifdef FT_HAVE_CUDA
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    cudaGetLastError();
    return {};
  }
  return fmt::format("{}, {:.1f} GiB", prop.name, static_cast<double>(prop.totalGlobalMem) / (1ull << 30));
#else
  (void)device;
  return {};
#endif
}

}  // namespace ft
