// attention_mla: multi-head latent attention in latent space (DeepSeek-V2, arXiv:2405.04434, §2.1.2 and
// appendix C: W_UK absorbed into the query, W_UV applied after attention; the form FlashMLA computes).
// One shared latent KV head: the pages hold each token's latent c (kv.k [n_pages, page_size, 1, R]) and
// rotated RoPE key r (kv.v [n_pages, page_size, 1, P]). Query t (sequence s, position p), head h:
//   out[t, h] = sum_{j <= p} softmax_j(scale * (q_lat[t, h] . c_j + q_rope[t, h] . r_j)) c_j.
// q_lat, out [T, H * R]; q_rope [T, H * P]; F32 or BF16 (q_lat and q_rope one dtype); KV pages F32 or
// BF16 (one dtype), or quantized (--kv-cache-dtype fp8 / q8_0: F8_E4M3 or I8 codes in kv.k / kv.v with
// kv.k_scale / kv.v_scale, kv_quant.cuh; kv_write quantizes the latent and RoPE-key rows as the CPU).
// fp32 scores, online softmax (base 2) and accumulation.
//
// Two kernels, one plan. A block owns `rows` query rows (nt consecutive tokens x hc heads of one head
// chunk) and one split piece of the key range, and streams the keys through shared memory in tiles of
// kMlaTile: each latent row is read once per block and serves all its heads (the point of MLA: one KV
// head for all query heads). Tokens of different sequences in one block are handled as runs.
//  - CUDA-core kernel (this file; the attention.cu design with a [c | r] key row whose first R dims are
//    the value): exact fp32 products of the stored values. F32 KV pages, and prefill batches under
//    kMlaTcMinTokens tokens, take it (the fixtures' exact path); so do quantized pages, always (decode
//    and prefill): each key row is dequantized into the shared-memory tile as code * scale, the CPU's
//    kv_dequantize_head values, so the result matches the CPU's up to the order of fp32 sums.
//  - Tensor-core kernel (attention_mla_tc.cu): bf16 mma.sync, q and p rounded to bf16 (~3e-3 relative);
//    BF16 KV pages (decode and prefill) and long F32 prefill take it; quantized pages (code * scale
//    rounded to bf16) only when MlaTuning::tc asks for it (measurements).
// Splits: a decode batch (one token per sequence) splits each token's own range (MlaArgs::per_token,
// n_split from the batch size rounded up to a power of two and the pool's head chunks, so a graph padded
// to its size equals eager decode bit for bit, and max_kv_len plays no part); prefill splits absolute
// ranges when few blocks would run (as attention.cu). Split pieces write (m, l, o) partials; the merge
// kernel (one block per (token, head)) combines them (flash-decoding, Dao et al. 2023).
// Graph-capturable: launch shapes depend on host integers of BatchInfo and the pool only.
// Bytes moved: per block, its keys' c and r once (KV bytes once per head chunk; L2 serves the other
// chunks); q and out once; partials n_split * T * H * (R + 4) * 4 written and read once when split.
// Measured on the H200 (tests/backend/cuda_mla_bench_test.cpp, R 512, P 64, 4096 keys, one graph of 20 calls;
// KV bytes over time): BF16 pages, 16 heads: bs 1 23 us (0.20 TB/s), bs 8 40 us (0.94), bs 32 102 us
// (1.48); 128 heads bs 1 39 us, bs 8 130 us. F32 pages (CUDA-core kernel): 16 heads bs 1 87 us, 128
// heads 163 us. Batch 1 is latency-bound (a split piece is only 2 tiles, each ~4.5 us of dependent
// copy and mma latency in one block). Tried and dropped: a 3-stage cp.async pipeline with per-chunk page
// lookups (one block per SM: bs 1 20% slower, bs 32 2.4x slower), 1 or 2 row tiles for 128 heads (no gain).
#include <algorithm>
#include <initializer_list>

#include "backend/op_checks.h"
#include "backend/cuda/attention_mla.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kv_quant.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/smem_opt_in.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kCoreWarps = 4, kCoreRows = 16, kCoreRowsPerWarp = kCoreRows / kCoreWarps;
constexpr int kMaxQk = 1152;  // R + P bound of the CUDA-core kernel (shared memory: q and one key tile)
/** Prefill batches of at least this many tokens with F32 pages take the tensor-core kernel (as attention.cu). */
constexpr int64_t kMlaTcMinTokens = 256;

