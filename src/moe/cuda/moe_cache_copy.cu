// The device side of the expert cache's copy-engine prefetch (moe_cache_copy.h; protocol:
// moe/prefetch_copier.h). Why copies instead of the gather kernel: pinned host -> device copies run
// at ~54 GB/s per 9 MiB expert on the H200 against ~51 GB/s for SM-issued UVA reads (DESIGN.md),
// and they leave the SMs to the layer's kernels.
#include "moe/cuda/moe_cache_copy.h"

#include <cuda.h>

#include <atomic>
#include <cstring>

#include <cuda/atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_check.h"
#include "util/error.h"

namespace ft::cuda {
namespace {

using SysU32 = ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_system>;
using WriteValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

constexpr int kPublishThreads = 32;
// counters_ layout (device memory, uint32): the request counter, each entry's last request, done.
constexpr int kCounter = 0, kEntryRequest = 1, kDone = 1 + kCopyRingEntries, kCounters = 2 + kCopyRingEntries;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/** One warp: the next request number s, entry s % kCopyRingEntries of the mapped ring gets the miss
 *  list, then (after a system fence) its sequence number with release. */
__global__ void __launch_bounds__(kPublishThreads)
    copy_publish_kernel(const CacheMiss* misses, const int32_t* n_misses, uint32_t* counters, int entry, CopyRing ring) {
  const uint32_t s = counters[kCounter] + 1;
  const int e = static_cast<int>(s % kCopyRingEntries);
  int32_t n = *n_misses;
  n = n < 0 ? 0 : (n > ring.max_misses ? ring.max_misses : n);
  CacheMiss* dst = ring.misses + static_cast<int64_t>(e) * ring.max_misses;
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = misses[i];
  if (threadIdx.x == 0) ring.n[e] = n;
  __threadfence_system();
  __syncwarp();
  if (threadIdx.x != 0) return;
  counters[kCounter] = s;
  counters[kEntryRequest + entry] = s;
  SysU32(ring.seq[e]).store(s, ::cuda::memory_order_release);
}

/** One thread: polls done (written by the copy stream's memory operation) until it reaches the
 *  entry's request; after limit_ns it stores the request in timed_out (mapped) and returns. */
__global__ void copy_wait_kernel(uint32_t* counters, int entry, uint32_t* timed_out, uint64_t limit_ns) {
  const uint32_t target = counters[kEntryRequest + entry];
  SysU32 done(counters[kDone]);
  if (static_cast<int32_t>(done.load(::cuda::memory_order_acquire) - target) >= 0) return;
  const uint64_t t0 = global_ns();
  unsigned ns = 32;
  while (static_cast<int32_t>(done.load(::cuda::memory_order_acquire) - target) < 0) {
    if (global_ns() - t0 > limit_ns) {
      SysU32(*timed_out).store(target, ::cuda::memory_order_release);
      return;
    }
    __nanosleep(ns);
    ns = ns < 256 ? 2 * ns : 256;
  }
}

}  // namespace

DmaPrefetch::DmaPrefetch(const ExpertBanks& banks, const GatherArgs& gather, int32_t n_slots, int32_t max_misses,
                         int device, int spin_us, uint8_t* staging, int decode_blocks)
    : banks_(banks), gather_(gather), n_slots_(n_slots), device_(device), staging_(staging),
      decode_blocks_(decode_blocks < 1 ? 1 : decode_blocks) {
  const bool ec12 = banks.format() == BankFormat::kEc12;
  if (ec12 && (!gather.ec12 || !staging))
    fail(ErrorCode::kInvalidArgument, "expert cache: the copy-engine prefetch of EC12 records needs their layouts "
         "and a staging buffer to decode from");
  cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue32", &write_value_, 12000, cudaEnableDefault, &q) !=
          cudaSuccess ||
      q != cudaDriverEntryPointSuccess || !write_value_) {
    (void)cudaGetLastError();
    fail(ErrorCode::kUnsupported, "expert cache: the CUDA driver offers no stream memory operations "
         "(cuStreamWriteValue32) for the copy-engine prefetch");
  }
  const int64_t n_entries = kCopyRingEntries;
  const int64_t bytes = 64 + n_entries * 8 + n_entries * max_misses * static_cast<int64_t>(sizeof(CacheMiss));
  FT_CUDA_CHECK(cudaHostAlloc(&host_, static_cast<size_t>(bytes), cudaHostAllocMapped));
  std::memset(host_, 0, static_cast<size_t>(bytes));
  FT_CUDA_CHECK(cudaHostGetDevicePointer(&host_dev_, host_, 0));
  auto view = [&](void* base, CopyRing& r, uint32_t*& timed_out) {
    auto* b = static_cast<uint8_t*>(base);
    timed_out = reinterpret_cast<uint32_t*>(b);             // its own 64 bytes
    r.seq = reinterpret_cast<uint32_t*>(b + 64);
    r.n = reinterpret_cast<int32_t*>(b + 64 + n_entries * 4);
    r.misses = reinterpret_cast<CacheMiss*>(b + 64 + n_entries * 8);
    r.max_misses = max_misses;
  };
  view(host_, ring_, timed_out_);
  view(host_dev_, ring_dev_, timed_out_dev_);
  FT_CUDA_CHECK(cudaMalloc(&counters_, kCounters * sizeof(uint32_t)));
  FT_CUDA_CHECK(cudaMemset(counters_, 0, kCounters * sizeof(uint32_t)));
  FT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  if (ec12) {
    FT_CUDA_CHECK(cudaStreamCreateWithFlags(&decode_stream_, cudaStreamNonBlocking));
    for (int i = 0; i < kStagingRecords; ++i) {
      FT_CUDA_CHECK(cudaEventCreateWithFlags(&staged_[i], cudaEventDisableTiming));
      FT_CUDA_CHECK(cudaEventCreateWithFlags(&decoded_[i], cudaEventDisableTiming));
    }
  }
  auto write = reinterpret_cast<WriteValue32>(write_value_);
  const CUdeviceptr done = reinterpret_cast<CUdeviceptr>(counters_ + kDone);
  // The signal follows the request's last write to a slot: its copy, or for EC12 its decode.
  cudaStream_t signal_stream = ec12 ? decode_stream_ : stream_;
  copier_ = std::make_unique<PrefetchCopier>(
      ring_, [this](const CacheMiss& m) { copy(m); },
      [write, done, signal_stream](uint32_t seq) {
        const CUresult r = write(reinterpret_cast<CUstream>(signal_stream), done, seq, 0);
        if (r != CUDA_SUCCESS) fail(ErrorCode::kInternal, "expert cache: cuStreamWriteValue32 failed ({})", static_cast<int>(r));
      },
      spin_us, [device] { FT_CUDA_CHECK(cudaSetDevice(device)); });
}

