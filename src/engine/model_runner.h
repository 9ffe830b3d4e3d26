#pragma once
// ModelRunner: what the serving loop (engine/service.h) needs from a model: one forward over a batch of
// sequences of different lengths, writing their tokens' K/V into the paged cache and returning the
// logits of each sequence's last token. The CPU/CUDA engine implements it; tests use fakes.
#include <cstdint>
#include <string>
#include <span>
#include <vector>

#include "backend/sampling.h"
#include "kv/page_pool.h"

namespace ft {

/** One step's batch on the host: S sequences, T tokens. Sequence s owns token rows
 *  seq_start[s] .. seq_start[s+1]-1 (consecutive positions), and block_tables[s] lists its KV pages
 *  in position order (page j holds positions [j * page_size, (j + 1) * page_size)). */
struct ForwardBatch {
  std::vector<int32_t> tokens;     // [T] token ids
  std::vector<int32_t> positions;  // [T] absolute positions
  std::vector<int32_t> seq_start;  // [S + 1]
  std::vector<const std::vector<int32_t>*> block_tables;  // [S] pages of each sequence (covering its positions)
  /** [S] each sequence's sliding-window pages (kv/page_pool.h KvPools::swa), or empty: no such pool. */
  std::vector<const std::vector<int32_t>*> swa_block_tables;
  /** [S] each sequence's recurrent-state slot (kv/page_pool.h KvPools::states), or empty: none. */
  std::vector<int32_t> state_slots;
  /** Recurrent-state copies to queue before the forward (snapshots restored into the slots of
   *  sequences starting from a prefix hit) and after it (slots saved as snapshots for the prefix
   *  cache), in order. */
  std::vector<StateCopy> copies_before, copies_after;
  /** [S] logit rows forward() returns for each sequence: 1 (its last token's) or its token count (every
   *  token's, in position order); empty: one each. forward_sample takes batches with one each only. */
  std::vector<int32_t> logit_rows;

  int32_t n_tokens() const { return static_cast<int32_t>(tokens.size()); }
  int32_t n_seqs() const { return static_cast<int32_t>(block_tables.size()); }
  void clear() {
    tokens.clear();
    positions.clear();
    seq_start.assign(1, 0);
    block_tables.clear();
    swa_block_tables.clear();
    state_slots.clear();
    copies_before.clear();
    copies_after.clear();
    logit_rows.clear();
  }
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  /** Rows of the logits (the model's vocabulary size). */
  virtual int32_t vocab_size() const = 0;
  /** Runs the model over `batch` and returns its logits (float32 [R, vocab_size]: R = S and row s = the
   *  last token of sequence s, or with batch.logit_rows those rows of each sequence in turn), held by the
   *  runner until its next forward (the engine's pinned buffer: no copy). Results of one sequence must not depend on the other sequences of the batch
   *  (batch-invariant kernels), so batched and solo runs agree. Throws ft::Error. */
  virtual std::span<const float> forward(const ForwardBatch& batch) = 0;
  /** Runs the model over `batch` and samples row s by rows[s] (backend/sampling.h; `edits` holds the
   *  ranges the rows name; `masks` the allowed-token masks they name by mask_index, sample_mask_words(
   *  vocab_size()) words each; a row with `skip` set is not sampled), returning the results [S], held until
   *  the next forward. The default samples forward()'s logits on the host (cpu::sample_rows); the engine's
   *  runner samples on its backend. Throws ft::Error. */
  virtual std::span<const SampleResult> forward_sample(const ForwardBatch& batch, std::span<const SampleRow> rows,
                                                       std::span<const LogitEdit> edits,
                                                       std::span<const uint32_t> masks = {});

  /** Samples `logits` (float32 [S, vocab_size], row s for rows[s]) on the host as forward_sample does
   *  (cpu::sample_rows), returning the results [S], held until the next call or forward. Throws
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
