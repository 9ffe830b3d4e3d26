// compress_kv: DeepSeek-V4's KV compressor (ops.h): stores the step's projections in the value pages'
// columns [col, col + 2 width), then one block per (sequence, entry) pools the entry's window(s)
// per channel (softmax of gate + ape, online, the window's tokens split over thread groups and merged),
// RMSNorms it and applies the tail RoPE at w * rate. head_dim <= 512 (kUnsupported above). Value
// pages F32 / BF16, or quantized (--kv-cache-dtype fp8 / q8_0): the stored columns must be whole heads
// of the pages, each quantized by one warp as kv_write does (kv_quant.cuh), and the pool dequantizes
// each value it reads (kv_page_value), as the CPU backend does. Entries dense [S, M, hd] (every closed
// window of each sequence: Qwen4-Exp), or the KV pages' entry rows (KvLayer::e at
// CompressParams::entry_col, addressed by ::entry_tables when given; entry_rows.cuh): then only the windows this step closes are pooled, one
// block each, the grid ceil(T / rate) blocks a sequence whatever the positions (a captured graph's
// shape does not change).
#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/entry_rows.cuh"
#include "backend/cuda/kv_quant.cuh"

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

/** Quantized pages: one warp per (token t, head hh of the nh heads of dim columns from head h0): the
 *  token's proj[t, hh dim ..] quantized into page row (slot * heads + h0 + hh). */
