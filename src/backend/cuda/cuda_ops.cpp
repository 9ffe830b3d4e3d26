// CudaOps: construction, memory (alloc, make_resident, zero, synchronize), scratch regions and
// the cached expert pointer tables. The ops themselves live one per file in this folder.
#include "backend/cuda/cuda_ops.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/cuda/checks.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/launch.h"
#include "backend/cuda_factory.h"
#include "backend/host_allocator.h"
#include "util/error.h"

namespace ft {

CudaOps::CudaOps(int device, DType activations) : device_(device), activations_(activations) {
  if (activations != DType::BF16 && activations != DType::F32)
    fail(ErrorCode::kInvalidArgument, "cuda: activations must be BF16 or F32, not {}", dtype_name(activations));
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    n = 0;
  }
  if (device < 0 || device >= n)
    fail(ErrorCode::kInvalidArgument, "cuda: device {} requested but {} CUDA device(s) are visible (--device cpu runs on "
         "the CPU; --device auto picks the GPU when there is one)", device, n);
  FT_CUDA_CHECK(cudaSetDevice(device));
  FT_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  FT_CUBLAS_CHECK(cublasCreate(&cublas_));
  FT_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  FT_CUDA_CHECK(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes));
  FT_CUBLAS_CHECK(cublasSetWorkspace(cublas_, cublas_workspace_, kCublasWorkspaceBytes));
}

CudaOps::~CudaOps() {
  // Destructors must not throw: errors here are ignored (the process is tearing the backend down).
  if (stream_) cudaStreamSynchronize(stream_);
  for (Region& r : scratch_)
    if (r.ptr) cudaFree(r.ptr);
  for (auto& [bank, t] : bank_tables_)
    if (t.dev) cudaFree(t.dev);
  if (sleep_event_) cudaEventDestroy(sleep_event_);
  if (cublas_) cublasDestroy(cublas_);
  if (cublas_workspace_) cudaFree(cublas_workspace_);
  if (stream_) cudaStreamDestroy(stream_);
}

Buffer CudaOps::alloc(int64_t bytes) {
  if (bytes < 0) fail(ErrorCode::kInvalidArgument, "cuda alloc: negative size {}", bytes);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 256)));
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    fail(ErrorCode::kOutOfMemory, "cuda: cannot allocate {} bytes of device memory ({} free of {}): {}", bytes, free_b,
         total_b, cudaGetErrorString(err));
  }
  return Buffer(p, bytes, Device::kCuda, [](void* q) { cudaFree(q); });
}

Tensor CudaOps::make_resident(const Tensor& host, Buffer& storage) {
  if (host.empty()) fail(ErrorCode::kInvalidArgument, "make_resident: tensor is empty");
  if (host.device != Device::kCpu)
    fail(ErrorCode::kInvalidArgument, "make_resident: tensor {} is already on {}", host.str(), device_name(host.device));
  storage = alloc(host.bytes());
  FT_CUDA_CHECK(cudaMemcpyAsync(storage.data(), host.data, static_cast<size_t>(host.bytes()), cudaMemcpyHostToDevice,
                                stream_));
  FT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  Tensor t = host;
  t.data = storage.data();
  t.device = Device::kCuda;
  return t;
}

Buffer CudaOps::alloc_host(int64_t bytes) {
  if (bytes <= 0) fail(ErrorCode::kInvalidArgument, "alloc_host: {} bytes", bytes);
  FT_CUDA_CHECK(cudaSetDevice(device_));
  void* p = nullptr;
  const cudaError_t err = cudaHostAlloc(&p, static_cast<size_t>(bytes), cudaHostAllocPortable);
  if (err != cudaSuccess) {
    cudaGetLastError();
    fail(ErrorCode::kOutOfMemory, "cuda: cannot allocate {} bytes of pinned host memory: {}", bytes,
         cudaGetErrorString(err));
  }
  return Buffer(p, bytes, Device::kCpu, [](void* q) { cudaFreeHost(q); });
}

Tensor CudaOps::make_host_mapped(const Tensor& host, Buffer& storage) {
  if (host.empty()) fail(ErrorCode::kInvalidArgument, "make_host_mapped: tensor is empty");
  if (host.device != Device::kCpu)
    fail(ErrorCode::kInvalidArgument, "make_host_mapped: tensor {} is already on {}", host.str(), device_name(host.device));
  // The expert banks' allocator: pages filled first, then pinned and mapped (pinned_host_allocator.cu).
  const std::unique_ptr<HostAllocator> alloc = make_pinned_host_allocator(device_);
  storage = alloc->allocate(host.bytes());
  std::memcpy(storage.data(), host.data, static_cast<size_t>(host.bytes()));
  Tensor t = host;
  t.data = alloc->pin(storage);  // the UVA address kernels read it at
  t.device = Device::kCuda;
  return t;
}

void CudaOps::zero(Tensor t) {
  cuda::check_dtype("zero", "t", t, {DType::F32, DType::F16, DType::BF16, DType::I32});
  FT_CUDA_CHECK(cudaMemsetAsync(t.data, 0, static_cast<size_t>(t.bytes()), stream_));
}

