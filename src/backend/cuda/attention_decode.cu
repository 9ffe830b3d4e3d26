// Decode attention (one query token per sequence) for CudaOps::attention, attention.cu: the same
// contract as the general kernel there. Flash-decoding (split-K over the key range; Dao et al.,
// "Flash-Decoding for long-context inference", 2023) with one block per (token, split, kv head and
// pair of its query heads; launch_group): the block's 4 warps take every 4th key of the split,
// kKeysInFlight keys in flight per warp; a warp reads one key's K and V row with 16-byte loads (lane l
// holds dims l*DPL .. l*DPL + DPL - 1), scores it against the block's query heads (held in
// registers), and keeps an online softmax per head. The warps' states merge through shared memory.
// Splits follow the token's own key range: n_split (fixed per launch) blocks share the range [lo, p]
// in pieces of max(kDecodeMinKeys, ceil(len / n_split)) keys, so the plan depends only on the token's
// position and n_split, never on the batch or on the pool: a graph recorded once equals eager decode
// bit for bit, and short contexts use few blocks. A token whose range is one piece writes its output
// directly; otherwise each split writes a (max, sum, unnormalised output) partial, and the split block
// that finishes last (a per-(token, kv head) counter, reset by that block) merges them, so no
// separate combine launch is needed (the "last block" reduction of the CUDA threadFenceReduction sample).
// Cluster mode (AttnDecodeArgs::cluster: batches of at most kDecodeClusterMaxTokens tokens whose ranges
// are all at most kDecodeClusterKeys): 16 splits, launched as one thread-block cluster per (token,
// block of query heads); each block keeps its partial in shared memory and the cluster's first block
// merges them through distributed shared memory (Hopper thread-block clusters, CUDA C++ Programming
// Guide, "Distributed Shared Memory"): no global partials, fence or counter, and only 16 blocks per
// token. Measured on the H200 (qwen3-30b-a3b, 512 + 256 tokens): batch 1 q4_k +8%, bf16 +6%, batch 8
// unchanged or +2%; at 1.5-1.8k keys +1-3%; at 3k keys 8% slower than many short splits (16 blocks of
// 200 keys leave SMs idle), hence the bound.
// Fused (AttnDecodeArgs::fused, qk_norm_rope_attention): q and k arrive unnormalised; each block
// applies the per-head RMSNorm and the rotation to its q heads in registers, the split holding the
// token's key p computes that key and scores it from registers, and the first block of its kv head
// stores the key and v into the pages (no other block of the launch reads that row).
// With AttnDecodeArgs::q8 the blocks that write the output also write its int8 form for the o-proj
// GEMV (CudaOps::prepare_q8), so that GEMV skips its quantize launch.
// Bytes moved: each of the token's keys' K and V once per block (the 1-4 blocks of a kv head share
// them through L2); q once; partials
// n_active * GROUP * (head_dim + 4) * 4 written and read once per (token, kv head).
#include "backend/cuda/attention_decode.h"

#include <cooperative_groups.h>

#include <algorithm>

#include "backend/cuda/attention_sink.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kv_quant.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/q8_act.cuh"
#include "backend/cuda/smem_opt_in.h"
#include "util/error.h"

namespace ft::cuda {
namespace {

constexpr int kDecWarps = 4;
constexpr int kDecodeMinKeys = 16;  // fewest keys a split takes (shorter ranges use fewer splits)
// Keys each warp loads before scoring them. Measured on the H200 (qwen3-30b-a3b q4_k decode, tok/s at
// batch 1 / batch 8 / batch 1 after a 4k prompt): 4 keys 307.6 / 796.6 / 232.1, 2 keys 304.1 / 812.7 /
// 248.5 (fewer registers); 2 is kept for longer contexts. Splits of at least 32 or 24 keys, or 8,
// measured no better.
constexpr int kKeysInFlight = 2;
constexpr int kMergeUnroll = 16;    // splits whose partials the merge loads at once

__device__ __forceinline__ void store_out(const AttnDecodeArgs& a, int64_t i, float v) {
  if (a.out_f32) static_cast<float*>(a.out)[i] = v;
  else static_cast<bf16*>(a.out)[i] = __float2bfloat16_rn(v);
}

/** Stores 4 consecutive outputs at element o (o % 4 == 0) and, with a.q8, their int8 form. For the
 *  int8 form the whole warp calls it, 8 consecutive lanes holding one 32-element chunk (lane & 7: the
 *  quad's place in it; attention_decode_writes_q8). The bytes equal quantize_q8_lane's for the stored
 *  values: the chunk's max is exact in any order, and its sum follows warp_sum's butterfly (elements
 *  16, 8, 4 apart are lanes 4, 2, 1 apart here; 2 and 1 apart, values of the same lane). */
__device__ __forceinline__ void store_out4(const AttnDecodeArgs& a, int64_t o, const float (&v)[4]) {
  float x[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    store_out(a, o + u, v[u]);
    x[u] = a.out_f32 ? v[u] : __bfloat162float(__float2bfloat16_rn(v[u]));
  }
  if (!a.q8) return;
  float m = fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3])));
