// Expert-cache gather: copies each missed expert's record from the host banks (pinned, mapped
// host memory read over UVA, i.e. PCIe reads issued by the SMs) into its slot. Work items are
// (miss, 64 KiB chunk); a fixed grid strides over items up to the device-side miss count, so the
// launch shape never depends on the data (graph-capturable). Each thread keeps 4 independent
// 16-byte loads in flight; measured on the H200 (DESIGN.md): ~51 GB/s for 9 MiB blocks.
// EC12 banks (moe/ec12.h) take the decoding twin: work items are (miss, matrix, ~48 KiB of coded
// rows); a thread decodes half a 64-value group from three 16-byte loads (the code bytes and two
// 16-byte lanes of low bytes), four halves in flight, then the block patches its rows' exceptions.
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/moe_cache_kernels.h"
#include "moe/ec12.h"

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

constexpr int kEc12Unroll = 4;
constexpr int64_t kEc12ItemBytes = 48 * 1024;  // coded bytes one work item decodes (about)

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

/** Decodes work items of EC12 records into slots. Miss i is a.misses[i] (i < *a.n_misses), or with
 *  stream_n > 0 the record of (stream_layer, i) into slot stream_first + i (i < stream_n). */
__global__ void __launch_bounds__(kGatherThreads)
    cache_gather_ec12_kernel(GatherArgs a, int32_t stream_layer, int32_t stream_first, int32_t stream_n) {
  __shared__ uint8_t table[ec12::kTableSize];
  const int64_t n_items = static_cast<int64_t>(stream_n > 0 ? stream_n : *a.n_misses) * a.ec12_items;
  for (int64_t item = blockIdx.x; item < n_items; item += gridDim.x) {
    const int32_t mi = static_cast<int32_t>(item / a.ec12_items);
    const CacheMiss m = stream_n > 0 ? CacheMiss{stream_layer, mi, stream_first + mi} : a.misses[mi];
    const Ec12Layer& L = a.ec12[m.layer];
    int j = static_cast<int>(item % a.ec12_items), mat = 0;
    while (mat < 3 && j >= L.items[mat]) j -= L.items[mat++];
    if (mat == 3) continue;  // this layer's records have fewer items than the largest
    const int64_t rows = L.rows[mat], cols = L.cols[mat];
    const uint8_t* src = reinterpret_cast<const uint8_t*>(a.host_base[m.layer] +
                                                          static_cast<uint64_t>(m.expert) * a.record_bytes[m.layer] +
                                                          L.record_offset[mat]);
    uint16_t* dst = reinterpret_cast<uint16_t*>(a.pool + static_cast<int64_t>(m.slot) * a.slot_bytes + L.slot_offset[mat]);
    const int64_t r0 = static_cast<int64_t>(j) * L.rows_per_item[mat];
    const int64_t r1 = r0 + L.rows_per_item[mat] < rows ? r0 + L.rows_per_item[mat] : rows;
    __syncthreads();  // the previous item's table reads are done
    if (threadIdx.x < ec12::kTableSize) table[threadIdx.x] = src[threadIdx.x];
    __syncthreads();
    const ec12::MatrixGeometry g{rows, cols, 0};
    const int64_t halves_per_row = cols / 32, n_halves = (r1 - r0) * halves_per_row;
    const uint8_t* rows_src = src + ec12::kHeaderBytes + r0 * g.row_bytes();
    uint16_t* rows_dst = dst + r0 * cols;
    for (int64_t h0 = threadIdx.x; h0 < n_halves; h0 += kEc12Unroll * kGatherThreads) {
      uint4 code[kEc12Unroll], lo_a[kEc12Unroll], lo_b[kEc12Unroll];
#pragma unroll
      for (int u = 0; u < kEc12Unroll; ++u) {
        const int64_t h = h0 + u * kGatherThreads;
        if (h >= n_halves) continue;
        // Halves are consecutive in memory: group h / 2 of the rows, at 96 bytes each.
        const uint8_t* grp = rows_src + (h >> 1) * ec12::kGroupBytes;
        const int half = static_cast<int>(h & 1);
        code[u] = *reinterpret_cast<const uint4*>(grp + 16 * half);
        lo_a[u] = *reinterpret_cast<const uint4*>(grp + 32 + 16 * half);
        lo_b[u] = *reinterpret_cast<const uint4*>(grp + 64 + 16 * half);
      }
#pragma unroll
      for (int u = 0; u < kEc12Unroll; ++u) {
        const int64_t h = h0 + u * kGatherThreads;
        if (h >= n_halves) continue;
        // Low-byte lane `half` holds natural values 8 half..+8 and 32 + 8 half..+8; lane half + 2
        // (its codes in the high nibbles) 16 + 8 half..+8 and 48 + 8 half..+8.
        const int half = static_cast<int>(h & 1);
        uint16_t* out = rows_dst + (h >> 1) * ec12::kGroup + 8 * half;
        *reinterpret_cast<uint4*>(out) = decode8(lo_a[u], code[u], 0, false, table);
        *reinterpret_cast<uint4*>(out + 32) = decode8(lo_a[u], code[u], 8, false, table);
        *reinterpret_cast<uint4*>(out + 16) = decode8(lo_b[u], code[u], 0, true, table);
        *reinterpret_cast<uint4*>(out + 48) = decode8(lo_b[u], code[u], 8, true, table);
      }
    }
    __syncthreads();  // the decoded rows are written: now the exceptions over them
    const uint32_t* index = reinterpret_cast<const uint32_t*>(src + g.row_index_offset());
    const uint2* exc = reinterpret_cast<const uint2*>(src + g.exceptions_offset());
    const uint32_t e1 = index[r1];
    for (uint32_t e = index[r0] + threadIdx.x; e < e1; e += kGatherThreads) {
      const uint2 x = exc[e];
      dst[x.x] = static_cast<uint16_t>(x.y);
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
    if (!ec12::supports(cols[j]) || rows[j] < 1 || rows[j] > INT32_MAX || cols[j] > INT32_MAX ||
        record_offset[j] % 16 != 0 || slot_offset[j] % 16 != 0)
      fail(ErrorCode::kInvalidArgument, "expert cache gather: EC12 matrix {} of [{}, {}] at record offset {}, slot "
           "offset {}", j, rows[j], cols[j], record_offset[j], slot_offset[j]);
    const int64_t row_bytes = ec12::MatrixGeometry{rows[j], cols[j], 0}.row_bytes();
    l.record_offset[j] = record_offset[j], l.slot_offset[j] = slot_offset[j];
    l.rows[j] = static_cast<int32_t>(rows[j]), l.cols[j] = static_cast<int32_t>(cols[j]);
    l.rows_per_item[j] = static_cast<int32_t>(std::clamp<int64_t>(kEc12ItemBytes / row_bytes, 1, rows[j]));
    l.items[j] = static_cast<int32_t>((rows[j] + l.rows_per_item[j] - 1) / l.rows_per_item[j]);
  }
  return l;
}

void launch_cache_gather(const GatherArgs& a, int blocks, cudaStream_t stream) {
  check_pool(a);
  if (a.ec12)
    cache_gather_ec12_kernel<<<blocks < 1 ? 1 : blocks, kGatherThreads, 0, stream>>>(a, 0, 0, 0);
  else
    cache_gather_kernel<<<blocks < 1 ? 1 : blocks, kGatherThreads, 0, stream>>>(a);
  FT_CUDA_LAUNCH_CHECK();
}

void launch_cache_stream_ec12(const GatherArgs& a, int32_t layer, int32_t first, int32_t n, int blocks,
                              cudaStream_t stream) {
  check_pool(a);
  if (!a.ec12) fail(ErrorCode::kInvalidArgument, "expert cache stream: the banks are not EC12-coded");
  if (n < 1) return;
  cache_gather_ec12_kernel<<<blocks < 1 ? 1 : blocks, kGatherThreads, 0, stream>>>(a, layer, first, n);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
