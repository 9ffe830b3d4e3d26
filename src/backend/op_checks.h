#pragma once
// Shape checks every backend's op entry runs before its dtype/device-specific ones, written once so
// the CPU and CUDA backends reject the same inputs with the same message. Host code only: reads
// shapes and host integers, never tensor data (so it works for device tensors too).
#include "backend/ops.h"

namespace ft::op_checks {

/** rope: x [T, n_head * head_dim], positions [T], inv_freq [n_rot / 2], n_rot even in (0, head_dim].
 *  Throws ft::Error(kInvalidArgument) naming the argument. */
void rope(const RopeParams& p, const Tensor& x, const Tensor& positions);

/** matmul: w 2-D [N, K], x [T, K], y [T, N], K a whole number of w's blocks. Throws ft::Error(kInvalidArgument). */
void matmul(const Tensor& x, const Tensor& w, const Tensor& y);

/** BatchInfo index tensors are I32 with T / S / S+1 / S*max_blocks entries and no negative sizes.
 *  Throws ft::Error(kInvalidArgument) naming `op`. */
void batch(const char* op, const BatchInfo& b);

/** sample: rows and out hold logits.rows() SampleRows / SampleResults and edits (empty allowed) a whole
 *  number of LogitEdits, whose count it returns. Throws ft::Error(kInvalidArgument) naming the argument. */
int64_t sample(const Tensor& logits, const Tensor& rows, const Tensor& edits, const Tensor& out);

/** The edits' contract of Ops::sample, on host copies of its R rows and n edits over rows of V logits:
 *  every row not skipped names a range inside [0, n), the ranges are disjoint, and a range's ids lie in
 *  [0, V) and are unique. Throws ft::Error(kInvalidArgument) naming `op`. Reads its data (host code). */
void sample_edits(const char* op, const SampleRow* rows, int64_t R, const LogitEdit* edits, int64_t n, int64_t V);


}  // namespace ft::op_checks