__host__ __device__ constexpr int core_smem_floats(int D) { return kCoreRows * D + kMlaTile * (D + 4); }

/** The CUDA-core kernel: block (token block, head chunk, split) of 16 rows; lane j of a warp scores key j
 *  of the tile for the warp's 4 rows (float4 dot products over the [c | r] row in shared memory), then
 *  each lane accumulates latent dims lane, lane + 32, ... (DPL = R / 32 of them). */
template <int DPL, int FORM>
__global__ void __launch_bounds__(kCoreWarps * 32) mla_core_kernel(MlaArgs a) {
  extern __shared__ __align__(16) float smem[];
  const int R = a.R, P = a.P, D = R + P, KS = D + 4;
  float* q_s = smem;                   // [16][D], pre-scaled by scale * log2(e)
  float* k_s = q_s + kCoreRows * D;    // [kMlaTile][D + 4]: [c | r] rows, 16-byte rows
  __shared__ int row_t[kCoreRows], row_h[kCoreRows], row_seq[kCoreRows], row_pos[kCoreRows];
  __shared__ int64_t key_row[kMlaTile];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t t0 = static_cast<int64_t>(blockIdx.x) * a.nt;
  const int hchunk = blockIdx.y, split = blockIdx.z;
  pdl_enter();  // q was written by the kernel before, the pages by kv_write
  if (threadIdx.x < kCoreRows)
    mla_row(a, threadIdx.x, t0, hchunk, row_t[threadIdx.x], row_h[threadIdx.x], row_seq[threadIdx.x],
            row_pos[threadIdx.x]);
  __syncthreads();
  int max_pos = -1;
  for (int r = 0; r < kCoreRows; ++r) max_pos = max(max_pos, row_pos[r]);
  const int64_t per = mla_piece(a, max_pos);  // per_token: nt == 1, every row has the token's position
  const int64_t split_lo = split * per, split_hi = split_lo + per;
  if (split_lo > max_pos && split > 0) return;  // no row has keys here (the merge skips it too)
  for (int i = threadIdx.x; i < kCoreRows * D; i += blockDim.x) {
    const int r = i / D, d = i - r * D;
    float v = 0.0f;
    if (row_t[r] >= 0) {
      const int64_t qr = static_cast<int64_t>(row_t[r]) * a.H + row_h[r];
      v = d < R ? load_any(a.q_lat, a.q_f32 ? 0 : 2, qr * R + d) : load_any(a.q_rope, a.q_f32 ? 0 : 2, qr * P + d - R);
    }
    q_s[i] = a.scale_log2 * v;
  }
  float m[kCoreRowsPerWarp], l[kCoreRowsPerWarp], o[kCoreRowsPerWarp][DPL];
#pragma unroll
  for (int rr = 0; rr < kCoreRowsPerWarp; ++rr) {
    m[rr] = -INFINITY, l[rr] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) o[rr][i] = 0.0f;
  }
  __syncthreads();

  const int nt = a.nt, hc = a.hc;
  for (int run_begin = 0; run_begin < nt;) {  // runs of tokens of one sequence
    const int seq = row_seq[run_begin * hc];
    int run_end = run_begin + 1;
    while (run_end < nt && row_seq[run_end * hc] == seq) ++run_end;
    if (seq < 0) {  // no such token, or an invalid one: nothing to attend to
      run_begin = run_end;
      continue;
    }
    int64_t hi = -1;
    for (int tt = run_begin; tt < run_end; ++tt) hi = max(hi, static_cast<int64_t>(row_pos[tt * hc]));
    const int64_t kbeg = split_lo, kend = min(hi + 1, split_hi);
    const int32_t* table = a.bt + static_cast<int64_t>(seq) * a.max_blocks;
    for (int64_t j0 = kbeg; j0 < kend; j0 += kMlaTile) {
      if (threadIdx.x < kMlaTile) {
        const int64_t j = j0 + threadIdx.x;
        key_row[threadIdx.x] = j < kend ? mla_page_row(a, table, j) : -1;
      }
      __syncthreads();
      const int cpk = D / 4;  // 4-element chunks per key row
      for (int c0 = threadIdx.x; c0 < kMlaTile * cpk; c0 += 4 * blockDim.x) {
        float4 v[4];  // four chunks' loads in flight before their stores
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int c = c0 + u * blockDim.x;
          v[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
          if (c >= kMlaTile * cpk) continue;
          const int key = c / cpk, d = (c - key * cpk) * 4;
          const int64_t kr = key_row[key];
          if (kr < 0) continue;
          if constexpr (FORM == kKvFloat) {
            const int64_t off = d < R ? kr * R + d : kr * P + d - R;
            const void* base = d < R ? a.c : a.r;
            if (a.kv_f32) {
              v[u] = __ldg(reinterpret_cast<const float4*>(static_cast<const float*>(base) + off));
            } else {
              const uint2 b = __ldg(reinterpret_cast<const uint2*>(static_cast<const bf16*>(base) + off));
              v[u] = make_float4(__uint_as_float(b.x << 16), __uint_as_float(b.x & 0xffff0000u),
                                 __uint_as_float(b.y << 16), __uint_as_float(b.y & 0xffff0000u));
            }
          } else {  // codes * scale, the CPU's kv_dequantize_head values (4 codes in one 32-value block)
            float x[4];
            if (d < R) load_kv_quant<FORM, 4>(a.c, a.c_scale, kr, R, a.c_sph, d, x);
            else load_kv_quant<FORM, 4>(a.r, a.r_scale, kr, P, a.r_sph, d - R, x);
            v[u] = make_float4(x[0], x[1], x[2], x[3]);
          }
        }
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int c = c0 + u * blockDim.x;
          if (c >= kMlaTile * cpk) continue;
          const int key = c / cpk, d = (c - key * cpk) * 4;
          *reinterpret_cast<float4*>(k_s + key * KS + d) = v[u];
        }
      }
      __syncthreads();
      const int64_t j = j0 + lane;
      float s[kCoreRowsPerWarp], s2[kCoreRowsPerWarp];  // two chains per row: half the FMA latency
#pragma unroll
      for (int rr = 0; rr < kCoreRowsPerWarp; ++rr) s[rr] = s2[rr] = 0.0f;
#pragma unroll 2
      for (int d = 0; d < D; d += 4) {
        const float4 kd = *reinterpret_cast<const float4*>(k_s + lane * KS + d);
#pragma unroll
        for (int rr = 0; rr < kCoreRowsPerWarp; ++rr) {
          const float4 qd = *reinterpret_cast<const float4*>(q_s + (warp + kCoreWarps * rr) * D + d);
          s[rr] = fmaf(qd.x, kd.x, fmaf(qd.y, kd.y, s[rr]));
          s2[rr] = fmaf(qd.z, kd.z, fmaf(qd.w, kd.w, s2[rr]));
        }
      }
#pragma unroll
      for (int rr = 0; rr < kCoreRowsPerWarp; ++rr) s[rr] += s2[rr];
#pragma unroll
      for (int rr = 0; rr < kCoreRowsPerWarp; ++rr) {
        const int r = warp + kCoreWarps * rr;
        const int tt = r / hc;
        if (tt < run_begin || tt >= run_end || row_seq[r] < 0) continue;  // warp-uniform
        const bool ok = j < kend && j <= row_pos[r];
        const float sc = ok ? s[rr] : -INFINITY;
        const float tile_max = warp_max(sc);
        if (tile_max == -INFINITY) continue;
        const float m_new = fmaxf(m[rr], tile_max);
        const float alpha = exp2f(m[rr] - m_new);  // m = -inf the first time: 0
        const float pj = ok ? exp2f(sc - m_new) : 0.0f;
        l[rr] = l[rr] * alpha + warp_sum(pj);
        m[rr] = m_new;
#pragma unroll
        for (int i = 0; i < DPL; ++i) o[rr][i] *= alpha;
        for (int kk = 0; kk < kMlaTile; ++kk) {
          const float pk = __shfl_sync(0xffffffffu, pj, kk);
#pragma unroll
          for (int i = 0; i < DPL; ++i) o[rr][i] = fmaf(pk, k_s[kk * KS + lane + 32 * i], o[rr][i]);
        }
      }
      __syncthreads();
    }
    run_begin = run_end;
  }

