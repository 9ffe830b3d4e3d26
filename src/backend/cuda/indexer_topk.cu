// indexer_topk: DeepSeek-V4's lightning indexer (ops.h). One block per query token: the rotated query
// heads in shared memory, one score per visible entry in dynamic shared memory (so the rotated heads
// and a sequence's entries must fit kMaxSmem bytes: ~43k entries beside 64 heads of 128), then top_k
// rounds of a block arg-max (ties to the lower entry).
// Exactly tied scores are common (the ReLU zeroing every head scores 0), and the CPU backend keeps
// torch.topk's CPU choice among them, which depends on the candidate count (V4: the sequence's entries
// so far, the unseen ones at -inf; per_query, Qwen4-Exp's QSA indexer: the query's visible ones). So
// when the last pick ties with an entry left out, one thread redoes the selection with libstdc++'s
// steps (backend/torch_topk_order.h) over an index array in shared memory beside the scores; where
// that array does not fit (entries past ~half the limit), the lower entry wins such ties instead.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/torch_topk_order.h"

namespace ft {
namespace cuda {
namespace {

constexpr size_t kMaxSmem = 200 * 1024;  // of the 227 KiB an sm_90 block may opt into

template <typename T>
__device__ float entry_score(const float* qr, const T* kb, const T* w, int64_t t, int64_t e, int nh, int hd, float ss,
                             float ws) {
  float total = 0.0f;
  for (int h = 0; h < nh; ++h) {
    float dot = 0.0f;
    for (int d = 0; d < hd; ++d) dot += qr[h * hd + d] * to_f(kb[e * hd + d]);
    total += fmaxf(dot, 0.0f) * ss * (to_f(w[t * nh + h]) * ws);
  }
  return total;
}

template <typename T>
__global__ void indexer_kernel(const T* q, const T* w, const T* keys, const int32_t* positions,
                               const int32_t* seq_index, const int32_t* seq_start, const float* inv_freq,
                               int32_t* ids, int nh, int hd, int n_rot, float attn_factor, int rate, int K, int64_t M,
                               bool per_query, bool exact_ties) {
  extern __shared__ float sm[];  // qr [nh * hd], score [M], then with exact_ties order [M] (int32)
  float* qr = sm;
  float* score = sm + nh * hd;
  int32_t* order = reinterpret_cast<int32_t*>(score + M);
  __shared__ float best_v[32];
  __shared__ int best_i[32];
  __shared__ int n_left_tied;
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
    qr[i] = v;
  }
  __syncthreads();
  const T* kb = keys + static_cast<int64_t>(seq_index[t]) * M * hd;
  const float ss = rsqrtf(static_cast<float>(hd)), ws = rsqrtf(static_cast<float>(nh));
  for (int64_t e = threadIdx.x; e < n_vis; e += blockDim.x) score[e] = entry_score(qr, kb, w, t, e, nh, hd, ss, ws);
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  float last_v = 0.0f;  // thread 0: the score of the last pick
  for (int j = 0; j < K; ++j) {
    if (j >= n_vis) {  // uniform over the block
      if (threadIdx.x == 0) ids[t * K + j] = -1;
      continue;
    }
    float bv = -INFINITY;
    int bi = -1;
    for (int64_t e = threadIdx.x; e < n_vis; e += blockDim.x)
      if (bi < 0 || score[e] > bv) bv = score[e], bi = static_cast<int>(e);
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
    }
    if (lane == 0) best_v[warp] = bv, best_i[warp] = bi;
    __syncthreads();
    if (threadIdx.x == 0) {
      float v = best_v[0];
      int i = best_i[0];
      for (int k = 1; k < n_warps; ++k)
        if (best_i[k] >= 0 && (i < 0 || best_v[k] > v || (best_v[k] == v && best_i[k] < i))) v = best_v[k], i = best_i[k];
      ids[t * K + j] = i;
      if (exact_ties) order[i] = __float_as_int(score[i]);  // kept to undo the -inf below
      score[i] = -INFINITY;
      last_v = v;
    }
    __syncthreads();
  }
  if (!exact_ties || n_vis <= K) return;  // every visible entry picked: no choice was made
  // Does an entry left out tie with the last pick? (The picked ones now read -inf.)
  if (threadIdx.x == 0) n_left_tied = 0, best_v[0] = last_v;
  __syncthreads();
  const float kth = best_v[0];
  int tied = 0;
  for (int64_t e = threadIdx.x; e < n_vis; e += blockDim.x) tied += score[e] == kth;
  if (tied) atomicAdd(&n_left_tied, tied);
  __syncthreads();
  if (n_left_tied == 0) return;  // uniform over the block
  // torch.topk's CPU choice: the picks' scores back, the candidates the sequence has but this query
  // cannot see at -inf, then libstdc++'s selection on one thread.
  const int64_t n_seq = min(static_cast<int64_t>(positions[seq_start[seq_index[t] + 1] - 1] + 1) / rate, M);
  const int64_t n = per_query ? n_vis : max(n_seq, n_vis);
  for (int j = threadIdx.x; j < K; j += blockDim.x) {
    const int32_t i = ids[t * K + j];
    score[i] = __int_as_float(order[i]);
  }
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
  cuda::check_same_dtype(op, "keys", keys, q);
  cuda::check_dtype(op, "ids", ids, {DType::I32});
  cuda::check_dtype(op, "inv_freq", p.rope.inv_freq, {DType::F32});
  const int64_t T = batch.n_tokens, nh = p.n_head, hd = p.head_dim, K = p.top_k;
  if (nh < 1 || hd < 1 || K < 1 || p.rate < 1 || !q.has_shape({T, nh * hd}) || !w.has_shape({T, nh}) ||
      keys.ndim != 3 || keys.dim(0) < batch.n_seqs || keys.dim(2) != hd || !ids.has_shape({T, K}))
    fail(ErrorCode::kInvalidArgument, "{}: q {}, w {}, keys {}, ids {} do not fit {} heads of {} and top_k {}", op,
         q.str(), w.str(), keys.str(), ids.str(), nh, hd, K);
  const int64_t M = keys.dim(1);
  const size_t smem = static_cast<size_t>(nh * hd + M) * 4;
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
    cuda::indexer_kernel<T><<<blocks, 256, smem_all, stream_>>>(
        q.ptr<T>(), w.ptr<T>(), keys.ptr<T>(), batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(),
        batch.seq_start.ptr<int32_t>(), p.rope.inv_freq.ptr<float>(), ids.ptr<int32_t>(), static_cast<int>(nh),
        static_cast<int>(hd), p.rope.n_rot, p.rope.attn_factor, p.rate, static_cast<int>(K), M, p.per_query,
        exact_ties);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
