// sample: one token from each logit row, by the sampler backend/sampling.h defines (the CUDA twin of
// backend/cpu/sample.cpp, which sorts where this kernel selects).
//
// One block of 1024 threads a row; each warp owns a contiguous run of ids (read 32 at a time), so the
// passes that need id order (the draw, the ties of top_logprobs) keep it. The row (F32 [V], 0.6 MB for
// a 152k vocabulary) is read from global memory once a pass:
//   raw log-softmax 1; top_logprobs 3 radix passes + 2 gather passes; edits (only the edited ids);
//   argmax 1 — a greedy row stops here; top-k 3 radix passes; top-p 1 + 3; the draw 2.
// A threshold is a radix select on the order-preserving keys of the floats: digits of 12, 10 and 10
// bits, each a pass building a histogram of weights (counts for top-k and top_logprobs, the integer
// probability weights for top-p) in shared memory, then a block scan for the bin where the weight
// from the top reaches the target. Integer weights make the sums exact and order-independent, so the
// kernel is deterministic and equals the CPU twin up to exp()'s last bit.
#include <cfloat>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/sampling.h"

namespace ft {
namespace cuda {
namespace {

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

/** Row r: backend/sampling.h's steps 1-5. logits F32 [R, V] (edited entries overwritten). */
__global__ void __launch_bounds__(kThreads) sample_kernel(float* logits, int64_t V, const SampleRow* rows,
                                                          LogitEdit* edits, SampleResult* out) {
  __shared__ SampleSmem sm;
  const SampleRow p = rows[blockIdx.x];
  if (p.skip) return;
  float* row = logits + static_cast<int64_t>(blockIdx.x) * V;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const WarpRun run(V);

  // 1. Raw log-softmax: per-thread online max and sum, then the block's.
  float m_t = kNegInf, s_t = 0.0f;
  for (int64_t i = run.lo + lane; i < run.hi; i += 32) {
    const float x = clean(row[i]);
    if (x == kNegInf) continue;
    if (x > m_t) {
      s_t = s_t * expf(m_t - x) + 1.0f;
      m_t = x;
    } else {
      s_t += expf(x - m_t);
    }
  }
  float xmax = warp_max(m_t);
  if (lane == 0) sm.warp_f[warp] = xmax;
  __syncthreads();
  xmax = kNegInf;
  for (int w = 0; w < kWarps; ++w) xmax = fmaxf(xmax, sm.warp_f[w]);
  __syncthreads();
  float s_scaled = m_t == kNegInf ? 0.0f : s_t * expf(m_t - xmax);
  s_scaled = warp_sum(s_scaled);
  if (lane == 0) sm.warp_f[warp] = s_scaled;
  __syncthreads();
  float sum = 0.0f;
  for (int w = 0; w < kWarps; ++w) sum += sm.warp_f[w];
  __syncthreads();
  const float lse = xmax == kNegInf ? kNegInf : xmax + logf(sum);

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

  // 3. Greedy: the lowest id holding the maximum, and how many are finite.
  float m = kNegInf;
  int id = INT_MAX, n_finite = 0;
  for (int64_t i = run.lo + lane; i < run.hi; i += 32) {
    const float z = clean(row[i]);
    if (z > m) m = z, id = static_cast<int>(i);  // ids ascend within a thread
    n_finite += z != kNegInf;
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float om = __shfl_xor_sync(0xffffffffu, m, o);
    const int oid = __shfl_xor_sync(0xffffffffu, id, o);
    if (om > m || (om == m && oid < id)) m = om, id = oid;
    n_finite += __shfl_xor_sync(0xffffffffu, n_finite, o);
  }
  if (lane == 0) {
    sm.warp_f[warp] = m;
    sm.warp_i[warp] = id;
    sm.warp_j[warp] = n_finite;
  }
  __syncthreads();
  m = kNegInf;
  id = INT_MAX;
  n_finite = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (sm.warp_f[w] > m || (sm.warp_f[w] == m && sm.warp_i[w] < id)) m = sm.warp_f[w], id = sm.warp_i[w];
    n_finite += sm.warp_j[w];
  }
  if (id == INT_MAX) id = 0;  // every logit -inf: id 0
  __syncthreads();

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

void CudaOps::sample(const Tensor& logits, const Tensor& rows, Tensor edits, Tensor out) {
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
  cuda::sample_kernel<<<static_cast<unsigned>(R), cuda::kThreads, 0, stream_>>>(
      logits.ptr<float>(), V, static_cast<const SampleRow*>(rows.data), static_cast<LogitEdit*>(edits.data),
      static_cast<SampleResult*>(out.data));
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
