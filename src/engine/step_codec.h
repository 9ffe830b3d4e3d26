#pragma once
// The wire form of a step (engine/step_batch.h) that rank 0 sends the other ranks of a group
// (engine/rank_group.h, over dist::StepChannel): every item's tokens, positions, block tables and state
// slot and the batch's state copies, as little-endian int32/int64 words. Pages are the same page ids on
// every rank: each rank's KV cache has the same pages (the same KV options; its heads' share of each).
#include <cstdint>
#include <vector>

#include "engine/step_batch.h"

namespace ft {

/** A decoded step: owns what its StepBatch's items point to. Not copyable or movable (the batch
 *  points into it). */
struct DecodedStep {
  DecodedStep() = default;
  DecodedStep(const DecodedStep&) = delete;
  DecodedStep& operator=(const DecodedStep&) = delete;

  StepBatch batch;
  std::vector<std::vector<int32_t>> tokens, pages, swa_pages;  // per item
};

/** `batch` as bytes (a version word, then per item start, n, n_logits, state_slot, the tokens, the
 *  pages and the sliding-window pages (length -1: none), then the copies). */
std::vector<uint8_t> encode_step(const StepBatch& batch);

/** Decodes encode_step's bytes into `out` (its batch pointing into its vectors). Throws
 *  ft::Error(kInvalidArgument) naming the field and byte offset for a message that is truncated,
 *  has another version, a negative length or trailing bytes. */
void decode_step(const std::vector<uint8_t>& bytes, DecodedStep& out);

}  // namespace ft
