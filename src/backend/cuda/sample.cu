// sample: one token from each logit row, by the sampler backend/sampling.h defines (the CUDA twin of
// backend/cpu/sample.cpp, which sorts where these kernels select). Two kernels:
// - sample_stats_kernel: a grid of row chunks (4096 logits, one block each) staged in shared memory:
//   the chunk's raw max and sum of exp, its edits (raw logits saved), the edited maximum, its lowest id
//   and the count of finite logits; the row's last block to finish merges the chunks in id order
//   (deterministic) into the row's stats, and writes the result of a row that needs nothing more
//   (greedy, or nothing finite, and no top_logprobs). Reads the row once with every SM: the whole
//   sampler of a greedy step (~0.6 MB a row for a 152k vocabulary).
// - sample_select_kernel, only for rows left: one block of 1024 threads a row; each warp owns a
//   contiguous run of ids (read 32 at a time), so the passes that need id order (the draw, the ties
//   of top_logprobs) keep it. Per pass the row is read from global memory (L2): top_logprobs 3 radix
//   passes + 2 gather passes, the edits in place, then top-k 3 radix passes, top-p 1 + 3, the draw 2.
// A threshold is a radix select on the order-preserving keys of the floats: digits of 12, 10 and 10
// bits, each a pass building a histogram of weights (counts for top-k and top_logprobs, the integer
// probability weights for top-p) in shared memory, then a block scan for the bin where the weight
// from the top reaches the target. Integer weights make the sums exact and order-independent, so the
// kernels are deterministic and equal the CPU twin up to the logprobs' last bits.
#include <cfloat>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/sampling.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kStatsThreads = 256;
constexpr int kStatsChunk = 4096;  // logits a stats block stages (16 KiB)
constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxBins = 4096;
constexpr float kNegInf = -INFINITY;

struct SampleSmem {
  unsigned long long hist[kMaxBins];
  unsigned long long warp_u64[kWarps];
  float warp_f[kWarps];
  int warp_i[kWarps];
  int warp_j[kWarps];
  int top_id[kMaxTopLogprobs];
  float top_val[kMaxTopLogprobs];
  unsigned long long sel_above, draw_base, draw_r;
  float f0, raw;
  int i0, i1, sel_bin, draw_warp;
};

/** One chunk's share of a row (sample_stats_kernel). */
struct SamplePartial {
  float raw_max, raw_sum;  // max of the raw logits, sum of exp(x - raw_max)
  float z_max;             // max of the edited logits
  int z_arg, n_finite;     // its lowest id (INT_MAX: none finite), finite edited logits
};

/** A row's stats, merged by its last chunk: what sample_select_kernel starts from. */
struct SampleStats {
  float lse;              // raw log-sum-exp (-inf: nothing finite)
  float m;                // max edited logit
  int argmax, n_finite;   // lowest id holding m; finite edited logits
  int done;               // 1: the result is written (greedy without top_logprobs)
};

__device__ __forceinline__ float clean(float x) { return isnan(x) ? kNegInf : x; }
__device__ __forceinline__ uint32_t key_of(float x) { return sample_order_key(__float_as_uint(x)); }

/** This warp's run of ids [lo, hi) (32-aligned runs, in warp order). */
struct WarpRun {
  int64_t lo, hi;
  __device__ WarpRun(int64_t V) {
    const int64_t chunk = ((V + kWarps - 1) / kWarps + 31) / 32 * 32;
    const int64_t w = threadIdx.x / 32;
    lo = min(V, w * chunk);
    hi = min(V, lo + chunk);
  }
};

