// attention: causal GQA attention of the batch's queries over the paged KV cache (after kv_write).
// q, out [T, n_head * head_dim] F32 or BF16; kv pages [n_pages, page_size, n_head_kv, head_dim]
// F32 or BF16, or quantized (--kv-cache-dtype fp8 / q8_0: one-byte codes with KvLayer::k_scale /
// v_scale, dequantized on load exactly as the CPU does; kv_quant.cuh; every kernel here, the decode
// and the tensor-core kernel have instantiations for them); head_dim <= 512 (Gemma 4's full layers: 512; above 256 only this kernel serves, its tiles
// taking 160 KB of shared memory a block at 512). Query t (sequence s, position p) attends to s's keys at positions
// max(0, p - window + 1) .. p. fp32 scores and online softmax (flash-attention recurrence). With
// AttentionParams::sinks each query head's sink logit joins the softmax's denominator once, where its
// row is normalised (the merge of the splits when the keys are split; attention_sink.cuh). No kernel
// reads a key below a query's window: a KV page wholly below the window of every query of the batch
// for its sequence is never touched (its page-table entry included), so such pages may be released.
//
// One kernel serves prefill and decode. A block owns up to 16 query rows = nt consecutive tokens x
// hc query heads of one kv head g, and one split of the key range; it streams the keys in tiles of
// 32 through shared memory (K and V read once per block, shared by the rows), lane j of a warp
// scoring key j of the tile for the warp's rows. Tokens of different sequences in one block are
// handled as consecutive runs. The key range is split (flash-decoding; Dao et al., "Flash-Decoding
// for long-context inference", 2023) when few blocks would be launched, and always for decode (one
// token per sequence), whose split length depends only on the KV pool's capacity (so results do
// not depend on the batch, and a graph recorded with max_kv_len = capacity equals eager decode):
// each split writes (max, sum, unnormalised output) partials and a combine kernel merges them.
// Prefill batches of kAttnTcMinTokens or more run the tensor-core kernel of attention_tc.cu instead,
// decode batches (one token per sequence) the kernel of attention_decode.cu, which splits each
// token's own key range and merges in its last block (this kernel's decode path remains for head
// shapes that one does not take).
// Bytes moved: per block, its keys' K and V once; q and out once; partials
// 2 * n_split * T * n_head * (head_dim + 2) * 4 when split.
#include <algorithm>

#include "backend/op_checks.h"
#include "backend/cuda/attention_args.h"
#include "backend/cuda/attention_decode.h"
#include "backend/cuda/attention_sink.cuh"
#include "backend/cuda/attention_tc.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kv_quant.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/smem_opt_in.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kWarps = 4, kRows = 16, kRowsPerWarp = kRows / kWarps, kTile = 32, kMaxHeadDim = 512;
// Decode splits: at least kDecodeSplitMin keys each, at most kDecodeMaxSplits over the pool's capacity.
constexpr int64_t kDecodeSplitMin = 64, kDecodeMaxSplits = 512;
// Prefill batches of at least this many tokens go to the tensor-core kernel (attention_tc.cu, bf16
// mma.sync); shorter ones (chat turns, the fixtures) stay on this kernel's exact fp32 products, where
// the quadratic cost is small anyway.
constexpr int64_t kAttnTcMinTokens = 256;

struct AttnArgs : AttnTensors {
  int nt, hc, n_hchunks;
  int n_split, split_len;
  bool use_part;  // partials to `part`, merged by attention_combine_kernel (else `out` directly)
  float* part;    // [n_split, T * H, D + 2] when use_part: m, l, o[D]
};

__device__ __forceinline__ float kv_load(const void* p, bool f32, int64_t i) {
  return f32 ? static_cast<const float*>(p)[i] : __bfloat162float(static_cast<const bf16*>(p)[i]);
}

