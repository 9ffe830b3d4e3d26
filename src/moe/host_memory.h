#pragma once
// Host memory for the expert banks: the backend's allocator for them (backend/host_allocator.h:
// pinned after the fill on CUDA) and the check that they fit in the host's free memory.
// C++17-clean: included from CUDA sources.
#include <cstdint>
#include <functional>
#include <memory>

#include "backend/host_allocator.h"
#include "backend/ops.h"
#include "tensor/tensor.h"

namespace ft {

/** The allocator expert banks for backend `ops` need: Ops::host_allocator() (pinned for its device
 *  on the CUDA backend, make_host_allocator() otherwise). */
std::unique_ptr<HostAllocator> make_bank_allocator(Ops& ops);

/** MemAvailable of /proc/meminfo in bytes (what can be allocated without swapping, reclaimable page
 *  cache included), or -1 where it cannot be read. */
int64_t host_memory_available();

/** Host memory set aside, beyond the banks, for the runtime's own host allocations (staging and
 *  exchange buffers, the CUDA context) when checking that banks fit: 1 GiB. */
inline constexpr int64_t kBankHostReserve = int64_t{1} << 30;

/** Checks, before any bank memory is touched, that expert banks of `bank_bytes` can be filled with
 *  `available` bytes of MemAvailable (host_memory_available(); < 0: unknown, no check). A
 *  checkpoint in anonymous memory (`source_released`: a synthetic model) hands each layer's pages
 *  back once its bank holds them, so the fill needs only `in_flight_bytes` (the layers copied at
 *  once) beyond what the checkpoint holds; a mapped file's pages are page cache, already counted in
 *  MemAvailable, so the banks need all of `bank_bytes`. kBankHostReserve is added either way.
 *  Throws ft::Error(kOutOfMemory) naming what is needed and available (and, for a mapped file, the
 *  largest banks that would fit) with the flags that help: without it the kernel's OOM killer ends
 *  the process mid-fill (seen: qwen3-235b-a22b, 123 GiB of q4_k weights, on a 128 GiB host). */
void check_bank_host_memory(int64_t bank_bytes, int64_t in_flight_bytes, bool source_released, int64_t available);

}  // namespace ft