__device__ __forceinline__ unsigned long long warp_sum_u64(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/** Sum over the block (every thread gets it). */
__device__ unsigned long long block_sum_u64(unsigned long long v, SampleSmem& sm) {
  v = warp_sum_u64(v);
  if (threadIdx.x % 32 == 0) sm.warp_u64[threadIdx.x / 32] = v;
  __syncthreads();
  unsigned long long t = 0;
  for (int w = 0; w < kWarps; ++w) t += sm.warp_u64[w];
  __syncthreads();
  return t;
}

/** Exclusive prefix sum over the threads in index order (every thread gets its own). */
__device__ unsigned long long block_exclusive_u64(unsigned long long v, SampleSmem& sm) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned long long inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long up = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += up;
  }
  if (lane == 31) sm.warp_u64[warp] = inc;
  __syncthreads();
  unsigned long long before = 0;
  for (int w = 0; w < warp; ++w) before += sm.warp_u64[w];
  __syncthreads();
  return before + inc - v;
}

/** The largest key v such that the elements with key >= v weigh at least `target` (given that all of
 *  them together do): three radix passes. `weight(z, key)` is an element's weight (0: not a member);
 *  z is the row's value with NaN as -inf. */
template <typename Weight>
__device__ uint32_t radix_select(const float* row, int64_t V, Weight weight, unsigned long long target,
                                 SampleSmem& sm) {
  constexpr int kShift[3] = {20, 10, 0}, kBits[3] = {12, 10, 10};
  const WarpRun run(V);
  const int lane = threadIdx.x % 32;
  uint32_t prefix = 0;
  unsigned long long above = 0;
#pragma unroll 1
  for (int level = 0; level < 3; ++level) {
    const int shift = kShift[level], nb = 1 << kBits[level];
    const uint32_t mask_hi = level == 0 ? 0u : ~((1u << (shift + kBits[level])) - 1u);
    for (int b = threadIdx.x; b < nb; b += kThreads) sm.hist[b] = 0;
    __syncthreads();
    for (int64_t i = run.lo + lane; i < run.hi; i += 32) {
      const float z = clean(row[i]);
      const uint32_t key = key_of(z);
      if ((key & mask_hi) != prefix) continue;
      const unsigned long long w = weight(z, key);
      if (w) atomicAdd(&sm.hist[(key >> shift) & (nb - 1)], w);
    }
    __syncthreads();
    // Thread t owns bins [nb - (t + 1) * per, nb - t * per), the highest first.
    const int per = nb / kThreads, top = nb - static_cast<int>(threadIdx.x) * per;
    unsigned long long mine = 0;
    for (int b = top - 1; b >= top - per; --b) mine += sm.hist[b];
    const unsigned long long ex = block_exclusive_u64(mine, sm);
    if (above + ex < target && above + ex + mine >= target) {
      unsigned long long cum = above + ex;
      for (int b = top - 1; b >= top - per; --b) {
        if (cum + sm.hist[b] >= target) {
          sm.sel_bin = b;
          sm.sel_above = cum;
          break;
        }
        cum += sm.hist[b];
      }
    }
    __syncthreads();
    prefix |= static_cast<uint32_t>(sm.sel_bin) << shift;
    above = sm.sel_above;
    __syncthreads();
  }
  return prefix;
}

/** Block (chunk blockIdx.x, row blockIdx.y) of the stats pass; see the file comment. logits F32 [R, V]
 *  (read only); partials [R, gridDim.x]; stats [R]; done [R] counters (zero, and left zero). */