// KV: kKvFloat (F32 / BF16 pages, a.kv_f32), or kKvFp8 / kKvQ8 (codes and scales, dequantized into the
// shared tiles as the CPU dequantizes them; separate instantiations, so the float path is unchanged).
template <int DPL, int KV>  // head dims per lane: ceil(D / 32)
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttnArgs a) {
  extern __shared__ __align__(16) float smem[];
  const int D = a.D, group = a.H / a.G;
  const int KS = D + 4;                 // k_s row stride: 16-byte rows, conflict-free float4 reads
  float* q_s = smem;                    // [kRows][D], pre-scaled
  float* k_s = q_s + kRows * D;         // [kTile][D + 4]
  float* v_s = k_s + kTile * KS;        // [kTile][D]
  __shared__ int row_t[kRows], row_h[kRows], row_pos[kRows], row_seq[kRows];
  __shared__ int64_t key_off[kTile];    // element offset of each tile key's row for kv head g (-1: none);
                                        // quantized KV: the row's index (codes at row * D, scales at row * sph)

  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * a.nt;
  const int g = blockIdx.y / a.n_hchunks, hchunk = blockIdx.y % a.n_hchunks;
  const int split = blockIdx.z;
  const int rows = a.nt * a.hc;

  if (threadIdx.x < kRows) {
    const int r = threadIdx.x;
    const int64_t t = t0 + r / a.hc;
    const int hh = hchunk * a.hc + r % a.hc;
    bool valid = r < rows && t < a.T && hh < group;
    int s = valid ? a.seq[t] : -1;
    if (s < 0 || s >= a.n_seqs) valid = false;
    row_t[r] = valid ? static_cast<int>(t) : -1;
    row_h[r] = g * group + hh;
    row_pos[r] = valid ? a.pos[t] : -1;
    row_seq[r] = valid ? s : -1;
  }
  __syncthreads();
  if (a.use_part && split > 0) {  // past every row's position: nothing to add (the combine skips it too)
    int max_pos = -1;
    for (int r = 0; r < kRows; ++r) max_pos = max(max_pos, row_pos[r]);
    if (static_cast<int64_t>(split) * a.split_len > max_pos) return;
  }
  for (int i = threadIdx.x; i < kRows * D; i += blockDim.x) {
    const int r = i / D, d = i % D;
    q_s[i] = row_t[r] >= 0
                 ? a.scale * load_any(a.q, a.q_code, (static_cast<int64_t>(row_t[r]) * a.H + row_h[r]) * D + d)
                 : 0.0f;
  }

  float m[kRowsPerWarp], l[kRowsPerWarp], o[kRowsPerWarp][DPL];
#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    m[rr] = -INFINITY, l[rr] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[rr][i] = 0.0f;
  }
  const int64_t split_lo = static_cast<int64_t>(split) * a.split_len;
  const int64_t split_hi = split + 1 == a.n_split ? INT64_MAX : split_lo + a.split_len;
  __syncthreads();

  for (int run_begin = 0; run_begin < a.nt;) {  // runs of tokens of one sequence
    const int seq = row_seq[run_begin * a.hc];
    if (seq < 0) break;  // invalid tokens only at the end of the batch
    int run_end = run_begin + 1;
    while (run_end < a.nt && row_seq[run_end * a.hc] == seq) ++run_end;
    int64_t lo = INT64_MAX, hi = -1;
    for (int tt = run_begin; tt < run_end; ++tt) {
      const int64_t p = row_pos[tt * a.hc];
      lo = min(lo, a.window > 0 ? max(int64_t{0}, p - a.window + 1) : int64_t{0});
      hi = max(hi, p);
    }
    const int64_t kbeg = max(lo, split_lo), kend = min(hi + 1, split_hi);
    const int32_t* table = a.bt + static_cast<int64_t>(seq) * a.max_blocks;
    for (int64_t j0 = kbeg; j0 < kend; j0 += kTile) {
      if (threadIdx.x < kTile) {  // one page-table lookup per key
        const int64_t j = j0 + threadIdx.x;
        int64_t off = -1;
        if (j < kend) {
          const int64_t blk = j / a.page_size;
          const int64_t page = blk < a.max_blocks ? table[blk] : -1;
          if (page >= 0 && page < a.n_pages) {
            if constexpr (KV == kKvFloat) off = ((page * a.page_size + j % a.page_size) * a.G + g) * D;
            else off = (page * a.page_size + j % a.page_size) * a.G + g;
          }
        }
        key_off[threadIdx.x] = off;
      }
      __syncthreads();
      if constexpr (KV != kKvFloat) {  // codes and scales: 4 values a load where rows are whole 4-byte words
        if (D % 4 == 0) {
          const int cpk = D / 4;
          for (int i = threadIdx.x; i < kTile * cpk; i += blockDim.x) {
            const int kk = i / cpk, d0 = (i % cpk) * 4;
            const int64_t row = key_off[kk];
            float kx[4] = {0.0f, 0.0f, 0.0f, 0.0f}, vx[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            if (row >= 0) {
              load_kv_quant<KV, 4>(a.k, a.k_scale, row, D, a.kv_sph, d0, kx);
              load_kv_quant<KV, 4>(a.v, a.v_scale, row, D, a.kv_sph, d0, vx);
            }
#pragma unroll
            for (int e = 0; e < 4; ++e) k_s[kk * KS + d0 + e] = kx[e], v_s[kk * D + d0 + e] = vx[e];
          }
        } else {
          for (int i = threadIdx.x; i < kTile * D; i += blockDim.x) {
            const int kk = i / D, d = i % D;
            const int64_t row = key_off[kk];
            float kx = 0.0f, vx = 0.0f;
            if (row >= 0) {
              load_kv_quant<KV, 1>(a.k, a.k_scale, row, D, a.kv_sph, d, &kx);
              load_kv_quant<KV, 1>(a.v, a.v_scale, row, D, a.kv_sph, d, &vx);
            }
            k_s[kk * KS + d] = kx, v_s[kk * D + d] = vx;
          }
        }
      } else if (!a.kv_f32 && D % 8 == 0) {  // bf16 rows: 16-byte loads, up to 8 a thread issued before any store
        const int cpk = D / 8;         // chunks per key; kTile * cpk = 4 * D = DPL * 4 * 32 at most
        constexpr int LB = DPL < 8 ? DPL : 8;  // loads a batch: DPL 16 (head_dim 512) in two, for registers
#pragma unroll
        for (int u0 = 0; u0 < DPL; u0 += LB) {
          uint4 kr[LB], vr[LB];
#pragma unroll
          for (int u = 0; u < LB; ++u) {
            const int i = threadIdx.x + (u0 + u) * kWarps * 32;
            kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
            if (i < kTile * cpk) {
              const int64_t off = key_off[i / cpk];
              if (off >= 0) {
                kr[u] = __ldg(reinterpret_cast<const uint4*>(static_cast<const bf16*>(a.k) + off) + i % cpk);
                vr[u] = __ldg(reinterpret_cast<const uint4*>(static_cast<const bf16*>(a.v) + off) + i % cpk);
              }
            }
          }
#pragma unroll
          for (int u = 0; u < LB; ++u) {
            const int i = threadIdx.x + (u0 + u) * kWarps * 32;
            if (i < kTile * cpk) {
              const int kk = i / cpk, d0 = (i % cpk) * 8;
              const uint32_t kw[4] = {kr[u].x, kr[u].y, kr[u].z, kr[u].w}, vw[4] = {vr[u].x, vr[u].y, vr[u].z, vr[u].w};
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                k_s[kk * KS + d0 + 2 * e] = __uint_as_float(kw[e] << 16);
                k_s[kk * KS + d0 + 2 * e + 1] = __uint_as_float(kw[e] & 0xffff0000u);
                v_s[kk * D + d0 + 2 * e] = __uint_as_float(vw[e] << 16);
                v_s[kk * D + d0 + 2 * e + 1] = __uint_as_float(vw[e] & 0xffff0000u);
              }
            }
          }
        }
      } else {
        for (int i = threadIdx.x; i < kTile * D; i += blockDim.x) {
          const int kk = i / D, d = i % D;
          const int64_t off = key_off[kk];
          k_s[kk * KS + d] = off >= 0 ? kv_load(a.k, a.kv_f32, off + d) : 0.0f;
          v_s[kk * D + d] = off >= 0 ? kv_load(a.v, a.kv_f32, off + d) : 0.0f;
        }
      }
      __syncthreads();
      const int64_t j = j0 + lane;
      float s[kRowsPerWarp];
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) s[rr] = 0.0f;
      if (D % 4 == 0) {
        for (int d = 0; d < D; d += 4) {
          const float4 kd = *reinterpret_cast<const float4*>(k_s + lane * KS + d);
#pragma unroll
          for (int rr = 0; rr < kRowsPerWarp; ++rr) {
            const float4 qd = *reinterpret_cast<const float4*>(q_s + (warp + kWarps * rr) * D + d);
            s[rr] = fmaf(qd.x, kd.x, fmaf(qd.y, kd.y, fmaf(qd.z, kd.z, fmaf(qd.w, kd.w, s[rr]))));
          }
        }
      } else {
        for (int d = 0; d < D; ++d) {
          const float kd = k_s[lane * KS + d];
#pragma unroll
          for (int rr = 0; rr < kRowsPerWarp; ++rr) s[rr] = fmaf(q_s[(warp + kWarps * rr) * D + d], kd, s[rr]);
        }
      }
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        const int r = warp + kWarps * rr;
        const int tt = r / a.hc;
        if (r >= rows || tt < run_begin || tt >= run_end || row_t[r] < 0) continue;  // warp-uniform
        const int64_t p = row_pos[r];
        const bool ok = j < kend && j <= p && (a.window <= 0 || j > p - a.window);
        const float sc = ok ? s[rr] : -INFINITY;
        const float tile_max = warp_max(sc);
        if (tile_max == -INFINITY) continue;
        const float m_new = fmaxf(m[rr], tile_max);
        const float alpha = __expf(m[rr] - m_new);
        const float pj = ok ? __expf(sc - m_new) : 0.0f;
        l[rr] = l[rr] * alpha + warp_sum(pj);
        m[rr] = m_new;
#pragma unroll
        for (int i = 0; i < DPL; ++i) o[rr][i] *= alpha;
        for (int kk = 0; kk < kTile; ++kk) {
          const float pk = __shfl_sync(0xffffffffu, pj, kk);
#pragma unroll
          for (int i = 0; i < DPL; ++i) {
            const int d = lane + 32 * i;
            if (d < D) o[rr][i] = fmaf(pk, v_s[kk * D + d], o[rr][i]);
          }
        }
      }
      __syncthreads();
    }
    run_begin = run_end;
  }

