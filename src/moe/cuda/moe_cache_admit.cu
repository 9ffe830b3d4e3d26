// Expert-cache admission on the device: the algorithm of moe/cache_admission.h (admit_reference
// is its CPU reference and the test oracle), in one thread block so the whole admission is one
// launch with no host synchronisation.
//   - distinct ids in first-appearance order: thread 0 walks the [T, k] ids (T*k <= a few hundred
//     at decode) marking a shared-memory table of n_expert entries (state and pair count);
//   - hits: parallel over distinct ids; thread 0 lists the misses; a planned FetchPolicy ranks them
//     heaviest first in parallel (planned_rank, O(m) per thread) and thread 0 sums the split;
//   - misses: in that order; each picks its victim with a block-wide argmin of (victim_key, slot) over
//     slots with stamp < tick, then thread 0 updates the maps (cost per miss ~ n_slots / blockDim loads,
//     small next to the miss's multi-MiB copy);
//   - per-pair outputs: parallel over pairs; stats: thread 0.
#include <climits>

#include "backend/cuda/common.cuh"
#include "moe/cuda/moe_cache_kernels.h"

namespace ft::cuda {
namespace {

constexpr int kAdmitThreads = 512;

struct Cand {
  long long key;  // victim_key of the slot's stamp
  int slot;
};

__device__ __forceinline__ Cand better(Cand a, Cand b) {
  return (b.key < a.key || (b.key == a.key && b.slot < a.slot)) ? b : a;
}

__device__ __forceinline__ Cand warp_best(Cand c) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Cand other;
    other.key = __shfl_xor_sync(0xffffffffu, c.key, o);
    other.slot = __shfl_xor_sync(0xffffffffu, c.slot, o);
    c = better(c, other);
  }
  return c;
}

__global__ void __launch_bounds__(kAdmitThreads) cache_admit_kernel(CacheStateRefs s, AdmitArgs a) {
  extern __shared__ int32_t shm[];
  const int32_t E = s.n_expert;
  int32_t* seen = shm;              // [E]: state and pairs (seen_state, seen_pairs)
  int32_t* distinct = shm + E;      // [E]; then the planned fetch order
  int32_t* misses = shm + 2 * E;    // [E]: misses in first-appearance order
  __shared__ long long tick;
  __shared__ int32_t n_distinct, n_miss, n_cpu, n_hits, m, cap;
  __shared__ Cand red[kAdmitThreads / 32];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  for (int32_t e = tid; e < E; e += blockDim.x) seen[e] = 0;
  __syncthreads();
  if (tid == 0) {
    tick = static_cast<long long>(++*s.tick);
    int32_t n = 0;
    for (int32_t i = 0; i < a.n_pairs; ++i) {
      const int32_t e = a.ids[i];
      if (e < 0 || e >= E) continue;
      if (seen[e] == 0) distinct[n++] = e;
      seen[e] = (seen[e] | 1) + 4;
    }
    n_distinct = n, n_miss = 0, n_cpu = 0, n_hits = 0;
  }
  __syncthreads();
  int32_t* map = s.slot_of + static_cast<int64_t>(a.layer) * E;
  for (int32_t d = tid; d < n_distinct; d += blockDim.x) {  // hits
    const int32_t slot = map[distinct[d]];
    if (slot >= 0) {
      s.stamp[slot] = tick;
      atomicAdd(&n_hits, 1);
    }
  }
  __syncthreads();
  if (tid == 0) {  // the misses, in first-appearance order
    int32_t n = 0;
    for (int32_t d = 0; d < n_distinct; ++d)
      if (map[distinct[d]] < 0) misses[n++] = distinct[d];
    m = n;
  }
  __syncthreads();
  const int32_t* order = misses;
  if (a.policy.planned()) {  // heaviest first (distinct is free now)
    for (int32_t i = tid; i < m; i += blockDim.x) distinct[planned_rank(misses, m, i, seen)] = misses[i];
    order = distinct;
    __syncthreads();
  }
  if (tid == 0) cap = planned_fetches(a.policy, order, m, seen);
  __syncthreads();
  for (int32_t d = 0; d < m; ++d) {  // misses, in fetch order (uniform control flow)
    const int32_t e = order[d];
    Cand c{LLONG_MAX, INT_MAX};
    // Victims' stamps stay below this; an empty slot (stamp 0) always qualifies.
    const long long newest = max(tick - static_cast<long long>(a.spare > 0 ? a.spare : 0), 1LL);
    if (n_miss < cap) {
      for (int32_t slot = tid; slot < s.n_slots; slot += blockDim.x) {
        const long long st = s.stamp[slot];
        if (st < newest) c = better(c, Cand{static_cast<long long>(victim_key(st, tick, s.n_layers)), slot});
      }
    }
    c = warp_best(c);
    if (lane == 0) red[warp] = c;
    __syncthreads();
    if (tid == 0) {
      Cand b = red[0];
      for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) b = better(b, red[w]);
      if (b.slot == INT_MAX) {
        seen[e] = (seen[e] & ~3) | 2;
        ++n_cpu;
      } else {
        const int32_t victim = b.slot;
        if (s.owner[victim] >= 0) s.slot_of[s.owner[victim]] = -1;
        s.owner[victim] = a.layer * E + e;
        map[e] = victim;
        s.stamp[victim] = tick;
        a.misses[n_miss] = CacheMiss{a.layer, e, victim};
        ++n_miss;
      }
    }
    __syncthreads();
  }
  for (int32_t i = tid; i < a.n_pairs; i += blockDim.x) {  // per-pair outputs
    const int32_t e = a.ids[i];
    const bool valid = e >= 0 && e < E;
    a.slot_ids[i] = valid ? map[e] : -1;
    if (a.cpu_ids && !a.prefetch) a.cpu_ids[i] = valid && seen_state(seen[e]) == 2 ? e : -1;
  }
  if (tid == 0) {
    int64_t* st = s.stats + static_cast<int64_t>(a.layer) * kCacheStatCount;
    if (a.prefetch) {
      st[kCachePrefetched] += n_miss;
    } else {
      st[kCacheHits] += n_hits;
      st[kCacheMisses] += n_miss;
      st[kCacheCpu] += n_cpu;
    }
    st[kCacheBytes] += static_cast<int64_t>(n_miss) * a.record_bytes;
    *a.n_misses = n_miss;
  }
}

