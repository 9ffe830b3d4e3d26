#pragma once
// Opting a kernel in to more than 48 KB of dynamic shared memory, or to a non-portable thread-block
// cluster size (more than 8 blocks). cudaFuncSetAttribute applies to the current device only, so each
// opt-in is remembered per (kernel, device): a process with CudaOps on two GPUs opts in on each (a
// process-wide "done once" flag left the second device's launches to fail).
#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "backend/cuda/cuda_check.h"

namespace ft::cuda {

/** Raises `kernel`'s dynamic shared memory limit on the current device to at least `bytes`, keeping the
 *  largest size granted so far (a smaller request never lowers it); thread-safe. Throws
 *  ft::Error(kInternal) when the runtime refuses. */
template <typename Kernel>
void opt_in_shared_memory(Kernel* kernel, int bytes) {
  static std::mutex mu;  // one per function type: instantiations of one kernel template share it,
  static std::map<std::pair<const void*, int>, int> granted;  // so the kernel's address is in the key
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), device);
  std::lock_guard<std::mutex> lock(mu);
  auto it = granted.find(key);
  if (it != granted.end() && it->second >= bytes) return;
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  granted[key] = bytes;
}

/** Allows `kernel` clusters of more than 8 blocks (up to 16 on sm_90) on the current device, once per
 *  (kernel, device); thread-safe. Throws ft::Error(kInternal) when the runtime refuses. */
template <typename Kernel>
void opt_in_nonportable_cluster(Kernel* kernel) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, bool> done;
  int device = 0;
  FT_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_pair(reinterpret_cast<const void*>(kernel), device);
  std::lock_guard<std::mutex> lock(mu);
  if (done.count(key)) return;
  FT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  done[key] = true;
}

}  // namespace ft::cuda