#pragma unroll
  for (int sh = 4; sh > 0; sh >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, sh));
  const float d = m / 127.0f;
  char4 qa, qc;
  int8_t* pa = &qa.x;
  int8_t* pc = &qc.x;
  float sum[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    int q1 = 0, q2 = 0;
    if (d > 0.0f) {
      q1 = __float2int_rn(x[u] / d);
      q2 = max(-127, min(127, __float2int_rn((x[u] - d * static_cast<float>(q1)) * (254.0f / d))));
    }
    pa[u] = static_cast<int8_t>(q1), pc[u] = static_cast<int8_t>(q2);
    sum[u] = d * fmaf(static_cast<float>(q2), 1.0f / 254.0f, static_cast<float>(q1));
  }
#pragma unroll
  for (int sh = 4; sh > 0; sh >>= 1) {
#pragma unroll
    for (int u = 0; u < 4; ++u) sum[u] += __shfl_xor_sync(0xffffffffu, sum[u], sh);
  }
  const float total = (sum[0] + sum[2]) + (sum[1] + sum[3]);
  const Q8Layout lay(a.T, static_cast<int64_t>(a.H) * a.D);
  *reinterpret_cast<char4*>(a.q8 + o) = qa;
  *reinterpret_cast<char4*>(a.q8 + lay.q2 + o) = qc;
  if ((threadIdx.x & 7) == 0) {
    reinterpret_cast<float*>(a.q8 + lay.xd)[o / 32] = d;
    reinterpret_cast<float*>(a.q8 + lay.xs)[o / 32] = total;
  }
}

/** The key range [lo, p] of a token at position p and its pieces: n_active splits of `per` keys.
 *  `merge_in_cluster` (AttnDecodeArgs::cluster, n_split = kDecodeClusterSplits): the pieces' partials
 *  merge in the cluster. */
__device__ __forceinline__ void decode_plan(int64_t p, int window, int n_split, bool cluster, int64_t& lo,
                                            int64_t& per, int& n_active, bool& merge_in_cluster) {
  lo = window > 0 ? max(int64_t{0}, p - window + 1) : int64_t{0};
  const uint32_t len = static_cast<uint32_t>(p + 1 - lo);  // 32-bit divisions: positions < 2^31
  const uint32_t per32 = max(static_cast<uint32_t>(kDecodeMinKeys), (len + n_split - 1) / n_split);
  per = per32;
  n_active = static_cast<int>((len + per32 - 1) / per32);
  merge_in_cluster = cluster && n_active > 1;
}

/** This lane's part of the sum of squares of one head held as the decode kernel holds it. */
template <int DPL>
__device__ __forceinline__ float lane_sum_sq(const float (&x)[DPL]) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < DPL; ++i) ss += x[i] * x[i];
  return ss;
}

/** Per-head RMSNorm then rotation of one head held as the decode kernel holds it (lane l: dims
 *  l * DPL ..; D == 32 * DPL), as norm_rope.cu computes it up to the order of the sum of squares,
 *  rounded to the activation dtype (round_bf16) as its store would. ss: the head's sum of squares
 *  (lane_sum_sq warp-summed, every lane); cs, sn: the lane's cos and sin (1 and 0 past n_rot);
 *  w: norm weight + offset. */
template <int DPL>
__device__ __forceinline__ void head_norm_rope(float (&x)[DPL], const float (&w)[DPL], const float (&cs)[DPL],
                                               const float (&sn)[DPL], const DecodeNormRope& nr, int D,
                                               bool round_bf16, float ss) {
  const int lane = threadIdx.x & 31;
  const float inv = rsqrtf(ss / static_cast<float>(D) + nr.eps);
#pragma unroll
  for (int i = 0; i < DPL; ++i) x[i] = x[i] * inv * w[i];
  const int half = nr.n_rot / 2;
  if (nr.neox) {  // pairs (i, i + half): a power-of-two number of lanes apart
    const int sh = half / DPL;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const float y = __shfl_xor_sync(0xffffffffu, x[i], sh);
      const int dim = lane * DPL + i;
      if (dim < nr.n_rot) x[i] = dim < half ? x[i] * cs[i] - y * sn[i] : x[i] * cs[i] + y * sn[i];
    }
  } else {  // pairs (2i, 2i + 1): in the lane
#pragma unroll
    for (int i = 0; i < DPL; i += 2) {
      if (lane * DPL + i >= nr.n_rot) break;
      const float a0 = x[i], a1 = x[i + 1];
      x[i] = a0 * cs[i] - a1 * sn[i];
      x[i + 1] = a1 * cs[i + 1] + a0 * sn[i + 1];
    }
  }
  if (round_bf16) {
#pragma unroll
    for (int i = 0; i < DPL; ++i) x[i] = __bfloat162float(__float2bfloat16_rn(x[i]));
  }
}

/** Floats of dynamic shared memory for the warp states, later the merge's split weights and totals,
 *  rounded up to 16 bytes: all a block uses, and in cluster mode where its partial starts (float4
 *  stores). */
__host__ __device__ __forceinline__ int partial_offset(int group, int D, int n_split) {
  const int n = kDecWarps * group * (2 + D) > group * (2 * n_split + 1) ? kDecWarps * group * (2 + D)
                                                                        : group * (2 * n_split + 1);
  return (n + 3) & ~3;
}

