// The CUDA device side of the GPU <-> CPU expert exchange (protocol: moe/host_exchange.h). Two
// kernels on the backend's stream, with fixed launch shapes and no host synchronisation, so a
// decode step with CPU experts is captured in a CUDA graph like any other:
//   exchange_post_kernel: copies x, ids, weights to the mapped staging buffers (PCIe writes, 16-byte
//     stores), then the last block to finish (threadFenceReduction pattern of the CUDA samples:
//     a system fence, then a device-scope arrival counter) advances the request counter in device
//     memory and stores the request and request_seq with system-scope release;
//   exchange_collect_kernel: thread 0 of each block polls done_seq (system-scope acquire, a short
//     __nanosleep between reads), with the ack and done limits measured on %globaltimer; after a
//     block barrier every thread reads its part of the mapped result (F32) and writes or adds it
//     into out. A block that gives up stores timed_out_seq and leaves its part of out as it was
//     (blocks decide independently, so a timed-out out may be partly written).
// Only plain loads and stores touch host memory (no atomic read-modify-write over PCIe).
#include <algorithm>

#include <cuda/atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "moe/cuda/cuda_factories.h"
#include "moe/host_exchange.h"
#include "util/error.h"

namespace ft {
namespace cuda {
namespace {

using SysSeq = ::cuda::atomic_ref<uint64_t, ::cuda::thread_scope_system>;

__device__ __forceinline__ SysSeq sys(uint64_t& field) { return SysSeq(field); }

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/** Device memory of the device side: the request counter and the post kernel's block arrivals. */
struct Counters {
  uint64_t seq;
  unsigned int arrived;
};

struct PostArgs {
  ExchangeControl* ctrl;  // mapped
  Counters* counters;     // device
  const uint8_t* x;       // [x_bytes]
  int64_t x_bytes;
  const int32_t* ids;     // [pairs]
  const float* weights;   // [pairs]
  int32_t pairs;
  uint8_t* hx;            // mapped staging
  int32_t* hids;
  float* hw;
  int32_t layer, n_tokens, n_embd, k, x_dtype;
};

/** grid: any number of blocks x 256 threads. Moves x_bytes + 8 * pairs bytes device -> host. */
__global__ void exchange_post_kernel(PostArgs a) {
  const int64_t tid = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t n16 = a.x_bytes / 16;
  const auto* src = reinterpret_cast<const uint4*>(a.x);
  auto* dst = reinterpret_cast<uint4*>(a.hx);
  for (int64_t i = tid; i < n16; i += stride) dst[i] = src[i];
  for (int64_t i = n16 * 16 + tid; i < a.x_bytes; i += stride) a.hx[i] = a.x[i];
  for (int64_t i = tid; i < a.pairs; i += stride) a.hids[i] = a.ids[i], a.hw[i] = a.weights[i];
  __threadfence_system();  // this thread's stores reach host memory before the block's arrival counts
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (atomicAdd(&a.counters->arrived, 1u) != gridDim.x - 1) return;
  __threadfence_system();  // every block's stores are ordered before the request below
  a.counters->arrived = 0;  // for the next launch (the kernel boundary orders it)
  const uint64_t seq = ++a.counters->seq;
  volatile ExchangeControl* c = a.ctrl;
  c->layer = a.layer;
  c->n_tokens = a.n_tokens;
  c->n_embd = a.n_embd;
  c->k = a.k;
  c->x_dtype = a.x_dtype;
  sys(a.ctrl->request_seq).store(seq, ::cuda::memory_order_release);
}

struct CollectArgs {
  ExchangeControl* ctrl;    // mapped
  const Counters* counters; // device: seq is the request to wait for
  const float* part;        // mapped [n] F32
  void* out;                // [n] of T
  int64_t n;
  bool accumulate;
  uint64_t ack_timeout_ns, done_timeout_ns;
};

/** Thread 0's wait: true when done_seq reached seq, false when it gave up (or another block did, or
 *  the dispatcher is still busy with a request an earlier wait gave up on). */
__device__ bool wait_done(const CollectArgs& a, uint64_t seq) {
  const uint64_t t0 = global_ns();
  if (sys(a.ctrl->timed_out_seq).load(::cuda::memory_order_acquire) >
      sys(a.ctrl->done_seq).load(::cuda::memory_order_acquire)) {
    sys(a.ctrl->timed_out_seq).store(seq, ::cuda::memory_order_release);
    return false;
  }
  unsigned sleep_ns = 32;
  for (;;) {
    if (sys(a.ctrl->done_seq).load(::cuda::memory_order_acquire) >= seq) return true;
    if (sys(a.ctrl->timed_out_seq).load(::cuda::memory_order_relaxed) >= seq) return false;
    const bool started = sys(a.ctrl->ack_seq).load(::cuda::memory_order_relaxed) >= seq;
    if (global_ns() - t0 > (started ? a.done_timeout_ns : a.ack_timeout_ns)) {
      sys(a.ctrl->timed_out_seq).store(seq, ::cuda::memory_order_release);
      return false;
    }
    __nanosleep(sleep_ns);
    if (sleep_ns < 256) sleep_ns *= 2;
  }
}

/** grid: enough 256-thread blocks for n / 4 (capped); out[i] = (accumulate ? out[i] : 0) + part[i]. */
template <typename T>
__global__ void exchange_collect_kernel(CollectArgs a) {
  __shared__ bool ok;
  if (threadIdx.x == 0) ok = wait_done(a, a.counters->seq);
  __syncthreads();  // thread 0's acquire orders the reads below (the pattern of NCCL's simple protocol)
  if (!ok) return;
  T* out = static_cast<T*>(a.out);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < a.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = from_f<T>((a.accumulate ? to_f(out[i]) : 0.0f) + a.part[i]);
}

}  // namespace
}  // namespace cuda

namespace {

class CudaExchangeDevice final : public ExchangeDevice {
 public:
  CudaExchangeDevice(CudaOps& ops, ExchangeBuffers& buffers, ExchangeDispatcher& dispatcher)
      : ExchangeDevice(buffers, dispatcher), ops_(ops) {
    counters_ = ops.alloc(sizeof(cuda::Counters));
    FT_CUDA_CHECK(cudaMemsetAsync(counters_.data(), 0, sizeof(cuda::Counters), ops.stream()));
    ops.synchronize();
  }

