// sample: one token from each logit row, by the sampler backend/sampling.h defines (the CUDA twin of
// backend/cpu/sample.cpp, which sorts where these kernels select).
//
// Every kernel is a grid of (chunk, row) blocks, a chunk being 4096 logits (16 KiB), so a row is read
// by ~37 SMs at once for a 152k vocabulary (a single block a row would be bound by one SM's shared-
// memory atomics: ~0.4-0.9 ms a sampled row, measured). The last block of a row to finish (a counter
// a row, returned to zero) merges the chunks' shares in id order, so the results are deterministic.
// 1. sample_stats_kernel: the chunk's raw max and sum of exp, its best top_logprobs candidates (by
//    rounds of block argmax), its edits (raw logits saved in the edits, edited values written to the
//    row), its edited maximum with the lowest id and its count of finite logits. The last block: the
//    row's log-sum-exp, argmax, top_logprobs, and the result of a row that needs no draw (greedy, or
//    nothing finite).
// 2. sample_select_kernel, three launches (digits of 12, 10 and 10 bits of the order-preserving key)
//    per threshold, top-k (counts) then top-p (the integer probability weights): each block builds
//    its chunk's histogram of the keys under the prefix chosen so far in shared memory and adds it to
//    the row's global histogram; the last block finds the bin where the weight from the top reaches
//    the target and extends the prefix.
// 3. sample_draw_kernel: each chunk's weight of the kept set; the last block picks the chunk holding
//    the draw's point and walks it in id order.
// A stage a row does not need returns at once (and the host skips stages no row needs).
#include <cfloat>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/op_checks.h"
#include "backend/sampling.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kChunk = 4096;               // logits a block stages
constexpr int kPer = kChunk / kThreads;    // 16 a thread: thread t holds chunk[t + k * kThreads]
constexpr int kMaxChunks = 128;            // rows of up to 524288 logits
constexpr int kMaxBins = 4096;
constexpr float kNegInf = -INFINITY;

/** One chunk's share of a row's stats. */
struct SamplePartial {
  float raw_max, raw_sum;  // max of the raw logits, sum of exp(x - raw_max)
  float z_max;             // max of the edited logits
  int z_arg, n_finite;     // its lowest id (INT_MAX: none finite), finite edited logits
  int n_cand;              // top_logprobs candidates written
};

struct SampleCand {
  float v;
  int id;
};

/** A row's state between the kernels. */
struct SampleState {
  float lse;             // raw log-sum-exp (-inf: nothing finite)
  float m;               // max edited logit
  int argmax, n_finite;  // lowest id holding m; finite edited logits
  int done;              // 1: the result is written
  uint32_t tk, tp;       // the top-k and top-p thresholds (order keys; 0: off)
  uint32_t prefix;       // the select in progress: key bits chosen so far
  unsigned long long above, target;
};

/** Scratch of a launch: [R] states, [R] counters, [R, kMaxBins] histograms, [R, nb] partials,
 *  [R, nb, kMaxTopLogprobs] candidates, [R, nb] chunk weights. */
struct SampleScratch {
  SampleState* state;
  unsigned* done;
  unsigned long long* hist;
  SamplePartial* part;
  SampleCand* cand;
  unsigned long long* mass;
};

__device__ __forceinline__ float clean(float x) { return isnan(x) ? kNegInf : x; }
__device__ __forceinline__ uint32_t key_of(float x) { return sample_order_key(__float_as_uint(x)); }
__device__ __forceinline__ bool better(float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); }

/** The block's best (value, id), ties to the lower id; every thread gets it. */
__device__ void block_best(float& v, int& i, float* red_f, int* red_i) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
  if (lane == 0) red_f[warp] = v, red_i[warp] = i;
  __syncthreads();
  v = kNegInf;
  i = INT_MAX;
  for (int w = 0; w < kWarps; ++w)
    if (better(red_f[w], red_i[w], v, i)) v = red_f[w], i = red_i[w];
  __syncthreads();
}

__device__ unsigned long long block_sum_u64(unsigned long long v, unsigned long long* red) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
  __syncthreads();
  unsigned long long t = 0;
  for (int w = 0; w < kWarps; ++w) t += red[w];
  __syncthreads();
  return t;
}