/** The block's partial (m, l, 2 unused, o[D] per head of its GROUP) in cluster mode: in dynamic shared
 *  memory after partial_offset floats (launch sizes it). */
template <int GROUP>
__device__ __forceinline__ float* block_partial(float* sm, const AttnDecodeArgs& a, int D) {
  return sm + partial_offset(GROUP, D, a.n_split);
}

/** A cluster block past the token's range: an empty partial (m = -inf, l = 0) for the merge,
 *  and both cluster barriers. */
template <int GROUP>
__device__ void cluster_idle_t(const AttnDecodeArgs& a, int D) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900  // launched only where clusters_possible()
  extern __shared__ __align__(16) float sm[];
  pdl_enter();  // nothing to wait for, but the next kernel may launch as soon as every block has passed it
  float* bp = block_partial<GROUP>(sm, a, D);
  for (int i = threadIdx.x; i < GROUP; i += blockDim.x) bp[i * (D + 4)] = -INFINITY, bp[i * (D + 4) + 1] = 0.0f;
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  cluster.sync();  // the partials are written
  cluster.sync();  // rank 0 has read them
#endif
}

/** The cluster's rank 0 merges its partials (read from each block's shared memory)
 *  into the output, as the global merge does from a.part: weights exp(m_s - M) per head, then
 *  sum_s w_s o_s / sum_s w_s l_s, stored by store_out4 (with the int8 form when a.q8). Every block of
 *  the cluster calls it after writing its partial. */
template <int DPL, int GROUP>
__device__ void cluster_merge(const AttnDecodeArgs& a, float* sm, int64_t t, int g, int D) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  float* bp = block_partial<GROUP>(sm, a, D);
  cluster.sync();  // every block's partial is written
  if (cluster.block_rank() == 0) {
    const int d4 = D / 4;
    for (int idx = threadIdx.x; idx < GROUP * d4; idx += blockDim.x) {  // whole warps (as the n_active == 1 path)
      const int h = idx / d4, d = 4 * (idx - h * d4);
      float ms[kDecodeClusterSplits], M = -INFINITY;
#pragma unroll
      for (int s = 0; s < kDecodeClusterSplits; ++s) {
        ms[s] = cluster.map_shared_rank(bp, s)[h * (D + 4)];
        M = fmaxf(M, ms[s]);
      }
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, L = 0.0f;
#pragma unroll
      for (int s = 0; s < kDecodeClusterSplits; ++s) {
        if (ms[s] == -INFINITY) continue;  // an idle block's partial: no o to read (0 x garbage may be NaN)
        const float* ps = cluster.map_shared_rank(bp, s) + h * (D + 4);
        const float w = __expf(ms[s] - M);
        const float4 o = *reinterpret_cast<const float4*>(ps + 4 + d);
        acc[0] = fmaf(w, o.x, acc[0]), acc[1] = fmaf(w, o.y, acc[1]);
        acc[2] = fmaf(w, o.z, acc[2]), acc[3] = fmaf(w, o.w, acc[3]);
        L = fmaf(w, ps[1], L);
      }
      const float inv = a.sinks ? sink_scale(M, L, a.sinks[g * GROUP + h]) : L > 0.0f ? 1.0f / L : 0.0f;
      const float y[4] = {acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv};
      store_out4(a, (t * a.H + g * GROUP + h) * D + d, y);
    }
  }
  cluster.sync();  // the other blocks stay until rank 0 has read their shared memory
#endif
}