#pragma unroll
  for (int rr = 0; rr < kCoreRowsPerWarp; ++rr) {
    const int r = warp + kCoreWarps * rr;
    if (row_t[r] < 0) continue;
    const int64_t qrow = static_cast<int64_t>(row_t[r]) * a.H + row_h[r];
    const int n_row = a.n_split == 1 ? 1 : mla_active(a, row_pos[r], per);  // pieces of this row's range
    if (split >= n_row) continue;  // none of its keys here (an invalid row's zeros: the merge writes them)
    if (n_row == 1) {  // the whole range in this block (invalid rows without splits: zeros)
      const float inv = l[rr] > 0.0f ? 1.0f / l[rr] : 0.0f;
#pragma unroll
      for (int i = 0; i < DPL; ++i) mla_store(a, qrow, lane + 32 * i, o[rr][i] * inv);
    } else {
      float* pp = a.part + (static_cast<int64_t>(split) * a.T * a.H + qrow) * (R + 4);
      if (lane == 0) pp[0] = m[rr], pp[1] = l[rr];
#pragma unroll
      for (int i = 0; i < DPL; ++i) pp[4 + lane + 32 * i] = o[rr][i];
    }
  }
}

/** Merges the split partials of each (token, head) row into out: weights exp2(m_s - M), then
 *  sum_s w_s o_s / sum_s w_s l_s over the pieces holding the row's keys (n <= kMlaMaxSplits). Block
 *  (row, chunk of 128 dims), 4 warps: each warp computes the weights itself (lane l holds splits l and
 *  l + 32), then sums the splits s = warp, warp + 4, ... of its lanes' float4 slices (loads in flight
 *  together), and warp 0 adds the 4 sums in a fixed order. Rows whose range is one piece were written by
 *  the attention kernel; rows of invalid tokens get zeros. */