void DmaPrefetch::copy(const CacheMiss& m) {
  if (m.layer < 0 || m.layer >= banks_.n_layers() || m.expert < 0 || m.expert >= banks_.n_expert(m.layer) ||
      m.slot < 0 || m.slot >= n_slots_)
    fail(ErrorCode::kInternal, "expert cache: prefetch miss (layer {}, expert {}, slot {}) out of range", m.layer,
         m.expert, m.slot);
  auto check = [](cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail(ErrorCode::kInternal, "expert cache: prefetch {}: {}", what, cudaGetErrorString(e));
  };
  const auto bytes = static_cast<size_t>(banks_.record_bytes(m.layer));
  if (!staging_) {
    check(cudaMemcpyAsync(gather_.pool + static_cast<int64_t>(m.slot) * gather_.slot_bytes,
                          banks_.record(m.layer, m.expert), bytes, cudaMemcpyHostToDevice, stream_),
          "copy");
    return;
  }
  // EC12: into staging buffer i once its previous decode is done, then decoded from there.
  const int i = static_cast<int>(next_stage_++ % kStagingRecords);
  uint8_t* stage = staging_ + i * (staging_bytes(gather_) / kStagingRecords);
  check(cudaStreamWaitEvent(stream_, decoded_[i], 0), "wait for a staging buffer");
  check(cudaMemcpyAsync(stage, banks_.record(m.layer, m.expert), bytes, cudaMemcpyHostToDevice, stream_), "copy");
  check(cudaEventRecord(staged_[i], stream_), "event");
  check(cudaStreamWaitEvent(decode_stream_, staged_[i], 0), "wait for a staged record");
  launch_cache_stream_ec12(gather_, m.layer, m.slot, 1, decode_blocks_, decode_stream_, stage);
  check(cudaEventRecord(decoded_[i], decode_stream_), "event");
}

DmaPrefetch::~DmaPrefetch() {
  copier_.reset();
  for (cudaStream_t s : {stream_, decode_stream_})
    if (s) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  for (int i = 0; i < kStagingRecords; ++i) {
    if (staged_[i]) cudaEventDestroy(staged_[i]);
    if (decoded_[i]) cudaEventDestroy(decoded_[i]);
  }
  if (counters_) cudaFree(counters_);
  if (host_) cudaFreeHost(host_);
}

void DmaPrefetch::publish(const CacheMiss* misses, const int32_t* n_misses, int entry, cudaStream_t stream) {
  if (entry < 0 || entry >= kCopyRingEntries)
    fail(ErrorCode::kInvalidArgument, "expert cache: prefetch entry {} outside [0, {})", entry, kCopyRingEntries);
  copy_publish_kernel<<<1, kPublishThreads, 0, stream>>>(misses, n_misses, counters_, entry, ring_dev_);
  FT_CUDA_LAUNCH_CHECK();
}

void DmaPrefetch::wait(int entry, cudaStream_t stream) {
  if (entry < 0 || entry >= kCopyRingEntries)
    fail(ErrorCode::kInvalidArgument, "expert cache: prefetch entry {} outside [0, {})", entry, kCopyRingEntries);
  copy_wait_kernel<<<1, 1, 0, stream>>>(counters_, entry, timed_out_dev_,
                                         static_cast<uint64_t>(kWaitLimitSeconds * 1e9));
  FT_CUDA_LAUNCH_CHECK();
}

void DmaPrefetch::check() {
  const uint32_t t = SysU32(*timed_out_).load(::cuda::memory_order_acquire);
  if (t != checked_timeout_) {
    checked_timeout_ = t;
    fail(ErrorCode::kInternal,
         "expert cache: prefetch request {} was not copied within {} s ({} served); that step's results are wrong", t,
         kWaitLimitSeconds, copier_->served());
  }
  const int64_t f = copier_->failures();
  if (f != checked_failures_) {
    checked_failures_ = f;
    fail(ErrorCode::kInternal, "expert cache: {}; that step's results may be wrong", copier_->last_error());
  }
}

}  // namespace ft::cuda