// KV: kKvFloat (F32 / BF16 pages, a.kv_f32), or kKvFp8 / kKvQ8 (one-byte codes and their scales,
// dequantized in registers as the CPU dequantizes them; never FUSED). Separate instantiations: the
// float kernels are unchanged.
template <int DPL, int GROUP, bool FUSED, int KV>
__global__ void __launch_bounds__(kDecWarps * 32) attention_decode_kernel(AttnDecodeArgs a) {
  static_assert(!FUSED || KV == kKvFloat, "the fused kernel stores float rows");
  extern __shared__ __align__(16) float sm[];  // [kDecWarps][GROUP][2 + D]: each warp's m, l, o per head
  __shared__ int is_last;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t = blockIdx.x;
  // blockIdx.y: GROUP consecutive query heads, g * GROUP .., of kv head gk (a.hs_log2 blocks per kv head)
  const int g = blockIdx.y, gk = g >> a.hs_log2, split = blockIdx.z, D = a.D;
  // Before the PDL wait: the token's slot, position and key plan, and its first keys' page lookups
  // (batch info the host wrote before the step). q and the keys come after it (the kernel before
  // this one writes q, and k and v of the token's own key: into the pages, or, fused, as this
  // kernel's inputs).
  const int seq = a.seq[t];
  const int64_t p = a.pos[t];
  if (seq < 0 || seq >= a.n_seqs || p < 0) {  // no keys: zeros, as the general kernel's combine writes
    pdl_enter();
    if (split == 0) {
      const int64_t o0 = (t * a.H + g * GROUP) * D;  // the block's GROUP heads: whole chunks with a.q8
      const Q8Layout lay(a.T, static_cast<int64_t>(a.H) * D);
      for (int idx = threadIdx.x; idx < GROUP * D; idx += blockDim.x) {
        store_out(a, o0 + idx, 0.0f);
        if (a.q8) {  // zeros quantize to zeros
          a.q8[o0 + idx] = 0, a.q8[lay.q2 + o0 + idx] = 0;
          if (idx % 32 == 0)
            reinterpret_cast<float*>(a.q8 + lay.xd)[(o0 + idx) / 32] = 0.0f,
            reinterpret_cast<float*>(a.q8 + lay.xs)[(o0 + idx) / 32] = 0.0f;
        }
      }
    }
    return;
  }
  int64_t lo, per;
  int n_active;
  bool in_cluster;  // the cluster's blocks merge through distributed shared memory
  decode_plan(p, a.window, a.n_split, a.cluster, lo, per, n_active, in_cluster);
  if (split >= n_active) {  // past the token's range: not counted, never read (split 0 waits)
    if (in_cluster) cluster_idle_t<GROUP>(a, D);  // a cluster member all the same
    return;
  }
  const int64_t s_lo = lo + split * per, s_hi = min(p + 1, s_lo + per);
  const bool active = lane * DPL < D;

  const int32_t* table = a.bt + static_cast<int64_t>(seq) * a.max_blocks;
  const uint32_t ps = static_cast<uint32_t>(a.page_size);
  auto page_row = [&](int64_t j) -> int64_t {  // element offset of key j's row for kv head g, or -1
    // 32-bit division (positions < 2^31): a 64-bit one is a ~70-instruction routine per key
    const uint32_t blk = static_cast<uint32_t>(j) / ps, in_page = static_cast<uint32_t>(j) - blk * ps;
    const int64_t page = blk < static_cast<uint32_t>(a.max_blocks) ? table[blk] : -1;
    if (page < 0 || page >= a.n_pages) return -1;
    return ((page * a.page_size + in_page) * a.G + gk) * D;
  };
  auto key_row = [&](int64_t j) -> int64_t {  // quantized KV: the index of key j's row for kv head g, or -1
    const uint32_t blk = static_cast<uint32_t>(j) / ps, in_page = static_cast<uint32_t>(j) - blk * ps;
    const int64_t page = blk < static_cast<uint32_t>(a.max_blocks) ? table[blk] : -1;
    if (page < 0 || page >= a.n_pages) return -1;
    return (page * a.page_size + in_page) * a.G + gk;
  };
  // Fused: this kernel writes key p itself (below); the split that holds it scores it from registers.
  // Float pages: element offsets of the rows; quantized: row indices (load_kv_quant).
  auto row_of = [&](int64_t j) -> int64_t {
    if constexpr (KV == kKvFloat) return j >= s_hi || (FUSED && j == p) ? -1 : page_row(j);
    else return j >= s_hi ? -1 : key_row(j);
  };
  (void)page_row, (void)key_row;  // each instantiation uses one of them (fused: page_row too)
  constexpr int kStep = kKeysInFlight * kDecWarps;  // keys the block's warps take per iteration
  int64_t off[kKeysInFlight];  // rows of this warp's next keys (warp-uniform), looked up one iteration ahead
#pragma unroll
  for (int u = 0; u < kKeysInFlight; ++u) off[u] = row_of(s_lo + warp + u * kDecWarps);
  // The split's keys into L2 before the wait, one prefetch per page it touches: a page holds each key's
  // rows of every kv head together, so the blocks of kv head 0's first query heads fetch them for all
  // (one prefetch per key from every block measured 7-14% slower at batch 32 and at a 4k context).
  // A prefetch reads no value: L2 is coherent, so a prefetch of key p's row, which the kernel before
  // this one (or, fused, this kernel after the wait) writes, never leaves a stale copy behind.
  if (g == 0 && threadIdx.x == 0) {
    const int64_t key_bytes = static_cast<int64_t>(a.G) * D * (KV != kKvFloat ? 1 : a.kv_f32 ? 4 : 2);  // codes only
    for (int64_t j = s_lo; j < s_hi && key_bytes % 16 == 0;) {
      const uint32_t blk = static_cast<uint32_t>(j) / ps, first = static_cast<uint32_t>(j) - blk * ps;
      const int64_t end = min(s_hi, static_cast<int64_t>(blk + 1) * ps);  // past the last key of the page
      const int64_t page = blk < static_cast<uint32_t>(a.max_blocks) ? table[blk] : -1;
      if (page >= 0 && page < a.n_pages) {
        const int64_t byte = (page * a.page_size + first) * key_bytes;
        const uint32_t n = static_cast<uint32_t>((end - j) * key_bytes);
        prefetch_l2(static_cast<const char*>(a.k) + byte, n);
        prefetch_l2(static_cast<const char*>(a.v) + byte, n);
      }
      j = end;
    }
  }
  // Fused: the norm weights, and the cos and sin of the token's position for the lane's dims.
  float wq[FUSED ? DPL : 1], wk[FUSED ? DPL : 1], cs[FUSED ? DPL : 1], sn[FUSED ? DPL : 1];
  const bool has_p = FUSED && s_hi == p + 1;  // this split ends at the token's own key
  if constexpr (FUSED) {
    const int half = a.nr.n_rot / 2;
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
      const int dim = lane * DPL + i;
      wq[i] = load_any(a.nr.wq, a.nr.wq_code, dim) + a.nr.offset;
      wk[i] = load_any(a.nr.wk, a.nr.wk_code, dim) + a.nr.offset;
      cs[i] = 1.0f, sn[i] = 0.0f;
      if (dim < a.nr.n_rot) {
        const int pair = a.nr.neox ? (dim < half ? dim : dim - half) : dim / 2;
        sincosf(static_cast<float>(p) * a.nr.inv_freq[pair], &sn[i], &cs[i]);
        cs[i] *= a.nr.attn_factor, sn[i] *= a.nr.attn_factor;
      }
    }
  }
  // Keys before p were written by earlier steps: the first iteration's K and V rows are loaded before
  // the wait (key p's row, which the kernel before this one writes, after it).
  float kk[kKeysInFlight][DPL], vv[kKeysInFlight][DPL];
  bool pre[kKeysInFlight];
