#pragma once
// Launchers of the expert-cache kernels (moe_cache_admit.cu, moe_cache_gather.cu). Both run with
// fixed launch shapes and read every count from device memory, so they can be captured in a CUDA
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
 *  maps `layer`'s n experts to the region of s.n_expert slots at `first`. Throws kInvalidArgument
 *  for arguments out of range. */
void launch_cache_claim_region(const CacheStateRefs& s, int32_t layer, int32_t first, int32_t n,
                               int64_t record_bytes, cudaStream_t stream);

/** Arguments of the gather: miss i of *n_misses (device) copies record_bytes[m.layer] bytes from
 *  host_base[m.layer] + m.expert * record_bytes[m.layer] (mapped host memory, read over UVA) to
 *  pool + m.slot * slot_bytes (device). Addresses and sizes are multiples of 16 bytes. */
struct GatherArgs {
  const CacheMiss* misses = nullptr;
  const int32_t* n_misses = nullptr;
  int32_t max_misses = 0;             // capacity of the miss list (bounds the grid's work)
  const uint64_t* host_base = nullptr;  // [n_layers] device-visible address of each layer's records
  const int64_t* record_bytes = nullptr;  // [n_layers]
  int64_t max_record_bytes = 0;
  uint8_t* pool = nullptr;
  int64_t slot_bytes = 0;
};

/** Copies the missed records into their slots with 16-byte loads, `blocks` blocks (a few per SM
 *  keep enough loads in flight to saturate PCIe; the grid does not depend on the miss count). */
void launch_cache_gather(const GatherArgs& a, int blocks, cudaStream_t stream);

}  // namespace ft::cuda
