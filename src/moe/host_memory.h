#pragma once
// Host memory for the expert banks: the backend's allocator for them (backend/host_allocator.h:
// pinned after the fill on CUDA) and the check that they fit in the host's free memory.
// C++17-clean: included from CUDA sources.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

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

/** What bounds this process's host memory, in bytes (-1: not known / no limit). */
struct HostMemoryLimits {
  int64_t mem_available = -1;  // MemAvailable of /proc/meminfo
  int64_t cgroup_limit = -1;   // the tightest memory limit of the process's cgroup and its ancestors (v2 memory.max, v1 memory.limit_in_bytes)
  int64_t cgroup_usage = -1;   // that cgroup's usage (v2 memory.current, v1 memory.usage_in_bytes)
  int64_t memlock = -1;        // RLIMIT_MEMLOCK's soft limit (pinned memory; -1: unlimited)
};

/** Reads MemAvailable and the cgroup limits under `root` ("/" on a real system; a test plants
 *  proc/meminfo, proc/self/cgroup and sys/fs/cgroup/... under a folder): cgroup v2 ("0::/path":
 *  sys/fs/cgroup/<path>/memory.max, "max" = none, and memory.current; the tightest limit from the
 *  path up to the root), else v1 (the "memory" controller's line: sys/fs/cgroup/memory/<path>/
 *  memory.limit_in_bytes, above 2^60 = none, and memory.usage_in_bytes). A cgroup path missing
 *  under the mount (a container's namespace) is read at the mount's root. memlock is left -1 (see
 *  memlock_limit). Missing or unreadable files leave their fields -1; never throws. */
HostMemoryLimits read_host_memory_limits(const std::string& root = "/");

/** RLIMIT_MEMLOCK's soft limit in bytes (getrlimit), -1 when unlimited or unreadable. */
int64_t memlock_limit();

/** Host memory set aside when measuring usable host memory (usable_host_memory): 1 GiB. */
inline constexpr int64_t kHostMemoryMargin = int64_t{1} << 30;

/** Host memory the expert banks may take: the least of MemAvailable, the cgroup's room (limit -
 *  usage) and, when the banks are pinned (`pinned`: the CUDA backend), RLIMIT_MEMLOCK, less
 *  `margin`, at least 0; -1 when none of them is known (no bound). */
int64_t usable_host_memory(const HostMemoryLimits& m, bool pinned, int64_t margin = kHostMemoryMargin);

/** One line for the log: each known bound of `m` and the usable figure. */
std::string describe_host_memory(const HostMemoryLimits& m, bool pinned, int64_t usable);

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
