#pragma once
// Launchers of the expert-cache kernels (moe_cache_admit.cu, moe_cache_gather.cu, moe_cache_bias.cu).
// All run with fixed launch shapes and read every count from device memory, so they can be captured in a CUDA
// graph. Host code of the CUDA backend only (includes the CUDA runtime header).
#include <cuda_runtime.h>

#include <cstdint>

#include "moe/cache_admission.h"

namespace ft::cuda {

/** One admission (the algorithm of moe/cache_admission.h, bit for bit) in one thread block.
 *  `s` and every pointer of `a` are device memory; a.layer, a.n_pairs and a.fetch_cap are launch
 *  arguments (constant per captured layer). Needs 2 * s.n_expert int32 of dynamic shared memory
 *  (throws kUnsupported for more than 4096 experts per layer). */
void launch_cache_admit(const CacheStateRefs& s, const AdmitArgs& a, cudaStream_t stream);

/** claim_region (moe/cache_admission.h, bit for bit with claim_region_reference) in one block:
 *  maps `layer`'s n experts to the region of s.n_expert slots at `first`; src_slot [n] (device, may
 *  be null) receives each expert's cached slot, -1, or kStreamOnCpu for the CPU's share
 *  cpu_share_q16 / 65536 of the uncached experts, and experts cached below slot keep_below stay
 *  there. Throws kInvalidArgument for arguments out of range. */
void launch_cache_claim_region(const CacheStateRefs& s, int32_t layer, int32_t first, int32_t n,
                               int64_t record_bytes, int32_t* src_slot, int32_t keep_below, cudaStream_t stream,
                               int32_t cpu_share_q16 = 0);

/** Splits a streamed layer's routes between the GPU and the CPU by its region's claim (`keep`,
 *  device [n_expert], claim_region's src_slot): for each of the n routed ids, gpu_ids = the id and
 *  cpu_ids = -1, or gpu_ids = -1 and cpu_ids = the id where keep[id] == kStreamOnCpu; ids outside
 *  [0, n_expert) go to neither (-1, -1). ids, gpu_ids, cpu_ids I32 [n] on the device. */
void launch_stream_split(const int32_t* ids, const int32_t* keep, int32_t n_expert, int64_t n, int32_t* gpu_ids,
                         int32_t* cpu_ids, cudaStream_t stream);

/** Where a layer's EC12 records (moe/ec12.h, BankFormat::kEc12) put each coded matrix and where
 *  its decoded BF16 goes in a slot. Matrix j: 0 gate, 1 up, 2 down. */
struct Ec12Layer {
  int64_t record_offset[3] = {};  // bytes from the record start (the coded matrix)
  int64_t slot_offset[3] = {};    // bytes from the slot start (the BF16 matrix)
  int32_t rows[3] = {}, cols[3] = {};
  int32_t items[3] = {};  // work items: 256 groups of 64 values each (the last fewer)
};

/** Ec12Layer for matrices [rows[j], cols[j]] at the given offsets. Host side (moe_cache_gather.cu).
 *  Throws kInvalidArgument for a shape EC12 does not take or offsets not 16-byte aligned. */
Ec12Layer make_ec12_layer(const int64_t record_offset[3], const int64_t slot_offset[3], const int64_t rows[3],
                          const int64_t cols[3]);

/** Arguments of the gather: miss i of *n_misses (device) copies record_bytes[m.layer] bytes from
 *  host_base[m.layer] + m.expert * record_bytes[m.layer] (mapped host memory, read over UVA) to
 *  pool + m.slot * slot_bytes (device). Addresses and sizes are multiples of 16 bytes. With `ec12`
 *  set the records are EC12-coded and each is decoded into its slot instead of copied. */
struct GatherArgs {
  const CacheMiss* misses = nullptr;
  const int32_t* n_misses = nullptr;
  int32_t max_misses = 0;             // capacity of the miss list (bounds the grid's work)
  const uint64_t* host_base = nullptr;  // [n_layers] device-visible address of each layer's records
  const int64_t* record_bytes = nullptr;  // [n_layers]
  int64_t max_record_bytes = 0;
  uint8_t* pool = nullptr;
  int64_t slot_bytes = 0;
  const Ec12Layer* ec12 = nullptr;  // [n_layers] (device) for EC12 banks; null: plain copies
  int32_t ec12_items = 0;           // work items of one EC12 record (the largest over layers)
};

/** Copies the missed records into their slots with 16-byte loads, `blocks` blocks (a few per SM
 *  keep enough loads in flight to saturate PCIe; the grid does not depend on the miss count). */
void launch_cache_gather(const GatherArgs& a, int blocks, cudaStream_t stream);

/** Decodes EC12 records (a.ec12 set) of `layer`'s experts 0..n-1 into slots first..first+n-1 with
 *  `blocks` blocks on `stream`: prefill streaming, reading the banks over UVA (src null; the copy
 *  engines cannot decode), or, with `src` (device memory), n records laid back to back there
 *  (record_bytes[layer] apart; the copy-engine prefetch's staging, one record at a time). With
 *  `keep` ([n] device, claim_region's src_slot), expert e with keep[e] >= 0 is copied from that
 *  slot of the pool (already decoded) instead, and one with kStreamOnCpu is skipped. Throws kInvalidArgument without a.ec12. */
void launch_cache_stream_ec12(const GatherArgs& a, int32_t layer, int32_t first, int32_t n, int blocks,
                              cudaStream_t stream, const uint8_t* src = nullptr, const int32_t* keep = nullptr);

/** Prefill streaming of stored (not EC12) records: `layer`'s experts 0..n-1 into slots
 *  first..first+n-1, expert e from slot keep[e] of the pool when keep (device [n], may be null) says
 *  it is cached there (device to device), none for kStreamOnCpu (the CPU computes it), else from
 *  the banks over UVA (PCIe reads by the SMs);
 *  `blocks` blocks on `stream`. Throws kInvalidArgument for EC12 banks. */
void launch_cache_stream(const GatherArgs& a, int32_t layer, int32_t first, int32_t n, const int32_t* keep, int blocks,
                         cudaStream_t stream);

/** One layer's biases for the slot-bias copy (moe_cache_bias.cu): bias j (0 gate, 1 up, 2 down) of
 *  expert e at src[j] + e * width[j] (resident, F32), slot s's row at dst[j] + s * width[j] (the
 *  slots' rows, moe/expert_slots.h SlotBiases); src[j] null when the layer has none. Device memory. */
struct SlotBiasLayer {
  const float* src[3] = {nullptr, nullptr, nullptr};
  float* dst[3] = {nullptr, nullptr, nullptr};
  int32_t width[3] = {0, 0, 0};
};

/** Arguments of the slot-bias copy: for miss i of *n_misses (device), every bias of (m.layer,
 *  m.expert) into slot m.slot's row. layers [n_layers] on the device. */
struct SlotBiasArgs {
  const CacheMiss* misses = nullptr;
  const int32_t* n_misses = nullptr;
  int32_t max_misses = 0;
  const SlotBiasLayer* layers = nullptr;
};

/** Queues the slot-bias copy on `stream` (fixed grid, counts read on the device: graph-capturable);
 *  device to device, a few KB a miss. Throws kInternal on a launch error. */
void launch_cache_bias_copy(const SlotBiasArgs& a, cudaStream_t stream);

}  // namespace ft::cuda