__global__ void __launch_bounds__(kStatsThreads) sample_stats_kernel(const float* logits, int64_t V,
                                                                     const SampleRow* rows, LogitEdit* edits,
                                                                     SamplePartial* partials, SampleStats* stats,
                                                                     unsigned* done, SampleResult* out) {
  __shared__ float chunk[kStatsChunk];
  __shared__ float red_f[kStatsThreads / 32];
  __shared__ int red_i[kStatsThreads / 32], red_j[kStatsThreads / 32];
  __shared__ int last, finished, finish_id;
  __shared__ float finish_raw, finish_lse;
  const int r = blockIdx.y, nb = gridDim.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const SampleRow p = rows[r];
  if (p.skip) return;
  const float* row = logits + static_cast<int64_t>(r) * V;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kStatsChunk;
  const int n = static_cast<int>(min(static_cast<int64_t>(kStatsChunk), V - lo));
  auto block_max = [&](float v) {
    v = warp_max(v);
    if (lane == 0) red_f[warp] = v;
    __syncthreads();
    v = kNegInf;
    for (int w = 0; w < kStatsThreads / 32; ++w) v = fmaxf(v, red_f[w]);
    __syncthreads();
    return v;
  };
  float mx = kNegInf;
  for (int i = threadIdx.x; i < n; i += kStatsThreads) {
    const float x = clean(row[lo + i]);
    chunk[i] = x;
    mx = fmaxf(mx, x);
  }
  mx = block_max(mx);
  float s = 0.0f;
  if (mx != kNegInf)
    for (int i = threadIdx.x; i < n; i += kStatsThreads) s += expf(chunk[i] - mx);
  s = warp_sum(s);
  if (lane == 0) red_f[warp] = s;
  __syncthreads();
  s = 0.0f;
  for (int w = 0; w < kStatsThreads / 32; ++w) s += red_f[w];
  __syncthreads();
  // This chunk's edits (ids are unique in a row), their raw logits kept for the other blocks.
  for (int j = p.edit_begin + static_cast<int>(threadIdx.x); j < p.edit_end; j += kStatsThreads) {
    const LogitEdit e = edits[j];
    if (e.id < lo || e.id >= lo + n) continue;
    const float raw = chunk[e.id - lo];
    edits[j].raw = raw;
    chunk[e.id - lo] = sample_edit_logit(raw, e, p, kNegInf);
  }
  __threadfence();
  __syncthreads();
  float zm = kNegInf;
  int za = INT_MAX, nf = 0;
  for (int i = threadIdx.x; i < n; i += kStatsThreads) {
    const float z = chunk[i];
    if (z > zm) zm = z, za = static_cast<int>(lo + i);  // ids ascend within a thread
    nf += z != kNegInf;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, zm, o);
    const int oa = __shfl_xor_sync(0xffffffffu, za, o);
    if (om > zm || (om == zm && oa < za)) zm = om, za = oa;
    nf += __shfl_xor_sync(0xffffffffu, nf, o);
  }
  if (lane == 0) {
    red_f[warp] = zm;
    red_i[warp] = za;
    red_j[warp] = nf;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    zm = kNegInf;
    za = INT_MAX;
    nf = 0;
    for (int w = 0; w < kStatsThreads / 32; ++w) {
      if (red_f[w] > zm || (red_f[w] == zm && red_i[w] < za)) zm = red_f[w], za = red_i[w];
      nf += red_j[w];
    }
    partials[static_cast<int64_t>(r) * nb + blockIdx.x] = SamplePartial{mx, s, zm, za, nf};
    __threadfence();
    last = atomicAdd(&done[r], 1u) == static_cast<unsigned>(nb - 1);
  }
  __syncthreads();
  if (!last) return;
  // The row's last block: merge the chunks in id order.
  __threadfence();
  if (threadIdx.x == 0) {
    done[r] = 0;
    const SamplePartial* pr = partials + static_cast<int64_t>(r) * nb;
    float M = kNegInf, S = 0.0f, Z = kNegInf;
    int arg = INT_MAX, finite = 0;
    for (int b = 0; b < nb; ++b) M = fmaxf(M, __ldcg(&pr[b].raw_max));
    for (int b = 0; b < nb; ++b) {
      const float bm = __ldcg(&pr[b].raw_max);
      if (bm != kNegInf) S += __ldcg(&pr[b].raw_sum) * expf(bm - M);
      const float bz = __ldcg(&pr[b].z_max);
      if (bz > Z) Z = bz, arg = __ldcg(&pr[b].z_arg);  // chunks ascend: the first maximum is the lowest id
      finite += __ldcg(&pr[b].n_finite);
    }
    if (arg == INT_MAX) arg = 0;  // every logit -inf: id 0
    const float lse = M == kNegInf ? kNegInf : M + logf(S);
    finished = (p.temperature <= 0.0f || Z == kNegInf) && p.top_logprobs <= 0;
    stats[r] = SampleStats{lse, Z, arg, finite, finished};
    finish_id = arg;
    finish_lse = lse;
    finish_raw = clean(row[arg]);
  }
  __syncthreads();
  if (!finished) return;
  for (int j = p.edit_begin + static_cast<int>(threadIdx.x); j < p.edit_end; j += kStatsThreads)
    if (__ldcg(&edits[j].id) == finish_id) finish_raw = __ldcg(&edits[j].raw);
  __syncthreads();
  if (threadIdx.x == 0) {
    SampleResult& o = out[r];
    o.id = finish_id;
    o.logprob = finish_lse == kNegInf ? kNegInf : finish_raw - finish_lse;
    o.n_top = 0;
  }
}

