#pragma once
// The in-process twin of an NCCL communicator: N ranks are N threads of one process sharing one
// group object. Each collective is a rendezvous (a mutex, a condition variable and a generation
// counter; no spinning, no sleeps): the last rank to arrive checks that the ranks agree, does the whole
// operation for every rank, reduces in rank order (so results are bit-identical run to run) and wakes
// the others. A rank that waits past the timeout aborts the group, so one rank that never arrives (it
// threw, or took another path) ends every rank's wait with an error instead of a hang.
// split (ncclCommSplit) is a rendezvous of the same kind that makes one new group per color.
// Used by the CPU tests of tensor and expert parallelism; the GPU build uses NCCL behind the same
// interface (dist/collective.h).
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "dist/collective.h"

namespace ft::dist {

struct InProcessOptions {
  /** How long a rank waits in a collective for the others before it aborts the group. */
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
};

/** `n_ranks` handles of one new group; handle r has rank() == r. Each handle is used by one thread at
 *  a time; buffers are host memory (Device::kCpu). Throws ft::Error(kInvalidArgument) for n_ranks < 1. */
std::vector<std::unique_ptr<Collective>> make_in_process_group(int n_ranks, InProcessOptions options = {});

/** Runs `body(handle)` for every handle on a thread of its own and joins them all. When a body throws,
 *  the group is aborted (the other ranks' collectives end with an error instead of waiting) and, once
 *  every thread has ended, the first exception thrown is rethrown (the cause; the others' "aborted"
 *  errors are dropped). */
void run_ranks(const std::vector<std::unique_ptr<Collective>>& ranks, const std::function<void(Collective&)>& body);

}  // namespace ft::dist
