// dequant_rows: decodes whole weight rows (any cuda_weight_type) to F32 or BF16. Serves embedding
// (a gather of the rows named by token ids) and the prefill GEMM path (a tile of W decoded to a
// bf16 scratch that cuBLAS then multiplies). One thread per chunk (dequant.cuh).
// Bytes moved: n_rows * row_bytes read + n_rows * K * out size written.
#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/pdl.cuh"

namespace ft::cuda {
namespace {

template <DType WT, typename TO>
__global__ void dequant_rows_kernel(const uint8_t* __restrict__ w, int64_t row_bytes, int64_t K,
                                    const int32_t* __restrict__ ids, int64_t V, int64_t row0, int64_t n_rows,
                                    TO* __restrict__ out, int64_t ldo) {
  using D = Dq<WT>;
  const int64_t cpr = K / D::kChunk;  // chunks per row
  const int64_t total = n_rows * cpr;
  pdl_enter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cpr, c = i % cpr;
    int64_t src = row0 + r;
    if (ids) src = min(max(static_cast<int64_t>(ids[r]), int64_t{0}), V - 1);
    float v[D::kChunk];
    D::load(w + src * row_bytes, c, v);
    TO* o = out + r * ldo + c * D::kChunk;  // 16-byte (8-byte for 4 bf16) aligned: ldo % 8 == 0
    if constexpr (sizeof(TO) == 4) {
#pragma unroll
      for (int j = 0; j < D::kChunk; j += 4)
        *reinterpret_cast<float4*>(o + j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
    } else {
      uint32_t packed[D::kChunk / 2];
#pragma unroll
      for (int j = 0; j < D::kChunk / 2; ++j) {
        const __nv_bfloat162 h2 = __floats2bfloat162_rn(v[2 * j], v[2 * j + 1]);
        packed[j] = *reinterpret_cast<const uint32_t*>(&h2);
      }
      if constexpr (D::kChunk == 4) {
        *reinterpret_cast<uint2*>(o) = make_uint2(packed[0], packed[1]);
      } else {
#pragma unroll
        for (int j = 0; j < D::kChunk / 8; ++j)
          reinterpret_cast<uint4*>(o)[j] =
              make_uint4(packed[4 * j], packed[4 * j + 1], packed[4 * j + 2], packed[4 * j + 3]);
      }
    }
  }
}

template <DType WT>
void launch_t(const void* w, int64_t row_bytes, int64_t K, const int32_t* ids, int64_t V, int64_t row0,
              int64_t n_rows, void* out, DType out_dtype, int64_t ldo, cudaStream_t s) {
  const unsigned g = grid_1d(n_rows * (K / Dq<WT>::kChunk), 256);
  const auto* wp = static_cast<const uint8_t*>(w);
  if (out_dtype == DType::F32)
    launch_pdl(dequant_rows_kernel<WT, float>, g, 256, 0, s, wp, row_bytes, K, ids, V, row0, n_rows,
               static_cast<float*>(out), ldo);
  else
    launch_pdl(dequant_rows_kernel<WT, bf16>, g, 256, 0, s, wp, row_bytes, K, ids, V, row0, n_rows,
               static_cast<bf16*>(out), ldo);
}

}  // namespace

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
  FT_DISPATCH_WEIGHT(wt, launch_t<WT>(w, row_bytes, K, ids, V, row0, n_rows, out, out_dtype, ldo, s));
}

}  // namespace ft::cuda