/** Row blockIdx.x when its stats left it: backend/sampling.h's steps 1 (top_logprobs), 2 (the edits,
 *  now in place: logits F32 [R, V] has them overwritten) and 4-5. */
__global__ void __launch_bounds__(kThreads) sample_select_kernel(float* logits, int64_t V, const SampleRow* rows,
                                                                 LogitEdit* edits, const SampleStats* stats,
                                                                 SampleResult* out) {
  __shared__ SampleSmem sm;
  const SampleRow p = rows[blockIdx.x];
  if (p.skip) return;
  const SampleStats st = stats[blockIdx.x];
  if (st.done) return;
  float* row = logits + static_cast<int64_t>(blockIdx.x) * V;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const WarpRun run(V);
  const float lse = st.lse, xmax = lse;  // -inf exactly when no raw logit is finite

  // top_logprobs: the N-th best raw key, then the N best in id order (ties to the lower id).
  int n_top = 0;
  if (p.top_logprobs > 0 && xmax != kNegInf) {
    n_top = static_cast<int>(min(static_cast<int64_t>(min(p.top_logprobs, kMaxTopLogprobs)), V));
    const uint32_t v = radix_select(row, V, [](float, uint32_t) { return 1ull; }, n_top, sm);
    int gt = 0, eq = 0;
    for (int64_t i0 = run.lo; i0 < run.hi; i0 += 32) {
      const int64_t i = i0 + lane;
      const uint32_t key = i < run.hi ? key_of(clean(row[i])) : 0u;
      gt += __popc(__ballot_sync(0xffffffffu, i < run.hi && key > v));
      eq += __popc(__ballot_sync(0xffffffffu, i < run.hi && key == v));
    }
    if (lane == 0) {
      sm.warp_i[warp] = gt;
      sm.warp_j[warp] = eq;
    }
    __syncthreads();
    int gt_base = 0, eq_base = 0, n_gt = 0;
    for (int w = 0; w < kWarps; ++w) {
      if (w < warp) gt_base += sm.warp_i[w], eq_base += sm.warp_j[w];
      n_gt += sm.warp_i[w];
    }
    const int need_eq = n_top - n_gt;
    const unsigned lt = (1u << lane) - 1u;
    for (int64_t i0 = run.lo; i0 < run.hi; i0 += 32) {
      const int64_t i = i0 + lane;
      const float x = i < run.hi ? clean(row[i]) : kNegInf;
      const uint32_t key = i < run.hi ? key_of(x) : 0u;
      const unsigned bg = __ballot_sync(0xffffffffu, i < run.hi && key > v);
      const unsigned be = __ballot_sync(0xffffffffu, i < run.hi && key == v);
      if (i < run.hi && key > v) {
        const int slot = gt_base + __popc(bg & lt);
        sm.top_id[slot] = static_cast<int>(i);
        sm.top_val[slot] = x;
      } else if (i < run.hi && key == v) {
        const int r = eq_base + __popc(be & lt);
        if (r < need_eq) {
          sm.top_id[n_gt + r] = static_cast<int>(i);
          sm.top_val[n_gt + r] = x;
        }
      }
      gt_base += __popc(bg);
      eq_base += __popc(be);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // insertion sort of n_top <= 20 by (value desc, id asc)
      for (int a = 1; a < n_top; ++a) {
        const int id = sm.top_id[a];
        const float val = sm.top_val[a];
        int b = a - 1;
        while (b >= 0 && (sm.top_val[b] < val || (sm.top_val[b] == val && sm.top_id[b] > id))) {
          sm.top_id[b + 1] = sm.top_id[b];
          sm.top_val[b + 1] = sm.top_val[b];
          --b;
        }
        sm.top_id[b + 1] = id;
        sm.top_val[b + 1] = val;
      }
    }
    __syncthreads();
  }

  // 2. Edits, in place; each keeps its raw logit.
  for (int j = p.edit_begin + static_cast<int>(threadIdx.x); j < p.edit_end; j += kThreads) {
    LogitEdit e = edits[j];
    if (e.id < 0 || e.id >= V) continue;
    const float raw = clean(row[e.id]);
    edits[j].raw = raw;
    row[e.id] = sample_edit_logit(raw, e, p, kNegInf);
  }
  __syncthreads();

  // 3. Greedy: the stats' lowest id holding the maximum.
  const float m = st.m;
  const int n_finite = st.n_finite;
  int id = st.argmax;

  // 4-5. Thresholds and one draw.
  if (p.temperature > 0.0f && m != kNegInf) {
    uint32_t tk = 0, tp = 0;
    if (p.top_k > 0 && p.top_k < n_finite)
      tk = radix_select(row, V, [](float z, uint32_t) { return z != kNegInf ? 1ull : 0ull; },
                        static_cast<unsigned long long>(p.top_k), sm);
    const float inv_t = 1.0f / p.temperature;
    if (p.top_p < 1.0f) {
      auto cand = [=](float z, uint32_t key) -> unsigned long long {
        return z != kNegInf && key >= tk ? sample_weight(sample_exp((z - m) * inv_t)) : 0ull;
      };
      unsigned long long total = 0;
      for (int64_t i = run.lo + lane; i < run.hi; i += 32) {
        const float z = clean(row[i]);
        total += cand(z, key_of(z));
      }
      total = block_sum_u64(total, sm);
      tp = radix_select(row, V, cand, sample_top_p_target(p.top_p, total), sm);
    }
    const uint32_t t = max(tk, tp);
    const float min_p = p.min_p;
    auto weight = [=](float z) -> unsigned long long {
      if (z == kNegInf || key_of(z) < t) return 0ull;
      const float pr = sample_exp((z - m) * inv_t);
      return pr >= min_p ? sample_weight(pr) : 0ull;
    };
    unsigned long long mass = 0;
    for (int64_t i = run.lo + lane; i < run.hi; i += 32) mass += weight(clean(row[i]));
    mass = warp_sum_u64(mass);
    if (lane == 0) sm.warp_u64[warp] = mass;
    __syncthreads();
    if (threadIdx.x == 0) {
      unsigned long long W = 0;
      for (int w = 0; w < kWarps; ++w) W += sm.warp_u64[w];
      const unsigned long long r = sample_mulhi(sample_random_bits(p), W);
      unsigned long long base = 0;
      int chosen = -1;
      for (int w = 0; w < kWarps; ++w) {
        if (r < base + sm.warp_u64[w]) {
          chosen = w;
          break;
        }
        base += sm.warp_u64[w];
      }
      sm.draw_warp = chosen;
      sm.draw_base = base;
      sm.draw_r = r;
      sm.i0 = id;
    }
    __syncthreads();
    if (warp == sm.draw_warp) {
      unsigned long long base = sm.draw_base;
      const unsigned long long r = sm.draw_r;
      for (int64_t i0 = run.lo; i0 < run.hi; i0 += 32) {
        const int64_t i = i0 + lane;
        const unsigned long long w = i < run.hi ? weight(clean(row[i])) : 0ull;
        unsigned long long inc = w;
        for (int o = 1; o < 32; o <<= 1) {
          const unsigned long long up = __shfl_up_sync(0xffffffffu, inc, o);
          if (lane >= o) inc += up;
        }
        const unsigned hit = __ballot_sync(0xffffffffu, base + inc > r);
        if (hit) {
          if (lane == __ffs(hit) - 1) sm.i0 = static_cast<int>(i);
          break;
        }
        base += __shfl_sync(0xffffffffu, inc, 31);
      }
    }
    __syncthreads();
    id = sm.i0;
  }

  // The sampled id's raw logit (its edit's, when it has one), then the result.
  if (threadIdx.x == 0) sm.raw = clean(row[id]);
  __syncthreads();
  for (int j = p.edit_begin + static_cast<int>(threadIdx.x); j < p.edit_end; j += kThreads)
    if (edits[j].id == id) sm.raw = edits[j].raw;
  __syncthreads();
  if (threadIdx.x == 0) {
    SampleResult& o = out[blockIdx.x];
    o.id = id;
    o.logprob = lse == kNegInf ? kNegInf : sm.raw - lse;
    o.n_top = n_top;
    for (int j = 0; j < n_top; ++j) {
      o.top_ids[j] = sm.top_id[j];
      o.top_logprobs[j] = sm.top_val[j] - lse;
    }
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::sample(const Tensor& logits, const Tensor& rows, Tensor edits, Tensor out, bool greedy_only) {
  forget_prepared();
  cuda::check_dtype("sample", "logits", logits, {DType::F32});
  cuda::check_dev("sample", "rows", rows);
  cuda::check_dev("sample", "out", out);
  const int64_t R = logits.rows(), V = logits.cols();
  if (rows.bytes() != R * static_cast<int64_t>(sizeof(SampleRow)))
    fail(ErrorCode::kInvalidArgument, "sample: rows holds {} bytes, expected {} rows of {}", rows.bytes(), R,
         sizeof(SampleRow));
  if (out.bytes() != R * static_cast<int64_t>(sizeof(SampleResult)))
    fail(ErrorCode::kInvalidArgument, "sample: out holds {} bytes, expected {} rows of {}", out.bytes(), R,
         sizeof(SampleResult));
  if (!edits.empty()) {
    cuda::check_dev("sample", "edits", edits);
    if (edits.bytes() % static_cast<int64_t>(sizeof(LogitEdit)) != 0)
      fail(ErrorCode::kInvalidArgument, "sample: edits holds {} bytes, not a whole number of edits", edits.bytes());
  }
  if (V > INT_MAX) fail(ErrorCode::kInvalidArgument, "sample: row length {} of logits is too large", V);
  if (R == 0) return;
  if (R > 65535) fail(ErrorCode::kInvalidArgument, "sample: {} rows exceed the grid's 65535", R);
  const int64_t nb = (V + cuda::kStatsChunk - 1) / cuda::kStatsChunk;
  auto* done = static_cast<unsigned*>(zeroed_scratch(Scratch::kSampleDone, R * 4));
  auto* base = static_cast<uint8_t*>(
      scratch(Scratch::kSample, R * static_cast<int64_t>(sizeof(cuda::SampleStats) + nb * sizeof(cuda::SamplePartial))));
  auto* stats = reinterpret_cast<cuda::SampleStats*>(base);
  auto* partials = reinterpret_cast<cuda::SamplePartial*>(base + R * sizeof(cuda::SampleStats));
  const auto* rp = static_cast<const SampleRow*>(rows.data);
  auto* ep = static_cast<LogitEdit*>(edits.data);
  auto* op = static_cast<SampleResult*>(out.data);
  cuda::sample_stats_kernel<<<dim3(static_cast<unsigned>(nb), static_cast<unsigned>(R)), cuda::kStatsThreads, 0,
                              stream_>>>(logits.ptr<float>(), V, rp, ep, partials, stats, done, op);
  FT_CUDA_LAUNCH_CHECK();
  if (greedy_only) return;
  cuda::sample_select_kernel<<<static_cast<unsigned>(R), cuda::kThreads, 0, stream_>>>(logits.ptr<float>(), V, rp,
                                                                                        ep, stats, op);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
