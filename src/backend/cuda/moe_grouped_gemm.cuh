#pragma once
// The grouped expert GEMM's kernel (see moe_grouped_gemm.cu for what it computes) and its per-type
// launcher, shared by moe_grouped_gemm.cu (dispatch; the types of dequant.cuh) and
// moe_grouped_gemm_iq.cu / moe_grouped_gemm_lowbit.cu (the types of dequant_iq.cuh and
// dequant_lowbit.cuh, compiled in parallel).
#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/expert_glu.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/moe_grouped_gemm.h"
#include "backend/cuda/smem_opt_in.h"

namespace ft::cuda {
namespace grouped {

constexpr int kTM = 64, kTN = 64, kTK = 64, kPad = 8, kThreads = 128;  // 4 warps x 16 rows

/** Decodes rows [n0, n0 + 64) x columns [k0, k0 + 64) of one expert weight into w_s (bf16). */
template <DType WT>
__device__ __forceinline__ void load_w_tile(const uint8_t* w, int64_t row_bytes, int64_t N, int64_t n0, int64_t k0,
                                            bf16* w_s) {
  constexpr int C = Dq<WT>::kChunk;                   // elements per decoded chunk (4, 8, 16 or 32)
  constexpr int kChunksPerRow = kTK / C;
  for (int c = threadIdx.x; c < kTN * kChunksPerRow; c += kThreads) {
    const int r = c / kChunksPerRow, cc = c % kChunksPerRow;
    float v[C];
    if (n0 + r < N) {
      Dq<WT>::load(w + (n0 + r) * row_bytes, k0 / C + cc, v);
    } else {
#pragma unroll
      for (int i = 0; i < C; ++i) v[i] = 0.0f;
    }
    uint32_t* dst = reinterpret_cast<uint32_t*>(w_s + r * (kTK + kPad) + cc * C);
#pragma unroll
    for (int i = 0; i < C / 2; ++i) dst[i] = pack_bf16(v[2 * i], v[2 * i + 1]);
  }
}

/** Shared memory of one pipeline stage: the bf16 x tile, then one (or two, glu) weight tiles. */
template <bool GLU>
constexpr int stage_elems() {
  return (kTM + (GLU ? 2 : 1) * kTN) * (kTK + kPad);
}

/** Fills one stage with the x and weight tiles of K step k0. */
template <DType WT, bool GLU>
__device__ __forceinline__ void load_stage(const GroupedGemmArgs& a, int64_t m0, int64_t m_end, int64_t n0,
                                           const uint8_t* wa, const uint8_t* wb, int64_t k0, bf16* st) {
  for (int c = threadIdx.x; c < kTM * kTK / 4; c += kThreads) {  // x tile -> bf16, 4 elements per step
    const int r = c / (kTK / 4), d = (c % (kTK / 4)) * 4;
    const int64_t row = m0 + r;
    float v[4] = {0, 0, 0, 0};
    if (row < m_end) {
      if (a.x_f32) {
        const float4 f = *reinterpret_cast<const float4*>(static_cast<const float*>(a.x) + row * a.K + k0 + d);
        v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
      } else {
        const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const bf16*>(a.x) + row * a.K + k0 + d);
        v[0] = __uint_as_float(u.x << 16), v[1] = __uint_as_float(u.x & 0xffff0000u);
        v[2] = __uint_as_float(u.y << 16), v[3] = __uint_as_float(u.y & 0xffff0000u);
      }
    }
    *reinterpret_cast<uint2*>(st + r * (kTK + kPad) + d) = make_uint2(pack_bf16(v[0], v[1]), pack_bf16(v[2], v[3]));
  }
  bf16* w_s = st + kTM * (kTK + kPad);
  load_w_tile<WT>(wa, a.row_bytes, a.N, n0, k0, w_s);
  if constexpr (GLU) load_w_tile<WT>(wb, a.row_bytes_b, a.N, n0, k0, w_s + kTN * (kTK + kPad));
}

template <DType WT, bool GLU>
__global__ void __launch_bounds__(kThreads) grouped_gemm_kernel(GroupedGemmArgs a) {
  extern __shared__ __align__(16) bf16 smem_bf[];  // two stages: while one is multiplied the next fills
  const int tile = blockIdx.x;
  const int32_t total = a.tile_start[a.E];
  if (tile >= total) return;
  int lo = 0, hi = a.E - 1;  // the expert whose tiles include `tile`: last e with tile_start[e] <= tile
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.tile_start[mid] <= tile) lo = mid;
    else hi = mid - 1;
  }
  const int e = lo;
  const int64_t m0 = a.offsets[e] + static_cast<int64_t>(tile - a.tile_start[e]) * kTM;
  const int64_t m_end = a.offsets[e + 1];
  const int64_t n0 = static_cast<int64_t>(blockIdx.y) * kTN;
  const uint8_t* wa = reinterpret_cast<const uint8_t*>(a.table[static_cast<int64_t>(e) * 3 + a.col_a]);
  const uint8_t* wb = GLU ? reinterpret_cast<const uint8_t*>(a.table[static_cast<int64_t>(e) * 3 + a.col_b]) : nullptr;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gid = lane >> 2, tig = lane & 3;

  float acc[GLU ? 2 : 1][kTN / 8][4];
