// Expert-cache slot biases: after an admission (or a prefetch admission), each missed expert's
// biases (gpt-oss: gate, up [n_ff], down [n_embd], F32) are copied from the resident per-layer copies
// (CudaExpertSlots keeps every expert's biases on the device, uploaded once) into its slot's rows, so
// the slot bank's bias views (moe/expert_slots.h SlotBiases) are indexed by slot id as its weights
// are. Work items are (miss, bias); a fixed grid strides over them up to the device-side miss count
// (graph-capturable). Runs on the backend's stream right after the admission: the slots it writes
// are the admission's victims, which no queued work reads any more (the admission's rules: never a
// slot of this step's layer, nor one a prefetch in flight holds), whatever stream fills their weights.
// Bytes moved: 2 x (2 n_ff + n_embd) x 4 per miss.
#include "backend/cuda/common.cuh"
#include "moe/cuda/moe_cache_kernels.h"

namespace ft::cuda {
namespace {

constexpr int kBiasThreads = 256;

__global__ void __launch_bounds__(kBiasThreads) cache_bias_kernel(SlotBiasArgs a) {
  const int64_t n_items = static_cast<int64_t>(*a.n_misses) * 3;
  for (int64_t item = blockIdx.x; item < n_items; item += gridDim.x) {
    const CacheMiss m = a.misses[item / 3];
    const int j = static_cast<int>(item % 3);
    const SlotBiasLayer& L = a.layers[m.layer];
    const float* src = L.src[j];
    if (!src) continue;  // the same for the whole block
    const int64_t w = L.width[j];
    const float* from = src + static_cast<int64_t>(m.expert) * w;
    float* to = L.dst[j] + static_cast<int64_t>(m.slot) * w;
    for (int64_t i = threadIdx.x; i < w; i += kBiasThreads) to[i] = from[i];
  }
}

}  // namespace

void launch_cache_bias_copy(const SlotBiasArgs& a, cudaStream_t stream) {
  const int blocks = a.max_misses * 3 < 256 ? (a.max_misses * 3 > 0 ? a.max_misses * 3 : 1) : 256;
  cache_bias_kernel<<<blocks, kBiasThreads, 0, stream>>>(a);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