#pragma unroll
  for (int rr = 0; rr < kRowsPerWarp; ++rr) {
    const int r = warp + kWarps * rr;
    if (r >= rows || row_t[r] < 0) continue;
    const int64_t qrow = static_cast<int64_t>(row_t[r]) * a.H + row_h[r];
    if (!a.use_part) {
      const float inv = a.sinks ? sink_scale(m[rr], l[rr], a.sinks[row_h[r]]) : l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = lane + 32 * i;
        if (d >= D) continue;
        const float v = o[rr][i] * inv;
        if (a.out_f32) static_cast<float*>(a.out)[qrow * D + d] = v;
        else static_cast<bf16*>(a.out)[qrow * D + d] = __float2bfloat16_rn(v);
      }
    } else {
      float* pp = a.part + (static_cast<int64_t>(split) * a.T * a.H + qrow) * (D + 2);
      if (lane == 0) pp[0] = m[rr], pp[1] = l[rr];
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int d = lane + 32 * i;
        if (d < D) pp[2 + d] = o[rr][i];
      }
    }
  }
}

/** Merges the split partials of each (token, head): one block per query row, over the splits that
 *  hold any of its keys (the first pos / split_len + 1; later ones were never written). The split
 *  weights exp(m_s - M) and the total L go through shared memory; then each thread sums its head
 *  dims over the splits (independent loads, so they overlap instead of queueing one by one). With
 *  sinks (F32 [H], or null) the head's sink joins M and L here, once. */
