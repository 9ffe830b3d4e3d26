#pragma once
// GEMV / small-batch GEMM that decodes weights in registers: y[t, n] = sum_k x[t, k] * W[n, k] for
// up to MAXT tokens per weight pass, W in any cuda_weight_type (dequant.cuh). ks warps (1, 2 or 4,
// gemv_warps_per_row) per output row n; their lanes stride over the row's chunks (kChunk elements:
// one 16-byte load for float weights, one 32-element sub-block for block types), decode the chunk,
// and FMA it against the matching activations of every token; a warp shuffle reduction (then one
// through shared memory when ks > 1) finishes the row. Small problems (attention projections, routers
// of batches the fused moe_router does not take) get ks > 1 so that more loads are in flight than one
// warp per row allows.
// Bytes moved per problem: N * row_bytes of weights (read once per MAXT tokens) + x rows (cached)
// + N * MAXT outputs. Included by the per-type-family instantiation files gemv_*.cu only.
#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/expert_glu.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/pdl.cuh"

namespace ft::cuda {

constexpr int kGemvWarps = 4;  // output rows per block

/** Warps per output row for a matrix of N rows of `chunks` chunks: more (up to kGemvWarps) while
 *  N * ks < 8192 and each lane keeps at least `min_per_lane` chunks. A function of the matrix only,
 *  never of the batch or problem count, so a row's summation order (and its last bits) is the same
 *  at every batch size: a decode step padded for a CUDA graph equals the eager step bit for bit. */
inline int gemv_warps_per_row(int64_t N, int64_t chunks, int min_per_lane) {
  int ks = 1;
  while (ks < kGemvWarps && N * ks < 8192 && chunks >= 64 * ks * min_per_lane) ks *= 2;
  return ks;
}

/** log2 of a power of two up to kGemvWarps: kernels take ks as a shift, since an integer division
 *  by a run-time value costs tens of instructions per thread (64-bit: ~70). */
inline int gemv_log2(int ks) { return ks >= 4 ? 2 : ks - 1; }

/** Problem p's weight matrices in table mode (expert ids[p], columns col_a / col_b of the bank
 *  table); false when the id is outside [0, n_expert): that problem is another executor's. */
template <bool GLU>
__device__ __forceinline__ bool expert_weights(const GemvArgs& a, int64_t p, const uint8_t*& wa, const uint8_t*& wb) {
  const int32_t e = a.ids[p];
  if (e < 0 || e >= a.n_expert) return false;
  wa = reinterpret_cast<const uint8_t*>(a.table[3 * static_cast<int64_t>(e) + a.col_a]);
  if constexpr (GLU) wb = reinterpret_cast<const uint8_t*>(a.table[3 * static_cast<int64_t>(e) + a.col_b]);
  return true;
}

/** Entry of a GEMV block (launched by launch_pdl). In plain mode the weights do not depend on the
 *  previous kernel: thread 0 of each of the first (up to) 128 blocks asks L2 for its 1/128 share of the
 *  matrix's first 32 MB before the PDL wait. Those blocks start while the kernel before still runs,
 *  so the matrix streams into L2 under that kernel's tail and the GEMV then reads it from L2. Expert
 *  mode reads its matrices from ids the router writes: no prefetch there (the int8 lane-group kernel
 *  loads its first chunks into registers before this call instead, under GemvArgs::ids_before). */
__device__ __forceinline__ void gemv_enter(const GemvArgs& a) {
  constexpr int64_t kMaxBytes = int64_t{32} << 20, kPiece = int64_t{1} << 20;
  const unsigned pieces = min(gridDim.x, 128u);
  if (!a.table && threadIdx.x == 0 && blockIdx.y == 0 && blockIdx.x < pieces &&
      (reinterpret_cast<uintptr_t>(a.w) & 15) == 0) {
    const int64_t total = min(a.N * a.row_bytes, kMaxBytes) & ~int64_t{15};
    const int64_t share = (total / pieces + 15) & ~int64_t{15};
    const int64_t lo = blockIdx.x * share, hi = min(total, lo + share);
    for (int64_t o = lo; o < hi; o += kPiece) prefetch_l2(a.w + o, static_cast<uint32_t>(min(hi - o, kPiece)));
  }
  pdl_enter();
}

/** Expert mode: adds problem p's expert biases at row n (GemvArgs::ebias_a to dot, with GLU ebias_b to
 *  dot_b); nothing without them. p must be a problem whose id is in [0, n_expert), n < N. */
template <bool GLU>
__device__ __forceinline__ void add_expert_bias(const GemvArgs& a, int64_t p, int64_t n, float& dot, float& dot_b) {
  if (!a.ebias_a && !a.ebias_b) return;
  const int64_t o = static_cast<int64_t>(a.ids[p]) * a.N + n;
  if (a.ebias_a) dot += a.ebias_a[o];
  if constexpr (GLU) {
    if (a.ebias_b) dot_b += a.ebias_b[o];
  }
}

/** Stores y[yrow, n] = dot + bias, or glu(dot, dot_b) for a GLU pair (GemvArgs::glu_kind), in y's
 *  dtype (F32 or BF16); in expert mode (yrow = the problem) the expert's biases first. */
template <bool GLU>
__device__ __forceinline__ void gemv_store(const GemvArgs& a, float dot, float dot_b, int64_t yrow, int64_t n) {
  add_expert_bias<GLU>(a, yrow, n, dot, dot_b);
  float v = dot + (a.bias ? load_any(a.bias, a.bias_code, n) : 0.0f);
  if constexpr (GLU) v = expert_glu(a.glu_kind, a.glu_alpha, a.glu_limit, dot, dot_b);
  const int64_t o = yrow * a.ldy + n;
  if (a.y_f32) static_cast<float*>(a.y)[o] = v;
  else static_cast<bf16*>(a.y)[o] = __float2bfloat16_rn(v);
}

/** GemvArgs::combine's store, after a block barrier, by thread r < rows of the block: combine_out[t,
 *  n0 + r] (=|+=) sum over slots j in order of combine_weights[t, j] * red[j * rows + r], the slots
 *  whose id is outside [0, n_expert) skipped (moe_experts.cu's moe_combine_kernel: the same sum). */
__device__ __forceinline__ void gemv_combine_store(const GemvArgs& a, const float* red, int rows, int64_t t, int64_t n0) {
  const int r = static_cast<int>(threadIdx.x);
  if (r >= rows || n0 + r >= a.N) return;
  const int64_t o = t * a.combine_ld + n0 + r;
  float* of = static_cast<float*>(a.combine_out);
  bf16* ob = static_cast<bf16*>(a.combine_out);
  float s = a.combine_accumulate ? (a.combine_out_f32 ? of[o] : __bfloat162float(ob[o])) : 0.0f;
  for (int j = 0; j < a.combine_k; ++j) {
    const int32_t e = a.ids[t * a.combine_k + j];
    if (e >= 0 && e < a.n_expert) s = fmaf(a.combine_weights[t * a.combine_k + j], red[j * rows + r], s);
  }
  if (a.combine_out_f32) of[o] = s;
  else ob[o] = __float2bfloat16_rn(s);
}

constexpr int kCombineMaxSlots = 16;  // GemvArgs::combine_k: one warp a slot, 512 threads a block at most

/** Shared GEMV epilogue (float and dp4a kernels): warp-reduces each token's partial dot products
 *  (and sums the ks warps of a row through shared memory, in warp order), then lane 0 of the row's
 *  first warp adds the bias (or applies silu(gate) * up for GLU pairs) and stores row n of tokens
 *  yrow .. yrow + nt - 1 in y's dtype (F32 or BF16). Every warp of the block must call it (it holds
 *  block barriers when ks > 1); `valid` is false for rows past N. */
template <int MAXT, bool GLU>
__device__ __forceinline__ void gemv_epilogue(const GemvArgs& a, float (&acc)[MAXT], float* accb, int nt,
                                              int64_t yrow, int64_t n, bool valid, int ks_log2, int warp, int lane) {
  const int ks = 1 << ks_log2;
#pragma unroll
  for (int t = 0; t < MAXT; ++t) {
    acc[t] = warp_sum(acc[t]);
    if constexpr (GLU) accb[t] = warp_sum(accb[t]);
  }
  if (ks > 1) {
    constexpr int kVals = GLU ? 2 * MAXT : MAXT;
    __shared__ float red[kGemvWarps][kVals];
    __syncthreads();  // the previous problem's reads of red are done
    if (lane == 0) {
#pragma unroll
      for (int t = 0; t < MAXT; ++t) {
        red[warp][t] = acc[t];
        if constexpr (GLU) red[warp][MAXT + t] = accb[t];
      }
    }
    __syncthreads();
    if ((warp & (ks - 1)) != 0) return;
    for (int w = 1; w < ks; ++w) {
#pragma unroll
      for (int t = 0; t < MAXT; ++t) {
        acc[t] += red[warp + w][t];
        if constexpr (GLU) accb[t] += red[warp + w][MAXT + t];
      }
    }
  }
  if (lane != 0 || !valid) return;
#pragma unroll
  for (int t = 0; t < MAXT; ++t)
    if (t < nt) gemv_store<GLU>(a, acc[t], GLU ? accb[t] : 0.0f, yrow + t, n);
}

/** U: chunks per lane whose loads the unrolled loop issues together. COMBINE (GemvArgs::combine, one
 *  token per problem, ks = 1): a block holds row blockIdx.x of token blockIdx.y's combine_k slots,
 *  warp j slot j, and stores their weighted sum instead of y. */
template <DType WT, int MAXT, bool GLU, int U = 2, bool COMBINE = false>
__global__ void __launch_bounds__(COMBINE ? kCombineMaxSlots * 32 : kGemvWarps * 32)
    gemv_kernel(GemvArgs a, int64_t n_problems, int ks_log2) {
  static_assert(!COMBINE || (MAXT == 1 && !GLU), "the combine is for the one-token down GEMV");
  using D = Dq<WT>;
  constexpr int C = D::kChunk;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ks = 1 << ks_log2;
  const int64_t n = COMBINE ? static_cast<int64_t>(blockIdx.x)
                            : static_cast<int64_t>(blockIdx.x) * (kGemvWarps >> ks_log2) + (warp >> ks_log2);
  const int64_t n_chunks = a.K / C, c0 = lane + 32 * (warp & (ks - 1)), cstep = 32 * ks;
  gemv_enter(a);
  const bool valid = n < a.N;
  if (ks == 1 && !valid) return;  // whole warp (COMBINE: block) leaves; no block barrier below when ks == 1
  const int64_t p_first = COMBINE ? static_cast<int64_t>(blockIdx.y) * a.combine_k + warp : blockIdx.y;
  for (int64_t p = p_first; p < n_problems; p += COMBINE ? n_problems : gridDim.y) {
    const uint8_t* wa;
    const uint8_t* wb = nullptr;
    int64_t xoff;  // element offset of the problem's first activation row
    int nt;
    int64_t yrow;
    bool used = true;
    if (a.table) {
      if (!expert_weights<GLU>(a, p, wa, wb)) {
        if constexpr (!COMBINE) continue;  // block-uniform: every warp of the block has this p
        used = false;  // COMBINE: the warp's slot is another executor's; it still meets the barrier
        wa = nullptr;
      }
      xoff = static_cast<int64_t>(static_cast<uint32_t>(p) / static_cast<uint32_t>(a.x_div)) * a.ldx;
      nt = 1;
      yrow = p;
    } else {
      wa = a.w;
      yrow = p * MAXT;
      xoff = yrow * a.ldx;
      nt = static_cast<int>(min(static_cast<int64_t>(MAXT), a.T - yrow));
    }
    const uint8_t* ra = wa + n * a.row_bytes;
    const uint8_t* rb = GLU ? wb + n * a.row_bytes : nullptr;
    float acc[MAXT], accb[GLU ? MAXT : 1];
#pragma unroll
    for (int t = 0; t < MAXT; ++t) acc[t] = 0.0f;
#pragma unroll
    for (int t = 0; t < (GLU ? MAXT : 1); ++t) accb[t] = 0.0f;
    auto dot = [&](const float (&w)[C], const float (&w2)[GLU ? C : 1], int64_t c) {
#pragma unroll
      for (int t = 0; t < MAXT; ++t) {
        if (t < nt) {
          float xv[C];
          load_x_any<C>(a.x, a.x_f32, xoff + t * a.ldx + c * C, xv);
#pragma unroll
          for (int i = 0; i < C; ++i) {
            acc[t] = fmaf(w[i], xv[i], acc[t]);
            if constexpr (GLU) accb[t] = fmaf(w2[i], xv[i], accb[t]);
          }
        }
      }
    };
#pragma unroll U
    for (int64_t c = c0; valid && used && c < n_chunks; c += cstep) {
      float w[C], w2[GLU ? C : 1];
      D::load(ra, c, w);
      if constexpr (GLU) D::load(rb, c, w2);
      dot(w, w2, c);
    }
    if constexpr (COMBINE) {
      __shared__ float red[kCombineMaxSlots];
      acc[0] = warp_sum(acc[0]);
      if (used) add_expert_bias<false>(a, p, n, acc[0], acc[0]);  // down_bias: y = dot + b before the weighted sum
      if (lane == 0) red[warp] = acc[0];
      __syncthreads();
      gemv_combine_store(a, red, 1, blockIdx.y, n);
      return;
    } else {
      gemv_epilogue<MAXT, GLU>(a, acc, accb, nt, yrow, n, valid, ks_log2, warp, lane);
    }
  }
}

/** Host launcher for one weight type; explicit instantiations live in gemv_<family>.cu. */
template <DType WT>
void launch_gemv_t(int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s) {
  const int ks = gemv_warps_per_row(a.N, a.K / Dq<WT>::kChunk, 3);
  const int rows = kGemvWarps / ks;
  const dim3 grid(static_cast<unsigned>((a.N + rows - 1) / rows),
                  static_cast<unsigned>(n_problems < 65535 ? n_problems : 65535));
  const int lg = gemv_log2(ks);
  // One-token launches of float weights keep 4 chunks per lane in flight (H200, bf16 qwen3-30b-a3b
  // decode, one lease: 252.2-254.3 -> 254.6-255.0 tok/s at batch 1, +0.6-0.8% at 8 and 32); the block
  // decoders (more registers per chunk) keep 2.
  constexpr int U = WT == DType::BF16 || WT == DType::F16 || WT == DType::F32 ? 4 : 2;
  // The kernel loads no chunk before the PDL wait, even for the expert down GEMV (GemvArgs::ids_before):
  // registers held for such chunks lowered occupancy more than the early loads gained. Occupancy bounds
  // these GEMVs (a wave of short-lived blocks, each lane with one round of loads). H200, qwen3-30b-a3b
  // decode, one lease, against pre-wait loads at <= 64 registers (bf16) / 146-168 (Q5_K): bf16 batch 1
  // 278.5 / 281.7 -> 294.4 / 289.0 tok/s, batch 8 471.9 / 477.9 -> 519.2 / 513.3; q5_k batch 1
  // 136.9 / 137.1 -> 141.3 / 142.5, batch 8 188.4 / 188.8 -> 201.2 / 201.7. (Before that, session 14:
  // pre-wait registers in every one-token launch held bf16 at 80 registers, 251-252 tok/s at batch 1.)
  if (a.combine_weights) {
    FT_CHECK(!glu && maxt == 1 && a.table && ks == 1 && a.combine_k >= 1 && a.combine_k <= kCombineMaxSlots &&
             n_problems % a.combine_k == 0);
    const dim3 cgrid(static_cast<unsigned>(a.N), static_cast<unsigned>(n_problems / a.combine_k));
    return launch_pdl(gemv_kernel<WT, 1, false, U, true>, cgrid, a.combine_k * 32, 0, s, a, n_problems, 0);
  }
  FT_CHECK(!a.q8_out);  // the int8 output is the lane-group kernel's (gemv_q8.cu)
  if (glu) launch_pdl(gemv_kernel<WT, 1, true, U>, grid, kGemvWarps * 32, 0, s, a, n_problems, lg);
  else if (maxt == 1) launch_pdl(gemv_kernel<WT, 1, false, U>, grid, kGemvWarps * 32, 0, s, a, n_problems, lg);
  else launch_pdl(gemv_kernel<WT, 8, false>, grid, kGemvWarps * 32, 0, s, a, n_problems, lg);
}

/** Declares (X = FT_EXTERN_GEMV_) launch_gemv_t of type T as instantiated in another file, or
 *  (X = FT_INSTANTIATE_GEMV_) instantiates it; used with dequant.cuh's type lists. */
#define FT_GEMV_SIG_(T) void launch_gemv_t<::ft::DType::T>(int, bool, const GemvArgs&, int64_t, cudaStream_t);
#define FT_EXTERN_GEMV_(T, ...) extern template FT_GEMV_SIG_(T)
#define FT_INSTANTIATE_GEMV_(T, ...) template FT_GEMV_SIG_(T)

}  // namespace ft::cuda
