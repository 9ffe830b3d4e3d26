#pragma once
// Opting a kernel in to more than 48 KB of dynamic shared memory. cudaFuncSetAttribute applies to the
// current device only, so the opt-in is remembered per (kernel, device): a process with CudaOps on
// two GPUs opts in on each (a process-wide "done once" flag left the second device's launches to fail).
#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <tuple>

#include "backend/cuda/cuda_check.h"

namespace ft::cuda {

/** Raises `kernel`'s dynamic shared memory limit to `bytes` on the current device, once per
 *  (kernel, device, bytes); thread-safe. Throws ft::Error(kInternal) when the runtime refuses. */
template <typename Kernel>
void opt_in_shared_memory(Kernel* kernel, int bytes) {
  static std::mutex mu;  // one per function type: instantiations of one kernel template share it,
  static std::set<std::tuple<const void*, int, int>> done;  // so the kernel's address is in the key
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_tuple(reinterpret_cast<const void*>(kernel), device, bytes);
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert(key).second) return;
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err != cudaSuccess) done.erase(key);
  FT_CUDA_CHECK(err);
}

}  // namespace ft::cuda
