// Expert-cache gather: copies each missed expert's record from the host banks (pinned, mapped
// host memory read over UVA, i.e. PCIe reads issued by the SMs) into its slot. Work items are
// (miss, 64 KiB chunk); a fixed grid strides over items up to the device-side miss count, so the
// launch shape never depends on the data (graph-capturable). Each thread keeps 4 independent
// 16-byte loads in flight; measured on the H200 (DESIGN.md): ~51 GB/s for 9 MiB blocks.
// EC12 banks (moe/ec12.h) take the decoding twin: work items are (miss, matrix, 256 groups = 24 KiB
// of coded values), staged through shared memory (cache_gather_ec12_kernel).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "moe/cuda/moe_cache_kernels.h"
#include "moe/ec12.h"

namespace ft::cuda {
namespace {

constexpr int kGatherThreads = 256;
constexpr int64_t kChunkBytes = 64 * 1024;
constexpr int kUnroll = 4;

/** Copies records into slots, work items (record, 64 KiB chunk). Record i is a.misses[i] (i <
 *  *a.n_misses) from the banks, or with stream_n > 0 (prefill streaming) expert i of stream_layer
 *  into slot stream_first + i (i < stream_n), read from slot keep[i] of the pool when keep is set
 *  and keep[i] >= 0 (cached elsewhere: device to device), none for kStreamOnCpu, else from the banks. */
__global__ void __launch_bounds__(kGatherThreads)
    cache_gather_kernel(GatherArgs a, int32_t stream_layer, int32_t stream_first, int32_t stream_n,
                        const int32_t* keep) {
  const int64_t chunks_per_miss = (a.max_record_bytes + kChunkBytes - 1) / kChunkBytes;
  const int64_t n_items = static_cast<int64_t>(stream_n > 0 ? stream_n : *a.n_misses) * chunks_per_miss;
  for (int64_t item = blockIdx.x; item < n_items; item += gridDim.x) {
    const auto mi = static_cast<int32_t>(item / chunks_per_miss);
    const CacheMiss m = stream_n > 0 ? CacheMiss{stream_layer, mi, stream_first + mi} : a.misses[mi];
    const int64_t bytes = a.record_bytes[m.layer];
    const int64_t begin = (item % chunks_per_miss) * kChunkBytes;
    if (begin >= bytes) continue;
    const int64_t end = begin + kChunkBytes < bytes ? begin + kChunkBytes : bytes;
    const int32_t from = stream_n > 0 && keep ? keep[mi] : -1;
    if (from == m.slot || from == kStreamOnCpu) continue;  // already in place, or the CPU's this step
    const uint4* src = reinterpret_cast<const uint4*>(
        from >= 0 ? a.pool + static_cast<int64_t>(from) * a.slot_bytes + begin
                  : reinterpret_cast<const uint8_t*>(a.host_base[m.layer] + static_cast<uint64_t>(m.expert) * bytes + begin));
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

// An EC12 work item: up to 256 groups (24 KiB of coded values) of one matrix, one per thread pair.
constexpr int64_t kEc12ItemGroups = 256;
constexpr int kEc12Loads = static_cast<int>(kEc12ItemGroups * ec12::kGroupBytes / 16 / kGatherThreads);  // 6

/** Byte i (0..15) of v. */
__device__ __forceinline__ uint32_t byte_of(const uint4& v, int i) {
  const uint32_t w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;
  return (w >> (8 * (i & 3))) & 0xffu;
}

/** Eight BF16 values (one uint4) from bytes [from, from + 8) of the low bytes `lo`, their codes in
 *  the low (high = false) or high nibbles of the same bytes of `code`. */
__device__ __forceinline__ uint4 decode8(const uint4& lo, const uint4& code, int from, bool high, const uint8_t* table) {
  uint32_t w[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    uint32_t v[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int i = from + 2 * k + h;
      const uint32_t c = (byte_of(code, i) >> (high ? 4 : 0)) & 0xfu;
      v[h] = byte_of(lo, i) | (static_cast<uint32_t>(table[c]) << 8);
    }
    w[k] = v[0] | (v[1] << 16);
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/** One EC12 work item: groups [ga, gb) of one coded matrix (src) and where they decode to (dst). */
struct Ec12Item {
  bool valid = false;  // false past the last item, or for an item a smaller layer's record lacks
  const uint8_t* src = nullptr;
  const uint16_t* cached = nullptr;  // the same values decoded in another slot (copied, not decoded), or null
  uint16_t* dst = nullptr;
  int64_t rows = 0, cols = 0, ga = 0, gb = 0;
};

__device__ __forceinline__ Ec12Item ec12_item(const GatherArgs& a, int64_t item, int64_t n_items, int32_t stream_layer,
                                              int32_t stream_first, int32_t stream_n, const uint8_t* src,
                                              const int32_t* keep) {
  Ec12Item it;
  if (item >= n_items) return it;
  const int32_t mi = static_cast<int32_t>(item / a.ec12_items);
  const CacheMiss m = stream_n > 0 ? CacheMiss{stream_layer, mi, stream_first + mi} : a.misses[mi];
  const Ec12Layer& L = a.ec12[m.layer];
  int j = static_cast<int>(item % a.ec12_items), mat = 0;
  while (mat < 3 && j >= L.items[mat]) j -= L.items[mat++];
  if (mat == 3) return it;
  it.valid = true;
  it.rows = L.rows[mat], it.cols = L.cols[mat];
  const uint8_t* base = src ? src : reinterpret_cast<const uint8_t*>(a.host_base[m.layer]);
  it.src = base + static_cast<int64_t>(m.expert) * a.record_bytes[m.layer] + L.record_offset[mat];
  it.dst = reinterpret_cast<uint16_t*>(a.pool + static_cast<int64_t>(m.slot) * a.slot_bytes + L.slot_offset[mat]);
  const int32_t from = stream_n > 0 && keep ? keep[mi] : -1;
  if (from == m.slot || from == kStreamOnCpu) {  // already in place or the CPU's: nothing to copy
    it.valid = false;
    return it;
  }
  if (from >= 0)
    it.cached = reinterpret_cast<const uint16_t*>(a.pool + static_cast<int64_t>(from) * a.slot_bytes + L.slot_offset[mat]);
  const int64_t total = it.rows * it.cols / ec12::kGroup;
  it.ga = static_cast<int64_t>(j) * kEc12ItemGroups;
  it.gb = it.ga + kEc12ItemGroups < total ? it.ga + kEc12ItemGroups : total;
  return it;
}

/** Thread t's share of item `it`'s reads (issued, not waited for): its 16-byte pieces of the coded
 *  groups, the table byte t (t < 16), the first / end exception index of the item's rows (t = 16, 17). */
__device__ __forceinline__ void ec12_load(const Ec12Item& it, int t, uint4 (&v)[kEc12Loads], uint32_t& side) {
  if (it.cached) return;  // copied from its slot in the loop
  const int n16 = static_cast<int>((it.gb - it.ga) * ec12::kGroupBytes / 16);
  const uint4* from = reinterpret_cast<const uint4*>(it.src + ec12::kHeaderBytes + it.ga * ec12::kGroupBytes);
#pragma unroll
  for (int i = 0; i < kEc12Loads; ++i)
    if (t + i * kGatherThreads < n16) v[i] = from[t + i * kGatherThreads];
  if (t < ec12::kTableSize) side = it.src[t];
  if (t == ec12::kTableSize || t == ec12::kTableSize + 1) {
    const int64_t per_row = it.cols / ec12::kGroup;
    const int64_t row = t == ec12::kTableSize ? it.ga / per_row : (it.gb - 1) / per_row + 1;
    side = reinterpret_cast<const uint32_t*>(it.src + ec12::MatrixGeometry{it.rows, it.cols, 0}.row_index_offset())[row];
  }
}

/** Decodes EC12 records into slots. Miss i is a.misses[i] (i < *a.n_misses), or with stream_n > 0
 *  the record of (stream_layer, i) into slot stream_first + i (i < stream_n). The records are read
 *  from the banks (a.host_base), or with `src` set from src + expert * record_bytes (device memory:
 *  the copy-engine prefetch's staging). Per work item the
 *  block reads its groups with consecutive 16-byte loads (whole lines over PCIe, as the plain
 *  gather: per-thread loads of a group's pieces cut the reads into 32-byte requests and ran at
 *  22 GB/s on the H200) into shared memory, with the matrix's table and its rows' exception range
 *  beside them; each thread then decodes half a group from three 16-byte pieces (the code bytes and
 *  two 16-byte lanes of low bytes), and the block patches the exceptions that fall in its groups.
 *  The next item's reads are issued before this one is decoded, so a block keeps PCIe reads in
 *  flight throughout (a small grid, as the prefetch's 8 blocks, depends on it). */
__global__ void __launch_bounds__(kGatherThreads)
    cache_gather_ec12_kernel(GatherArgs a, int32_t stream_layer, int32_t stream_first, int32_t stream_n,
                             const uint8_t* src, const int32_t* keep) {
  __shared__ uint4 stage[kEc12Loads * kGatherThreads];
  __shared__ uint8_t table[ec12::kTableSize];
  __shared__ uint32_t exc_range[2];
  const int64_t n_items = static_cast<int64_t>(stream_n > 0 ? stream_n : *a.n_misses) * a.ec12_items;
  const int t = static_cast<int>(threadIdx.x);
  uint4 v[kEc12Loads];
  uint32_t side = 0;
  Ec12Item next = ec12_item(a, blockIdx.x, n_items, stream_layer, stream_first, stream_n, src, keep);
  if (next.valid) ec12_load(next, t, v, side);
  for (int64_t item = blockIdx.x; item < n_items; item += gridDim.x) {
    const Ec12Item it = next;
    __syncthreads();  // the previous item's shared data is no longer read
    if (it.valid && !it.cached) {
      const int n16 = static_cast<int>((it.gb - it.ga) * ec12::kGroupBytes / 16);
#pragma unroll
      for (int i = 0; i < kEc12Loads; ++i)
        if (t + i * kGatherThreads < n16) stage[t + i * kGatherThreads] = v[i];
      if (t < ec12::kTableSize) table[t] = static_cast<uint8_t>(side);
      if (t == ec12::kTableSize || t == ec12::kTableSize + 1) exc_range[t - ec12::kTableSize] = side;
    }
    __syncthreads();
    next = ec12_item(a, item + gridDim.x, n_items, stream_layer, stream_first, stream_n, src, keep);
    if (next.valid) ec12_load(next, t, v, side);
    if (!it.valid) continue;  // the same for the whole block
    if (it.cached) {  // decoded already in another slot: groups [ga, gb) copied device to device
      const uint4* from = reinterpret_cast<const uint4*>(it.cached + it.ga * ec12::kGroup);
      uint4* to = reinterpret_cast<uint4*>(it.dst + it.ga * ec12::kGroup);
      for (int64_t i = t; i < (it.gb - it.ga) * ec12::kGroup / 8; i += kGatherThreads) to[i] = from[i];
      continue;
    }
    for (int64_t h = t; h < 2 * (it.gb - it.ga); h += kGatherThreads) {
      // Low-byte lane `half` holds natural values 8 half..+8 and 32 + 8 half..+8; lane half + 2
      // (its codes in the high nibbles) 16 + 8 half..+8 and 48 + 8 half..+8.
      const int half = static_cast<int>(h & 1);
      const uint4* grp = stage + (h >> 1) * (ec12::kGroupBytes / 16);
      const uint4 code = grp[half], lo_a = grp[2 + half], lo_b = grp[4 + half];
      uint16_t* out = it.dst + (it.ga + (h >> 1)) * ec12::kGroup + 8 * half;
      *reinterpret_cast<uint4*>(out) = decode8(lo_a, code, 0, false, table);
      *reinterpret_cast<uint4*>(out + 32) = decode8(lo_a, code, 8, false, table);
      *reinterpret_cast<uint4*>(out + 16) = decode8(lo_b, code, 0, true, table);
      *reinterpret_cast<uint4*>(out + 48) = decode8(lo_b, code, 8, true, table);
    }
    __syncthreads();  // the decoded values are written: now the exceptions among them
    const uint2* exc = reinterpret_cast<const uint2*>(it.src + ec12::MatrixGeometry{it.rows, it.cols, 0}.exceptions_offset());
    const uint64_t lo = static_cast<uint64_t>(it.ga) * ec12::kGroup, hi = static_cast<uint64_t>(it.gb) * ec12::kGroup;
    for (uint32_t e = exc_range[0] + t; e < exc_range[1]; e += kGatherThreads) {
      const uint2 x = exc[e];
      if (x.x >= lo && x.x < hi) it.dst[x.x] = static_cast<uint16_t>(x.y);
    }
  }
}

void check_pool(const GatherArgs& a) {
  if (a.slot_bytes % 16 != 0 || reinterpret_cast<uintptr_t>(a.pool) % 16 != 0)
    fail(ErrorCode::kUnsupported, "expert cache gather: slots of {} bytes at {} are not 16-byte aligned", a.slot_bytes,
         static_cast<const void*>(a.pool));
}

}  // namespace

Ec12Layer make_ec12_layer(const int64_t record_offset[3], const int64_t slot_offset[3], const int64_t rows[3],
                          const int64_t cols[3]) {
  Ec12Layer l;
  for (int j = 0; j < 3; ++j) {
    const int64_t groups = rows[j] * cols[j] / ec12::kGroup;
    if (!ec12::supports(cols[j]) || rows[j] < 1 || rows[j] > INT32_MAX || cols[j] > INT32_MAX ||
        rows[j] * cols[j] > UINT32_MAX || record_offset[j] % 16 != 0 || slot_offset[j] % 16 != 0)
      fail(ErrorCode::kInvalidArgument, "expert cache gather: EC12 matrix {} of [{}, {}] at record offset {}, slot "
           "offset {}", j, rows[j], cols[j], record_offset[j], slot_offset[j]);
    l.record_offset[j] = record_offset[j], l.slot_offset[j] = slot_offset[j];
    l.rows[j] = static_cast<int32_t>(rows[j]), l.cols[j] = static_cast<int32_t>(cols[j]);
    l.items[j] = static_cast<int32_t>((groups + kEc12ItemGroups - 1) / kEc12ItemGroups);
  }
  return l;
}

void launch_cache_gather(const GatherArgs& a, int blocks, cudaStream_t stream) {
  check_pool(a);
  if (a.ec12)
    cache_gather_ec12_kernel<<<blocks < 1 ? 1 : blocks, kGatherThreads, 0, stream>>>(a, 0, 0, 0, nullptr, nullptr);
  else
    cache_gather_kernel<<<blocks < 1 ? 1 : blocks, kGatherThreads, 0, stream>>>(a, 0, 0, 0, nullptr);
  FT_CUDA_LAUNCH_CHECK();
}

void launch_cache_stream_ec12(const GatherArgs& a, int32_t layer, int32_t first, int32_t n, int blocks,
                              cudaStream_t stream, const uint8_t* src, const int32_t* keep) {
  check_pool(a);
  if (!a.ec12) fail(ErrorCode::kInvalidArgument, "expert cache stream: the banks are not EC12-coded");
  if (n < 1) return;
  cache_gather_ec12_kernel<<<blocks < 1 ? 1 : blocks, kGatherThreads, 0, stream>>>(a, layer, first, n, src, keep);
  FT_CUDA_LAUNCH_CHECK();
}

void launch_cache_stream(const GatherArgs& a, int32_t layer, int32_t first, int32_t n, const int32_t* keep, int blocks,
                         cudaStream_t stream) {
  check_pool(a);
  if (a.ec12) fail(ErrorCode::kInvalidArgument, "expert cache stream: EC12 banks take launch_cache_stream_ec12");
  if (n < 1) return;
  cache_gather_kernel<<<blocks < 1 ? 1 : blocks, kGatherThreads, 0, stream>>>(a, layer, first, n, keep);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