#pragma unroll
  for (int u = 0; u < kKeysInFlight; ++u) {
    pre[u] = s_lo + warp + u * kDecWarps < p;
#pragma unroll
    for (int i = 0; i < DPL; ++i) kk[u][i] = vv[u][i] = 0.0f;
    if (pre[u] && active && off[u] >= 0) {
      if constexpr (KV == kKvFloat) {
        load_x_any<DPL>(a.k, a.kv_f32, off[u] + lane * DPL, kk[u]);
        load_x_any<DPL>(a.v, a.kv_f32, off[u] + lane * DPL, vv[u]);
      } else {
        load_kv_quant<KV, DPL>(a.k, a.k_scale, off[u], D, a.kv_sph, lane * DPL, kk[u]);
        load_kv_quant<KV, DPL>(a.v, a.v_scale, off[u], D, a.kv_sph, lane * DPL, vv[u]);
      }
    }
  }
  pdl_enter();

  // Fused, the split with key p: warp 0 normalises and rotates the token's k, takes its v, both as
  // the pages hold them, and the first block of the kv head stores them there.
  float kp[FUSED ? DPL : 1], vp[FUSED ? DPL : 1];
  int64_t p_row = -1;
  if constexpr (FUSED) {
    if (has_p && warp == 0) {
      p_row = page_row(p);
      const bool bf = a.q_code != 0;
      const int64_t ko = (t * a.G + gk) * D + lane * DPL;
      load_x_any<DPL>(a.nr.k, !bf, ko, kp);
      load_x_any<DPL>(a.nr.v, !bf, ko, vp);
      head_norm_rope<DPL>(kp, wk, cs, sn, a.nr, D, bf, warp_sum(lane_sum_sq<DPL>(kp)));
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        if (!a.kv_f32) kp[i] = __bfloat162float(__float2bfloat16_rn(kp[i])), vp[i] = __bfloat162float(__float2bfloat16_rn(vp[i]));
      }
      if (p_row >= 0 && (g & ((1 << a.hs_log2) - 1)) == 0) {
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
          const int64_t o = p_row + lane * DPL + i;
          if (a.kv_f32) {
            const_cast<float*>(static_cast<const float*>(a.k))[o] = kp[i];
            const_cast<float*>(static_cast<const float*>(a.v))[o] = vp[i];
          } else {
            const_cast<bf16*>(static_cast<const bf16*>(a.k))[o] = __float2bfloat16_rn(kp[i]);
            const_cast<bf16*>(static_cast<const bf16*>(a.v))[o] = __float2bfloat16_rn(vp[i]);
          }
        }
      }
    }
  }

  float q[GROUP][DPL];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    const int64_t qo = (t * a.H + g * GROUP + h) * D;
    if (a.q_code != 1) {  // F32 or BF16: vector loads
#pragma unroll
      for (int i = 0; i < DPL; ++i) q[h][i] = 0.0f;
      if (active) load_x_any<DPL>(a.q, a.q_code == 0, qo + lane * DPL, q[h]);
    } else {
#pragma unroll
      for (int i = 0; i < DPL; ++i) q[h][i] = lane * DPL + i < D ? load_any(a.q, a.q_code, qo + lane * DPL + i) : 0.0f;
    }
  }
  if constexpr (FUSED) {  // the heads' sums of squares, reduced together
    float ss[GROUP];
#pragma unroll
    for (int h = 0; h < GROUP; ++h) ss[h] = lane_sum_sq<DPL>(q[h]);
    warp_sum_n(ss);
#pragma unroll
    for (int h = 0; h < GROUP; ++h) head_norm_rope<DPL>(q[h], wq, cs, sn, a.nr, D, a.q_code != 0, ss[h]);
  }
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
#pragma unroll
    for (int i = 0; i < DPL; ++i) q[h][i] *= a.scale;
  }
  float m[GROUP], l[GROUP], o[GROUP][DPL];
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    m[h] = -INFINITY, l[h] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[h][i] = 0.0f;
  }
  // Head h's score of one key (this lane's part of the dot product), and the online-softmax update
  // with the key's warp-summed score s and its value row (Milakov & Gimelshein, "Online normalizer
  // calculation for softmax", 2018).
  auto partial_dot = [&](int h, const float (&k)[DPL]) {
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) s = fmaf(q[h][i], k[i], s);
    return s;
  };
  auto accumulate = [&](int h, float s, const float (&v)[DPL]) {
    const float m_new = fmaxf(m[h], s);
    const float alpha = __expf(m[h] - m_new);  // m[h] = -inf the first time: 0
    const float pj = __expf(s - m_new);
    l[h] = l[h] * alpha + pj;
    m[h] = m_new;
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[h][i] = fmaf(pj, v[i], o[h][i] * alpha);
  };
  auto score = [&](const float (&k)[DPL], const float (&v)[DPL]) {
#pragma unroll
    for (int h = 0; h < GROUP; ++h) accumulate(h, warp_sum(partial_dot(h, k)), v);
  };
  for (int64_t j = s_lo + warp; j < s_hi; j += kStep) {  // several keys per warp in flight
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u) {
      if (pre[u]) {  // loaded before the wait (first iteration only)
        pre[u] = false;
        continue;
      }
#pragma unroll
      for (int i = 0; i < DPL; ++i) kk[u][i] = vv[u][i] = 0.0f;
      if (active && off[u] >= 0) {
        if constexpr (KV == kKvFloat) {
          load_x_any<DPL>(a.k, a.kv_f32, off[u] + lane * DPL, kk[u]);
          load_x_any<DPL>(a.v, a.kv_f32, off[u] + lane * DPL, vv[u]);
        } else {
          load_kv_quant<KV, DPL>(a.k, a.k_scale, off[u], D, a.kv_sph, lane * DPL, kk[u]);
          load_kv_quant<KV, DPL>(a.v, a.v_scale, off[u], D, a.kv_sph, lane * DPL, vv[u]);
        }
      }
    }
    bool use[kKeysInFlight];
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u) {  // the next iteration's page lookups overlap these loads
      use[u] = off[u] >= 0;
      off[u] = row_of(j + kStep + u * kDecWarps);
    }
    // Every (key, head) dot of the iteration first, then their warp sums level by level: the
    // shuffles of independent sums overlap instead of forming one chain of 5 per (key, head). Each
    // sum is warp_sum's butterfly, and the softmax updates run in key order, so the bits are score's.
    float sc[kKeysInFlight * GROUP];  // [key in flight][head]
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u)
#pragma unroll
      for (int h = 0; h < GROUP; ++h) sc[u * GROUP + h] = partial_dot(h, kk[u]);
    warp_sum_n(sc);