  void post(int32_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights) override {
    check_post(x, ids, weights);
    if (x.device != Device::kCuda || ids.device != Device::kCuda || weights.device != Device::kCuda)
      fail(ErrorCode::kInvalidArgument, "moe exchange: x {}, ids {} and weights {} must be on the GPU", x.str(),
           ids.str(), weights.str());
    cuda::PostArgs a{};
    a.ctrl = buf_.device.ctrl;
    a.counters = static_cast<cuda::Counters*>(counters_.data());
    a.x = static_cast<const uint8_t*>(x.data);
    a.x_bytes = x.bytes();
    a.ids = static_cast<const int32_t*>(ids.data);
    a.weights = static_cast<const float*>(weights.data);
    a.pairs = static_cast<int32_t>(ids.numel());
    a.hx = static_cast<uint8_t*>(buf_.device.x);
    a.hids = buf_.device.ids;
    a.hw = buf_.device.weights;
    a.layer = layer;
    a.n_tokens = static_cast<int32_t>(x.rows());
    a.n_embd = static_cast<int32_t>(x.cols());
    a.k = static_cast<int32_t>(ids.cols());
    a.x_dtype = static_cast<int32_t>(x.dtype);
    if (reinterpret_cast<uintptr_t>(x.data) % 16 != 0)
      fail(ErrorCode::kInvalidArgument, "moe exchange: x {} is not 16-byte aligned", x.str());
    // One block per 16 KiB of x (decode: 1-2 blocks; a prefill chunk: up to 64 in flight over PCIe).
    const auto blocks = static_cast<unsigned>(std::clamp<int64_t>((a.x_bytes + 16383) / 16384, 1, 64));
    cuda::exchange_post_kernel<<<blocks, 256, 0, ops_.stream()>>>(a);
    FT_CUDA_LAUNCH_CHECK();
    T_ = x.rows(), H_ = x.cols();
  }

  void collect(Tensor out, bool accumulate) override {
    if (T_ == 0) fail(ErrorCode::kInvalidArgument, "moe exchange: collect() without a post()");
    if (out.device != Device::kCuda || out.ndim != 2 || out.rows() != T_ || out.cols() != H_ ||
        (out.dtype != DType::F32 && out.dtype != DType::BF16 && out.dtype != DType::F16))
      fail(ErrorCode::kInvalidArgument, "moe exchange: out {} must be a float GPU [{}, {}]", out.str(), T_, H_);
    cuda::CollectArgs a{};
    a.ctrl = buf_.device.ctrl;
    a.counters = static_cast<const cuda::Counters*>(counters_.data());
    a.part = buf_.device.out;
    a.out = out.data;
    a.n = out.numel();
    a.accumulate = accumulate;
    a.ack_timeout_ns = static_cast<uint64_t>(ack_timeout_s * 1e9);
    a.done_timeout_ns = static_cast<uint64_t>(done_timeout_s * 1e9);
    const auto blocks = static_cast<unsigned>(std::clamp<int64_t>((a.n + 1023) / 1024, 1, 64));
    cudaStream_t s = ops_.stream();
    if (out.dtype == DType::F32) cuda::exchange_collect_kernel<float><<<blocks, 256, 0, s>>>(a);
    else if (out.dtype == DType::BF16) cuda::exchange_collect_kernel<cuda::bf16><<<blocks, 256, 0, s>>>(a);
    else cuda::exchange_collect_kernel<__half><<<blocks, 256, 0, s>>>(a);
    FT_CUDA_LAUNCH_CHECK();
  }

 private:
  CudaOps& ops_;
  Buffer counters_;
  int64_t T_ = 0, H_ = 0;
};

}  // namespace

std::unique_ptr<ExchangeDevice> make_cuda_exchange_device(Ops& ops, ExchangeBuffers& buffers,
                                                          ExchangeDispatcher& dispatcher) {
  auto* cuda_ops = dynamic_cast<CudaOps*>(&ops);
  if (!cuda_ops)
    fail(ErrorCode::kInvalidArgument, "moe exchange: the GPU device side needs the cuda backend, not {}", ops.name());
  cuda_ops->set_host_waits_sleep(true);  // the host's cores run the CPU experts while a step waits
  return std::make_unique<CudaExchangeDevice>(*cuda_ops, buffers, dispatcher);
}

}  // namespace ft