__global__ void attention_combine_kernel(const float* part, int n_split_all, int64_t rows, int D, const int32_t* pos,
                                         int H, int split_len, const float* sinks, void* out, bool out_f32) {
  extern __shared__ float wsplit[];  // [n_split]
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const int p = pos[r / H];
  const int n_split = p < 0 ? 0 : min(n_split_all, p / split_len + 1);
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < n_split; s += blockDim.x) mx = fmaxf(mx, part[(s * rows + r) * (D + 2)]);
  mx = block_max(mx, red);
  const float sink = sinks ? sinks[r % H] : -INFINITY;
  if (sinks) mx = fmaxf(mx, sink);
  float l = 0.0f;
  for (int s = threadIdx.x; s < n_split; s += blockDim.x) {
    const float* pp = part + (s * rows + r) * (D + 2);
    const float w = pp[0] == -INFINITY ? 0.0f : __expf(pp[0] - mx);
    wsplit[s] = w;
    l += w * pp[1];
  }
  l = block_sum(l, red);  // its barriers also publish wsplit[]
  if (sinks) l += __expf(sink - mx);  // no value: the denominator only
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float acc = 0.0f;
#pragma unroll 4
    for (int s = 0; s < n_split; ++s) acc = fmaf(wsplit[s], part[(s * rows + r) * (D + 2) + 2 + d], acc);
    if (out_f32) static_cast<float*>(out)[r * D + d] = acc * inv;
    else static_cast<bf16*>(out)[r * D + d] = __float2bfloat16_rn(acc * inv);
  }
}