__global__ void __launch_bounds__(128) mla_merge_kernel(MlaArgs a) {
  __shared__ float4 red4[3][32];
  pdl_enter();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x, t = row / a.H;
  const int s = a.seq[t], p = a.pos[t];
  const bool valid = s >= 0 && s < a.n_seqs && p >= 0;
  const int64_t per = valid ? mla_piece(a, p) : 1;
  const int n = valid ? mla_active(a, p, per) : 0;
  if (n == 1) return;
  const int R = a.R, d = blockIdx.y * 128 + lane * 4;
  const bool has = d < R;
  const int64_t rs = a.T * a.H * (R + 4);  // stride between splits
  const float* p0 = a.part + row * (R + 4);
  const float ma = lane < n ? __ldcg(p0 + lane * rs) : -INFINITY;
  const float mb = lane + 32 < n ? __ldcg(p0 + (lane + 32) * rs) : -INFINITY;
  const float M = warp_max(fmaxf(ma, mb));
  const float wa = ma == -INFINITY ? 0.0f : exp2f(ma - M), wb = mb == -INFINITY ? 0.0f : exp2f(mb - M);
  const float la = wa > 0.0f ? __ldcg(p0 + lane * rs + 1) : 0.0f, lb = wb > 0.0f ? __ldcg(p0 + (lane + 32) * rs + 1) : 0.0f;
  const float L = warp_sum(fmaf(wa, la, wb * lb));
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 8
  for (int i = warp; i < n; i += 4) {
    const float w = __shfl_sync(0xffffffffu, i < 32 ? wa : wb, i & 31);
    if (!has || w == 0.0f) continue;  // an empty piece: no o to read (0 x garbage may be NaN)
    const float4 v = __ldcg(reinterpret_cast<const float4*>(p0 + i * rs + 4 + d));
    acc.x = fmaf(w, v.x, acc.x), acc.y = fmaf(w, v.y, acc.y), acc.z = fmaf(w, v.z, acc.z), acc.w = fmaf(w, v.w, acc.w);
  }
  if (warp > 0) red4[warp - 1][lane] = acc;
  __syncthreads();
  if (warp != 0 || !has) return;
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  const float y[4] = {acc.x + red4[0][lane].x + red4[1][lane].x + red4[2][lane].x,
                      acc.y + red4[0][lane].y + red4[1][lane].y + red4[2][lane].y,
                      acc.z + red4[0][lane].z + red4[1][lane].z + red4[2][lane].z,
                      acc.w + red4[0][lane].w + red4[1][lane].w + red4[2][lane].w};
#pragma unroll
  for (int u = 0; u < 4; ++u) mla_store(a, row, d + u, y[u] * inv);
}

template <int DPL, int FORM>
void launch_core_form(const MlaArgs& a, dim3 grid, cudaStream_t s) {
  const size_t smem = static_cast<size_t>(core_smem_floats(a.R + a.P)) * 4;
  opt_in_shared_memory(mla_core_kernel<DPL, FORM>, core_smem_floats(kMaxQk) * 4);
  launch_pdl(mla_core_kernel<DPL, FORM>, grid, dim3(kCoreWarps * 32), smem, s, a);
}