#pragma unroll
    for (int u = 0; u < kKeysInFlight; ++u)
      if (use[u])
#pragma unroll
        for (int h = 0; h < GROUP; ++h) accumulate(h, sc[u * GROUP + h], vv[u]);
  }
  if constexpr (FUSED) {
    if (p_row >= 0) score(kp, vp);  // warp 0 of the split with key p
  }

  const int stride = 2 + D;
  float* mine = sm + static_cast<int64_t>(warp) * GROUP * stride;
#pragma unroll
  for (int h = 0; h < GROUP; ++h) {
    if (lane == 0) mine[h * stride] = m[h], mine[h * stride + 1] = l[h];
#pragma unroll
    for (int i = 0; i < DPL; ++i)
      if (lane * DPL + i < D) mine[h * stride + 2 + lane * DPL + i] = o[h][i];
  }
  __syncthreads();
  // Merge the warps: thread x handles (head, 4 dims) slices.
  const int d4 = D / 4;
  for (int idx = threadIdx.x; idx < GROUP * d4; idx += blockDim.x) {
    const int h = idx / d4, d = 4 * (idx - h * d4);
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) M = fmaxf(M, sm[(w * GROUP + h) * stride]);
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, L = 0.0f;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w) {
      const float* st = sm + (w * GROUP + h) * stride;
      const float sc = st[0] == -INFINITY ? 0.0f : __expf(st[0] - M);
#pragma unroll
      for (int u = 0; u < 4; ++u) acc[u] = fmaf(sc, st[2 + d + u], acc[u]);
      L = fmaf(sc, st[1], L);
    }
    const int64_t row = t * a.H + g * GROUP + h;
    if (n_active == 1) {  // the whole range in this block: the output itself (the sink joins here)
      const float inv = a.sinks ? sink_scale(M, L, a.sinks[g * GROUP + h]) : L > 0.0f ? 1.0f / L : 0.0f;
      const float y[4] = {acc[0] * inv, acc[1] * inv, acc[2] * inv, acc[3] * inv};
      store_out4(a, row * D + d, y);
      continue;
    }
    float* pp = in_cluster ? block_partial<GROUP>(sm, a, D) + h * (D + 4)
                           : a.part + (static_cast<int64_t>(split) * a.T * a.H + row) * (D + 4);
    if (d == 0) pp[0] = M, pp[1] = L;
    *reinterpret_cast<float4*>(pp + 4 + d) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }
  if (n_active == 1) return;
  if (in_cluster) return cluster_merge<DPL, GROUP>(a, sm, t, g, D);

  // The last split block of this (token, kv head) merges every split's partial.
  __threadfence();  // this block's partial is visible device-wide before it is counted
  __syncthreads();
  int* done = a.done + t * gridDim.y + g;
  if (threadIdx.x == 0) is_last = atomicAdd(done, 1) == n_active - 1;
  __syncthreads();
  if (!is_last) return;
  __threadfence();
  // Split weights first, in parallel: wgt[h][s] = exp(m_s - M_h) (shared memory, reusing the warp
  // states' space), one warp per head for the max and the total L_h. Then each thread sums its
  // float4 slices of the group's outputs over the splits, kMergeUnroll splits' loads at a time.
  const int64_t rs = a.T * a.H * (D + 4);  // stride between splits
  const float* p0 = a.part + (t * a.H + g * GROUP) * (D + 4);  // split 0, head g * GROUP
  float* wgt = sm;                             // [GROUP][n_split]
  float* lsum = sm + GROUP * a.n_split;        // [GROUP][n_split]: each split's l
  float* tot = sm + 2 * GROUP * a.n_split;     // [GROUP]: 1 / L_h
  for (int i = threadIdx.x; i < GROUP * n_active; i += blockDim.x) {  // each split's (m, l) in one load
    const int h = i / n_active, s = i % n_active;
    const float2 ml = __ldcg(reinterpret_cast<const float2*>(p0 + s * rs + h * (D + 4)));
    wgt[h * a.n_split + s] = ml.x, lsum[h * a.n_split + s] = ml.y;
  }
  __syncthreads();
  for (int h = warp; h < GROUP; h += kDecWarps) {
    float M = -INFINITY;
    for (int s = lane; s < n_active; s += 32) M = fmaxf(M, wgt[h * a.n_split + s]);
    M = warp_max(M);
    float L = 0.0f;
    for (int s = lane; s < n_active; s += 32) {
      const float ms = wgt[h * a.n_split + s];
      const float w = ms == -INFINITY ? 0.0f : __expf(ms - M);
      wgt[h * a.n_split + s] = w;
      L = fmaf(w, lsum[h * a.n_split + s], L);
    }
    L = warp_sum(L);
    if (lane == 0) tot[h] = a.sinks ? sink_scale(M, L, a.sinks[g * GROUP + h]) : L > 0.0f ? 1.0f / L : 0.0f;
  }
  __syncthreads();
  constexpr int kSlots = (GROUP * DPL + 15) / 16;  // float4 slices per thread: GROUP * D / 4 over 128 threads
  // d4 (D / 4) as in the warp merge above
  float4 acc[kSlots];
  int sh[kSlots], soff[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int idx = threadIdx.x + i * kDecWarps * 32;
    sh[i] = idx < GROUP * d4 ? idx / d4 : -1;
    soff[i] = sh[i] < 0 ? 0 : sh[i] * (D + 4) + 4 + 4 * (idx % d4);
    acc[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }
#pragma unroll kMergeUnroll
  for (int s = 0; s < n_active; ++s) {
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      if (sh[i] < 0) continue;
      const float4 v = __ldcg(reinterpret_cast<const float4*>(p0 + s * rs + soff[i]));
      const float w = wgt[sh[i] * a.n_split + s];
      acc[i].x = fmaf(w, v.x, acc[i].x), acc[i].y = fmaf(w, v.y, acc[i].y);
      acc[i].z = fmaf(w, v.z, acc[i].z), acc[i].w = fmaf(w, v.w, acc[i].w);
    }
  }
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    if (sh[i] < 0) continue;  // warp-uniform when a.q8 is set (attention_decode_writes_q8)
    const int idx = threadIdx.x + i * kDecWarps * 32;
    const int64_t o = (t * a.H + g * GROUP + sh[i]) * D + 4 * (idx % d4);
    const float inv = tot[sh[i]];
    const float y[4] = {acc[i].x * inv, acc[i].y * inv, acc[i].z * inv, acc[i].w * inv};
    store_out4(a, o, y);
  }
  if (threadIdx.x == 0) *done = 0;  // ready for the next launch (graph replays included)
}