#pragma unroll
  for (int g = 0; g < (GLU ? 2 : 1); ++g)
#pragma unroll
    for (int n = 0; n < kTN / 8; ++n) acc[g][n][0] = acc[g][n][1] = acc[g][n][2] = acc[g][n][3] = 0.0f;

  load_stage<WT, GLU>(a, m0, m_end, n0, wa, wb, 0, smem_bf);
  __syncthreads();
  for (int64_t k0 = 0, step = 0; k0 < a.K; k0 += kTK, ++step) {
    const bf16* x_s = smem_bf + (step & 1) * stage_elems<GLU>();
    const bf16* w_s = x_s + kTM * (kTK + kPad);
    if (k0 + kTK < a.K) load_stage<WT, GLU>(a, m0, m_end, n0, wa, wb, k0 + kTK, smem_bf + ((step + 1) & 1) * stage_elems<GLU>());
#pragma unroll
    for (int kk = 0; kk < kTK / 16; ++kk) {
      const bf16* xr = x_s + (warp * 16 + gid) * (kTK + kPad) + kk * 16 + tig * 2;
      const uint32_t af[4] = {*reinterpret_cast<const uint32_t*>(xr),
                              *reinterpret_cast<const uint32_t*>(xr + 8 * (kTK + kPad)),
                              *reinterpret_cast<const uint32_t*>(xr + 8),
                              *reinterpret_cast<const uint32_t*>(xr + 8 * (kTK + kPad) + 8)};
#pragma unroll
      for (int g = 0; g < (GLU ? 2 : 1); ++g)
#pragma unroll
        for (int n = 0; n < kTN / 8; ++n) {
          const bf16* wr = w_s + g * kTN * (kTK + kPad) + (n * 8 + gid) * (kTK + kPad) + kk * 16 + tig * 2;
          mma_bf16_16816(acc[g][n], af, *reinterpret_cast<const uint32_t*>(wr), *reinterpret_cast<const uint32_t*>(wr + 8));
        }
    }
    __syncthreads();  // this stage's reads and the next stage's writes are done
  }

#pragma unroll
  for (int n = 0; n < kTN / 8; ++n)
#pragma unroll
    for (int e2 = 0; e2 < 4; ++e2) {
      const int64_t row = m0 + warp * 16 + gid + (e2 >= 2 ? 8 : 0);
      const int64_t col = n0 + n * 8 + tig * 2 + (e2 & 1);
      if (row >= m_end || col >= a.N) continue;
      const int64_t bo = static_cast<int64_t>(e) * a.N + col;
      const float va = acc[0][n][e2] + (a.bias_a ? a.bias_a[bo] : 0.0f);
      float v = va;
      if constexpr (GLU)
        v = expert_glu(a.glu_kind, a.glu_alpha, a.glu_limit, va, acc[1][n][e2] + (a.bias_b ? a.bias_b[bo] : 0.0f));
      if (a.y_f32) static_cast<float*>(a.y)[row * a.ldy + col] = v;
      else static_cast<bf16*>(a.y)[row * a.ldy + col] = __float2bfloat16_rn(v);
    }
}

template <DType WT, bool GLU>
void launch_kernel(dim3 grid, const GroupedGemmArgs& a, cudaStream_t s) {
  constexpr int bytes = 2 * stage_elems<GLU>() * 2;
  opt_in_shared_memory(grouped_gemm_kernel<WT, GLU>, bytes);  // more than 48 KB, once per device
  grouped_gemm_kernel<WT, GLU><<<grid, kThreads, bytes, s>>>(a);
}

}  // namespace grouped

/** Queues the grouped GEMM for weight type WT on `grid` (launch_grouped_gemm's). */
template <DType WT>
void launch_grouped_gemm_t(dim3 grid, const GroupedGemmArgs& a, cudaStream_t s) {
  if (a.glu) grouped::launch_kernel<WT, true>(grid, a, s);
  else grouped::launch_kernel<WT, false>(grid, a, s);
}

/** Declares (X = FT_EXTERN_GROUPED_GEMM_) launch_grouped_gemm_t of type T as instantiated in another
 *  file, or (X = FT_INSTANTIATE_GROUPED_GEMM_) instantiates it; used with dequant.cuh's type lists. */
#define FT_GROUPED_GEMM_SIG_(T) \
  void launch_grouped_gemm_t<::ft::DType::T>(dim3, const GroupedGemmArgs&, cudaStream_t);
#define FT_EXTERN_GROUPED_GEMM_(T, ...) extern template FT_GROUPED_GEMM_SIG_(T)
#define FT_INSTANTIATE_GROUPED_GEMM_(T, ...) template FT_GROUPED_GEMM_SIG_(T)

}  // namespace ft::cuda