/** Exclusive prefix sum in thread order; every thread gets its own. */
__device__ unsigned long long block_exclusive_u64(unsigned long long v, unsigned long long* red) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  unsigned long long inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long up = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += up;
  }
  if (lane == 31) red[warp] = inc;
  __syncthreads();
  unsigned long long before = 0;
  for (int w = 0; w < warp; ++w) before += red[w];
  __syncthreads();
  return before + inc - v;
}

/** Counts this block in for row r; true in the row's last block (which returns the counter to 0). */
__device__ bool last_block(unsigned* done, int r, int* flag) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    *flag = atomicAdd(&done[r], 1u) == gridDim.x - 1;
    if (*flag) done[r] = 0;
  }
  __syncthreads();
  if (!*flag) return false;
  __threadfence();
  return true;
}

/** The raw logit of `id` in row r after the stats kernel: its edit's `raw` when it has one. */
__device__ float raw_logit(const float* row, const SampleRow& p, const LogitEdit* edits, int id, float* shared) {
  if (threadIdx.x == 0) *shared = clean(__ldcg(&row[id]));
  __syncthreads();
  for (int j = p.edit_begin + static_cast<int>(threadIdx.x); j < p.edit_end; j += kThreads)
    if (__ldcg(&edits[j].id) == id) *shared = __ldcg(&edits[j].raw);
  __syncthreads();
  return *shared;
}