template <int FORM, typename T>
__global__ void store_quant_kernel(const T* proj, uint8_t* codes, void* scales, const int32_t* positions,
                                   const int32_t* seq_index, const int32_t* block_tables, int max_blocks,
                                   int page_size, int heads, int dim, int h0, int nh, int64_t n_rows) {
  const int64_t warps = (static_cast<int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5; r < n_rows; r += warps) {
    const int64_t t = r / nh;
    const int hh = static_cast<int>(r - t * nh);
    const int64_t row = page_row(block_tables, max_blocks, page_size, seq_index[t], positions[t]) * heads + h0 + hh;
    const T* src = proj + (t * nh + hh) * static_cast<int64_t>(dim);
    kv_quantize_row_warp<FORM>([&](int d) { return to_f(src[d]); }, dim, codes + row * dim, scales, row);
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
template <typename T, int FORM, typename P>
__global__ void __launch_bounds__(kPoolThreads) pool_kernel(
    KvPages pages, const int32_t* positions, const int32_t* seq_start, const int32_t* block_tables, int max_blocks,
    int page_size, int col, const float* ape, const float* norm_w, const float* inv_freq, EntryRows entries,
    int rate, int hd, bool overlap, float eps, int n_rot, float attn_factor) {
  extern __shared__ float sm[];  // e [hd], then per group: max [hd], sum [hd], acc [hd]
  __shared__ float red[32];
  const int s = blockIdx.y;
  const int32_t lo = seq_start[s], hi = seq_start[s + 1];
  if (hi <= lo) return;
  // Dense: window blockIdx.x of all closed ones; paged: of those whose last position is in this step.
  const int64_t w_first = entries.block_tables ? static_cast<int64_t>(positions[lo]) / rate : 0;
  const int64_t w = w_first + blockIdx.x, n_entries = (static_cast<int64_t>(positions[hi - 1]) + 1) / rate;
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
    const int64_t slot = page_row(block_tables, max_blocks, page_size, s, static_cast<int>(win * rate + j));
#pragma unroll
    for (int c = 0; c < kPoolMaxPerThread; ++c) {
      const int d = ci + kPoolChan * c;
      if (d >= hd) break;
      const float gt = kv_page_value<FORM, P>(pages, slot, col + width + co + d) + ape[j * width + co + d];
      const float v = kv_page_value<FORM, P>(pages, slot, col + co + d);
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
  T* out = static_cast<T*>(entries.data) + entries.offset(s, w);
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

/** The launches of one compress_kv: store (float or quantized pages), then pool. */
struct CompressLaunch {
  const void* proj;
  KvPages pages;
  void* codes_or_pages;  // pages.data, writable
  void* scales;          // pages.scales, writable (quantized)
  const int32_t *positions, *seq_index, *seq_start, *block_tables;
  int max_blocks, page_size, col, hd, rate, n_rot;
  int64_t n_tok, width, max_entries;
  const float *ape, *norm_w, *inv_freq;
  EntryRows entries;
  bool overlap;
  float eps, attn_factor;
  dim3 pool_grid;
  unsigned pool_threads;
  size_t pool_smem;
};

template <typename T, int FORM, typename P>
void launch_compress(const CompressLaunch& a, cudaStream_t stream) {
  const int64_t W2 = 2 * a.width;
  if constexpr (FORM == kKvFloat) {
    store_kernel<T, P><<<grid_1d(a.n_tok * W2, 256), 256, 0, stream>>>(
        static_cast<const T*>(a.proj), static_cast<P*>(a.codes_or_pages), a.positions, a.seq_index, a.block_tables,
        a.max_blocks, a.page_size, static_cast<int64_t>(a.pages.heads) * a.pages.dim, a.col, W2, a.n_tok * W2);
  } else {
    const int nh = static_cast<int>(W2 / a.pages.dim);
    store_quant_kernel<FORM, T><<<grid_1d(a.n_tok * nh * 32, 256), 256, 0, stream>>>(
        static_cast<const T*>(a.proj), static_cast<uint8_t*>(a.codes_or_pages), a.scales, a.positions, a.seq_index,
        a.block_tables, a.max_blocks, a.page_size, a.pages.heads, a.pages.dim, a.col / a.pages.dim, nh, a.n_tok * nh);
  }
  if (a.max_entries > 0)
    pool_kernel<T, FORM, P><<<a.pool_grid, a.pool_threads, a.pool_smem, stream>>>(
        a.pages, a.positions, a.seq_start, a.block_tables, a.max_blocks, a.page_size, a.col, a.ape, a.norm_w,
        a.inv_freq, a.entries, a.rate, a.hd, a.overlap, a.eps, a.n_rot, a.attn_factor);
}

}  // namespace
}  // namespace cuda

void CudaOps::compress_kv(const CompressParams& p, const BatchInfo& batch, const Tensor& proj, KvLayer kv,
                          const Tensor& ape, const Tensor& norm_w, Tensor entries) {
  const char* op = "compress_kv";
  cuda::check_batch(op, batch);
  cuda::check_act(op, "proj", proj);
  // F32 or BF16 pages whatever the activations, or quantized codes with scales
  const int form = cuda::check_kv_page_tensor(op, "kv.v", "kv.v_scale", kv.v, kv.v_scale);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"ape", &ape}, {"norm_w", &norm_w},
                                {"inv_freq", &p.rope.inv_freq}})
    cuda::check_dtype(op, name, *t, {DType::F32});
  const int64_t hd = p.head_dim, width = p.overlap ? 2 * hd : hd, T = batch.n_tokens, S = batch.n_seqs;
  if (p.rate < 1 || hd < 1 || p.rope.n_rot % 2 != 0 || p.rope.n_rot > hd || kv.v.ndim != 4 || p.col < 0 ||
      p.col + 2 * width > kv.v.dim(2) * kv.v.dim(3) || !proj.has_shape({T, 2 * width}) ||
      !ape.has_shape({p.rate, width}) || norm_w.numel() != hd)
    fail(ErrorCode::kInvalidArgument, "{}: proj {}, kv.v {}, ape {}, norm_w {} do not fit rate {}, head_dim {}, col {}",
         op, proj.str(), kv.v.str(), ape.str(), norm_w.str(), p.rate, hd, p.col);
  const bool paged = entries.ndim == 4;
  const cuda::EntryRows ent =
      cuda::entry_rows(op, entry_batch(op, batch, p.entry_tables), entries, proj, hd, paged ? p.entry_col : 0,
                       kv.v.dim(1), p.rate);  // the entry pages' tables: their own pool's when given
  const int64_t dim = kv.v.dim(3);
  if (form != cuda::kKvFloat && (p.col % dim != 0 || (2 * width) % dim != 0))
    fail(ErrorCode::kInvalidArgument, "{}: columns [{}, {}) of quantized kv.v {} are not whole heads of {}", op, p.col,
         p.col + 2 * width, kv.v.str(), dim);
  if (hd > cuda::kPoolChan * cuda::kPoolMaxPerThread)
    fail(ErrorCode::kUnsupported, "{}: head_dim {} (the CUDA pool holds at most {} channels)", op, hd,
         cuda::kPoolChan * cuda::kPoolMaxPerThread);
  if (T == 0) return;
  // Dense: each sequence's entry count is bounded by max_kv_len / rate (its last position + 1 at most);
  // paged: a sequence's step of n <= T tokens closes at most ceil(n / rate) windows.
  const int64_t max_entries = paged ? (T + p.rate - 1) / p.rate : std::min<int64_t>(ent.M, batch.max_kv_len / p.rate);
  // Groups over the window's slots: as many as the slots can use (2 rate at most), up to kPoolThreads.
  const int groups = static_cast<int>(std::clamp<int64_t>(2 * p.rate, 1, cuda::kPoolThreads / cuda::kPoolChan));
  cuda::CompressLaunch a{};
  a.proj = proj.data;
  a.pages = {kv.v.data, form == cuda::kKvFloat ? nullptr : kv.v_scale.data, static_cast<int>(kv.v.dim(2)),
             static_cast<int>(dim), form == cuda::kKvFloat ? 0 : static_cast<int>(kv.v_scale.dim(3))};
  a.codes_or_pages = kv.v.data;
  a.scales = form == cuda::kKvFloat ? nullptr : kv.v_scale.data;
  a.positions = batch.positions.ptr<int32_t>();
  a.seq_index = batch.seq_index.ptr<int32_t>();
  a.seq_start = batch.seq_start.ptr<int32_t>();
  a.block_tables = batch.block_tables.ptr<int32_t>();
  a.max_blocks = batch.max_blocks;
  a.page_size = static_cast<int>(kv.v.dim(1));
  a.col = p.col, a.hd = static_cast<int>(hd), a.rate = p.rate, a.n_rot = p.rope.n_rot;
  a.n_tok = T, a.width = width, a.max_entries = max_entries;
  a.ape = ape.ptr<float>(), a.norm_w = norm_w.ptr<float>(), a.inv_freq = p.rope.inv_freq.ptr<float>();
  a.entries = ent;
  a.overlap = p.overlap, a.eps = p.eps, a.attn_factor = p.rope.attn_factor;
  a.pool_grid = dim3(static_cast<unsigned>(std::max<int64_t>(max_entries, 1)), static_cast<unsigned>(S));
  a.pool_threads = static_cast<unsigned>(groups * cuda::kPoolChan);
  a.pool_smem = static_cast<size_t>(hd) * 4 * (1 + 3 * static_cast<size_t>(groups));
  FT_DISPATCH_ACT(op, "proj", proj.dtype, FT_DISPATCH_KV_FORM(op, "kv.v", form, kv.v.dtype, {
    cuda::launch_compress<T, F, P>(a, stream_);
  }));
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
