// attention_compressed: DeepSeek-V4's attention (ops.h): one block per (query token, head), its warps
// each an online softmax over every n_warps-th key (warp 0's starting from the head's sink) of the
// sliding window of rotated kv from the key pages and the compressed entries (all visible ones or the
// indexer's picks), merged in shared memory; the output's tail RoPE is undone at -p. Lane l holds dims
// l, l + 32, ... (head_dim <= 512); a RoPE pair's partner is lane l ^ 1. Key pages F32 / BF16, or
// quantized (--kv-cache-dtype fp8 / q8_0): each value dequantized as it is loaded (kv_page_value).
// Entries dense [S, M, hd] or the pages' entry rows (KvLayer::e; entry_rows.cuh; p.entry_tables).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/entry_rows.cuh"
#include "backend/cuda/kv_quant.cuh"

namespace ft {
namespace cuda {
namespace {

constexpr int kMaxPerLane = 16;  // head_dim <= 512

struct TailRope {
  const float* inv_freq;
  int hd, n_rot;
  float attn_factor;
  // Rotates the lane's dims of a head at position `pos` (sign -1: backwards); v[i] is dim lane + 32 i.
  __device__ void apply(float (&v)[kMaxPerLane], int lane, float pos, float sign) const {
    const int d0 = hd - n_rot;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      const float partner = __shfl_xor_sync(0xffffffffu, v[i], 1);
      if (d < hd && d >= d0) {
        float sn, cs;
        sincosf(pos * inv_freq[(d - d0) / 2], &sn, &cs);
        cs *= attn_factor, sn *= sign * attn_factor;
        v[i] = ((d - d0) % 2 == 0) ? v[i] * cs - partner * sn : v[i] * cs + partner * sn;
      }
    }
  }
};

/** One block per (query token, head); its warps split the keys (the window's, then the entries) round
 *  robin, each an online softmax (warp 0's starting from the sink), merged through shared memory. */
template <typename T, int FORM, typename Pg>
__global__ void attention_kernel(const T* q, KvPages kpages, EntryRows entries, const int32_t* selected, int sel_k,
                                 const float* sinks, const int32_t* positions, const int32_t* seq_index,
                                 const int32_t* block_tables, int max_blocks, int page_size, T* out, int64_t n_tok,
                                 int nh, int hd, float scale, int window, TailRope rope) {
  extern __shared__ float sm[];  // per warp: m, l, acc [hd]; then the merged output [hd]
  const int64_t item = blockIdx.x;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  if (item >= n_tok * nh) return;
  const int64_t t = item / nh;
  const int h = static_cast<int>(item % nh);
  const int P = positions[t], s = seq_index[t];
  float qv[kMaxPerLane], acc[kMaxPerLane], kv[kMaxPerLane];
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < hd ? to_f(q[(t * nh + h) * hd + d]) : 0.0f;
    acc[i] = 0.0f;
  }
  rope.apply(qv, lane, static_cast<float>(P), 1.0f);
  float m = warp == 0 ? sinks[h] : -INFINITY, l = warp == 0 ? 1.0f : 0.0f;
  auto visit = [&](bool rotate, int pos) {  // the key (= value) in kv[]
    if (rotate) rope.apply(kv, lane, static_cast<float>(pos), 1.0f);
    float dot = 0.0f;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) dot += qv[i] * kv[i];
    const float x = warp_sum(dot) * scale;
    const float m2 = fmaxf(m, x), c = expf(m - m2), pr = expf(x - m2);
    l = l * c + pr;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) acc[i] = acc[i] * c + pr * kv[i];
    m = m2;
  };
  const int j0 = max(0, P - window + 1);
  for (int j = j0 + warp; j <= P; j += n_warps) {
    const int64_t page = block_tables[static_cast<int64_t>(s) * max_blocks + j / page_size];
    const int64_t slot = page * page_size + j % page_size;
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      kv[i] = d < hd ? kv_page_value<FORM, Pg>(kpages, slot, d) : 0.0f;
    }
    visit(true, j);
  }
  auto entry = [&](const T* row) {
#pragma unroll
    for (int i = 0; i < kMaxPerLane; ++i) {
      const int d = lane + 32 * i;
      kv[i] = d < hd ? to_f(row[d]) : 0.0f;
    }
    visit(false, 0);
  };
  if (entries.data) {
    const int64_t n_vis = min(static_cast<int64_t>(P + 1) / entries.rate, entries.M);
    const T* eb = static_cast<const T*>(entries.data);
    if (selected) {
      for (int j = warp; j < sel_k; j += n_warps) {
        const int e = selected[t * sel_k + j];
        if (e >= 0 && e < n_vis) entry(eb + entries.offset(s, e));
      }
    } else {
      for (int64_t e = warp; e < n_vis; e += n_warps) entry(eb + entries.offset(s, e));
    }
  }
  float* mine = sm + static_cast<int64_t>(warp) * (hd + 2);
  if (lane == 0) mine[0] = m, mine[1] = l;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) mine[2 + d] = acc[i];
  }
  __syncthreads();
  float mt = -INFINITY;
  for (int k = 0; k < n_warps; ++k) mt = fmaxf(mt, sm[static_cast<int64_t>(k) * (hd + 2)]);
  float lt = 0.0f;
  for (int k = 0; k < n_warps; ++k) {
    const float* pk = sm + static_cast<int64_t>(k) * (hd + 2);
    if (pk[1] > 0.0f) lt += pk[1] * expf(pk[0] - mt);
  }
  float* o = sm + static_cast<int64_t>(n_warps) * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float v = 0.0f;
    for (int k = 0; k < n_warps; ++k) {
      const float* pk = sm + static_cast<int64_t>(k) * (hd + 2);
      if (pk[1] > 0.0f) v += pk[2 + d] * expf(pk[0] - mt);
    }
    o[d] = v / lt;
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    acc[i] = d < hd ? o[d] : 0.0f;
  }
  rope.apply(acc, lane, static_cast<float>(P), -1.0f);
