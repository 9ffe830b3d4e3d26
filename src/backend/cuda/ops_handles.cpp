// cuda_ops_device, cuda_ops_stream and cuda_set_device (backend/cuda_factory.h) for code outside the
// CUDA backend: a rank group's NCCL group runs on each CudaOps' device and stream.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda_factory.h"

namespace ft {
namespace {

const CudaOps& as_cuda(const Ops& ops, const char* what) {
  const auto* c = dynamic_cast<const CudaOps*>(&ops);
  if (!c) fail(ErrorCode::kInvalidArgument, "{}: the {} backend is not a CUDA backend", what, ops.name());
  return *c;
}

}  // namespace

int cuda_ops_device(const Ops& ops) { return as_cuda(ops, "cuda_ops_device").device_index(); }

void* cuda_ops_stream(Ops& ops) { return as_cuda(ops, "cuda_ops_stream").stream(); }

void cuda_set_device(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  if (device < 0 || device >= n)
    fail(ErrorCode::kInvalidArgument, "cuda: device {} requested but {} CUDA device(s) are visible", device, n);
  FT_CUDA_CHECK(cudaSetDevice(device));
}

}  // namespace ft
