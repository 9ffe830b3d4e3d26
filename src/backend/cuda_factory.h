#pragma once
// Entry point to the CUDA backend that compiles in every build: code outside backend/cuda (engine,
// tests, cli) creates the backend through this header and never includes CUDA headers.
#include <memory>

#include "backend/ops.h"

namespace ft {

/** The CUDA backend on device `device` with `activations` (BF16 or F32) as its activation dtype
 *  (see backend/cuda/cuda_ops.h). Throws ft::Error(kUnsupported) in a build without CUDA,
 *  kInvalidArgument when `device` is not a visible CUDA device. */
std::unique_ptr<Ops> make_cuda_ops(int device = 0, DType activations = DType::F32);

/** Whether this build has the CUDA backend (make_cuda_ops can succeed where a GPU is visible). */
bool cuda_built();

/** Whether the CUDA backend launches its decode kernels on `device` with programmatic dependent launch
 *  (backend/cuda/pdl.cuh): the kernels loaded are sm_90 code, the GPU is sm_90 or later, and neither
 *  FT_CUDA_PDL=0 (or off, false) nor set_cuda_pdl turned it off. False in a build without CUDA. */
bool cuda_pdl_enabled(int device = 0);

/** From now on, launches on every device use PDL where it is possible (true) or never (false),
 *  whatever FT_CUDA_PDL says. For tests and A/B measurements; launches already recorded in a CUDA
 *  graph keep what they had. No effect in a build without CUDA. */
void set_cuda_pdl(bool enabled);

/** From now on, moe_experts' decode path on the CUDA backend fuses h's int8 quantization into the
 *  gate/up GEMV and the weighted sum into the down GEMV where their lane-group layout allows (true,
 *  the default unless FT_CUDA_MOE_FUSE=0), or launches both separately (false). Both give the same
 *  bits; for tests and A/B measurements. No effect in a build without CUDA. */
void set_cuda_moe_fusion(bool enabled);

/** The CUDA device index of `ops`, a backend make_cuda_ops made. Throws ft::Error(kInvalidArgument)
 *  naming the backend for any other Ops (every Ops in a build without CUDA). */
int cuda_ops_device(const Ops& ops);

/** The stream (a cudaStream_t, as void*) `ops`, a backend make_cuda_ops made, queues all its work on:
 *  what a collective enqueued there is ordered with its kernels (dist/nccl_factory.h). Throws
 *  ft::Error(kInvalidArgument) for any other Ops. */
void* cuda_ops_stream(Ops& ops);

/** Makes CUDA device `device` the calling thread's current device (cudaSetDevice). The current device
 *  is per thread and a CudaOps sets it only when it is constructed: a thread that uses a backend of
 *  another device than the one it was made on (a rank group's threads) calls this first. Throws
 *  ft::Error(kInvalidArgument) when `device` is not visible, kUnsupported in a build without CUDA. */
void cuda_set_device(int device);

}  // namespace ft
