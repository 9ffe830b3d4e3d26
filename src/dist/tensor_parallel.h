#pragma once
// Tensor parallelism's split rules: how one rank's share of an attention layer and of a dense SwiGLU
// FFN is cut, after Megatron-LM (Shoeybi et al. 2019, "Megatron-LM: Training Multi-Billion Parameter
// Language Models Using Model Parallelism", sec. 3): the first projection of each block is split by
// output rows ("column parallel linear": Q/K/V by heads, FFN gate/up by intermediate columns), the
// second by input columns ("row parallel linear": O by heads, FFN down by intermediate columns), so
// that each rank computes a partial [T, H] sum of the block's output and one all-reduce per block
// gives every rank the whole output. Pure functions of the sizes; the loading (model/decoder.cpp) and
// the reductions (model/blocks.cpp) use them.
#include <cstdint>

namespace ft::dist {

/** One rank's place in a tensor-parallel group: rank in [0, size). size 1: no split at all. */
struct TpShard {
  int rank = 0;
  int size = 1;
};

/** A contiguous block [begin, begin + count) of a split dimension. */
struct TpRange {
  int64_t begin = 0;
  int64_t count = 0;
};

/** Throws ft::Error(kInvalidArgument) unless size >= 1 and 0 <= rank < size. */
void check_shard(const TpShard& tp);

/** The rank's block of `n` things (heads, FFN columns) split evenly over tp.size ranks in rank order.
 *  `what` names them in the error. Throws ft::Error(kUnsupported) "<what> (n) is not a multiple of the
 *  tensor-parallel size (size)" when size does not divide n, and what check_shard throws. */
TpRange tp_split(int64_t n, const TpShard& tp, const char* what);

/** Query heads of the rank (column parallel: Q rows and O input columns of these heads). */
inline TpRange tp_heads(int64_t n_head, const TpShard& tp) { return tp_split(n_head, tp, "attention heads"); }

/** KV heads of the rank: split when n_head_kv is a multiple of the size (each rank its own K/V heads
 *  and the query heads that share them); replicating KV heads over ranks is not done yet, so
 *  n_head_kv % size != 0 is refused (kUnsupported) as tp_split refuses it. */
inline TpRange tp_kv_heads(int64_t n_head_kv, const TpShard& tp) { return tp_split(n_head_kv, tp, "KV heads"); }

/** FFN intermediate columns of the rank (gate/up rows, down input columns; column then row parallel). */
inline TpRange tp_ffn(int64_t n_ff, const TpShard& tp) { return tp_split(n_ff, tp, "FFN width"); }

}  // namespace ft::dist
