// compress_kv: DeepSeek-V4's KV compressor (ops.h): stores the step's projections in the value pages'
// columns [col, col + 2 width), then one block per (sequence, entry) pools the entry's window(s)
// per channel (softmax of gate + ape), RMSNorms it and applies the tail RoPE at w * rate.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

__device__ int64_t page_row(const int32_t* block_tables, int max_blocks, int page_size, int s, int pos) {
  const int32_t page = block_tables[static_cast<int64_t>(s) * max_blocks + pos / page_size];
  return static_cast<int64_t>(page) * page_size + pos % page_size;
}

template <typename T>
__global__ void store_kernel(const T* proj, T* pages, const int32_t* positions, const int32_t* seq_index,
                             const int32_t* block_tables, int max_blocks, int page_size, int64_t Wv, int col,
                             int64_t W2, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / W2, c = i % W2;
    pages[page_row(block_tables, max_blocks, page_size, seq_index[t], positions[t]) * Wv + col + c] = proj[i];
  }
}

template <typename T>
__global__ void pool_kernel(const T* pages, const int32_t* positions, const int32_t* seq_start,
                            const int32_t* block_tables, int max_blocks, int page_size, int64_t Wv, int col,
                            const float* ape, const float* norm_w, const float* inv_freq, T* entries, int64_t M,
                            int rate, int hd, bool overlap, float eps, int n_rot, float attn_factor) {
  extern __shared__ float e[];  // [hd]
  __shared__ float red[32];
  const int s = blockIdx.y;
  const int64_t w = blockIdx.x;
  const int32_t lo = seq_start[s], hi = seq_start[s + 1];
  if (hi <= lo) return;
  const int64_t n_entries = (static_cast<int64_t>(positions[hi - 1]) + 1) / rate;
  if (w >= n_entries) return;
  const int width = overlap ? 2 * hd : hd, off = overlap ? hd : 0;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float mx = -INFINITY;
    for (int pass = 0; pass < 2; ++pass) {  // pass 0: max; pass 1: sums
      float sum = 0.0f, acc = 0.0f;
      for (int part = 0; part < 2; ++part) {
        if (part == 0 && !(overlap && w > 0)) continue;
        const int64_t win = part == 0 ? w - 1 : w;
        const int co = part == 0 ? 0 : off;
        for (int j = 0; j < rate; ++j) {
          const T* r = pages + page_row(block_tables, max_blocks, page_size, s, static_cast<int>(win * rate + j)) * Wv + col;
          const float g = to_f(r[width + co + d]) + ape[j * width + co + d];
          if (pass == 0) mx = fmaxf(mx, g);
          else {
            const float x = expf(g - mx);
            sum += x;
            acc += x * to_f(r[co + d]);
          }
        }
      }
      if (pass == 1) e[d] = acc / sum;
    }
  }
  __syncthreads();
  float ss = 0.0f;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) ss += e[d] * e[d];
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / hd + eps);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) e[d] = norm_w[d] * (e[d] * inv);
  __syncthreads();
  T* out = entries + (static_cast<int64_t>(s) * M + w) * hd;
  const float fp = static_cast<float>(w * rate);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    const int d0 = hd - n_rot;
    float v = e[d];
    if (d >= d0) {
      const int i = (d - d0) / 2;
      float sn, cs;
      sincosf(fp * inv_freq[i], &sn, &cs);
      cs *= attn_factor, sn *= attn_factor;
      v = ((d - d0) % 2 == 0) ? e[d] * cs - e[d + 1] * sn : e[d] * cs + e[d - 1] * sn;
    }
    out[d] = from_f<T>(v);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::compress_kv(const CompressParams& p, const BatchInfo& batch, const Tensor& proj, KvLayer kv,
                          const Tensor& ape, const Tensor& norm_w, Tensor entries) {
  const char* op = "compress_kv";
  cuda::check_batch(op, batch);
  cuda::check_act(op, "proj", proj);
  cuda::check_same_dtype(op, "kv.v", kv.v, proj);
  cuda::check_same_dtype(op, "entries", entries, proj);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"ape", &ape}, {"norm_w", &norm_w},
                                {"inv_freq", &p.rope.inv_freq}})
    cuda::check_dtype(op, name, *t, {DType::F32});
  const int64_t hd = p.head_dim, width = p.overlap ? 2 * hd : hd, T = batch.n_tokens, S = batch.n_seqs;
  if (p.rate < 1 || hd < 1 || p.rope.n_rot % 2 != 0 || p.rope.n_rot > hd || kv.v.ndim != 4 || kv.v.dim(2) != 1 ||
      p.col < 0 || p.col + 2 * width > kv.v.dim(3) || !proj.has_shape({T, 2 * width}) || !ape.has_shape({p.rate, width}) ||
      norm_w.numel() != hd || entries.ndim != 3 || entries.dim(0) < S || entries.dim(2) != hd)
    fail(ErrorCode::kInvalidArgument, "{}: proj {}, kv.v {}, ape {}, norm_w {}, entries {} do not fit rate {}, "
         "head_dim {}, col {}", op, proj.str(), kv.v.str(), ape.str(), norm_w.str(), entries.str(), p.rate, hd, p.col);
  const int64_t M = entries.dim(1), Wv = kv.v.dim(3);
  const int ps = static_cast<int>(kv.v.dim(1));
  if (T == 0) return;
  // Each sequence's entry count is bounded by max_kv_len / rate (its last position + 1 at most).
  const int64_t max_entries = std::min<int64_t>(M, batch.max_kv_len / p.rate);
  const dim3 pool_grid(static_cast<unsigned>(std::max<int64_t>(max_entries, 1)), static_cast<unsigned>(S));
  const size_t pool_smem = static_cast<size_t>(hd) * 4;
  const int64_t n_tok = T;  // (T names the element type inside FT_DISPATCH_ACT)
  FT_DISPATCH_ACT(op, "proj", proj.dtype, {
    cuda::store_kernel<T><<<cuda::grid_1d(n_tok * 2 * width, 256), 256, 0, stream_>>>(
        proj.ptr<T>(), static_cast<T*>(kv.v.data), batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(),
        batch.block_tables.ptr<int32_t>(), batch.max_blocks, ps, Wv, p.col, 2 * width, n_tok * 2 * width);
    if (max_entries > 0)
      cuda::pool_kernel<T><<<pool_grid, 128, pool_smem, stream_>>>(
          static_cast<T*>(kv.v.data), batch.positions.ptr<int32_t>(), batch.seq_start.ptr<int32_t>(),
          batch.block_tables.ptr<int32_t>(), batch.max_blocks, ps, Wv, p.col, ape.ptr<float>(), norm_w.ptr<float>(),
          p.rope.inv_freq.ptr<float>(), entries.ptr<T>(), M, p.rate, static_cast<int>(hd), p.overlap, p.eps,
          p.rope.n_rot, p.rope.attn_factor);
  });
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
