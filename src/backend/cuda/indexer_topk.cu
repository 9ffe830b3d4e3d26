// indexer_topk: DeepSeek-V4's lightning indexer (ops.h). One block per query token: the rotated query
// heads in shared memory, one score per visible entry in dynamic shared memory (so the rotated heads
// and a sequence's entries must fit kMaxSmem bytes: ~43k entries beside 64 heads of 128), a warp per
// entry; then the top_k by a radix select of the K-th largest score (ties to the lower entry), written
// in entry order.
// Exactly tied scores are common (the ReLU zeroing every head scores 0), and the CPU backend keeps
// torch.topk's CPU choice among them, which depends on the candidate count (V4: the sequence's entries
// so far, the unseen ones at -inf; per_query, Qwen4-Exp's QSA indexer: the query's visible ones). So
// when the last pick ties with an entry left out, one thread redoes the selection with libstdc++'s
// steps (backend/torch_topk_order.h) over an index array in shared memory beside the scores; where
// that array does not fit (entries past ~half the limit), the lower entry wins such ties instead.
// Keys dense [S, M, hd] or the KV pages' entry rows (KvLayer::e at IndexerParams::key_col;
// entry_rows.cuh, M then max_kv_len / rate).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/entry_rows.cuh"
#include "backend/torch_topk_order.h"

