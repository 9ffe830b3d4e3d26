#pragma once
// Launchers shared between op files of the CUDA backend (kernels that more than one op uses).
#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/dtype.h"

namespace ft::cuda {

/** Arguments of the weight-decoding GEMV (gemv.cuh). A launch computes `n_problems` problems; problem
 *  p multiplies up to `maxt` consecutive activation rows by one weight matrix [N, K]:
 *  - plain mode (table == nullptr): weight `w`; problem p covers tokens [p*maxt, min(T, (p+1)*maxt))
 *    and writes the same rows of y;
 *  - expert mode (table != nullptr): weight = table[ids[p] * 3 + col_a] (an expert of a bank), one
 *    activation row x[p / x_div], output row y[p]; problems whose id is outside [0, n_expert) write
 *    nothing. With glu, y = glu(x Wa^T, x Wb^T) (silu(a) * b by default; glu_kind), Wb = table[ids[p] * 3 + col_b].
 *  x is BF16 (or F32 with x_f32) with row stride ldx (elements); y is F32 or BF16 with row stride ldy; bias (plain mode)
 *  is F32/F16/BF16 (bias_code 0/1/2) or null. */
struct GemvArgs {
  const uint8_t* w = nullptr;
  const uint64_t* table = nullptr;
  int col_a = 0, col_b = 1;
  const int32_t* ids = nullptr;
  int32_t n_expert = 0;
  int64_t N = 0, K = 0, row_bytes = 0;
  const void* x = nullptr;
  bool x_f32 = false;
  int64_t ldx = 0;
  int x_div = 1;
  int64_t T = 1;
  void* y = nullptr;
  bool y_f32 = false;
  int64_t ldy = 0;
  const void* bias = nullptr;
  int bias_code = 0;
  /** Expert mode: per-expert F32 biases [n_expert, N], row ids[p] (ExpertBank::gate_bias ...), added
   *  to the products before the GLU (ebias_a to x Wa^T, ebias_b to x Wb^T), or to y without GLU
   *  (ebias_a); null: none. Every output mode adds them (y, q8_out, combine_out). */
  const float* ebias_a = nullptr;
  const float* ebias_b = nullptr;
  /** The GLU of glu mode (expert_glu.cuh: kGluSwiglu, kGluGeluTanh, kGluSwigluOai with glu_alpha and glu_limit,
   *  kGluSwigluClamp with glu_limit). */
  int glu_kind = 0;
  float glu_alpha = 1.702f, glu_limit = 7.0f;
  /** Device scratch of gemv_q8_scratch_bytes(activation rows, K) bytes for the integer-dot path
   *  (Q4_0/Q8_0/Q4_K/Q6_K); null keeps the float decoder. */
  void* q8 = nullptr;
  /** q8 already holds x's int8 form (written by the kernel that produced x: CudaOps::handed_q8);
   *  false: the launch quantizes x into q8 first. */
  bool q8_ready = false;
  /** ids, the table and the weights they name were written before the previous kernel of the stream
   *  started (the down GEMV of moe_experts: the gate/up GEMV runs between the router or admission and
   *  it), so a PDL launch may read them before its wait (pdl.cuh): the int8 lane-group GEMV
   *  (gemv_q8.cu) then loads its first problem's first chunks while the kernel before still runs. */
  bool ids_before = false;
  /** Expert GLU mode, when gemv_q8_lanes_serves(the dtype, N, K) and N % 32 == 0: the launch writes
   *  y's int8 form (Q8Layout(n_problems, N), as quantize_q8_kernel would write it from y stored in
   *  y's dtype) here instead of y, for a GEMV that reads it with q8_ready. */
  void* q8_out = nullptr;
  /** Expert mode, not GLU, maxt 1, when gemv_combines(the dtype, N, K, q8 set): problems are combine_k slots of
   *  n_problems / combine_k tokens, and the launch writes, instead of y, combine_out[t, n] (=|+= with
   *  combine_accumulate) sum over slots j in order of combine_weights[t, j] * y[t * combine_k + j, n],
   *  skipping ids outside [0, n_expert): moe_experts' weighted sum, the same bits as its combine
   *  kernel. combine_out F32 (combine_out_f32) or BF16, row stride combine_ld; combine_k <= 16. */
  const float* combine_weights = nullptr;
  void* combine_out = nullptr;
  bool combine_out_f32 = false, combine_accumulate = false;
  int combine_k = 0;
  int64_t combine_ld = 0;
};

/** Launches the GEMV for weight dtype `wt` (cuda_weight_type), `maxt` in {1, 8}, `glu` only with
 *  table mode and maxt 1. Throws kUnsupported for a K or address the vector loads cannot serve. */
void launch_gemv(DType wt, int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t stream);

/** True when the integer-dot GEMV (gemv_q8.cu: Q4_0, Q8_0, Q4_K, Q6_K; activations quantized to int8
 *  per 32 elements first) serves weight type `wt`. launch_gemv takes it when GemvArgs::q8 is set. */
bool gemv_q8_supports(DType wt);
/** True when the integer-dot GEMV takes a one-token expert launch of weight type `wt`, [N, K], in lane
 *  groups (gemv_q8.cu), the layout that can write GemvArgs::q8_out and GemvArgs::combine_out. */
bool gemv_q8_lanes_serves(DType wt, int64_t N, int64_t K);
/** True when a one-token expert launch of weight type `wt`, [N, K], can write GemvArgs::combine_out
 *  (the int8 lane-group kernel when `q8` is set and serves wt, else the decoding kernel at one warp a
 *  row). */
bool gemv_combines(DType wt, int64_t N, int64_t K, bool q8);
/** Bytes of GemvArgs::q8 for `rows` activation rows of K elements. */
int64_t gemv_q8_scratch_bytes(int64_t rows, int64_t K);
/** That GEMV; same arguments as launch_gemv (called by it). */
void launch_gemv_q8(DType wt, int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t stream);

/** out[r, :] = decode(w[src_row(r), :]) for r < n_rows, src_row(r) = ids ? clamp(ids[r], 0, V-1) : row0 + r.
 *  w rows of `row_bytes` bytes holding K elements of `wt`; out F32 or BF16 with row stride ldo. */
void launch_dequant_rows(DType wt, const void* w, int64_t row_bytes, int64_t K, const int32_t* ids, int64_t V,
                         int64_t row0, int64_t n_rows, void* out, DType out_dtype, int64_t ldo, cudaStream_t stream);

/** The GLU of moe_experts' unfused paths in place (moe_glu.cu): g[i] = expert_glu(kind, alpha, limit,
 *  g[i], u[i]) over n elements of dtype dt (F32 or BF16; the biases were added by the projections).
 *  Throws kInternal on a launch error. */
void launch_moe_glu(void* g, const void* u, DType dt, int64_t n, int kind, float alpha, float limit,
                    cudaStream_t stream);

/** Elementwise dtype conversion between F32/F16/BF16 device arrays of n elements. */
void launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, cudaStream_t stream);

