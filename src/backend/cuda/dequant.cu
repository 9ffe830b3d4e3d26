// dequant_rows: decodes whole weight rows (any cuda_weight_type) to F32 or BF16. Serves embedding
// (a gather of the rows named by token ids) and the prefill GEMM path (a tile of W decoded to a
// bf16 scratch that cuBLAS then multiplies). One thread per chunk (dequant.cuh).
// Bytes moved: n_rows * row_bytes read + n_rows * K * out size written.
#include "backend/cuda/dequant_rows.cuh"

namespace ft::cuda {

FT_CUDA_IQ_WEIGHT_TYPES(FT_EXTERN_DEQUANT_ROWS_, _)  // dequant_ext.cu
FT_CUDA_LOWBIT_WEIGHT_TYPES(FT_EXTERN_DEQUANT_ROWS_, _)

namespace {

/** One element per thread: rows of a float type (F32, F16, BF16) whose length or alignment the chunked
 *  kernel cannot take (rows of a few values: Qwen4-Exp's per-head n-gram embeddings are 4 wide in its
 *  test fixture). Same rows (ids clamped to [0, V)) and the same value per element as the chunked kernel. */
template <DType WT, typename TO>
__global__ void dequant_float_rows_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t K,
                                          const int32_t* __restrict__ ids, int64_t V, int64_t row0, int64_t n_rows,
                                          TO* __restrict__ out, int64_t ldo) {
  const int64_t total = n_rows * K;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / K, k = i % K;
    int64_t src = row0 + r;
    if (ids) src = min(max(static_cast<int64_t>(ids[r]), int64_t{0}), V - 1);
    const uint8_t* p = w + src * row_bytes;
    float v;
    if constexpr (WT == DType::F32) {
      v = reinterpret_cast<const float*>(p)[k];
    } else if constexpr (WT == DType::F16) {
      v = __half2float(reinterpret_cast<const __half*>(p)[k]);
    } else {
      v = __bfloat162float(reinterpret_cast<const bf16*>(p)[k]);
    }
    if constexpr (sizeof(TO) == 4)
      out[r * ldo + k] = v;
    else
      out[r * ldo + k] = __float2bfloat16_rn(v);
  }
}

template <DType WT>
void launch_dequant_float_rows(const void* w, int64_t row_bytes, int64_t K, const int32_t* ids, int64_t V,
                               int64_t row0, int64_t n_rows, void* out, DType out_dtype, int64_t ldo, cudaStream_t s) {
  const unsigned g = grid_1d(n_rows * K, 256);
  const auto* wp = static_cast<const uint8_t*>(w);
  if (out_dtype == DType::F32)
    dequant_float_rows_kernel<WT, float><<<g, 256, 0, s>>>(wp, row_bytes, K, ids, V, row0, n_rows,
                                                            static_cast<float*>(out), ldo);
  else
    dequant_float_rows_kernel<WT, bf16><<<g, 256, 0, s>>>(wp, row_bytes, K, ids, V, row0, n_rows,
                                                           static_cast<bf16*>(out), ldo);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace

void launch_dequant_rows(DType wt, const void* w, int64_t row_bytes, int64_t K, const int32_t* ids, int64_t V,
                         int64_t row0, int64_t n_rows, void* out, DType out_dtype, int64_t ldo, cudaStream_t s) {
  if (!cuda_weight_type(wt))
    fail(ErrorCode::kUnsupported, "dequantize: dtype {} has no CUDA kernel", dtype_name(wt));
  const int C = chunk_elems(wt);
  const int64_t out_size = out_dtype == DType::F32 ? 4 : 2;
  const bool float_type = wt == DType::F32 || wt == DType::F16 || wt == DType::BF16;
  // Rows the chunked kernel cannot take (a length that is not whole 16-byte chunks, unaligned rows or
  // output rows) of a float type go element by element.
  if (float_type && (K % C != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0 || row_bytes % 16 != 0 ||
                     reinterpret_cast<uintptr_t>(out) % 16 != 0 || (ldo * out_size) % 16 != 0)) {
    if (n_rows <= 0) return;
    if (wt == DType::F32)
      launch_dequant_float_rows<DType::F32>(w, row_bytes, K, ids, V, row0, n_rows, out, out_dtype, ldo, s);
    else if (wt == DType::F16)
      launch_dequant_float_rows<DType::F16>(w, row_bytes, K, ids, V, row0, n_rows, out, out_dtype, ldo, s);
    else
      launch_dequant_float_rows<DType::BF16>(w, row_bytes, K, ids, V, row0, n_rows, out, out_dtype, ldo, s);
    return;
  }
  if (K % C != 0)
    fail(ErrorCode::kUnsupported, "dequantize: row length {} must be a multiple of {} for {}", K, C, dtype_name(wt));
  const bool vec_w = wt == DType::F32 || wt == DType::F16 || wt == DType::BF16 || wt == DType::Q4_K;
  if (vec_w && (reinterpret_cast<uintptr_t>(w) % 16 != 0 || row_bytes % 16 != 0))
    fail(ErrorCode::kUnsupported, "dequantize: {} rows must be 16-byte aligned (row of {} bytes)", dtype_name(wt),
         row_bytes);
  const int64_t esz = out_dtype == DType::F32 ? 4 : 2;
  if (reinterpret_cast<uintptr_t>(out) % 16 != 0 || (ldo * esz) % 16 != 0)
    fail(ErrorCode::kUnsupported, "dequantize: output rows must be 16-byte aligned (row stride {})", ldo);
  if (n_rows <= 0) return;
  FT_DISPATCH_WEIGHT(wt, launch_dequant_rows_t<WT>(w, row_bytes, K, ids, V, row0, n_rows, out, out_dtype, ldo, s));
}

}  // namespace ft::cuda