__global__ void __launch_bounds__(kThreads) sample_stats_kernel(float* logits, int64_t V, const SampleRow* rows,
                                                                LogitEdit* edits, const uint32_t* masks,
                                                                SampleScratch sc, SampleResult* out) {
  __shared__ float chunk[kChunk];
  __shared__ float red_f[kWarps];
  __shared__ int red_i[kWarps], red_j[kWarps];
  __shared__ int flag;
  __shared__ float raw_sh;
  const int r = blockIdx.y, nb = gridDim.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const SampleRow p = rows[r];
  if (p.skip) return;
  float* row = logits + static_cast<int64_t>(r) * V;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int n = static_cast<int>(min(static_cast<int64_t>(kChunk), V - lo));
  const int n_top = min(p.top_logprobs, kMaxTopLogprobs);

  float mx = kNegInf;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float x = clean(row[lo + i]);
    chunk[i] = x;
    mx = fmaxf(mx, x);
  }
  mx = warp_max(mx);
  if (lane == 0) red_f[warp] = mx;
  __syncthreads();
  mx = kNegInf;
  for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, red_f[w]);
  __syncthreads();
  float s = 0.0f;
  if (mx != kNegInf)
    for (int i = threadIdx.x; i < n; i += kThreads) s += expf(chunk[i] - mx);
  s = warp_sum(s);
  if (lane == 0) red_f[warp] = s;
  __syncthreads();
  s = 0.0f;
  for (int w = 0; w < kWarps; ++w) s += red_f[w];
  __syncthreads();
  // The chunk's best raw logits: rounds of block argmax, each thread skipping what it gave already.
  const int n_cand = n_top > 0 ? min(n_top, n) : 0;
  SampleCand* my_cand = sc.cand + (static_cast<int64_t>(r) * nb + blockIdx.x) * kMaxTopLogprobs;
  uint32_t taken = 0;
  for (int j = 0; j < n_cand; ++j) {
    float bv = kNegInf;
    int bi = INT_MAX;
    for (int k = 0; k < kPer; ++k) {
      const int i = static_cast<int>(threadIdx.x) + k * kThreads;
      if (i < n && !(taken >> k & 1u) && better(chunk[i], i, bv, bi)) bv = chunk[i], bi = i;
    }
    block_best(bv, bi, red_f, red_i);
    if (bi % kThreads == static_cast<int>(threadIdx.x)) taken |= 1u << (bi / kThreads);
    if (threadIdx.x == 0) my_cand[j] = SampleCand{bv, static_cast<int>(lo) + bi};
  }
  // This chunk's edits (ids are unique in a row): the raw logit kept in the edit, the edited one in
  // the chunk and in the row (the later kernels read it there).
  for (int j = p.edit_begin + static_cast<int>(threadIdx.x); j < p.edit_end; j += kThreads) {
    const LogitEdit e = edits[j];
    if (e.id < lo || e.id >= lo + n) continue;
    const float raw = chunk[e.id - lo];
    const float z = sample_edit_logit(raw, e, p, kNegInf);
    edits[j].raw = raw;
    chunk[e.id - lo] = z;
    row[e.id] = z;
  }
  __syncthreads();
  if (p.mask_index >= 0 && masks) {  // the allowed-token mask: -inf outside it, in the chunk and in the row
    const uint32_t* mask = masks + p.mask_index * sample_mask_words(V);
    for (int i = threadIdx.x; i < n; i += kThreads)
      if (!sample_mask_allows(mask, lo + i) && chunk[i] != kNegInf) {
        chunk[i] = kNegInf;
        row[lo + i] = kNegInf;
      }
    __syncthreads();
  }
  float zm = kNegInf;
  int za = INT_MAX, nf = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float z = chunk[i];
    if (z > zm) zm = z, za = static_cast<int>(lo + i);  // ids ascend within a thread
    nf += z != kNegInf;
  }
  for (int o = 16; o > 0; o >>= 1) nf += __shfl_xor_sync(0xffffffffu, nf, o);
  if (lane == 0) red_j[warp] = nf;
  block_best(zm, za, red_f, red_i);  // syncs: red_j is complete after it
  if (threadIdx.x == 0) {
    nf = 0;
    for (int w = 0; w < kWarps; ++w) nf += red_j[w];
    sc.part[static_cast<int64_t>(r) * nb + blockIdx.x] = SamplePartial{mx, s, zm, za, nf, n_cand};
  }
  if (!last_block(sc.done, r, &flag)) return;

  // The row's last block: merge the chunks in id order, thread b holding chunk b's share (in one
  // round trip to L2, then fixed reduction trees: deterministic).
  const SamplePartial* pr = sc.part + static_cast<int64_t>(r) * nb;
  __shared__ SampleState st_sh;
  float bm = kNegInf, bsum = 0.0f, bz = kNegInf;
  int barg = INT_MAX, bfin = 0;
  if (static_cast<int>(threadIdx.x) < nb) {
    const SamplePartial* q = pr + threadIdx.x;
    bm = __ldcg(&q->raw_max);
    bsum = __ldcg(&q->raw_sum);
    bz = __ldcg(&q->z_max);
    barg = __ldcg(&q->z_arg);
    bfin = __ldcg(&q->n_finite);
  }
  float M = warp_max(bm);
  if (lane == 0) red_f[warp] = M;
  __syncthreads();
  M = kNegInf;
  for (int w = 0; w < kWarps; ++w) M = fmaxf(M, red_f[w]);
  __syncthreads();
  float S = warp_sum(bm != kNegInf ? bsum * expf(bm - M) : 0.0f);
  for (int o = 16; o > 0; o >>= 1) bfin += __shfl_xor_sync(0xffffffffu, bfin, o);
  if (lane == 0) red_f[warp] = S, red_j[warp] = bfin;
  __syncthreads();
  S = 0.0f;
  bfin = 0;
  for (int w = 0; w < kWarps; ++w) S += red_f[w], bfin += red_j[w];
  __syncthreads();
  block_best(bz, barg, red_f, red_i);  // the lowest id holding the maximum
  if (threadIdx.x == 0) {
    SampleState st{};
    st.lse = M == kNegInf ? kNegInf : M + logf(S);
    st.m = bz;
    st.argmax = barg == INT_MAX ? 0 : barg;  // every logit -inf: id 0
    st.n_finite = bfin;
    st.done = p.temperature <= 0.0f || bz == kNegInf;
    sc.state[r] = st;
    st_sh = st;
  }
  __syncthreads();
  const SampleState st = st_sh;
  SampleResult& o = out[r];
  // top_logprobs: rounds of block argmax over the chunks' candidates (each chunk's are its best, so the
  // row's best N are among them), 4 chunks' worth a thread.
  int got = 0;
  if (n_top > 0 && st.lse != kNegInf) {
    const int total = nb * kMaxTopLogprobs;
    bool used[kMaxChunks * kMaxTopLogprobs / kThreads] = {};
    for (int j = 0; j < n_top && j < V; ++j) {
      float bv = kNegInf;
      int bi = INT_MAX, bs = -1;
      for (int k = 0; k * kThreads < total; ++k) {
        const int c = static_cast<int>(threadIdx.x) + k * kThreads;
        if (c >= total || used[k]) continue;
        const int b = c / kMaxTopLogprobs;
        if (c % kMaxTopLogprobs >= __ldcg(&pr[b].n_cand)) continue;
        const SampleCand cd = sc.cand[(static_cast<int64_t>(r) * nb) * kMaxTopLogprobs + c];
        if (better(cd.v, cd.id, bv, bi)) bv = cd.v, bi = cd.id, bs = k;
      }
      float wv = bv;
      int wi = bi;
      block_best(wv, wi, red_f, red_i);
      if (wi == bi && bs >= 0) used[bs] = true;  // ids are unique: the winner's holder
      if (threadIdx.x == 0) {
        o.top_ids[j] = wi;
        o.top_logprobs[j] = wv - st.lse;
      }
      ++got;
    }
  }
  if (threadIdx.x == 0) o.n_top = got;
  if (!st.done) return;
  const float raw = raw_logit(row, p, edits, st.argmax, &raw_sh);
  if (threadIdx.x == 0) {
    o.id = st.argmax;
    o.logprob = st.lse == kNegInf ? kNegInf : raw - st.lse;
  }
}

