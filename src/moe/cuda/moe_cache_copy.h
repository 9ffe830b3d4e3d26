#pragma once
// DmaPrefetch: the device side of the expert cache's copy-engine prefetch (protocol:
// moe/prefetch_copier.h). publish() queues a one-warp kernel that hands a prefetch admission's
// miss list to the host thread through a CopyRing in mapped host memory; the thread copies each
// missed expert with cudaMemcpyAsync on its own stream (the DMA engines) and then writes the
// request's number into device memory with a stream memory operation (cuStreamWriteValue32, which
// fences the copies before it); wait() queues a one-thread kernel that polls that number. Both
// kernels have fixed shapes and read every count from device memory, so a decode step that uses
// them is captured in a CUDA graph like any other. EC12 banks (moe/ec12.h) are decoded on the
// way: the thread copies each coded record into a device staging buffer (a ring of
// kStagingRecords) and queues the decoding gather kernel (moe_cache_kernels.h) from there into the
// slot on a second stream, which then carries the request's signal. Host code of the CUDA backend
// only.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "moe/cuda/moe_cache_kernels.h"
#include "moe/cache_admission.h"
#include "moe/expert_bank.h"
#include "moe/prefetch_copier.h"

namespace ft::cuda {

class DmaPrefetch {
 public:
  /** Copies misses of at most `max_misses` experts from `banks` (pinned for CUDA device `device`)
   *  into the slot pool gather.pool (n_slots slots of gather.slot_bytes, device memory). `spin_us`:
   *  the host thread's polling time before it sleeps (PrefetchCopier). EC12 banks (gather.ec12
   *  set, the arrays of `gather` in device memory): `staging` is device memory of
   *  staging_bytes(gather) bytes, and each record decodes from there with `decode_blocks` blocks.
   *  Throws ft::Error(kUnsupported) when the driver offers no stream memory operations,
   *  kInvalidArgument for EC12 banks without gather.ec12 or staging, kOutOfMemory from the
   *  allocations. */
  DmaPrefetch(const ExpertBanks& banks, const GatherArgs& gather, int32_t n_slots, int32_t max_misses, int device,
              int spin_us, uint8_t* staging = nullptr, int decode_blocks = 1);
  /** Stops the host thread; the caller must have synchronized the streams that queued publish()
   *  and wait() (a wait for a request the stopped thread never served would spin to its limit). */
  ~DmaPrefetch();
  DmaPrefetch(const DmaPrefetch&) = delete;
  DmaPrefetch& operator=(const DmaPrefetch&) = delete;

  /** Queues on `stream` the hand-off of the miss list `misses` [*n_misses] (device memory, written
   *  by the admission queued before) as the next request; its number goes to `entry` (0 or 1: the
   *  caller's prefetch buffer), which wait(entry) reads. */
  void publish(const CacheMiss* misses, const int32_t* n_misses, int entry, cudaStream_t stream);
  /** Queues on `stream` a wait until the request last published into `entry` has been copied. It
   *  gives up after kWaitLimitSeconds and records the request for check() instead of hanging. */
  void wait(int entry, cudaStream_t stream);
  /** Throws ft::Error(kInternal) when, since the last check, a wait gave up or a copy failed (that
   *  step's experts, and so its results, may be wrong). Reads host memory only; no synchronisation. */
  void check();

  static constexpr double kWaitLimitSeconds = 10.0;
  /** EC12 staging buffers: the copy of record i + kStagingRecords waits for record i's decode (a
   *  decode of HBM data takes a few percent of its record's copy over PCIe). */
  static constexpr int kStagingRecords = 3;
  /** Device bytes of the staging an EC12 `gather` needs (0 for stored records). */
  static int64_t staging_bytes(const GatherArgs& gather) {
    return gather.ec12 ? kStagingRecords * ((gather.max_record_bytes + 255) / 256 * 256) : 0;
  }

 private:
  /** Queues miss m's copy (stored: into its slot; EC12: into staging, then its decode). */
  void copy(const CacheMiss& m);

  const ExpertBanks& banks_;
  GatherArgs gather_;
  int32_t n_slots_;
  int device_;
  uint8_t* staging_ = nullptr;  // EC12: kStagingRecords records, staging_bytes(gather_) / kStagingRecords apart
  int decode_blocks_ = 1;
  int64_t next_stage_ = 0;                      // the copier thread's next staging buffer
  cudaStream_t decode_stream_ = nullptr;        // EC12: the decodes and the signals
  cudaEvent_t staged_[kStagingRecords] = {};    // EC12: a buffer's copy done
  cudaEvent_t decoded_[kStagingRecords] = {};   // EC12: its decode done (the buffer is free)
  void* host_ = nullptr;  // the mapped block: CopyRing's arrays and the wait's timed-out number
  void* host_dev_ = nullptr;
  CopyRing ring_;           // host view
  CopyRing ring_dev_;       // device view of the same memory
  uint32_t* timed_out_ = nullptr;      // host view
  uint32_t* timed_out_dev_ = nullptr;  // device view
  uint32_t* counters_ = nullptr;       // device: [0] request counter, [1..2] entry's request, [3] done
  cudaStream_t stream_ = nullptr;      // the copies (stored: and the signals)
  void* write_value_ = nullptr;        // cuStreamWriteValue32
  uint32_t checked_timeout_ = 0;
  int64_t checked_failures_ = 0;
  std::unique_ptr<PrefetchCopier> copier_;  // last: its thread uses the members above
};

}  // namespace ft::cuda