template <int DPL>
void launch_core(const MlaArgs& a, dim3 grid, cudaStream_t s) {
  switch (a.kv_form) {
    case kKvFp8: return launch_core_form<DPL, kKvFp8>(a, grid, s);
    case kKvQ8: return launch_core_form<DPL, kKvQ8>(a, grid, s);
    default: return launch_core_form<DPL, kKvFloat>(a, grid, s);
  }
}

}  // namespace

bool mla_core_supports(int64_t R, int64_t P) {
  return (R == 32 || R == 64 || R == 128 || R == 256 || R == 512) && P % 4 == 0 && P >= 0 && R + P <= kMaxQk;
}

void launch_mla_core(const MlaArgs& a, cudaStream_t stream) {
  FT_CHECK(a.rows == kCoreRows);
  const dim3 grid(static_cast<unsigned>((a.T + a.nt - 1) / a.nt), static_cast<unsigned>(a.n_hchunks),
                  static_cast<unsigned>(a.n_split));
  switch (a.R) {
    case 32: return launch_core<1>(a, grid, stream);
    case 64: return launch_core<2>(a, grid, stream);
    case 128: return launch_core<4>(a, grid, stream);
    case 256: return launch_core<8>(a, grid, stream);
    default: return launch_core<16>(a, grid, stream);
  }
}

void launch_mla_merge(const MlaArgs& a, cudaStream_t stream) {
  FT_CHECK(a.n_split <= kMlaMaxSplits);
  launch_pdl(mla_merge_kernel, dim3(static_cast<unsigned>(a.T * a.H), static_cast<unsigned>((a.R + 127) / 128)),
             dim3(128), 0, stream, a);
}

MlaTuning& mla_tuning() {
  static MlaTuning t;
  return t;
}

}  // namespace cuda