namespace ft {
namespace cuda {
namespace {

constexpr size_t kMaxSmem = 200 * 1024;  // of the 227 KiB an sm_90 block may opt into

/** Orders floats as unsigned keys: a > b exactly when key(a) > key(b), a == b when the keys are
 *  equal (-0 is read as +0; no NaN). */
__device__ __forceinline__ uint32_t order_key(float v) {
  const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) ? ~u : u | 0x80000000u;
}

/** Exclusive prefix count of `flag` over the block's threads in thread order; `total` gets the block's
 *  count. Every thread must call it (two __syncthreads). warp_tot: shared [32]. */
__device__ __forceinline__ int block_flag_scan(bool flag, int* warp_tot, int& total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const unsigned b = __ballot_sync(0xffffffffu, flag);
  const int rank = __popc(b & ((1u << lane) - 1u));
  __syncthreads();  // warp_tot may still be read by the previous call
  if (lane == 0) warp_tot[warp] = __popc(b);
  __syncthreads();
  int before = 0;
  total = 0;
  for (int k = 0; k < n_warps; ++k) {
    before += k < warp ? warp_tot[k] : 0;
    total += warp_tot[k];
  }
  return before + rank;
}

/** One block per query token t. Scores: a warp per visible entry (its key in the warp's shared row,
 *  lanes over the heads, each head's dot over the dims in order; the heads' terms summed by the warp).
 *  Picks: the top_k (score descending, the lower entry first among equal scores) found by a radix
 *  select of the K-th largest score (4 passes of 8-bit digits) and written in entry order. */
template <typename T>
__global__ void indexer_kernel(const T* q, const T* w, EntryRows keys, const int32_t* positions,
                               const int32_t* seq_index, const int32_t* seq_start, const float* inv_freq,
                               int32_t* ids, int nh, int hd, int n_rot, float attn_factor, int rate, int K,
                               bool per_query, bool exact_ties) {
  const int64_t M = keys.M;
  // qr [nh][hd + 1] (a head's row padded: lanes on different heads read different banks), kbuf
  // [n_warps][hd], score [M], then with exact_ties order [M] (int32)
  extern __shared__ float sm[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  const int qs = hd + 1;
  float* qr = sm;
  float* kbuf = sm + nh * qs;
  float* score = kbuf + n_warps * hd;
  int32_t* order = reinterpret_cast<int32_t*>(score + M);
  __shared__ unsigned hist[256];
  __shared__ int warp_tot[32];
  __shared__ uint32_t sel_prefix;
  __shared__ int sel_remaining;
  const int64_t t = blockIdx.x;
  const int P = positions[t];
  const int64_t n_vis = min(static_cast<int64_t>(P + 1) / rate, M);
  const float fp = static_cast<float>(P);
  for (int i = threadIdx.x; i < nh * hd; i += blockDim.x) {
    const int d = i % hd, d0 = hd - n_rot;
    const T* qh = q + t * nh * hd + (i / hd) * hd;
    float v = to_f(qh[d]);
    if (d >= d0) {
      float sn, cs;
      sincosf(fp * inv_freq[(d - d0) / 2], &sn, &cs);
      cs *= attn_factor, sn *= attn_factor;
      v = ((d - d0) % 2 == 0) ? to_f(qh[d]) * cs - to_f(qh[d + 1]) * sn : to_f(qh[d]) * cs + to_f(qh[d - 1]) * sn;
    }
    qr[(i / hd) * qs + d] = v;
  }
  __syncthreads();
  const T* kb = static_cast<const T*>(keys.data);
  const int ks = seq_index[t];
  const float ss = rsqrtf(static_cast<float>(hd)), ws = rsqrtf(static_cast<float>(nh));
  float* kw = kbuf + warp * hd;
  for (int64_t e = warp; e < n_vis; e += n_warps) {
    const T* key = kb + keys.offset(ks, e);
    for (int d = lane; d < hd; d += 32) kw[d] = to_f(key[d]);
    __syncwarp();
    float part = 0.0f;
    for (int h = lane; h < nh; h += 32) {
      const float* qh = qr + h * qs;
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += qh[d] * kw[d];
      part += fmaxf(dot, 0.0f) * ss * (to_f(w[t * nh + h]) * ws);
    }
    part = warp_sum(part);
    if (lane == 0) score[e] = part;
    __syncwarp();  // kw is rewritten for the next entry
  }
  const int64_t k_sel = min(static_cast<int64_t>(K), n_vis);
  for (int64_t j = k_sel + threadIdx.x; j < K; j += blockDim.x) ids[t * K + j] = -1;
  __syncthreads();
  if (k_sel == 0) return;  // uniform over the block
  const bool all = n_vis <= K;  // every visible entry picked: no choice to make
  if (!all) {
    if (threadIdx.x == 0) sel_prefix = 0, sel_remaining = K;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
      __syncthreads();
      const uint32_t prefix = sel_prefix, mask = shift == 24 ? 0u : 0xffffffffu << (shift + 8);
      for (int64_t e = threadIdx.x; e < n_vis; e += blockDim.x) {
        const uint32_t key = order_key(score[e]);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int above = 0, b = 255;
        for (; b > 0 && above + static_cast<int>(hist[b]) < sel_remaining; --b) above += static_cast<int>(hist[b]);
        sel_remaining -= above;
        sel_prefix = prefix | (static_cast<uint32_t>(b) << shift);
      }
      __syncthreads();
    }
  }
  // The picks in entry order: every key above the K-th largest, and the first sel_remaining equal to it.
  const uint32_t kth_key = all ? 0u : sel_prefix;
  const int need_eq = all ? 0 : sel_remaining;
  int base = 0, eq_seen = 0;
  for (int64_t tile = 0; tile < n_vis; tile += blockDim.x) {
    const int64_t e = tile + threadIdx.x;
    const uint32_t key = e < n_vis ? order_key(score[e]) : 0u;
    const bool gt = e < n_vis && (all || key > kth_key), eq = e < n_vis && !all && key == kth_key;
    int n_eq = 0, n_sel = 0;
    const int eq_rank = block_flag_scan(eq, warp_tot, n_eq);
    const bool sel = gt || (eq && eq_seen + eq_rank < need_eq);
    const int pos = block_flag_scan(sel, warp_tot, n_sel);
    if (sel) ids[t * K + base + pos] = static_cast<int32_t>(e);
    base += n_sel;
    eq_seen += n_eq;
  }
  if (!exact_ties || all || eq_seen == need_eq) return;  // no entry left out ties with the last pick
  // torch.topk's CPU choice: the candidates the sequence has but this query cannot see at -inf, then
  // libstdc++'s selection on one thread.
  const int64_t n_seq = min(static_cast<int64_t>(positions[seq_start[seq_index[t] + 1] - 1] + 1) / rate, M);
  const int64_t n = per_query ? n_vis : max(n_seq, n_vis);
  __syncthreads();
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    if (e >= n_vis) score[e] = -INFINITY;
    order[e] = static_cast<int32_t>(e);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int64_t k = min(static_cast<int64_t>(K), n);
    topk_order::torch_topk_select(order, score, n, k);
    for (int j = 0; j < K; ++j) ids[t * K + j] = j < k && order[j] < n_vis ? order[j] : -1;
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::indexer_topk(const IndexerParams& p, const BatchInfo& batch, const Tensor& q, const Tensor& w,
                           const Tensor& keys, Tensor ids) {
  const char* op = "indexer_topk";
  cuda::check_batch(op, batch);
  cuda::check_act(op, "q", q);
  cuda::check_same_dtype(op, "w", w, q);
  cuda::check_dtype(op, "ids", ids, {DType::I32});
  cuda::check_dtype(op, "inv_freq", p.rope.inv_freq, {DType::F32});
  const int64_t T = batch.n_tokens, nh = p.n_head, hd = p.head_dim, K = p.top_k;
  if (nh < 1 || hd < 1 || K < 1 || p.rate < 1 || !q.has_shape({T, nh * hd}) || !w.has_shape({T, nh}) ||
      !ids.has_shape({T, K}))
    fail(ErrorCode::kInvalidArgument, "{}: q {}, w {}, keys {}, ids {} do not fit {} heads of {} and top_k {}", op,
         q.str(), w.str(), keys.str(), ids.str(), nh, hd, K);
  const cuda::EntryRows kr =
      cuda::entry_rows(op, batch, keys, q, hd, keys.ndim == 4 ? p.key_col : 0, p.page_size, p.rate);
  const int64_t M = kr.M;
  constexpr int kThreads = 256;
  const size_t smem = static_cast<size_t>(nh * (hd + 1) + kThreads / 32 * hd + M) * 4;
  if (smem > cuda::kMaxSmem)
    fail(ErrorCode::kUnsupported, "{}: {} compressed entries per sequence and {} query values; the CUDA indexer holds "
         "{} in shared memory", op, M, nh * hd, cuda::kMaxSmem / 4);
  // Room for the index array too: exact ties broken as the CPU backend (torch.topk) does.
  const bool exact_ties = smem + static_cast<size_t>(M) * 4 <= cuda::kMaxSmem;
  const size_t smem_all = exact_ties ? smem + static_cast<size_t>(M) * 4 : smem;
  if (T == 0) return;
  const unsigned blocks = static_cast<unsigned>(T);
  FT_DISPATCH_ACT(op, "q", q.dtype, {
    cudaFuncSetAttribute(cuda::indexer_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(smem_all));
    cuda::indexer_kernel<T><<<blocks, kThreads, smem_all, stream_>>>(
        q.ptr<T>(), w.ptr<T>(), kr, batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(),
        batch.seq_start.ptr<int32_t>(), p.rope.inv_freq.ptr<float>(), ids.ptr<int32_t>(), static_cast<int>(nh),
        static_cast<int>(hd), p.rope.n_rot, p.rope.attn_factor, p.rate, static_cast<int>(K), p.per_query,
        exact_ties);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
