// attention_qsa: Qwen4-Exp's sparse attention (ops.h; CPU reference backend/cpu/attention_qsa.cpp,
// after transformers' Qwen4ExpTextAttention under its QSA indexer's mask). One block per (token,
// query head): the candidate keys are the K selected blocks then the tail of the query's own block
// ((K + 1) block slots, unused ones masked); each warp scores a key at a time (lanes over head_dim),
// the scores and page rows sit in dynamic shared memory, then an fp32 max-subtracted softmax and one
// thread per output channel sums the values. GQA as `attention`: head h reads kv head h / (H / G).
// A selected block the query cannot see (the CPU backend throws) or < 0 is skipped.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/op_checks.h"

namespace ft {
namespace cuda {
namespace {

template <typename T>
__global__ void attention_qsa_kernel(const T* q, const T* kpages, const T* vpages, const int32_t* selected, int K,
                                     int block, const int32_t* positions, const int32_t* seq_index,
                                     const int32_t* block_tables, int max_blocks, int page, int H, int G, int D,
                                     int64_t Wk, int64_t Wv, float scale, T* out) {
  extern __shared__ float sm[];  // score [L], then row [L] (int32: the key's page row, -1 when masked)
  __shared__ float red[32];
  const int L = (K + 1) * block;
  float* score = sm;
  int32_t* rows = reinterpret_cast<int32_t*>(sm + L);
  const int64_t t = blockIdx.x / H;
  const int h = blockIdx.x % H, g = h / (H / G);
  const int P = positions[t];
  const int tail = (P + 1) / block * block;
  const int32_t* bt = block_tables + static_cast<int64_t>(seq_index[t]) * max_blocks;
  const T* qv = q + (t * H + h) * static_cast<int64_t>(D);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int i = warp; i < L; i += n_warps) {  // uniform per warp
    const int j = i / block, r = i % block;
    int pos = -1;
    if (j < K) {
      const int w = selected[t * K + j];
      if (w >= 0 && (static_cast<int64_t>(w) + 1) * block <= tail) pos = w * block + r;
    } else if (tail + r <= P) {
      pos = tail + r;
    }
    int32_t row = -1;
    float dot = 0.0f;
    if (pos >= 0) {
      row = bt[pos / page] * page + pos % page;
      const T* kr = kpages + static_cast<int64_t>(row) * Wk + static_cast<int64_t>(g) * D;
      for (int d = lane; d < D; d += 32) dot += to_f(qv[d]) * to_f(kr[d]);
      dot = warp_sum(dot);
    }
    if (lane == 0) {
      score[i] = pos >= 0 ? dot * scale : -INFINITY;
      rows[i] = row;
    }
  }
  __syncthreads();
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < L; i += blockDim.x) mx = fmaxf(mx, score[i]);
  mx = block_max(mx, red);  // finite: the query's own position is always a key
  float part = 0.0f;
  for (int i = threadIdx.x; i < L; i += blockDim.x) {
    const float e = rows[i] >= 0 ? expf(score[i] - mx) : 0.0f;
    score[i] = e;
    part += e;
  }
  const float inv = 1.0f / block_sum(part, red);  // (its barriers publish score[])
  T* o = out + (t * H + h) * static_cast<int64_t>(D);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < L; ++i)
      if (rows[i] >= 0) acc += score[i] * to_f(vpages[static_cast<int64_t>(rows[i]) * Wv + static_cast<int64_t>(g) * D + d]);
    o[d] = from_f<T>(acc * inv);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& batch, const Tensor& q,
                            KvLayer kv, const Tensor& selected, Tensor out) {
  const char* op = "attention_qsa";
  cuda::check_batch(op, batch);
  cuda::check_act(op, "q", q);
  cuda::check_same_dtype(op, "kv.k", kv.k, q);
  cuda::check_same_dtype(op, "kv.v", kv.v, q);
  cuda::check_same_dtype(op, "out", out, q);
  cuda::check_dtype(op, "selected", selected, {DType::I32});
  op_checks::attention_qsa(p, block, batch, q, kv, selected, out);
  if (out.data == q.data) fail(ErrorCode::kInvalidArgument, "{}: out must not alias q", op);
  const int64_t T = batch.n_tokens, H = p.n_head, G = p.n_head_kv, D = p.head_dim;
  const int64_t K = selected.cols(), L = (K + 1) * block;
  const size_t smem = static_cast<size_t>(L) * 8;
  if (smem > 200 * 1024)
    fail(ErrorCode::kUnsupported, "{}: {} selected blocks of {} keys; the CUDA kernel holds at most {} keys per query",
         op, K, block, 200 * 1024 / 8);
  if (T == 0) return;
  const int64_t n_tok = T;  // (T names the element type inside FT_DISPATCH_ACT)
  FT_DISPATCH_ACT(op, "q", q.dtype, {
    if (smem > 48 * 1024)
      cudaFuncSetAttribute(cuda::attention_qsa_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(smem));
    cuda::attention_qsa_kernel<T><<<static_cast<unsigned>(n_tok * H), 128, smem, stream_>>>(
        q.ptr<T>(), static_cast<const T*>(kv.k.data), static_cast<const T*>(kv.v.data), selected.ptr<int32_t>(),
        static_cast<int>(K), block, batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(),
        batch.block_tables.ptr<int32_t>(), batch.max_blocks, static_cast<int>(kv.k.dim(1)), static_cast<int>(H),
        static_cast<int>(G), static_cast<int>(D), G * D, kv.v.dim(2) * kv.v.dim(3), p.scale, out.ptr<T>());
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
