#pragma once
// NcclCollective: dist::Collective over NCCL, one handle per GPU rank (CUDA build only; include this
// header under FT_HAVE_CUDA). Each operation maps to one NCCL call enqueued on the rank's stream:
// all_reduce -> ncclAllReduce(ncclSum), all_gather -> ncclAllGather, reduce_scatter ->
// ncclReduceScatter(ncclSum), broadcast -> ncclBroadcast (in place), split -> ncclCommSplit, abort ->
// ncclCommAbort. dtypes: F32 -> ncclFloat32, BF16 -> ncclBfloat16; broadcast also moves I32 and U8
// (as bytes).
//
// Stream order. The stream given at construction should be the rank's compute stream: a collective
// then runs after the kernels that wrote its send buffer, and the kernels enqueued after it read its
// recv buffer, with no host synchronisation; the calls can be captured into a CUDA graph (NCCL
// supports capture; make one eager call of each op first, as a graph runner's warm-up does, so the
// ranks connect outside the capture). A call returns once the operation is enqueued, not when it is done: call
// synchronize() (or synchronise the stream) before the host reads the results.
//
// Differences from the in-process twin (dist/in_process_collective.h):
//  - Sums are NCCL's: their order depends on the algorithm and topology, so they are not guaranteed
//    bit-identical to the twin's rank-order sums (nor across NCCL versions or GPU counts). Tensor- and
//    expert-parallel results over NCCL agree with one rank within float tolerance, not bit for bit.
//  - Only this rank's own arguments are checked (dtype, device memory, sizes); NCCL does not check that
//    the ranks agree on counts, dtypes or roots, so a disagreement is undefined (a hang or wrong values).
//  - Buffers must be device memory (Device::kCuda) of this rank's GPU.
//  - A host-blocking NCCL call (split, or the first collective that connects the ranks) waits for
//    every rank; abort ends the GPU-side waits, not a host call blocked on a rank that never comes.
//
// NVLink multicast (NVLS) is forced off: every factory sets NCCL_NVLS_ENABLE=0 in the environment
// before NCCL reads it, whatever the user set (issue 43: multicast objects are not available on every
// machine, and all ranks must agree).
//
// Errors: ft::Error(kInvalidArgument) naming the op and the buffer for a host buffer, a dtype NCCL is
// not given here, or sizes that do not fit; ft::Error(kInternal) when an NCCL call fails (quoting
// ncclGetErrorString and ncclGetLastError), when NCCL reports an asynchronous error (checked at the
// start of every call and while synchronize() waits), and, after abort, "<op>: the collective group
// was aborted: <reason>". Without NCCL (libnccl.so.2 not loadable at run time, see
// dist/cuda/nccl_library.h, or a CUDA build without nccl.h) the factories throw ft::Error(kUnsupported).
#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "dist/collective.h"
#include "dist/nccl_factory.h"  // nccl_available, nccl_unavailable_reason, make_nccl_group_on
#include "dist/nccl_id.h"

namespace ft::dist {

/** A new NCCL unique id (ncclGetUniqueId) for make_nccl_rank: made once (by rank 0, say) and passed to
 *  every rank, e.g. as NcclId::to_hex(). Needs no GPU. Throws ft::Error(kInternal) when NCCL fails
 *  (no network interface for its bootstrap), kUnsupported without NCCL. */
NcclId nccl_unique_id();

/** devices.size() ranks in this process (ncclCommInitAll): rank r runs on CUDA device devices[r] and
 *  enqueues on streams[r] (a stream of that device, or nullptr for its legacy default stream). Each
 *  handle is then driven by its own thread (one host thread calling every rank's collectives one after
 *  another may wait forever on the first: NCCL needs ncclGroupStart/End for that). abort() on any
 *  handle aborts the whole group. Throws ft::Error(kInvalidArgument) for no devices, sizes that
 *  differ, a device listed twice or not visible; kInternal when NCCL fails; kUnsupported without NCCL (nccl_unavailable_reason()). */
std::vector<std::unique_ptr<Collective>> make_nccl_group(std::vector<int> devices, std::vector<cudaStream_t> streams);

/** Rank `rank` of `n_ranks` over processes (or nodes), one call per rank, every one with the same `id`
 *  (ncclCommInitRank; blocks until all ranks have joined). Runs on CUDA device `device`, enqueues on
 *  `stream`. abort() aborts this rank only; the others see the failure as NCCL errors or must be
 *  aborted by their own process. Throws ft::Error(kInvalidArgument) for rank outside [0, n_ranks) or a
 *  device that is not visible; kInternal when NCCL fails; kUnsupported without NCCL (nccl_unavailable_reason()). */
std::unique_ptr<Collective> make_nccl_rank(const NcclId& id, int rank, int n_ranks, int device, cudaStream_t stream);

/** One rank's handle (what the factories return, as Collective). Not copyable; each handle is used by
 *  one thread at a time (abort may come from any thread). */
class NcclCollective final : public Collective {
 public:
  struct Group;   // the comms of one communicator that live in this process (defined in the .cpp)
  struct Member;  // one of them

  /** Used by the factories: the handle of `member` of `group`. */
  NcclCollective(std::shared_ptr<Group> group, Member* member, int device, cudaStream_t stream);
  ~NcclCollective() override;
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  int group_size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce(const Tensor& send, const Tensor& recv) override;
  void all_gather(const Tensor& send, const Tensor& recv) override;
  void reduce_scatter(const Tensor& send, const Tensor& recv) override;
  void broadcast(const Tensor& buffer, int root) override;
  /** The sub-communicator shares this handle's device and stream. */
  std::unique_ptr<Collective> split(int color, int key) override;
  void abort(const std::string& reason) override;

  /** This rank's CUDA device and stream. */
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }

  /** Waits until everything enqueued on the stream so far is done, polling NCCL's asynchronous error
   *  state meanwhile (ncclCommGetAsyncError) and the group's abort. Throws ft::Error(kInternal) for an
   *  NCCL or CUDA error or an abort. */
  void synchronize();

 private:
  template <typename Call>
  void enqueue(const char* op, const char* call_name, Call&& call);
  /** Aborts this rank's comm (once) and throws "<op>: the collective group was aborted: <reason>".
   *  Called with member_->busy held. */
  [[noreturn]] void abort_here(const char* op);

  std::shared_ptr<Group> group_;
  Member* member_;  // this handle's comm, owned by group_
  int device_;
  cudaStream_t stream_;
  int rank_ = 0, size_ = 1;
  int splits_ = 0;  // splits made so far: with the color, names the sub-group a split joins
};

}  // namespace ft::dist