/** The kept weight of edited logit z under the row's thresholds (0: not kept). */
__device__ __forceinline__ unsigned long long kept_weight(float z, uint32_t t, float m, float inv_t, float min_p) {
  if (z == kNegInf || key_of(z) < t) return 0ull;
  const float pr = sample_exp((z - m) * inv_t);
  return pr >= min_p ? sample_weight(pr) : 0ull;
}

/** One digit of a threshold (mode 0: top-k by counts; 1: top-p by weights); see the file comment. */
__global__ void __launch_bounds__(kThreads) sample_select_kernel(const float* logits, int64_t V, const SampleRow* rows,
                                                                 SampleScratch sc, int mode, int level) {
  __shared__ unsigned long long hist[kMaxBins];
  __shared__ unsigned long long red[kWarps];
  __shared__ int flag, sel_bin;
  __shared__ unsigned long long sel_above;
  const int r = blockIdx.y;
  const SampleRow p = rows[r];
  if (p.skip) return;
  const SampleState st = sc.state[r];
  if (st.done) return;
  if (mode == 0 && !(p.top_k > 0 && p.top_k < st.n_finite)) return;
  if (mode == 1 && !(p.top_p < 1.0f)) return;
  constexpr int kShift[3] = {20, 10, 0}, kBits[3] = {12, 10, 10};
  const int shift = kShift[level], nbins = 1 << kBits[level];
  const uint32_t mask_hi = level == 0 ? 0u : ~((1u << (shift + kBits[level])) - 1u);
  const uint32_t prefix = level == 0 ? 0u : st.prefix;
  const float inv_t = 1.0f / p.temperature;
  const float* row = logits + static_cast<int64_t>(r) * V;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int n = static_cast<int>(min(static_cast<int64_t>(kChunk), V - lo));
  for (int b = threadIdx.x; b < nbins; b += kThreads) hist[b] = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float z = clean(row[lo + i]);
    const uint32_t key = key_of(z);
    if (z == kNegInf || (key & mask_hi) != prefix) continue;
    unsigned long long w = 1;
    if (mode == 1) w = key >= st.tk ? sample_weight(sample_exp((z - st.m) * inv_t)) : 0ull;
    if (w) atomicAdd(&hist[(key >> shift) & (nbins - 1)], w);
  }
  __syncthreads();
  unsigned long long* g = sc.hist + static_cast<int64_t>(r) * kMaxBins;
  for (int b = threadIdx.x; b < nbins; b += kThreads)
    if (hist[b]) atomicAdd(&g[b], hist[b]);
  if (!last_block(sc.done, r, &flag)) return;
  // The row's last block: the whole histogram (the global one returned to zero), then the bin.
  unsigned long long mine_total = 0;
  for (int b = threadIdx.x; b < nbins; b += kThreads) {
    hist[b] = __ldcg(&g[b]);
    g[b] = 0;
    mine_total += hist[b];
  }
  __syncthreads();
  unsigned long long target = st.target, above = level == 0 ? 0ull : st.above;
  if (threadIdx.x == 0) {  // overwritten below by the thread whose bins hold the target
    sel_bin = 0;
    sel_above = above;
  }
  if (level == 0) {
    const unsigned long long total = block_sum_u64(mine_total, red);
    target = mode == 0 ? static_cast<unsigned long long>(p.top_k) : sample_top_p_target(p.top_p, total);
  }
  // Thread t owns bins [nbins - (t + 1) * per, nbins - t * per), the highest first.
  const int per = nbins / kThreads, top = nbins - static_cast<int>(threadIdx.x) * per;
  unsigned long long mine = 0;
  for (int b = top - 1; b >= top - per; --b) mine += hist[b];
  const unsigned long long ex = block_exclusive_u64(mine, red);
  if (above + ex < target && above + ex + mine >= target) {
    unsigned long long cum = above + ex;
    for (int b = top - 1; b >= top - per; --b) {
      if (cum + hist[b] >= target) {
        sel_bin = b;
        sel_above = cum;
        break;
      }
      cum += hist[b];
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    SampleState& s = sc.state[r];
    const uint32_t pre = prefix | (static_cast<uint32_t>(sel_bin) << shift);
    s.prefix = pre;
    s.above = sel_above;
    s.target = target;
    if (level == 2) (mode == 0 ? s.tk : s.tp) = pre;
  }
}