template <int DPL, int KV>
void launch_attention(const AttnArgs& a, dim3 grid, size_t smem, cudaStream_t s) {
  // the tiles of the largest head_dim this instantiation takes (32 DPL), once per device: 160.5 KB at 512
  // (Hopper grants up to 227 KB a block)
  constexpr int kMaxD = 32 * DPL;
  static_assert(kMaxD <= kMaxHeadDim);
  opt_in_shared_memory(attention_kernel<DPL, KV>, static_cast<int>((kRows * kMaxD + kTile * (2 * kMaxD + 4)) * 4));
  attention_kernel<DPL, KV><<<grid, kWarps * 32, smem, s>>>(a);
  FT_CUDA_LAUNCH_CHECK();
}

/** launch_attention at the head dims per lane that a.D needs (1 .. 16). */
template <int KV>
void launch_attention_dims(const AttnArgs& a, dim3 grid, size_t smem, cudaStream_t s) {
  if (a.D <= 32) launch_attention<1, KV>(a, grid, smem, s);
  else if (a.D <= 64) launch_attention<2, KV>(a, grid, smem, s);
  else if (a.D <= 128) launch_attention<4, KV>(a, grid, smem, s);
  else if (a.D <= 256) launch_attention<8, KV>(a, grid, smem, s);
  else launch_attention<16, KV>(a, grid, smem, s);
}

}  // namespace
}  // namespace cuda

