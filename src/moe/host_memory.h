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
#include "util/error.h"

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
  int64_t cgroup_inactive_file = -1;  // of that usage, inactive page cache (memory.stat: v2 inactive_file, v1 total_inactive_file)
  int64_t memlock = -1;        // RLIMIT_MEMLOCK's soft limit (pinned memory; -1: unlimited)
};

/** Reads MemAvailable and the cgroup limits under `root` ("/" on a real system; a test plants
 *  proc/meminfo, proc/self/cgroup and sys/fs/cgroup/... under a folder): cgroup v2 ("0::/path":
 *  sys/fs/cgroup/<path>/memory.max, "max" = none, memory.current and memory.stat's inactive_file;
 *  the tightest limit from the path up to the root), else v1 (the "memory" controller's line:
 *  sys/fs/cgroup/memory/<path>/memory.limit_in_bytes, above 2^60 = none, memory.usage_in_bytes and
 *  memory.stat's total_inactive_file). A cgroup path missing
 *  under the mount (a container's namespace) is read at the mount's root. memlock is left -1 (see
 *  memlock_limit). Missing or unreadable files leave their fields -1; never throws. */
HostMemoryLimits read_host_memory_limits(const std::string& root = "/");

/** RLIMIT_MEMLOCK's soft limit in bytes (getrlimit), -1 when unlimited or unreadable. */
int64_t memlock_limit();

/** Host memory set aside when measuring usable host memory (usable_host_memory): 1 GiB. */
inline constexpr int64_t kHostMemoryMargin = int64_t{1} << 30;

/** Host memory the expert banks may take: the least of MemAvailable, the cgroup's room (limit less
 *  its working set: usage less inactive page cache, which the kernel reclaims before it OOM-kills,
 *  as cAdvisor and the kubelet count it; a mapped checkpoint's pages read by the fill sit there)
 *  and, when the banks are pinned (`pinned`: the CUDA backend), RLIMIT_MEMLOCK, less `margin`, at
 *  least 0; -1 when none of them is known (no bound). */
int64_t usable_host_memory(const HostMemoryLimits& m, bool pinned, int64_t margin = kHostMemoryMargin);

/** Host memory this process can still take now, in bytes (-1: not known). The engine measures it
 *  at start (the banks' bound, less kHostMemoryMargin) and the expert banks again before each
 *  layer's fill (ExpertBanks); tests plant a function that reports memory shrinking mid-load.
 *  Called from the fill's worker threads, one call at a time. */
using HostMemoryProbe = std::function<int64_t()>;

/** The default HostMemoryProbe: usable_host_memory(read_host_memory_limits(root), unpinned, no
 *  margin): MemAvailable and the cgroup's room (a few small reads of /proc and /sys, ~0.1 ms). */
int64_t host_memory_room(const std::string& root = "/");

/** Thrown by the expert banks' fill (ExpertBanks) when host memory, measured again before a layer,
 *  no longer holds what the layers still to copy need: another process took memory since the start.
 *  The engine plans again with the memory measured now when it can (whole layers to the GPU), else
 *  passes it on. Code kOutOfMemory; the message (host_memory_shrunk) names the numbers. */
class HostMemoryShrunk : public Error {
 public:
  HostMemoryShrunk(const std::string& message, int64_t layer, int64_t need, int64_t room_now, int64_t room_start)
      : Error(ErrorCode::kOutOfMemory, message), layer(layer), need(need), room_now(room_now), room_start(room_start) {}
  int64_t layer;       // the model layer (MoE) whose fill was about to start
  int64_t need;        // bytes of host memory the layers still to copy need (kBankFillReserve included)
  int64_t room_now;    // HostMemoryProbe's answer before that layer
  int64_t room_start;  // ... before the fill started
};

/** The HostMemoryShrunk for a fill stopped before model layer `layer`: `need` bytes still needed
 *  (`still_to_copy` of them bank records, the rest kBankFillReserve; for a `source_released`
 *  checkpoint the layers in flight), `room_now` usable now and `room_start` before the fill, with
 *  what helps (free host memory, --host-memory-limit to place more layers in GPU memory from the
 *  start, a smaller model or weight type). */
HostMemoryShrunk host_memory_shrunk(int64_t layer, int64_t need, int64_t still_to_copy, bool source_released,
                                    int64_t room_now, int64_t room_start);

/** One line for the log: each known bound of `m` and the usable figure. */
std::string describe_host_memory(const HostMemoryLimits& m, bool pinned, int64_t usable);

/** Host memory set aside, beyond the banks, for the runtime's own host allocations (staging and
 *  exchange buffers, the CUDA context) when checking that banks fit: 1 GiB. */
inline constexpr int64_t kBankHostReserve = int64_t{1} << 30;

/** Host memory that must stay free beyond the records still to write when the banks' fill measures
 *  again before a layer (ExpertBanks): half of kBankHostReserve, which the start's check asks for in
 *  full. The other half is what the process itself may take while it fills (page tables of the
 *  banks and of a mapped checkpoint, thread stacks), so a plan packed to the limit does not trip it. */
inline constexpr int64_t kBankFillReserve = kBankHostReserve / 2;

/** Checks, before any bank memory is touched, that expert banks of `bank_bytes` can be filled with
 *  `available` bytes of host memory (a HostMemoryProbe's answer, host_memory_room() by default:
 *  MemAvailable and the cgroup's room; < 0: unknown, no check). A
 *  checkpoint in anonymous memory (`source_released`: a synthetic model) hands each layer's pages
 *  back once its bank holds them, so the fill needs only `in_flight_bytes` (the layers copied at
 *  once) beyond what the checkpoint holds; a mapped file's pages are page cache, already counted in
 *  MemAvailable, so the banks need all of `bank_bytes`. kBankHostReserve is added either way.
 *  Throws ft::Error(kOutOfMemory) naming what is needed and available (and, for a mapped file, the
 *  largest banks that would fit) with the flags that help: without it the kernel's OOM killer ends
 *  the process mid-fill (seen: qwen3-235b-a22b, 123 GiB of q4_k weights, on a 128 GiB host). */
void check_bank_host_memory(int64_t bank_bytes, int64_t in_flight_bytes, bool source_released, int64_t available);

}  // namespace ft
