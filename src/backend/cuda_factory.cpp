// make_cuda_ops, the pinned host allocator, the CUDA weight-type list and the CudaOps handles
// (cuda_ops_device, ...) for builds without CUDA (the real ones are in backend/cuda/cuda_ops.cpp,
// backend/cuda/pinned_host_allocator.cu, backend/cuda/weight_types.cu and backend/cuda/ops_handles.cpp).
#include "backend/cuda_factory.h"
#include "backend/cuda_weight_types.h"
#include "backend/host_allocator.h"

#include "util/error.h"

namespace ft {

bool cuda_built() {
#ifdef FT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

#ifndef FT_HAVE_CUDA
std::unique_ptr<Ops> make_cuda_ops(int device, DType) {
  fail(ErrorCode::kUnsupported, "cuda device {} requested, but this build of FreeToken has no CUDA backend "
       "(rebuild on a machine with nvcc, or use --device cpu)", device);
}

bool cuda_pdl_enabled(int) { return false; }
bool cuda_has_weight_kernel(DType) { return false; }
std::string cuda_weight_kernel_types() { return ""; }
void set_cuda_pdl(bool) {}
void set_cuda_moe_fusion(bool) {}

int cuda_ops_device(const Ops& ops) {
  fail(ErrorCode::kInvalidArgument, "the {} backend is not a CUDA backend (this build has none)", ops.name());
}
void* cuda_ops_stream(Ops& ops) {
  fail(ErrorCode::kInvalidArgument, "the {} backend is not a CUDA backend (this build has none)", ops.name());
}
void cuda_set_device(int device) {
  fail(ErrorCode::kUnsupported, "cuda device {} requested, but this build of FreeToken has no CUDA backend", device);
}

std::unique_ptr<HostAllocator> make_pinned_host_allocator(int device) {
  fail(ErrorCode::kUnsupported, "pinned host memory for cuda device {} requested, but this build of FreeToken has no "
       "CUDA backend", device);
}
#endif

}  // namespace ft
