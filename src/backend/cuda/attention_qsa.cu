// attention_qsa: Qwen4-Exp's sparse attention (ops.h; CPU reference backend/cpu/attention_qsa.cpp,
// after transformers' Qwen4ExpTextAttention under its QSA indexer's mask). One block per (token,
// query head): the candidate keys are the K selected blocks then the tail of the query's own block
// ((K + 1) block slots, unused ones masked); each warp scores a key at a time (lanes over head_dim),
// the scores and page rows sit in dynamic shared memory, then an fp32 max-subtracted softmax and one
// thread per output channel sums the values. GQA as `attention`: head h reads kv head h / (H / G).
// A selected block the query cannot see (the CPU backend throws) or < 0 is skipped. Pages in the
// activation dtype, or quantized (--kv-cache-dtype fp8 / q8_0): each value dequantized as it is
// loaded (kv_page_value); a value row's heads may have any width (Qwen4-Exp: ModelConfig::kv_v_head_dim).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kv_quant.cuh"
#include "backend/op_checks.h"

namespace ft {
namespace cuda {
namespace {

template <typename T, int FORM, typename Pg>
__global__ void attention_qsa_kernel(const T* q, KvPages kpages, KvPages vpages, const int32_t* selected, int K,
                                     int block, const int32_t* positions, const int32_t* seq_index,
                                     const int32_t* block_tables, int max_blocks, int page, int H, int G, int D,
                                     float scale, T* out) {
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
      for (int d = lane; d < D; d += 32) dot += to_f(qv[d]) * kv_page_value<FORM, Pg>(kpages, row, g * D + d);
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
      if (rows[i] >= 0) acc += score[i] * kv_page_value<FORM, Pg>(vpages, rows[i], g * D + d);
    o[d] = from_f<T>(acc * inv);
  }
}

/** One attention_qsa launch over pages of FORM (Pg: the float pages' element, the activations'). */
template <typename T, int FORM, typename Pg>
void launch_qsa(unsigned blocks, size_t smem, cudaStream_t stream, const T* q, KvPages kp, KvPages vp,
                const int32_t* selected, int K, int block, const BatchInfo& batch, int page, int H, int G, int D,
                float scale, T* out) {
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(attention_qsa_kernel<T, FORM, Pg>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(smem));
  attention_qsa_kernel<T, FORM, Pg><<<blocks, 128, smem, stream>>>(
      q, kp, vp, selected, K, block, batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(),
      batch.block_tables.ptr<int32_t>(), batch.max_blocks, page, H, G, D, scale, out);
}

}  // namespace
}  // namespace cuda

void CudaOps::attention_qsa(const AttentionParams& p, int32_t block, const BatchInfo& batch, const Tensor& q,
                            KvLayer kv, const Tensor& selected, Tensor out) {
  const char* op = "attention_qsa";
  cuda::check_batch(op, batch);
  cuda::check_act(op, "q", q);
  const int form = cuda::check_kv_pages(op, kv);  // codes with scales, or pages in q's dtype:
  if (form == cuda::kKvFloat) {
    cuda::check_same_dtype(op, "kv.k", kv.k, q);
    cuda::check_same_dtype(op, "kv.v", kv.v, q);
  }
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
  const bool quant = form != cuda::kKvFloat;
  const cuda::KvPages kp{kv.k.data, quant ? kv.k_scale.data : nullptr, static_cast<int>(kv.k.dim(2)),
                         static_cast<int>(kv.k.dim(3)), quant ? static_cast<int>(kv.k_scale.dim(3)) : 0};
  const cuda::KvPages vp{kv.v.data, quant ? kv.v_scale.data : nullptr, static_cast<int>(kv.v.dim(2)),
                         static_cast<int>(kv.v.dim(3)), quant ? static_cast<int>(kv.v_scale.dim(3)) : 0};
  const unsigned blocks = static_cast<unsigned>(n_tok * H);
  FT_DISPATCH_ACT(op, "q", q.dtype, {
    auto go = [&](auto launch) {
      launch(blocks, smem, stream_, q.ptr<T>(), kp, vp, selected.ptr<int32_t>(), static_cast<int>(K), block, batch,
             static_cast<int>(kv.k.dim(1)), static_cast<int>(H), static_cast<int>(G), static_cast<int>(D), p.scale,
             out.ptr<T>());
    };
    if (form == cuda::kKvFp8) go(cuda::launch_qsa<T, cuda::kKvFp8, uint8_t>);
    else if (form == cuda::kKvQ8) go(cuda::launch_qsa<T, cuda::kKvQ8, uint8_t>);
    else go(cuda::launch_qsa<T, cuda::kKvFloat, T>);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
