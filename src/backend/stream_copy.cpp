#include "backend/stream_copy.h"

#include "util/error.h"

namespace ft {

namespace {

class PassedFence final : public CopyFence {
 public:
  void wait() const override {}
};

/** Ops::copy, which has finished (CPU) or, to the host, waited for the copy by the time it returns. */
class OpsCopier final : public StreamCopier {
 public:
  explicit OpsCopier(Ops& ops) : ops_(&ops) {}
  void copy(const Tensor& src, Tensor dst) override {
    if (src.dtype != dst.dtype || src.numel() != dst.numel())
      fail(ErrorCode::kInvalidArgument, "stream copy: {} to {}", src.str(), dst.str());
    ops_->copy(src, dst);
  }
  std::shared_ptr<const CopyFence> fence() override {
    if (ops_->device() != Device::kCpu) ops_->synchronize();  // host -> device copies may still run
    return std::make_shared<PassedFence>();
  }

 private:
  Ops* ops_;
};

}  // namespace

std::unique_ptr<StreamCopier> make_stream_copier(Ops& ops) {
  if (ops.device() == Device::kCuda)
    if (std::unique_ptr<StreamCopier> c = make_cuda_stream_copier(ops)) return c;
  return std::make_unique<OpsCopier>(ops);  // the CPU, or a decorator of CudaOps (ProfilingOps)
}

#ifndef FT_HAVE_CUDA
std::unique_ptr<StreamCopier> make_cuda_stream_copier(Ops&) { return nullptr; }
#endif

}  // namespace ft