void CudaOps::attention_mla(const MlaAttentionParams& p, const BatchInfo& batch, const Tensor& q_lat,
                            const Tensor& q_rope, KvLayer kv, Tensor out) {
  const char* op = "attention_mla";
  op_checks::attention_mla(p, batch, q_lat, q_rope, kv, out);
  cuda::check_act(op, "q_lat", q_lat);
  cuda::check_act(op, "q_rope", q_rope);
  cuda::check_same_dtype(op, "q_rope", q_rope, q_lat);
  cuda::check_act(op, "out", out);
  const int kv_form = cuda::check_kv_pages(op, kv);  // F32 / BF16 pages (0), or fp8 / q8_0 codes with scales
  if (out.data == q_lat.data) fail(ErrorCode::kInvalidArgument, "attention_mla: out must not alias q_lat");
  const int64_t T = batch.n_tokens, H = p.n_head, R = p.kv_lora_rank, P = p.rope_dim;
  const bool core_ok = cuda::mla_core_supports(R, P), tc_ok = cuda::mla_tc_supports(R, P);
  if (!core_ok && !tc_ok)
    fail(ErrorCode::kUnsupported,
         "attention_mla: kv_lora_rank {} and rope_dim {} have no CUDA kernel (kv_lora_rank 32, 64, 128, 256 or 512; "
         "rope_dim a multiple of 8, or of 4 on the CUDA-core kernel; their sum at most 640, or 1152 on the CUDA-core "
         "kernel)",
         R, P);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&q_lat, &q_rope, &out, &kv.k, &kv.v})
    if (reinterpret_cast<uintptr_t>(t->data) % 16 != 0)
      fail(ErrorCode::kUnsupported, "attention_mla: tensor {} is not 16-byte aligned", t->str());
  if (kv_form != cuda::kKvFloat && !core_ok)
    fail(ErrorCode::kUnsupported,
         "attention_mla: quantized KV pages ({}) take the CUDA-core kernel, which has no kernel for kv_lora_rank {} "
         "and rope_dim {} (kv_lora_rank 32, 64, 128, 256 or 512; rope_dim a multiple of 4; their sum at most 1152)",
         dtype_name(kv.k.dtype), R, P);
  if (T == 0) return;
  const bool decode = batch.n_tokens == batch.n_seqs;  // one token per sequence
  const bool kv_bf16 = kv.k.dtype == DType::BF16;
  bool tc = tc_ok && (kv_bf16 || (!decode && T >= cuda::kMlaTcMinTokens) || !core_ok);
  const cuda::MlaTuning& tune = cuda::mla_tuning();
  if (tune.tc == 0 && core_ok) tc = false;
  if (tune.tc == 1 && tc_ok) tc = true;
  // Quantized pages: the CUDA-core kernel (the CPU's values at fp32), unless the tuning asks for the
  // tensor-core one (code * scale rounded to bf16; for measurements).
  if (kv_form != cuda::kKvFloat) tc = tune.tc == 1 && tc_ok;

  cuda::MlaArgs a;
  a.q_lat = q_lat.data, a.q_rope = q_rope.data, a.q_f32 = q_lat.dtype == DType::F32;
  a.out = out.data, a.out_f32 = out.dtype == DType::F32;
  a.c = kv.k.data, a.r = kv.v.data, a.kv_f32 = !kv_bf16;  // quantized pages too: not BF16
  a.kv_form = kv_form;
  if (kv_form != cuda::kKvFloat) {
    a.c_scale = kv.k_scale.data, a.r_scale = kv.v_scale.data;
    a.c_sph = static_cast<int>(kv.k_scale.dim(3)), a.r_sph = static_cast<int>(kv.v_scale.dim(3));
  }
  a.T = T, a.H = static_cast<int>(H), a.R = static_cast<int>(R), a.P = static_cast<int>(P);
  a.scale_log2 = p.scale * 1.4426950408889634f;
  a.page_size = kv.k.dim(1), a.n_pages = kv.k.dim(0);
  a.pos = batch.positions.ptr<int32_t>(), a.seq = batch.seq_index.ptr<int32_t>(), a.n_seqs = batch.n_seqs;
  a.bt = batch.block_tables.ptr<int32_t>(), a.max_blocks = batch.max_blocks;
  // Row tiles of the tensor-core kernel: a block serves up to 64 heads of a token, reading each latent
  // row once for all of them.
  const int rt = tune.row_tiles > 0 ? tune.row_tiles : (H >= 64 ? 4 : H >= 32 ? 2 : 1);
  a.rows = tc ? 16 * rt : 16;
  a.hc = static_cast<int>(std::min<int64_t>(H, a.rows));
  a.nt = decode ? 1 : a.rows / a.hc;
  a.n_hchunks = static_cast<int>((H + a.hc - 1) / a.hc);
  const int64_t token_blocks = (T + a.nt - 1) / a.nt;
  if (decode) {
    // Enough blocks for two per SM, from the batch size rounded up to a power of two (a graph padded to
    // its size splits as eager decode does), at most one per kMlaMinKeys keys of the pool.
    int64_t tp = 1;
    while (tp < T) tp *= 2;
    int64_t n = 1;
    while (2 * n * tp * a.n_hchunks <= 2LL * sm_count_ && 2 * n <= cuda::kMlaMaxSplits) n *= 2;
    if (tune.n_split > 0) n = std::min(tune.n_split, cuda::kMlaMaxSplits);
    const int64_t capacity = kv.k.dim(0) * kv.k.dim(1);
    n = std::max<int64_t>(1, std::min(n, (capacity + cuda::kMlaMinKeys - 1) / cuda::kMlaMinKeys));
    a.n_split = static_cast<int>(n);
    a.per_token = n > 1;
  } else {  // as attention.cu: split absolute ranges when few blocks would run
    const int64_t base = token_blocks * a.n_hchunks, target = 4LL * sm_count_;
    const int64_t kv_len = std::max<int64_t>(batch.max_kv_len, 1);
    int64_t n = 1;
    if (base < target && kv_len > 2 * cuda::kMlaTile)
      n = std::min({(target + base - 1) / base, (kv_len + 2 * cuda::kMlaTile - 1) / (2 * cuda::kMlaTile),
                    static_cast<int64_t>(cuda::kMlaMaxSplits)});
    const int64_t per = ((kv_len + n - 1) / n + cuda::kMlaTile - 1) / cuda::kMlaTile * cuda::kMlaTile;
    n = (kv_len + per - 1) / per;
    a.n_split = static_cast<int>(n);
    if (n > 1) a.split_len = static_cast<int>(per);
  }
  if (a.n_split > 1) a.part = static_cast<float*>(scratch(Scratch::kAttention, a.n_split * T * H * (R + 4) * 4));
  if (tc) cuda::launch_mla_tc(a, stream_);
  else cuda::launch_mla_core(a, stream_);
  if (a.n_split > 1) cuda::launch_mla_merge(a, stream_);
}

}  // namespace ft
