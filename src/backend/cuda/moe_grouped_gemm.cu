// Grouped GEMM of the MoE prefill path (moe_experts.cu): rows already sorted by expert, every
// expert's rows multiplied by that expert's weight in one launch,
//   y[r, :] = x[r, :] W_e^T + b_e             (plain), or
//   y[r, :] = glu(x[r, :] Wa_e^T + ba_e, x[r, :] Wb_e^T + bb_e)   (glu: gate and up fused with their GLU),
// for r in [offsets[e], offsets[e+1]). x [P, K] F32 or BF16; W_e [N, K] any cuda_weight_type,
// addressed through the bank's pointer table; y [P, N] F32 or BF16; the per-expert biases F32 [E, N]
// or absent, the GLU any of expert_glu.cuh's (SwiGLU, gpt-oss's and DeepSeek-V4's clamped forms, GELU-tanh).
//
// Tiles of 64 rows x 64 columns (measured faster than 128-row tiles at 4k tokens: more blocks):
// tile_start[e] (tile_prefix_kernel) numbers each expert's row tiles, so the grid is fixed
// (ceil(P / 64) + E tiles bound x N / 64) and unused blocks exit. A block's 4 warps own 16 rows
// each. Per 64-wide K step the x tile is rounded to bf16 and the weight tile decoded (Dq<WT>,
// dequant.cuh) into one of two shared-memory stages while the other stage is multiplied (one
// barrier per step): mma.sync m16n8k16 bf16 products with fp32 accumulation (the same rounding as
// the cuBLAS path, which multiplies bf16 by bf16).
// Bytes moved: each used expert's weights once per 64-row tile of its rows; x once per column tile.
#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_grouped_gemm.cuh"

namespace ft::cuda {

FT_CUDA_IQ_WEIGHT_TYPES(FT_EXTERN_GROUPED_GEMM_, _)  // moe_grouped_gemm_iq.cu
FT_CUDA_LOWBIT_WEIGHT_TYPES(FT_EXTERN_GROUPED_GEMM_, _)  // moe_grouped_gemm_lowbit.cu

namespace {

using grouped::kTK;
using grouped::kTM;
using grouped::kTN;

/** tile_start[e] = sum over experts before e of ceil(rows / kTM); tile_start[E] = the total. */
__global__ void tile_prefix_kernel(const int32_t* offsets, int E, int32_t* tile_start) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int32_t acc = 0;
  for (int e = 0; e < E; ++e) {
    tile_start[e] = acc;
    acc += (offsets[e + 1] - offsets[e] + kTM - 1) / kTM;
  }
  tile_start[E] = acc;
}

}  // namespace

bool grouped_gemm_supports(DType w, int64_t K) { return cuda_weight_type(w) && K % kTK == 0; }

void launch_tile_prefix(const int32_t* offsets, int E, int32_t* tile_start, cudaStream_t s) {
  tile_prefix_kernel<<<1, 32, 0, s>>>(offsets, E, tile_start);
  FT_CUDA_LAUNCH_CHECK();
}

int64_t grouped_gemm_max_tiles(int64_t P, int E) { return (P + kTM - 1) / kTM + E; }

void launch_grouped_gemm(DType wt, const GroupedGemmArgs& a, int64_t P, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(grouped_gemm_max_tiles(P, a.E)), static_cast<unsigned>((a.N + kTN - 1) / kTN));
  FT_DISPATCH_WEIGHT(wt, launch_grouped_gemm_t<WT>(grid, a, s));
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft::cuda