template <int DPL, int GROUP>
void launch(const AttnDecodeArgs& a, cudaStream_t s) {
  // The fused kernel needs head_dim 32 * DPL with DPL 4 or 8 (attention_decode_fuses): none for 2 or 16.
  constexpr bool kFusable = DPL == 4 || DPL == 8;
  FT_CHECK(!a.fused || (kFusable && a.D == 32 * DPL));
  const dim3 grid(static_cast<unsigned>(a.T), static_cast<unsigned>(a.G << a.hs_log2), static_cast<unsigned>(a.n_split));
  // the warps' states, later the merge's split weights and totals; in cluster mode the block's partial after them
  const size_t smem = static_cast<size_t>(partial_offset(GROUP, a.D, a.n_split) + (a.cluster ? GROUP * (a.D + 4) : 0)) * 4;
  const dim3 cluster(1, 1, a.cluster ? kDecodeClusterSplits : 1);
  if (a.cluster) FT_CHECK(a.n_split == kDecodeClusterSplits);
  FT_CHECK(!a.fused || a.kv_form == kKvFloat);
  if constexpr (kFusable) {
    if (a.fused) {
      if (a.cluster) opt_in_nonportable_cluster(attention_decode_kernel<DPL, GROUP, true, kKvFloat>);
      return launch_pdl_cluster(attention_decode_kernel<DPL, GROUP, true, kKvFloat>, grid, cluster,
                                dim3(kDecWarps * 32), smem, s, a);
    }
  }
  // quantized pages (fp8 / q8_0): their own instantiations
  if (a.kv_form == kKvFp8) {
    if (a.cluster) opt_in_nonportable_cluster(attention_decode_kernel<DPL, GROUP, false, kKvFp8>);
    return launch_pdl_cluster(attention_decode_kernel<DPL, GROUP, false, kKvFp8>, grid, cluster, dim3(kDecWarps * 32),
                              smem, s, a);
  }
  if (a.kv_form == kKvQ8) {
    if (a.cluster) opt_in_nonportable_cluster(attention_decode_kernel<DPL, GROUP, false, kKvQ8>);
    return launch_pdl_cluster(attention_decode_kernel<DPL, GROUP, false, kKvQ8>, grid, cluster, dim3(kDecWarps * 32),
                              smem, s, a);
  }
  if (a.cluster) opt_in_nonportable_cluster(attention_decode_kernel<DPL, GROUP, false, kKvFloat>);
  launch_pdl_cluster(attention_decode_kernel<DPL, GROUP, false, kKvFloat>, grid, cluster, dim3(kDecWarps * 32), smem,
                     s, a);
}

