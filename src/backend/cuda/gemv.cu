// launch_gemv: host dispatch of the weight-decoding GEMV (gemv.cuh) over the weight dtype, with
// the alignment and shape checks its vector loads rely on. Instantiations: gemv_float.cu,
// gemv_legacy.cu, gemv_kquant.cu, gemv_iq.cu, gemv_lowbit.cu (split so the CUDA build compiles them
// in parallel).
#include <cstdint>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/gemv.cuh"
#include "backend/cuda/launch.h"

namespace ft::cuda {

template <DType WT>
void launch_gemv_t(int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s);
FT_CUDA_IQ_WEIGHT_TYPES(FT_EXTERN_GEMV_, _)  // gemv_iq.cu
FT_CUDA_LOWBIT_WEIGHT_TYPES(FT_EXTERN_GEMV_, _)  // gemv_lowbit.cu

void launch_gemv(DType wt, int maxt, bool glu, const GemvArgs& a, int64_t n_problems, cudaStream_t s) {
  if (!cuda_weight_type(wt)) fail(ErrorCode::kUnsupported, "gemv: weight dtype {} has no CUDA kernel", dtype_name(wt));
  const int C = chunk_elems(wt);
  if (a.K % C != 0)
    fail(ErrorCode::kUnsupported, "gemv: K = {} must be a multiple of {} for {} weights", a.K, C, dtype_name(wt));
  const int x_align = C >= 8 || a.x_f32 ? 16 : 8;
  if (reinterpret_cast<uintptr_t>(a.x) % x_align != 0 || (a.ldx * (a.x_f32 ? 4 : 2)) % x_align != 0)
    fail(ErrorCode::kUnsupported, "gemv: activations must be {}-byte aligned (row stride {} elements)", x_align, a.ldx);
  const bool vec_w = wt == DType::F32 || wt == DType::F16 || wt == DType::BF16 || wt == DType::Q4_K;
  if (vec_w && !a.table && (reinterpret_cast<uintptr_t>(a.w) % 16 != 0 || a.row_bytes % 16 != 0))
    fail(ErrorCode::kUnsupported, "gemv: {} weights must be 16-byte aligned (row of {} bytes)", dtype_name(wt),
         a.row_bytes);
  if (n_problems <= 0 || a.N <= 0) return;
  FT_CHECK(maxt == 1 || maxt == 8);
  FT_CHECK(!glu || (a.table && maxt == 1));
  if (a.q8 && gemv_q8_supports(wt)) return launch_gemv_q8(wt, maxt, glu, a, n_problems, s);
  FT_DISPATCH_WEIGHT(wt, launch_gemv_t<WT>(maxt, glu, a, n_problems, s));
}

bool gemv_combines(DType wt, int64_t N, int64_t K, bool q8) {
  if (!cuda_weight_type(wt) || K % chunk_elems(wt) != 0) return false;
  if (q8 && gemv_q8_supports(wt)) return gemv_q8_lanes_serves(wt, N, K);
  return gemv_warps_per_row(N, K / chunk_elems(wt), 3) == 1;
}

}  // namespace ft::cuda
