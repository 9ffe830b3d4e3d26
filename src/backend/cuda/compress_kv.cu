// compress_kv: DeepSeek-V4's KV compressor (ops.h): stores the step's projections in the value pages'
// columns [col, col + 2 width), then one block per (sequence, entry) pools the entry's window(s)
// per channel (softmax of gate + ape, online, the window's tokens split over thread groups and merged),
// RMSNorms it and applies the tail RoPE at w * rate. head_dim <= 512 (kUnsupported above).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

__device__ int64_t page_row(const int32_t* block_tables, int max_blocks, int page_size, int s, int pos) {
  const int32_t page = block_tables[static_cast<int64_t>(s) * max_blocks + pos / page_size];
  return static_cast<int64_t>(page) * page_size + pos % page_size;
}

template <typename T, typename P>
__global__ void store_kernel(const T* proj, P* pages, const int32_t* positions, const int32_t* seq_index,
                             const int32_t* block_tables, int max_blocks, int page_size, int64_t Wv, int col,
                             int64_t W2, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / W2, c = i % W2;
    pages[page_row(block_tables, max_blocks, page_size, seq_index[t], positions[t]) * Wv + col + c] =
        from_f<P>(to_f(proj[i]));
  }
}

constexpr int kPoolThreads = 512;  // the pool's block: kPoolChan channel threads x groups over the tokens
constexpr int kPoolChan = 128;     // threads across the channels (each holds hd / kPoolChan channels, <= 4)
constexpr int kPoolMaxPerThread = 4;

/** One block per (entry w, sequence s): the block's threads are G = blockDim / kPoolChan groups; group g
 *  visits the window slots u = g, g + G, ... (slot u: window w - 1's first series for u < rate when the
 *  windows overlap, else window w's token u % rate) with an online softmax per channel (channel c of
 *  thread i: i % kPoolChan + kPoolChan c), so a slot's loads are one row read by every channel thread and
 *  the serial chain is 2 rate / G slots long; the groups' (max, sum, acc) merge through shared memory. */
