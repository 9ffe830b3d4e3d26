// A streamed layer's routes split between the GPU and the CPU (issue 37: a prefill's uncached experts
// shared by the copy path and the CPU): the region's claim (claim_region's src_slot, device) marks the
// experts the CPU computes this step with kStreamOnCpu; each routed id goes to gpu_ids (the region
// bank's expert id, as moe_experts reads it) or to cpu_ids (the exchange's routes), -1 in the other.
// Reads the claim on the device, so the split follows whatever the claim kernel queued before it
// decided. Bytes moved: 12 per route plus the claim's reads (cached).
#include "backend/cuda/common.cuh"
#include "moe/cuda/moe_cache_kernels.h"

namespace ft::cuda {
namespace {

__global__ void stream_split_kernel(const int32_t* ids, const int32_t* keep, int32_t n_expert, int64_t n,
                                    int32_t* gpu_ids, int32_t* cpu_ids) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t e = ids[i];
    const bool valid = e >= 0 && e < n_expert;
    const bool on_cpu = valid && keep[e] == kStreamOnCpu;
    gpu_ids[i] = valid && !on_cpu ? e : -1;
    cpu_ids[i] = on_cpu ? e : -1;
  }
}

}  // namespace

void launch_stream_split(const int32_t* ids, const int32_t* keep, int32_t n_expert, int64_t n, int32_t* gpu_ids,
                         int32_t* cpu_ids, cudaStream_t stream) {
  if (n <= 0) return;
  stream_split_kernel<<<grid_1d(n, 256), 256, 0, stream>>>(ids, keep, n_expert, n, gpu_ids, cpu_ids);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