/** The draw; see the file comment. */
__global__ void __launch_bounds__(kThreads) sample_draw_kernel(const float* logits, int64_t V, const SampleRow* rows,
                                                               const LogitEdit* edits, SampleScratch sc,
                                                               SampleResult* out) {
  __shared__ unsigned long long red[kWarps];
  __shared__ int flag, chosen, pick;
  __shared__ unsigned long long point;
  __shared__ float raw_sh;
  const int r = blockIdx.y, nb = gridDim.x;
  const SampleRow p = rows[r];
  if (p.skip) return;
  const SampleState st = sc.state[r];
  if (st.done) return;
  const uint32_t t = max(st.tk, st.tp);
  const float inv_t = 1.0f / p.temperature, min_p = p.min_p;
  const float* row = logits + static_cast<int64_t>(r) * V;
  const int64_t lo = static_cast<int64_t>(blockIdx.x) * kChunk;
  const int n = static_cast<int>(min(static_cast<int64_t>(kChunk), V - lo));
  unsigned long long w = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) w += kept_weight(clean(row[lo + i]), t, st.m, inv_t, min_p);
  w = block_sum_u64(w, red);
  if (threadIdx.x == 0) sc.mass[static_cast<int64_t>(r) * nb + blockIdx.x] = w;
  if (!last_block(sc.done, r, &flag)) return;
  {  // thread b holds chunk b's weight: the chunk holding the draw's point
    const unsigned long long mb =
        static_cast<int>(threadIdx.x) < nb ? __ldcg(&sc.mass[static_cast<int64_t>(r) * nb + threadIdx.x]) : 0ull;
    const unsigned long long ex = block_exclusive_u64(mb, red);
    if (threadIdx.x == kThreads - 1) {
      point = sample_mulhi(sample_random_bits(p), ex + mb);  // the total weight, in [0, W)
      chosen = -1;
      pick = st.argmax;  // unreachable fallback: W > point always
    }
    __syncthreads();
    const unsigned long long x = point;
    __syncthreads();
    if (mb > 0 && ex <= x && x < ex + mb) {
      chosen = static_cast<int>(threadIdx.x);
      point = x - ex;
    }
    __syncthreads();
  }
  if (chosen >= 0) {  // walk chunk `chosen` in id order: thread t its kPer consecutive logits
    const int64_t clo = static_cast<int64_t>(chosen) * kChunk;
    const int cn = static_cast<int>(min(static_cast<int64_t>(kChunk), V - clo));
    unsigned long long wk[kPer], mine = 0;
    for (int k = 0; k < kPer; ++k) {
      const int i = static_cast<int>(threadIdx.x) * kPer + k;
      wk[k] = i < cn ? kept_weight(clean(__ldcg(&row[clo + i])), t, st.m, inv_t, min_p) : 0ull;
      mine += wk[k];
    }
    unsigned long long cum = block_exclusive_u64(mine, red);
    if (cum <= point && point < cum + mine) {
      for (int k = 0; k < kPer; ++k) {
        cum += wk[k];
        if (cum > point) {
          pick = static_cast<int>(clo) + static_cast<int>(threadIdx.x) * kPer + k;
          break;
        }
      }
    }
    __syncthreads();
  }
  const int id = pick;
  const float raw = raw_logit(row, p, edits, id, &raw_sh);
  if (threadIdx.x == 0) {
    out[r].id = id;
    out[r].logprob = st.lse == kNegInf ? kNegInf : raw - st.lse;
  }
}

}  // namespace
}  // namespace cuda

