#pragma once
// StreamCopier: copies between a backend's device memory and pinned host memory, queued on the
// backend's stream in order with its kernels, without a host wait per copy (the KV tiers' page copies,
// issue 39). A device -> host copy sees every kernel queued before it and is seen by none queued after
// it; the host reads its destination only after a CopyFence recorded after it has passed. CUDA:
// cudaMemcpyAsync on CudaOps' stream (truly asynchronous only for page-locked host memory, such as
// Ops::host_allocator()'s once pinned; a pageable side makes the call wait as cudaMemcpyAsync does) and
// events; CPU: Ops::copy, every fence already passed.
#include <memory>

#include "backend/ops.h"

namespace ft {

/** A point in a backend's queued work. */
class CopyFence {
 public:
  virtual ~CopyFence() = default;
  /** Blocks until everything queued before the fence was recorded is done. Thread-safe: any thread
   *  may wait (the prompt cache's writer does). Throws ft::Error(kInternal) for a device error. */
  virtual void wait() const = 0;
};

class StreamCopier {
 public:
  virtual ~StreamCopier() = default;
  /** Queues dst = src: the same dtype and numel, contiguous, one side on the host and one on the
   *  backend's device (or both on the host: a plain copy). The caller leaves the host side alone (does
   *  not read a device -> host destination, free or reuse either side for host writes) until a
   *  fence() recorded after this call has passed; later device work, queued copies included, is
   *  ordered after it. Throws kInvalidArgument for mismatched tensors. */
  virtual void copy(const Tensor& src, Tensor dst) = 0;
  /** A fence after everything queued on the backend so far. */
  virtual std::shared_ptr<const CopyFence> fence() = 0;
};

/** The copier of `ops` (which must outlive it): CUDA's for a CudaOps, else one through Ops::copy. */
std::unique_ptr<StreamCopier> make_stream_copier(Ops& ops);

/** The CUDA copier (backend/cuda/stream_copy.cpp) of a CudaOps; nullptr for another Ops or in a build
 *  without CUDA. */
std::unique_ptr<StreamCopier> make_cuda_stream_copier(Ops& ops);

}  // namespace ft