/** Query heads per block (GROUP): 2 of a larger group for one token, so a group of 8 takes 4 blocks
 *  per (token, kv head, split). A block's warps then run with little else on their SM, so its time
 *  is its instruction count, which the heads it scores set: each extra block rereads the keys from L2
 *  but shortens the path. From kDecodeGroup4Tokens tokens (cluster launches) the SMs are full and
 *  fewer, longer blocks win: 4 heads. H200, qwen3-30b-a3b (8 query heads per kv head), prompt 512 /
 *  gen 128, one lease: q4_k batch 8 774.5 / 777.4 -> 852.6 tok/s, bf16 batch 8 519.5 / 520.5 -> 533.9;
 *  at batch 1 4 heads lose (q4_k 369.9 -> 351.8), and 8 heads or 1 lose at both. The heads a block
 *  holds change no arithmetic (each head's scores, softmax and merges are its own), so the choice may
 *  follow the batch: a graph padded to more tokens equals eager decode bit for bit. */
constexpr int kDecodeGroup4Tokens = 8;

template <int DPL>
void launch_group(AttnDecodeArgs a, cudaStream_t s) {
  const int group = a.H / a.G;
  if (group >= 4 && a.cluster && a.T >= kDecodeGroup4Tokens) {
    a.hs_log2 = group >= 8 ? 1 : 0;
    return launch<DPL, 4>(a, s);
  }
  a.hs_log2 = group >= 8 ? 2 : (group >= 4 ? 1 : 0);
  if (group == 1) launch<DPL, 1>(a, s);
  else launch<DPL, 2>(a, s);
}

}  // namespace

bool attention_decode_supports(int64_t n_head, int64_t n_head_kv, int64_t head_dim) {
  const int64_t group = n_head / n_head_kv;
  // A lane loads DPL = 2, 4, 8 or 16 consecutive dims (launch_attention_decode): whole such runs only.
  return head_dim % 4 == 0 &&
         (head_dim <= 128 || (head_dim <= 256 && head_dim % 8 == 0) || (head_dim <= 512 && head_dim % 16 == 0)) &&
         (group == 1 || group == 2 || group == 4 || group == 8);
}

bool attention_decode_writes_q8(int64_t n_head, int64_t n_head_kv, int64_t head_dim) {
  // A block's output slices (4 dims each) are GROUP * head_dim / 4 consecutive threads (GROUP = 1, 2 or
  // 4, launch_group): whole warps, and whole chunks per head (GROUP 4 only where 2 is also possible).
  const int64_t group = n_head / n_head_kv == 1 ? 1 : 2;
  return attention_decode_supports(n_head, n_head_kv, head_dim) && head_dim % 32 == 0 && (group * head_dim) % 128 == 0;
}

bool attention_decode_fuses(int64_t head_dim, int64_t n_rot, bool neox) {
  if (head_dim != 128 && head_dim != 256) return false;
  const int64_t dpl = head_dim / 32, half = n_rot / 2;
  if (n_rot <= 0 || n_rot > head_dim || n_rot % 2 != 0) return false;
  if (!neox) return true;
  const int64_t sh = half / dpl;  // lanes between the pair's halves
  return half % dpl == 0 && (sh & (sh - 1)) == 0;
}

int decode_splits(int64_t T, int64_t capacity) {
  if (T > 64) return 8;
  if (T > 16) return 32;
  // Small batches: enough splits that one sequence's blocks spread over the SMs (at least 16 keys each).
  return static_cast<int>(std::clamp<int64_t>(capacity / 256, 64, 128));
}

void launch_attention_decode(const AttnDecodeArgs& a, cudaStream_t stream) {
  FT_CHECK(a.D % 4 == 0);
  // head_dim <= 64 (gpt-oss): 2 dims a lane, so the whole warp holds the head (4 dims a lane left half
  // of it idle and doubled each lane's products)
  if (a.D <= 64) launch_group<2>(a, stream);
  else if (a.D <= 128) launch_group<4>(a, stream);
  else if (a.D <= 256) launch_group<8>(a, stream);
  else launch_group<16>(a, stream);  // Gemma 4's 512: the block's warp states 16-33 KB of shared memory
}

}  // namespace ft::cuda