int64_t CudaOps::max_sample_row() const { return int64_t{cuda::kMaxChunks} * cuda::kChunk; }

void CudaOps::sample(const Tensor& logits, const Tensor& rows, Tensor edits, Tensor out,
                     const SampleRow* host_rows, const Tensor& masks) {
  cuda::check_dtype("sample", "logits", logits, {DType::F32});
  cuda::check_dev("sample", "rows", rows);
  cuda::check_dev("sample", "out", out);
  const int64_t R = logits.rows(), V = logits.cols();
  if (op_checks::sample(logits, rows, edits, out) > 0) cuda::check_dev("sample", "edits", edits);
  if (op_checks::sample_mask_count("sample", masks, V) > 0) cuda::check_dev("sample", "masks", masks);
  if (host_rows) op_checks::sample_mask_rows("sample", host_rows, R, op_checks::sample_mask_count("sample", masks, V));
  if (V > max_sample_row())
    fail(ErrorCode::kUnsupported, "sample: rows of {} logits exceed the sampler's {}", V, max_sample_row());
  const int64_t nb = (V + cuda::kChunk - 1) / cuda::kChunk;
  if (R > 65535) fail(ErrorCode::kInvalidArgument, "sample: {} rows exceed the grid's 65535", R);
  if (R == 0) return;
  // What the rows need (all of it when the host rows are not given).
  bool draw = host_rows == nullptr, top_k = draw, top_p = draw;
  for (int64_t i = 0; host_rows && i < R; ++i) {
    const SampleRow& r = host_rows[i];
    if (r.skip || r.temperature <= 0.0f) continue;
    draw = true;
    top_k = top_k || r.top_k > 0;
    top_p = top_p || r.top_p < 1.0f;
  }
  cuda::SampleScratch sc{};
  const int64_t done_words = (R + 1) / 2 * 2;  // the counters, then the histograms 8-byte aligned
  sc.done = static_cast<unsigned*>(zeroed_scratch(Scratch::kSampleDone, done_words * 4 + R * cuda::kMaxBins * 8));
  sc.hist = reinterpret_cast<unsigned long long*>(sc.done + done_words);
  const int64_t state_bytes = R * static_cast<int64_t>(sizeof(cuda::SampleState));
  const int64_t part_bytes = R * nb * static_cast<int64_t>(sizeof(cuda::SamplePartial));
  const int64_t cand_bytes = R * nb * kMaxTopLogprobs * static_cast<int64_t>(sizeof(cuda::SampleCand));
  auto* base = static_cast<uint8_t*>(scratch(Scratch::kSample, state_bytes + part_bytes + cand_bytes + R * nb * 8 + 64));
  sc.state = reinterpret_cast<cuda::SampleState*>(base);
  sc.part = reinterpret_cast<cuda::SamplePartial*>(base + state_bytes);
  sc.cand = reinterpret_cast<cuda::SampleCand*>(base + state_bytes + part_bytes);
  sc.mass = reinterpret_cast<unsigned long long*>(base + (state_bytes + part_bytes + cand_bytes + 7) / 8 * 8);
  const auto* rp = static_cast<const SampleRow*>(rows.data);
  auto* ep = static_cast<LogitEdit*>(edits.data);
  auto* op = static_cast<SampleResult*>(out.data);
  const dim3 grid(static_cast<unsigned>(nb), static_cast<unsigned>(R));
  float* x = logits.ptr<float>();
  const auto* mp = masks.empty() ? nullptr : static_cast<const uint32_t*>(masks.data);
  cuda::sample_stats_kernel<<<grid, cuda::kThreads, 0, stream_>>>(x, V, rp, ep, mp, sc, op);
  FT_CUDA_LAUNCH_CHECK();
  for (int mode = 0; mode < 2; ++mode) {
    if (!(mode == 0 ? top_k : top_p)) continue;
    for (int level = 0; level < 3; ++level) {
      cuda::sample_select_kernel<<<grid, cuda::kThreads, 0, stream_>>>(x, V, rp, sc, mode, level);
      FT_CUDA_LAUNCH_CHECK();
    }
  }
  if (draw) {
    cuda::sample_draw_kernel<<<grid, cuda::kThreads, 0, stream_>>>(x, V, rp, ep, sc, op);
    FT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace ft
