// make_cuda_ops for builds without CUDA (the real one is in backend/cuda/cuda_ops.cpp).
#include "backend/cuda_factory.h"

#include "util/error.h"

namespace ft {

#ifndef FT_HAVE_CUDA
std::unique_ptr<Ops> make_cuda_ops(int device, DType) {
  fail(ErrorCode::kUnsupported, "cuda device {} requested, but this build of FreeToken has no CUDA backend "
       "(rebuild on a machine with nvcc, or use --device cpu)", device);
}

bool cuda_pdl_enabled(int) { return false; }
void set_cuda_pdl(bool) {}
void set_cuda_moe_fusion(bool) {}
void set_cuda_prefetch_dma(bool) {}
#endif

}  // namespace ft
