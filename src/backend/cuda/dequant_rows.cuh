#pragma once
// The dequant_rows kernel (dequant.cu's op) and its per-type launcher, shared by dequant.cu (the
// dispatch and the types of dequant.cuh) and dequant_ext.cu (the types of dequant_iq.cuh and
// dequant_lowbit.cuh, compiled in parallel). One thread per chunk (Dq<WT>).
#include "backend/cuda/common.cuh"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/pdl.cuh"

namespace ft::cuda {

/** Rows row0 .. row0 + n_rows - 1 of w (or rows ids[r], clamped to [0, V)) decoded into out [n_rows, K]
 *  (F32 or BF16, row stride ldo), one thread per chunk. */
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

/** Queues dequant_rows_kernel for weight type WT (launch_dequant_rows checked the arguments). */
template <DType WT>
void launch_dequant_rows_t(const void* w, int64_t row_bytes, int64_t K, const int32_t* ids, int64_t V, int64_t row0,
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

/** Declares (X = FT_EXTERN_DEQUANT_ROWS_) the launcher of type T as instantiated elsewhere, or
 *  (X = FT_INSTANTIATE_DEQUANT_ROWS_) instantiates it. */
#define FT_DEQUANT_ROWS_SIG_(T)                                                                                  \
  void launch_dequant_rows_t<::ft::DType::T>(const void*, int64_t, int64_t, const int32_t*, int64_t, int64_t, \
                                             int64_t, void*, DType, int64_t, cudaStream_t);
#define FT_EXTERN_DEQUANT_ROWS_(T, ...) extern template FT_DEQUANT_ROWS_SIG_(T)
#define FT_INSTANTIATE_DEQUANT_ROWS_(T, ...) template FT_DEQUANT_ROWS_SIG_(T)

}  // namespace ft::cuda