namespace cuda {
namespace {

/** attention's arguments checked and as device pointers (op names the caller in errors). */
AttnTensors attention_tensors(const char* op, const AttentionParams& p, const BatchInfo& batch, const Tensor& q,
                              const KvLayer& kv, const Tensor& out) {
  check_batch(op, batch);
  check_act(op, "q", q);
  check_act(op, "out", out);
  check_same_shape(op, "out", out, q);
  const int kv_form = check_kv_pages(op, kv);  // F32 / BF16, or fp8 / q8_0 codes with their scales
  check_same_shape(op, "kv.v", kv.v, kv.k);
  const int64_t T = batch.n_tokens, H = p.n_head, G = p.n_head_kv, D = p.head_dim;
  if (H <= 0 || G <= 0 || D <= 0 || H % G != 0)
    fail(ErrorCode::kInvalidArgument, "{}: n_head {} must be a positive multiple of n_head_kv {} (head_dim {})", op,
         H, G, D);
  if (D > kMaxHeadDim)
    fail(ErrorCode::kUnsupported, "{}: head_dim {} (the CUDA kernel supports up to {})", op, D, kMaxHeadDim);
  if (q.rows() != T || q.cols() != H * D)
    fail(ErrorCode::kInvalidArgument, "{}: q {} must be [{}, {}] (tokens, n_head x head_dim)", op, q.str(), T, H * D);
  if (kv.k.ndim != 4 || kv.k.dim(2) != G || kv.k.dim(3) != D)
    fail(ErrorCode::kInvalidArgument, "{}: kv.k {} must be [pages, page_size, {}, {}]", op, kv.k.str(), G, D);
  op_checks::attention_sinks(op, p);
  if (!p.sinks.empty()) check_dev(op, "sinks", p.sinks);
  AttnTensors tensors;
  tensors.sinks = p.sinks.empty() ? nullptr : p.sinks.ptr<float>();
  tensors.q = q.data, tensors.q_code = float_code(op, "q", q.dtype);
  tensors.out = out.data, tensors.out_f32 = out.dtype == DType::F32;
  tensors.k = kv.k.data, tensors.v = kv.v.data, tensors.kv_f32 = kv.k.dtype == DType::F32;
  tensors.kv_form = kv_form;
  if (kv_form != kKvFloat) {
    tensors.k_scale = kv.k_scale.data, tensors.v_scale = kv.v_scale.data;
    tensors.kv_sph = static_cast<int>(kv.k_scale.dim(3));
  }
  tensors.T = T, tensors.H = static_cast<int>(H), tensors.G = static_cast<int>(G), tensors.D = static_cast<int>(D);
  tensors.scale = p.scale, tensors.window = p.sliding_window;
  tensors.page_size = kv.k.dim(1), tensors.n_pages = kv.k.dim(0);
  tensors.pos = batch.positions.ptr<int32_t>(), tensors.seq = batch.seq_index.ptr<int32_t>();
  tensors.n_seqs = batch.n_seqs;
  tensors.bt = batch.block_tables.ptr<int32_t>(), tensors.max_blocks = batch.max_blocks;
  return tensors;
}

}  // namespace
}  // namespace cuda

void CudaOps::qk_norm_rope_attention(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& rp,
                                     const AttentionParams& ap, Tensor q, Tensor k, const Tensor& v,
                                     const BatchInfo& batch, KvLayer kv, Tensor out, ActQ8* out_q8) {
  const char* op = "qk_norm_rope_attention";
  if (out_q8) *out_q8 = ActQ8{};  // until out's form is written
  const int64_t T = batch.n_tokens, G = ap.n_head_kv, D = ap.head_dim;
  // One decode token only. There the step is a chain of short kernels and the norm_rope launch is one
  // link less (H200, qwen3-30b-a3b q4_k, 640 keys: 332 -> 341 tok/s); with more tokens each of the
  // token's ~40 split blocks repeats its heads' norm and rotation, and batch 8 / 32 lost 5% / 9%.
  // The kernel's vector loads of q, k and v need 16-byte aligned rows.
  auto aligned = [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data) % 16 == 0; };
  const bool fits = T == 1 && batch.n_seqs == 1 && G > 0 && ap.n_head > 0 && ap.n_head % G == 0 &&
                    cuda::attention_decode_supports(ap.n_head, G, D) && rp.head_dim == D &&
                    cuda::attention_decode_fuses(D, rp.n_rot, rp.mode == RopeMode::kNeox) && wq.numel() == D &&
                    wk.numel() == D && k.rows() == T && k.cols() == G * D && v.rows() == T && v.cols() == G * D &&
                    k.dtype == q.dtype && v.dtype == q.dtype && aligned(q) && aligned(k) && aligned(v) &&
                    !kv.quantized();  // the fused kernel stores float rows; quantized pages: kv_write's quantizer
  if (!fits) return Ops::qk_norm_rope_attention(np, wq, wk, rp, ap, q, k, v, batch, kv, out, out_q8);
  cuda::AttnDecodeArgs d;
  static_cast<cuda::AttnTensors&>(d) = cuda::attention_tensors(op, ap, batch, q, kv, out);
  cuda::check_act(op, "k", k);
  cuda::check_act(op, "v", v);
  cuda::check_dev(op, "wq", wq);
  cuda::check_dev(op, "wk", wk);
  cuda::check_dtype(op, "positions", batch.positions, {DType::I32});
  cuda::check_dtype(op, "inv_freq", rp.inv_freq, {DType::F32});
  cuda::check_dev(op, "inv_freq", rp.inv_freq);
  op_checks::rope(rp, q, batch.positions);  // the rotation's own checks, as qk_norm_rope_store makes them
  op_checks::rope(rp, k, batch.positions);
  d.fused = true;
  d.nr.k = k.data, d.nr.v = v.data;
  d.nr.wq = wq.data, d.nr.wq_code = cuda::float_code(op, "wq", wq.dtype);
  d.nr.wk = wk.data, d.nr.wk_code = cuda::float_code(op, "wk", wk.dtype);
  d.nr.eps = np.eps, d.nr.offset = np.weight_offset;
  d.nr.inv_freq = rp.inv_freq.ptr<float>(), d.nr.n_rot = rp.n_rot, d.nr.neox = rp.mode == RopeMode::kNeox;
  d.nr.attn_factor = rp.attn_factor;
  launch_decode_attention(d, kv, out, batch.max_kv_len, out_q8);
}

