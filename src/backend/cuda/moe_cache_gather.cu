// Expert-cache gather: copies each missed expert's record from the host banks (pinned, mapped
// host memory read over UVA, i.e. PCIe reads issued by the SMs) into its slot. Work items are
// (miss, 64 KiB chunk); a fixed grid strides over items up to the device-side miss count, so the
// launch shape never depends on the data (graph-capturable). Each thread keeps 4 independent
// 16-byte loads in flight; measured on the H200 (DESIGN.md): ~51 GB/s for 9 MiB blocks.
#include "backend/cuda/common.cuh"
#include "backend/cuda/moe_cache_kernels.h"

namespace ft::cuda {
namespace {

constexpr int kGatherThreads = 256;
constexpr int64_t kChunkBytes = 64 * 1024;
constexpr int kUnroll = 4;

__global__ void __launch_bounds__(kGatherThreads) cache_gather_kernel(GatherArgs a) {
  const int64_t chunks_per_miss = (a.max_record_bytes + kChunkBytes - 1) / kChunkBytes;
  const int64_t n_items = static_cast<int64_t>(*a.n_misses) * chunks_per_miss;
  for (int64_t item = blockIdx.x; item < n_items; item += gridDim.x) {
    const CacheMiss m = a.misses[item / chunks_per_miss];
    const int64_t bytes = a.record_bytes[m.layer];
    const int64_t begin = (item % chunks_per_miss) * kChunkBytes;
    if (begin >= bytes) continue;
    const int64_t end = begin + kChunkBytes < bytes ? begin + kChunkBytes : bytes;
    const uint4* src = reinterpret_cast<const uint4*>(a.host_base[m.layer] + static_cast<uint64_t>(m.expert) * bytes + begin);
    uint4* dst = reinterpret_cast<uint4*>(a.pool + static_cast<int64_t>(m.slot) * a.slot_bytes + begin);
    const int64_t n = (end - begin) / 16;
    int64_t i = threadIdx.x;
    for (; i + (kUnroll - 1) * kGatherThreads < n; i += kUnroll * kGatherThreads) {
      uint4 v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) v[u] = src[i + u * kGatherThreads];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) dst[i + u * kGatherThreads] = v[u];
    }
    for (; i < n; i += kGatherThreads) dst[i] = src[i];
  }
}

}  // namespace

void launch_cache_gather(const GatherArgs& a, int blocks, cudaStream_t stream) {
  if (a.slot_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(a.pool) % 16 != 0)
    fail(ErrorCode::kUnsupported, "expert cache gather: slots of {} bytes at {} are not 16-byte aligned", a.slot_bytes,
         static_cast<const void*>(a.pool));
  cache_gather_kernel<<<blocks < 1 ? 1 : blocks, kGatherThreads, 0, stream>>>(a);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