void CudaOps::synchronize() {
  if (!host_waits_sleep_) {
    FT_CUDA_CHECK(cudaStreamSynchronize(stream_));
    return;
  }
  if (!sleep_event_)
    FT_CUDA_CHECK(cudaEventCreateWithFlags(&sleep_event_, cudaEventBlockingSync | cudaEventDisableTiming));
  FT_CUDA_CHECK(cudaEventRecord(sleep_event_, stream_));
  FT_CUDA_CHECK(cudaEventSynchronize(sleep_event_));
}

void* CudaOps::scratch(Scratch slot, int64_t bytes) {
  Region& r = scratch_[static_cast<int>(slot)];
  if (bytes > r.bytes) {
    if (r.ptr) {
      FT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      FT_CUDA_CHECK(cudaFree(r.ptr));
      r = Region{};
    }
    ++scratch_generation_;
    const int64_t want = region_bytes(bytes);
    if (cudaMalloc(&r.ptr, static_cast<size_t>(want)) != cudaSuccess) {
      cudaGetLastError();
      r.ptr = nullptr;
      fail(ErrorCode::kOutOfMemory, "cuda: cannot allocate {} bytes of scratch (slot {})", want,
           static_cast<int>(slot));
    }
    r.bytes = want;
  }
  return r.ptr;
}

int64_t CudaOps::scratch_bytes() const {
  int64_t total = 0;
  for (const Region& r : scratch_) total += r.bytes;
  return total;
}

void* CudaOps::zeroed_scratch(Scratch slot, int64_t bytes) {
  const int64_t before = scratch_generation_;
  void* p = scratch(slot, bytes);
  if (scratch_generation_ != before)
    FT_CUDA_CHECK(cudaMemsetAsync(p, 0, static_cast<size_t>(scratch_[static_cast<int>(slot)].bytes), stream_));
  return p;
}

void* CudaOps::pinned(int64_t bytes) {
  if (bytes > pinned_.bytes()) {
    if (!pinned_.empty()) {
      FT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      pinned_ = Buffer();
    }
    pinned_ = alloc_host(std::max<int64_t>(bytes, 4096));
  }
  return pinned_.data();
}

const uint64_t* CudaOps::expert_table(const ExpertBank& bank) {
  const int64_t E = bank.n_expert();
  std::vector<uint64_t> want(static_cast<size_t>(3 * E));
  for (int64_t e = 0; e < E; ++e) {
    const Tensor* parts[3] = {&bank.gate[static_cast<size_t>(e)], &bank.up[static_cast<size_t>(e)],
                              &bank.down[static_cast<size_t>(e)]};
    for (int j = 0; j < 3; ++j) want[static_cast<size_t>(3 * e + j)] = reinterpret_cast<uint64_t>(parts[j]->data);
  }
  BankTable& t = bank_tables_[&bank];
  if (t.host == want && t.dev) return static_cast<const uint64_t*>(t.dev);
  const int64_t bytes = static_cast<int64_t>(want.size() * sizeof(uint64_t));
  if (bytes > t.capacity) {
    if (t.dev) {
      FT_CUDA_CHECK(cudaStreamSynchronize(stream_));
      FT_CUDA_CHECK(cudaFree(t.dev));
      t.dev = nullptr;
      ++scratch_generation_;  // graphs recorded before read the old table's address
    }
    FT_CUDA_CHECK(cudaMalloc(&t.dev, static_cast<size_t>(std::max<int64_t>(bytes, 256))));
    t.capacity = std::max<int64_t>(bytes, 256);
  }
  // Stream-ordered: kernels queued before still read the old table, later ones the new one.
  FT_CUDA_CHECK(cudaMemcpyAsync(t.dev, want.data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice, stream_));
  FT_CUDA_CHECK(cudaStreamSynchronize(stream_));
  t.host = std::move(want);
  return static_cast<const uint64_t*>(t.dev);
}

bool CudaOps::reads_int8_activations(DType weight) const { return cuda::gemv_q8_supports(weight); }

void* CudaOps::prepare_q8(const Tensor& x, ActQ8* handle) {
  constexpr int64_t kMaxRows = 16;  // the GEMV's largest batch (matmul_raw)
  const int64_t rows = x.rows(), K = x.cols();
  if (!handle) return nullptr;
  *handle = ActQ8{};
  if (rows < 1 || rows > kMaxRows || K % 32 != 0) return nullptr;
  void* q8 = scratch(Scratch::kQ8Prepared, cuda::gemv_q8_scratch_bytes(kMaxRows, K));
  *handle = ActQ8{q8, x.data, x.dtype, rows, K, ++q8_generation_};  // earlier handles go stale
  return q8;
}

void* CudaOps::handed_q8(const ActQ8* h, const void* x, DType dt, int64_t rows, int64_t K) const {
  if (!h || !h->data || h->generation != q8_generation_) return nullptr;
  if (h->data != scratch_[static_cast<int>(Scratch::kQ8Prepared)].ptr) return nullptr;  // another backend's
  return h->x == x && h->dtype == dt && h->rows == rows && h->K == K ? h->data : nullptr;
}

std::unique_ptr<Ops> make_cuda_ops(int device, DType activations) {
  return std::make_unique<CudaOps>(device, activations);
}

}  // namespace ft