template <typename T, typename P>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel(
    const P* pages, const int32_t* positions, const int32_t* seq_start, const int32_t* block_tables, int max_blocks,
    int page_size, int64_t Wv, int col, const float* ape, const float* norm_w, const float* inv_freq, T* entries,
    int64_t M, int rate, int hd, bool overlap, float eps, int n_rot, float attn_factor) {
  extern __shared__ float sm[];  // e [hd], then per group: max [hd], sum [hd], acc [hd]
  __shared__ float red[32];
  const int s = blockIdx.y;
  const int64_t w = blockIdx.x;
  const int32_t lo = seq_start[s], hi = seq_start[s + 1];
  if (hi <= lo) return;
  const int64_t n_entries = (static_cast<int64_t>(positions[hi - 1]) + 1) / rate;
  if (w >= n_entries) return;
  const int width = overlap ? 2 * hd : hd, off = overlap ? hd : 0;
  const int G = blockDim.x / kPoolChan, g = threadIdx.x / kPoolChan, ci = threadIdx.x % kPoolChan;
  const int first = overlap && w > 0 ? 0 : rate, n_slots = 2 * rate;  // slots [first, 2 rate)
  float mx[kPoolMaxPerThread], sum[kPoolMaxPerThread], acc[kPoolMaxPerThread];
#pragma unroll
  for (int c = 0; c < kPoolMaxPerThread; ++c) mx[c] = -INFINITY, sum[c] = 0.0f, acc[c] = 0.0f;
  for (int u = first + g; u < n_slots; u += G) {
    const bool prev = u < rate;
    const int j = prev ? u : u - rate, co = prev ? 0 : off;
    const int64_t win = prev ? w - 1 : w;
    const P* r = pages + page_row(block_tables, max_blocks, page_size, s, static_cast<int>(win * rate + j)) * Wv + col;
#pragma unroll
    for (int c = 0; c < kPoolMaxPerThread; ++c) {
      const int d = ci + kPoolChan * c;
      if (d >= hd) break;
      const float gt = to_f(r[width + co + d]) + ape[j * width + co + d];
      const float v = to_f(r[co + d]);
      const float m2 = fmaxf(mx[c], gt), sc = expf(mx[c] - m2), x = expf(gt - m2);
      sum[c] = sum[c] * sc + x;
      acc[c] = acc[c] * sc + x * v;
      mx[c] = m2;
    }
  }
  float* e = sm;
  float* part = sm + hd;  // [G][3][hd]
#pragma unroll
  for (int c = 0; c < kPoolMaxPerThread; ++c) {
    const int d = ci + kPoolChan * c;
    if (d >= hd) break;
    float* pg = part + static_cast<int64_t>(g) * 3 * hd;
    pg[d] = mx[c], pg[hd + d] = sum[c], pg[2 * hd + d] = acc[c];
  }
  __syncthreads();
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float m = -INFINITY;
    for (int q = 0; q < G; ++q) m = fmaxf(m, part[static_cast<int64_t>(q) * 3 * hd + d]);
    float den = 0.0f, num = 0.0f;
    for (int q = 0; q < G; ++q) {
      const float* pq = part + static_cast<int64_t>(q) * 3 * hd;
      if (pq[hd + d] == 0.0f) continue;  // a group that saw no slot (max -inf)
      const float sc = expf(pq[d] - m);
      den += pq[hd + d] * sc;
      num += pq[2 * hd + d] * sc;
    }
    e[d] = num / den;
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
  cuda::check_act(op, "kv.v", kv.v);  // F32 or BF16 pages, whatever the activations
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
  if (hd > cuda::kPoolChan * cuda::kPoolMaxPerThread)
    fail(ErrorCode::kUnsupported, "{}: head_dim {} (the CUDA pool holds at most {} channels)", op, hd,
         cuda::kPoolChan * cuda::kPoolMaxPerThread);
  const int64_t M = entries.dim(1), Wv = kv.v.dim(3);
  const int ps = static_cast<int>(kv.v.dim(1));
  if (T == 0) return;
  // Each sequence's entry count is bounded by max_kv_len / rate (its last position + 1 at most).
  const int64_t max_entries = std::min<int64_t>(M, batch.max_kv_len / p.rate);
  const dim3 pool_grid(static_cast<unsigned>(std::max<int64_t>(max_entries, 1)), static_cast<unsigned>(S));
  // Groups over the window's slots: as many as the slots can use (2 rate at most), up to kPoolThreads.
  const int groups = static_cast<int>(std::clamp<int64_t>(2 * p.rate, 1, cuda::kPoolThreads / cuda::kPoolChan));
  const unsigned pool_threads = static_cast<unsigned>(groups * cuda::kPoolChan);
  const size_t pool_smem = static_cast<size_t>(hd) * 4 * (1 + 3 * static_cast<size_t>(groups));
  const int64_t n_tok = T;  // (T names the element type inside FT_DISPATCH_ACT)
  FT_DISPATCH_ACT(op, "proj", proj.dtype, FT_DISPATCH_PAGE(op, "kv.v", kv.v.dtype, {
    cuda::store_kernel<T, P><<<cuda::grid_1d(n_tok * 2 * width, 256), 256, 0, stream_>>>(
        proj.ptr<T>(), static_cast<P*>(kv.v.data), batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(),
        batch.block_tables.ptr<int32_t>(), batch.max_blocks, ps, Wv, p.col, 2 * width, n_tok * 2 * width);
    if (max_entries > 0)
      cuda::pool_kernel<T, P><<<pool_grid, pool_threads, pool_smem, stream_>>>(
          static_cast<const P*>(kv.v.data), batch.positions.ptr<int32_t>(), batch.seq_start.ptr<int32_t>(),
          batch.block_tables.ptr<int32_t>(), batch.max_blocks, ps, Wv, p.col, ape.ptr<float>(), norm_w.ptr<float>(),
          p.rope.inv_freq.ptr<float>(), entries.ptr<T>(), M, p.rate, static_cast<int>(hd), p.overlap, p.eps,
          p.rope.n_rot, p.rope.attn_factor);
  }));
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