namespace cuda {

int64_t attention_scratch_bound(int64_t max_seqs, int64_t H, int64_t D, int64_t max_kv_len, int sm_count) {
  // Decode: a query's splits are at least kDecodeSplitMin keys long and at most kDecodeMaxSplits
  // (the MLA decode takes at most 64). Prefill: n_split only exceeds 1 while the
  // unsplit grid has fewer than 4 x sm_count blocks of 16 rows, so the partials of the whole step
  // stay under 2 x 4 x sm_count x 16 rows of D + 4 floats (per head chunk and key head).
  const int64_t splits = std::max<int64_t>(
      64, std::min<int64_t>(kDecodeMaxSplits, (std::max<int64_t>(max_kv_len, 1) + kDecodeSplitMin - 1) / kDecodeSplitMin));
  const int64_t decode = splits * max_seqs * H * (D + 4) * 4;
  const int64_t prefill = 8LL * sm_count * 64 * (D + 4) * 4;
  return std::max(decode, prefill);
}

}  // namespace cuda

int32_t CudaOps::decode_short_kv_len() const {
  return cuda::clusters_possible(device_) ? cuda::kDecodeClusterKeys : 0;
}

void CudaOps::launch_decode_attention(cuda::AttnDecodeArgs& d, const KvLayer& kv, const Tensor& out,
                                      int64_t max_kv_len, ActQ8* out_q8) {
  if (cuda::attention_decode_writes_q8(d.H, d.G, d.D)) d.q8 = static_cast<int8_t*>(prepare_q8(out, out_q8));
  const int32_t short_len = decode_short_kv_len();  // 0: no cluster form on this device
  if (short_len > 0 && d.T <= cuda::kDecodeClusterMaxTokens && max_kv_len <= short_len) {
    d.cluster = true;  // the partials stay in the cluster's shared memory
    d.n_split = cuda::kDecodeClusterSplits;
  } else {
    d.n_split = cuda::decode_splits(d.T, kv.k.dim(0) * kv.k.dim(1));
    d.part = static_cast<float*>(scratch(Scratch::kAttention, d.n_split * d.T * d.H * (d.D + 4) * 4));
    d.done = static_cast<int*>(zeroed_scratch(Scratch::kAttentionDone, d.T * d.G * 4 * 4));
  }
  cuda::launch_attention_decode(d, stream_);
}

