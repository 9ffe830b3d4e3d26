// dequant_rows: decodes whole weight rows (any cuda_weight_type) to F32 or BF16. Serves embedding
// (a gather of the rows named by token ids) and the prefill GEMM path (a tile of W decoded to a
// bf16 scratch that cuBLAS then multiplies). One thread per chunk (dequant.cuh).
// Bytes moved: n_rows * row_bytes read + n_rows * K * out size written.
#include "backend/cuda/dequant_rows.cuh"

namespace ft::cuda {

FT_CUDA_IQ_WEIGHT_TYPES(FT_EXTERN_DEQUANT_ROWS_, _)  // dequant_ext.cu
FT_CUDA_LOWBIT_WEIGHT_TYPES(FT_EXTERN_DEQUANT_ROWS_, _)

void launch_dequant_rows(DType wt, const void* w, int64_t row_bytes, int64_t K, const int32_t* ids, int64_t V,
                         int64_t row0, int64_t n_rows, void* out, DType out_dtype, int64_t ldo, cudaStream_t s) {
  if (!cuda_weight_type(wt))
    fail(ErrorCode::kUnsupported, "dequantize: dtype {} has no CUDA kernel", dtype_name(wt));
  const int C = chunk_elems(wt);
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
