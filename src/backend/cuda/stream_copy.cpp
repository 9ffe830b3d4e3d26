// The CUDA StreamCopier (backend/stream_copy.h): cudaMemcpyAsync on CudaOps' stream, fences as events
// that a waiting host thread sleeps on (cudaEventBlockingSync) rather than spins.
#include <memory>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/stream_copy.h"

namespace ft {

namespace {

class EventFence final : public CopyFence {
 public:
  EventFence(int device, cudaStream_t stream) : device_(device) {
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventBlockingSync | cudaEventDisableTiming));
    FT_CUDA_CHECK(cudaEventRecord(event_, stream));
  }
  ~EventFence() override {
    if (event_) cudaEventDestroy(event_);  // errors ignored: a destructor must not throw
  }
  EventFence(const EventFence&) = delete;
  EventFence& operator=(const EventFence&) = delete;

  void wait() const override {
    FT_CUDA_CHECK(cudaSetDevice(device_));  // the waiting thread may not have used this device yet
    FT_CUDA_CHECK(cudaEventSynchronize(event_));
  }

 private:
  int device_;
  cudaEvent_t event_ = nullptr;
};

class CudaCopier final : public StreamCopier {
 public:
  explicit CudaCopier(CudaOps& ops) : ops_(&ops) {}

  void copy(const Tensor& src, Tensor dst) override {
    if (src.empty() || dst.empty() || src.dtype != dst.dtype || src.numel() != dst.numel())
      fail(ErrorCode::kInvalidArgument, "stream copy: {} to {}", src.str(), dst.str());
    const bool src_dev = src.device == Device::kCuda, dst_dev = dst.device == Device::kCuda;
    const cudaMemcpyKind kind = src_dev ? (dst_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyDeviceToHost)
                                        : (dst_dev ? cudaMemcpyHostToDevice : cudaMemcpyHostToHost);
    FT_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(src.bytes()), kind, ops_->stream()));
  }

  std::shared_ptr<const CopyFence> fence() override {
    return std::make_shared<EventFence>(ops_->device_index(), ops_->stream());
  }

 private:
  CudaOps* ops_;
};

}  // namespace

std::unique_ptr<StreamCopier> make_cuda_stream_copier(Ops& ops) {
  auto* cuda = dynamic_cast<CudaOps*>(&ops);
  return cuda ? std::make_unique<CudaCopier>(*cuda) : nullptr;
}

}  // namespace ft
