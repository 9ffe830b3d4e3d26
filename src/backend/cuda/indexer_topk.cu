// indexer_topk: DeepSeek-V4's lightning indexer (ops.h). One block per query token: the rotated query
// heads in shared memory, one score per visible entry in dynamic shared memory (so the rotated heads
// and a sequence's entries must fit kMaxSmem bytes: ~43k entries beside 64 heads of 128), then top_k
// rounds of a block arg-max (ties to the lower w).
// The candidates are the query's own visible entries either way, so IndexerParams::per_query
// (Qwen4-Exp's QSA indexer: torch.topk over those only) selects the same set as V4's ranking here.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

constexpr size_t kMaxSmem = 200 * 1024;  // of the 227 KiB an sm_90 block may opt into

template <typename T>
__global__ void indexer_kernel(const T* q, const T* w, const T* keys, const int32_t* positions,
                               const int32_t* seq_index, const float* inv_freq, int32_t* ids, int nh, int hd,
                               int n_rot, float attn_factor, int rate, int K, int64_t M) {
  extern __shared__ float sm[];  // qr [nh * hd], score [M]
  float* qr = sm;
  float* score = sm + nh * hd;
  __shared__ float best_v[32];
  __shared__ int best_i[32];
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
  for (int64_t e = threadIdx.x; e < n_vis; e += blockDim.x) {
    float total = 0.0f;
    for (int h = 0; h < nh; ++h) {
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot += qr[h * hd + d] * to_f(kb[e * hd + d]);
      total += fmaxf(dot, 0.0f) * ss * (to_f(w[t * nh + h]) * ws);
    }
    score[e] = total;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
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
      score[i] = -INFINITY;
    }
    __syncthreads();
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::indexer_topk(const IndexerParams& p, const BatchInfo& batch, const Tensor& q, const Tensor& w,
                           const Tensor& keys, Tensor ids) {
  forget_prepared();
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
  if (T == 0) return;
  const unsigned blocks = static_cast<unsigned>(T);
  FT_DISPATCH_ACT(op, "q", q.dtype, {
    cudaFuncSetAttribute(cuda::indexer_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    cuda::indexer_kernel<T><<<blocks, 256, smem, stream_>>>(
        q.ptr<T>(), w.ptr<T>(), keys.ptr<T>(), batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(),
        p.rope.inv_freq.ptr<float>(), ids.ptr<int32_t>(), static_cast<int>(nh), static_cast<int>(hd), p.rope.n_rot,
        p.rope.attn_factor, p.rate, static_cast<int>(K), M);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