#pragma unroll
  for (int i = 0; i < kMaxPerLane; ++i) {
    const int d = lane + 32 * i;
    if (d < hd) out[(t * nh + h) * hd + d] = from_f<T>(acc[i]);
  }
}

}  // namespace
}  // namespace cuda

void CudaOps::attention_compressed(const CompressedAttentionParams& p, const BatchInfo& batch, const Tensor& q,
                                   KvLayer kv, const Tensor& entries, const Tensor& selected, Tensor out) {
  const char* op = "attention_compressed";
  cuda::check_batch(op, batch);
  cuda::check_act(op, "q", q);
  // F32 or BF16 pages whatever the activations, or quantized codes with scales
  const int form = cuda::check_kv_page_tensor(op, "kv.k", "kv.k_scale", kv.k, kv.k_scale);
  cuda::check_same_dtype(op, "out", out, q);
  cuda::check_dtype(op, "sinks", p.sinks, {DType::F32});
  cuda::check_dtype(op, "inv_freq", p.rope.inv_freq, {DType::F32});
  const int64_t T = batch.n_tokens, nh = p.n_head, hd = p.head_dim;
  if (nh < 1 || hd < 1 || hd > 32 * cuda::kMaxPerLane || p.window < 1 || p.rope.head_dim != hd ||
      !q.has_shape({T, nh * hd}) || !out.has_shape({T, nh * hd}) || kv.k.ndim != 4 || kv.k.dim(2) != 1 ||
      kv.k.dim(3) != hd || p.sinks.numel() != nh || out.data == q.data)
    fail(ErrorCode::kInvalidArgument, "{}: q {}, kv.k {}, out {}, sinks {} do not fit {} heads of {} (at most {}; out "
         "must not alias q)", op, q.str(), kv.k.str(), out.str(), p.sinks.str(), nh, hd, 32 * cuda::kMaxPerLane);
  const cuda::EntryRows ent =  // addressed by the entry pages' own tables when given (p.entry_tables)
      entries.empty() ? cuda::EntryRows{}
                      : cuda::entry_rows(op, entry_batch(op, batch, p.entry_tables), entries, q, hd, 0, kv.k.dim(1),
                                         p.rate);
  if (!selected.empty()) {
    cuda::check_dtype(op, "selected", selected, {DType::I32});
    if (selected.rows() != T || entries.empty())
      fail(ErrorCode::kInvalidArgument, "{}: selected {} needs [{}, k] rows and entries", op, selected.str(), T);
  }
  if (T == 0) return;
  const cuda::TailRope rope{p.rope.inv_freq.ptr<float>(), static_cast<int>(hd), p.rope.n_rot, p.rope.attn_factor};
  const int64_t items = T * nh;
  if (items > (int64_t{1} << 31) - 1)
    fail(ErrorCode::kInvalidArgument, "{}: {} tokens x {} heads exceed one grid", op, T, nh);
  const unsigned blocks = static_cast<unsigned>(items);
  // Warps a (token, head) splits its keys over: 8 while few items fill the GPU (decode), else 4.
  const int warps = items < 2048 ? 8 : 4;
  const size_t smem = (static_cast<size_t>(warps) * (hd + 2) + hd) * 4;
  const int64_t n_tok = T;  // (T names the element type inside FT_DISPATCH_ACT)
  const cuda::KvPages kp{kv.k.data, form == cuda::kKvFloat ? nullptr : kv.k_scale.data, 1, static_cast<int>(hd),
                         form == cuda::kKvFloat ? 0 : static_cast<int>(kv.k_scale.dim(3))};
  FT_DISPATCH_ACT(op, "q", q.dtype, FT_DISPATCH_KV_FORM(op, "kv.k", form, kv.k.dtype, {
    cuda::attention_kernel<T, F, P><<<blocks, warps * 32, smem, stream_>>>(
        q.ptr<T>(), kp, ent,
        selected.empty() ? nullptr : selected.ptr<int32_t>(), selected.empty() ? 0 : static_cast<int>(selected.cols()),
        p.sinks.ptr<float>(), batch.positions.ptr<int32_t>(), batch.seq_index.ptr<int32_t>(),
        batch.block_tables.ptr<int32_t>(), batch.max_blocks, static_cast<int>(kv.k.dim(1)), out.ptr<T>(), n_tok,
        static_cast<int>(nh), static_cast<int>(hd), p.scale, p.window, rope);
  }));
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
