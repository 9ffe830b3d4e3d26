#pragma once
// Collective: the communicator interface tensor and expert parallelism are written against. Its
// operations have NCCL's semantics (NCCL docs, "Collective Operations": ncclAllReduce, ncclAllGather,
// ncclReduceScatter, ncclBroadcast, ncclCommAbort), so the same sharding and dispatch code runs over
// NCCL on GPUs and over the in-process twin (dist/in_process_collective.h) in the CPU tests.
//
// Every rank of a group calls the same collectives in the same order with the same element count,
// dtype (and root); a call returns when this rank's part is done. Buffers are contiguous Tensor views
// of F32 or BF16 elements; a view's shape does not matter, only its element count. send and recv may
// be the same view (in place; for all_gather and reduce_scatter, NCCL's in-place forms too: all_gather's
// send is recv's block `rank`, reduce_scatter's recv is send's block `rank`).
//
// Errors (ft::Error, message naming the op and what differs): kInvalidArgument on every rank of the
// call when the ranks' counts, dtypes or roots disagree, when a buffer is not F32/BF16 or not host
// memory where the implementation needs it, or send/recv sizes do not fit the op; kInternal when the
// group was aborted (by any rank, or by a rank that waited past the timeout).
#include <memory>
#include <string>

#include "tensor/tensor.h"

namespace ft::dist {

class Collective {
 public:
  virtual ~Collective() = default;

  /** Ranks in the group (NCCL: ncclCommCount). */
  virtual int group_size() const = 0;
  /** This handle's rank, 0..group_size()-1 (NCCL: ncclCommUserRank). */
  virtual int rank() const = 0;

  /** recv = sum over ranks of send, element-wise (ncclAllReduce, ncclSum). send and recv: equal
   *  element counts and dtypes (F32 or BF16). Sums are taken in float32 in rank order (0, 1, ...) and
   *  rounded once to the buffer's dtype, so every rank receives the same bits, run after run. */
  virtual void all_reduce(const Tensor& send, const Tensor& recv) = 0;

  /** recv = concatenation of every rank's send in rank order (ncclAllGather): send has `count`
   *  elements, recv group_size() * count; rank r's send lands at recv elements [r*count, (r+1)*count). */
  virtual void all_gather(const Tensor& send, const Tensor& recv) = 0;

  /** recv = block `rank` of the element-wise sum of every rank's send (ncclReduceScatter, ncclSum):
   *  send has group_size() * count elements, recv count. Summed as all_reduce does. */
  virtual void reduce_scatter(const Tensor& send, const Tensor& recv) = 0;

  /** Every rank's `buffer` = rank `root`'s `buffer` (ncclBroadcast with sendbuff == recvbuff).
   *  root in [0, group_size()), the same on every rank. Moves bytes, so besides F32 and BF16 the
   *  buffer may be I32 or U8 (token ids, masks) where the implementation says so: NcclCollective
   *  does; the in-process twin takes F32 and BF16 only. */
  virtual void broadcast(const Tensor& buffer, int root) = 0;

  /** A new communicator of the ranks that pass the same `color` (ncclCommSplit), ranked by (key, old
   *  rank); a negative color (NCCL_SPLIT_NOCOLOR) takes part but gets null. A collective: every rank of
   *  the group calls it, in the same order as its other collectives. The new group is independent of
   *  this one (its own order of collectives, its own abort). E.g. TP x EP over 4 ranks: split(rank / 2,
   *  rank) gives the pairs {0, 1}, {2, 3}; split(rank % 2, rank) the pairs {0, 2}, {1, 3}. */
  virtual std::unique_ptr<Collective> split(int color, int key) = 0;

  /** Aborts the whole group (ncclCommAbort): collectives waiting on any rank and every later one
   *  throw ft::Error(kInternal) quoting `reason`. Safe to call from any thread, more than once. */
  virtual void abort(const std::string& reason) = 0;
};

}  // namespace ft::dist
