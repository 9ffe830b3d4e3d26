// moe_sort_pairs: groups the T*k (token, slot) pairs of a MoE layer by expert for the prefill path:
// a stable CUB radix sort of (expert id, pair index), then the first sorted position of each
// expert by binary search, read back to the host (the per-expert GEMM sizes). Pairs whose id is
// outside [0, E) sort last and are not counted. Bytes moved: O(P) ints a few times + E offsets.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/common.cuh"
#include "backend/cuda/launch.h"

namespace ft::cuda {
namespace {

constexpr int64_t kAlign = 256;

int64_t align_up(int64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

int end_bit_for(int32_t E) {
  int bits = 1;
  while ((int64_t{1} << bits) <= E) ++bits;
  return bits;
}

size_t cub_bytes(int64_t P, int32_t E) {
  size_t bytes = 0;
  FT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                static_cast<int32_t*>(nullptr), static_cast<int>(P), 0, end_bit_for(E)));
  return bytes;
}

__global__ void sort_prep_kernel(const int32_t* ids, int64_t P, int32_t E, int32_t* keys, int32_t* vals) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < P;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int32_t e = ids[i];
    keys[i] = e >= 0 && e < E ? e : E;
    vals[i] = static_cast<int32_t>(i);
  }
}

__global__ void expert_offsets_kernel(const int32_t* sorted_keys, int64_t P, int32_t E, int32_t* offsets) {
  const int32_t e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e > E) return;
  int64_t lo = 0, hi = P;  // first position with key >= e
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (sorted_keys[mid] < e) lo = mid + 1;
    else hi = mid;
  }
  offsets[e] = static_cast<int32_t>(lo);
}

}  // namespace

const int32_t* moe_sort_device_offsets(const void* temp, int64_t P) {
  return reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(temp) + 3 * align_up(P * 4));
}

int64_t moe_sort_temp_bytes(int64_t P, int32_t E) {
  return 3 * align_up(P * 4) + align_up((E + 1) * 4) + align_up(static_cast<int64_t>(cub_bytes(P, E)));
}

void moe_sort_pairs(const int32_t* ids, int64_t P, int32_t E, void* temp, int32_t* order, int32_t* offsets_host,
                    cudaStream_t s) {
  if (P > INT32_MAX) fail(ErrorCode::kUnsupported, "moe_experts: {} (token, expert) pairs is too many", P);
  auto* base = static_cast<uint8_t*>(temp);
  auto* keys_in = reinterpret_cast<int32_t*>(base);
  auto* keys_out = reinterpret_cast<int32_t*>(base + align_up(P * 4));
  auto* vals_in = reinterpret_cast<int32_t*>(base + 2 * align_up(P * 4));
  auto* offsets = reinterpret_cast<int32_t*>(base + 3 * align_up(P * 4));
  void* cub_temp = base + 3 * align_up(P * 4) + align_up((E + 1) * 4);
  size_t bytes = cub_bytes(P, E);
  sort_prep_kernel<<<grid_1d(P, 256), 256, 0, s>>>(ids, P, E, keys_in, vals_in);
  FT_CUDA_LAUNCH_CHECK();
  FT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, bytes, keys_in, keys_out, vals_in, order,
                                                static_cast<int>(P), 0, end_bit_for(E), s));
  expert_offsets_kernel<<<(E + 1 + 127) / 128, 128, 0, s>>>(keys_out, P, E, offsets);
  FT_CUDA_LAUNCH_CHECK();
  FT_CUDA_CHECK(cudaMemcpyAsync(offsets_host, offsets, static_cast<size_t>(E + 1) * 4, cudaMemcpyDeviceToHost, s));
  FT_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace ft::cuda