/** Stable sort of the T*k (token, slot) pairs of `ids` by expert, on the device (CUB radix sort).
 *  Outputs: order[r] = pair index of sorted position r (pairs with an id outside [0, E) last),
 *  offsets_host[e] = first sorted position of expert e, e = 0..E (offsets_host[E] = valid pairs).
 *  `temp` must hold moe_sort_temp_bytes(P, E) bytes. Synchronizes the stream (eager prefill only). */
int64_t moe_sort_temp_bytes(int64_t P, int32_t E);

/** The bf16 scratch matmul decodes one tile of a quantized W into (cuBLAS then multiplies the tile). */
constexpr int64_t kDequantTileBytes = 64ll << 20;

/** An upper bound on the split partials attention and attention_mla keep in their scratch region, for
 *  decode batches of up to max_seqs queries and prefill steps, H heads of width D (MLA: the latent
 *  rank), keys up to max_kv_len, on a device of sm_count SMs. */
int64_t attention_scratch_bound(int64_t max_seqs, int64_t H, int64_t D, int64_t max_kv_len, int sm_count);

/** Byte offsets of moe_experts' intermediates in its scratch region (-1: not used) and the region's
 *  size, for T rows of top-k over E experts of width F (hidden H, intermediates of es bytes, gate and up
 *  fused when glu): decode steps (T <= 32) keep h (and u) and y; prefill also the sorted pairs, the
 *  gathered rows and the sort's temp. */
struct MoeScratch {
  int64_t h = -1, u = -1, y = -1, order = -1, inv = -1, xs = -1, sort = -1, tiles = -1, bytes = 0;
};
MoeScratch moe_scratch_layout(int64_t T, int64_t k, int64_t H, int64_t F, int32_t E, int64_t es, bool glu);
void moe_sort_pairs(const int32_t* ids, int64_t P, int32_t E, void* temp, int32_t* order, int32_t* offsets_host,
                    cudaStream_t stream);
/** The device copy of the offsets [E + 1] that moe_sort_pairs leaves inside `temp`. */
const int32_t* moe_sort_device_offsets(const void* temp, int64_t P);

}  // namespace ft::cuda