void CudaOps::attention(const AttentionParams& p, const BatchInfo& batch, const Tensor& q, KvLayer kv, Tensor out,
                        ActQ8* out_q8) {
  if (out_q8) *out_q8 = ActQ8{};  // until out's form is written
  const cuda::AttnTensors tensors = cuda::attention_tensors("attention", p, batch, q, kv, out);
  const int64_t T = batch.n_tokens, H = p.n_head, G = p.n_head_kv, D = p.head_dim;
  if (T == 0) return;

  // Long prefill and mixed batches over any page form (F32, BF16, fp8, q8_0): the tensor-core kernel.
  if (batch.n_tokens != batch.n_seqs && T >= cuda::kAttnTcMinTokens && cuda::attention_tc_supports(D)) {
    return cuda::launch_attention_tc(tensors, stream_);
  }

  if (batch.n_tokens == batch.n_seqs && cuda::attention_decode_supports(H, G, D)) {  // pure decode
    cuda::AttnDecodeArgs d;
    static_cast<cuda::AttnTensors&>(d) = tensors;
    return launch_decode_attention(d, kv, out, batch.max_kv_len, out_q8);
  }

  cuda::AttnArgs a{};
  static_cast<cuda::AttnTensors&>(a) = tensors;
  const int group = static_cast<int>(H / G);
  a.hc = std::min(group, cuda::kRows);
  a.n_hchunks = (group + a.hc - 1) / a.hc;
  // Pure decode (one token per sequence): one token per block, so sequences never share a block.
  a.nt = batch.n_tokens == batch.n_seqs ? 1 : std::max(1, cuda::kRows / a.hc);
  const int64_t token_blocks = (T + a.nt - 1) / a.nt;
  const int64_t kv_len = std::max<int64_t>(batch.max_kv_len, 1);
  bool use_part = false;
  if (a.nt == 1) {
    // Decode: the split length depends only on the pool's capacity, so a query's splits (and the
    // order its partials merge in) do not depend on the batch or on max_kv_len: a CUDA graph
    // recorded for the whole capacity computes what eager decode computes, bit for bit.
    const int64_t capacity = kv.k.dim(0) * kv.k.dim(1);
    const int64_t per = std::max<int64_t>(cuda::kDecodeSplitMin, (capacity + cuda::kDecodeMaxSplits - 1) /
                                                                    cuda::kDecodeMaxSplits);
    a.split_len = static_cast<int>((per + cuda::kTile - 1) / cuda::kTile * cuda::kTile);
    a.n_split = static_cast<int>((kv_len + a.split_len - 1) / a.split_len);
    use_part = true;
  } else {
    const int64_t base = token_blocks * G * a.n_hchunks;
    const int64_t target = 4LL * sm_count_;  // enough blocks to keep every SM's loads in flight
    int64_t n_split = 1;
    if (base < target && kv_len > 2 * cuda::kTile)
      n_split = std::min((target + base - 1) / base, (kv_len + 2 * cuda::kTile - 1) / (2 * cuda::kTile));
    const int64_t per = (kv_len + n_split - 1) / n_split;
    a.split_len = static_cast<int>((per + cuda::kTile - 1) / cuda::kTile * cuda::kTile);
    a.n_split = static_cast<int>((kv_len + a.split_len - 1) / a.split_len);
    use_part = a.n_split > 1;
  }
  a.use_part = use_part;
  if (use_part)
    a.part = static_cast<float*>(scratch(Scratch::kAttention, a.n_split * T * H * (D + 2) * 4));
  {
    const dim3 grid(static_cast<unsigned>(token_blocks), static_cast<unsigned>(G * a.n_hchunks),
                    static_cast<unsigned>(a.n_split));
    const size_t smem = static_cast<size_t>((cuda::kRows * D + cuda::kTile * (2 * D + 4)) * 4);
    if (a.kv_form == cuda::kKvFp8) cuda::launch_attention_dims<cuda::kKvFp8>(a, grid, smem, stream_);
    else if (a.kv_form == cuda::kKvQ8) cuda::launch_attention_dims<cuda::kKvQ8>(a, grid, smem, stream_);
    else cuda::launch_attention_dims<cuda::kKvFloat>(a, grid, smem, stream_);
  }
  if (use_part) {
    const int64_t rows = T * H;
    // weights rounded up to whole float4s: the unrolled merge loop reads them four at a time
    const size_t wbytes = static_cast<size_t>((a.n_split + 3) / 4 * 4) * 4;
    cuda::attention_combine_kernel<<<static_cast<unsigned>(rows), 128, wbytes, stream_>>>(
        a.part, a.n_split, rows, a.D, a.pos, a.H, a.split_len, a.sinks, out.data, a.out_f32);
    FT_CUDA_LAUNCH_CHECK();
  }
}

}  // namespace ft
