#pragma once
// ModelRunner: what the serving loop (engine/service.h) needs from a model: one forward over a batch of
// sequences of different lengths (engine/step_batch.h), writing their tokens' K/V into the paged cache
// and returning the logits rows the batch names. The engine implements it (engine/engine_runner.h);
// tests use fakes.
#include <cstdint>
#include <string>
#include <span>
#include <vector>

#include "backend/sampling.h"
#include "engine/step_batch.h"

namespace ft {

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  /** Rows of the logits (the model's vocabulary size). */
  virtual int32_t vocab_size() const = 0;
  /** Runs the model over `batch` (its state copies included) and returns its logits (float32 [R,
   *  vocab_size]: R = StepBatch::n_logit_rows(), each item's rows in turn), held by the runner until its
   *  next forward (the engine's pinned buffer: no copy). Results of one sequence must not depend on the
   *  other sequences of the batch (batch-invariant kernels), so batched and solo runs agree. Throws
   *  ft::Error. */
  virtual std::span<const float> forward(const StepBatch& batch) = 0;
  /** Runs the model over `batch` and samples logit row r by rows[r] (backend/sampling.h; `edits` holds the
   *  ranges the rows name; `masks` the allowed-token masks they name by mask_index, sample_mask_words(
   *  vocab_size()) words each; a row with `skip` set is not sampled), returning the results [R], held until
   *  the next forward. The default samples forward()'s logits on the host (cpu::sample_rows); the engine's
   *  runner samples on its backend. Throws ft::Error. */
  virtual std::span<const SampleResult> forward_sample(const StepBatch& batch, std::span<const SampleRow> rows,
                                                       std::span<const LogitEdit> edits,
                                                       std::span<const uint32_t> masks = {});

  /** Samples `logits` (float32 [R, vocab_size], row r for rows[r]) on the host as forward_sample does
   *  (cpu::sample_rows), returning the results [R], held until the next call or forward. Throws
   *  ft::Error(kInvalidArgument) for rows, edits or masks that do not fit. */
  std::span<const SampleResult> sample_on_host(std::span<const float> logits, std::span<const SampleRow> rows,
                                               std::span<const LogitEdit> edits, std::span<const uint32_t> masks = {});

 private:
  void check_sample_args(std::span<const SampleRow> rows, std::span<const LogitEdit> edits,
                         std::span<const uint32_t> masks) const;

  std::vector<SampleResult> host_results_;
  std::vector<LogitEdit> host_edits_;  // a writable copy: the sampler writes each edit's raw logit
};

}  // namespace ft
