#pragma once
// The grouped expert GEMM of the MoE prefill path (moe_grouped_gemm.cu). Host code of the CUDA
// backend only.
#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace ft::cuda {

/** One grouped GEMM over rows sorted by expert (see moe_grouped_gemm.cu). Device pointers. */
struct GroupedGemmArgs {
  const void* x = nullptr;   // [P, K] F32 (x_f32) or BF16, rows of expert e at [offsets[e], offsets[e+1])
  bool x_f32 = false;
  int64_t K = 0, N = 0;      // every expert weight is [N, K]
  int64_t row_bytes = 0;     // bytes of one row of weight col_a
  int64_t row_bytes_b = 0;   // the same for col_b (glu)
  const uint64_t* table = nullptr;  // [E][3] weight addresses (CudaOps::expert_table)
  int col_a = 0, col_b = 1;  // table columns: 0 gate, 1 up, 2 down
  bool glu = false;          // y = glu(x Wa^T + bias_a, x Wb^T + bias_b) (glu_kind: expert_glu.cuh)
  int glu_kind = 0;
  float glu_alpha = 1.702f, glu_limit = 7.0f;
  /** Per-expert F32 biases [E, N] (row e for expert e's rows), or null: bias_a added to x Wa^T (plain
   *  mode: to y), bias_b to x Wb^T (glu). */
  const float* bias_a = nullptr;
  const float* bias_b = nullptr;
  const int32_t* offsets = nullptr;     // [E + 1]
  const int32_t* tile_start = nullptr;  // [E + 1] from launch_tile_prefix
  int E = 0;
  void* y = nullptr;         // [P, N] F32 (y_f32) or BF16, row stride ldy
  bool y_f32 = false;
  int64_t ldy = 0;
};

/** Whether the kernel handles weights of dtype `w` with rows of K elements (K a multiple of 64). */
bool grouped_gemm_supports(DType w, int64_t K);

/** tile_start[e] = number of row tiles (64 rows) of experts before e (tile_start[E]: all), on `s`. */
void launch_tile_prefix(const int32_t* offsets, int E, int32_t* tile_start, cudaStream_t s);

/** Upper bound of the row tiles of P rows over E experts (the grid size). */
int64_t grouped_gemm_max_tiles(int64_t P, int E);

/** Queues the GEMM for P sorted rows with weight dtype `wt` (both matrices for glu). Throws kInternal on
 *  a launch error. */
void launch_grouped_gemm(DType wt, const GroupedGemmArgs& a, int64_t P, cudaStream_t s);

}  // namespace ft::cuda