/** claim_region (moe/cache_admission.h) in one block: the region's slots are distinct, so are
 *  their owners' map entries; the slots the layer's experts held elsewhere are outside the region
 *  once step 2 is done, and distinct. */
__global__ void cache_claim_region_kernel(CacheStateRefs s, int32_t layer, int32_t first, int32_t n,
                                          int64_t record_bytes, int32_t* src_slot, int32_t keep_below,
                                          int32_t cpu_share_q16) {
  const int32_t E = s.n_expert;
  __shared__ long long tick;
  __shared__ int kept, on_cpu;
  if (threadIdx.x == 0) tick = static_cast<long long>(++*s.tick), kept = 0, on_cpu = 0;
  for (int32_t slot = first + static_cast<int32_t>(threadIdx.x); slot < first + E; slot += blockDim.x) {
    const int32_t key = s.owner[slot];
    if (slot - first < n && key == layer * E + (slot - first)) continue;  // the layer's expert already in place
    if (key >= 0) s.slot_of[key] = -1;
    s.owner[slot] = -1;
    s.stamp[slot] = 0;
  }
  __syncthreads();
  int32_t* map = s.slot_of + static_cast<int64_t>(layer) * E;
  for (int32_t e = static_cast<int32_t>(threadIdx.x); e < n; e += blockDim.x) {
    const int32_t old = map[e];
    if (old < 0 && stream_cpu_pick(layer, e) < cpu_share_q16) {  // the CPU's share: not copied, not mapped
      src_slot[e] = kStreamOnCpu;
      atomicAdd(&on_cpu, 1);
      continue;
    }
    if (src_slot) {
      src_slot[e] = old;
      if (old >= 0) atomicAdd(&kept, 1);
    }
    if (old >= 0 && old != first + e) {
      if (src_slot && old < keep_below) {  // copied into the region as scratch: the cache keeps it where it is
        s.stamp[old] = tick;
        continue;
      }
      s.owner[old] = -1, s.stamp[old] = 0;
    }
    map[e] = first + e;
    s.owner[first + e] = layer * E + e;
    s.stamp[first + e] = tick;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int64_t* st = s.stats + static_cast<int64_t>(layer) * kCacheStatCount;
    st[kCacheHits] += kept;
    st[kCacheMisses] += n - kept - on_cpu;
    st[kCacheBytes] += static_cast<int64_t>(n - kept - on_cpu) * record_bytes;
    *s.tick += 2 * static_cast<int64_t>(s.n_layers);  // 5. the victim order's window passes
  }
}

}  // namespace

void launch_cache_claim_region(const CacheStateRefs& s, int32_t layer, int32_t first, int32_t n,
                               int64_t record_bytes, int32_t* src_slot, int32_t keep_below, cudaStream_t stream,
                               int32_t cpu_share_q16) {
  if (layer < 0 || layer >= s.n_layers || n < 0 || n > s.n_expert || first < 0 || first > s.n_slots - s.n_expert)
    fail(ErrorCode::kInvalidArgument, "expert cache: region of {} experts at slot {} (layer {}) outside {} slots", n,
         first, layer, s.n_slots);
  if (cpu_share_q16 < 0 || cpu_share_q16 > 65536 || (cpu_share_q16 > 0 && !src_slot))
    fail(ErrorCode::kInvalidArgument, "expert cache: a streamed layer's CPU share {} / 65536 (needs src_slot)",
         cpu_share_q16);
  cache_claim_region_kernel<<<1, 256, 0, stream>>>(s, layer, first, n, record_bytes, src_slot, keep_below,
                                                   cpu_share_q16);
  FT_CUDA_LAUNCH_CHECK();
}

void launch_cache_admit(const CacheStateRefs& s, const AdmitArgs& a, cudaStream_t stream) {
  // 3 * E int32 of dynamic shared memory (48,000 bytes at 4,000 experts) plus the static ~0.3 KiB
  // stay inside the 48 KiB every device gives without opting in; no runtime queries here, so the
  // launch can be captured in a graph.
  if (s.n_expert > 4000)
    fail(ErrorCode::kUnsupported, "expert cache: {} experts per layer; the admission kernel handles up to 4000",
         s.n_expert);
  const size_t shm = 3 * static_cast<size_t>(s.n_expert) * sizeof(int32_t);
  cache_admit_kernel<<<1, kAdmitThreads, shm, stream>>>(s, a);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
