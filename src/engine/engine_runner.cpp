#include "engine/engine_runner.h"

#include "util/error.h"

namespace ft {

void EngineRunner::build_items(const ForwardBatch& batch) {
  const int32_t S = batch.n_seqs();
  FT_CHECK(static_cast<int32_t>(batch.seq_start.size()) == S + 1);
  items_.resize(static_cast<size_t>(S));
  for (int32_t s = 0; s < S; ++s) {
    const int32_t begin = batch.seq_start[static_cast<size_t>(s)];
    const int32_t end = batch.seq_start[static_cast<size_t>(s) + 1];
    StepItem& it = items_[static_cast<size_t>(s)];
    it.pages = batch.block_tables[static_cast<size_t>(s)];
    it.start = batch.positions[static_cast<size_t>(begin)];
    it.tokens = batch.tokens.data() + begin;
    it.n = end - begin;
    it.n_logits = batch.logit_rows.empty() ? 1 : batch.logit_rows[static_cast<size_t>(s)];
    it.swa_pages = batch.swa_block_tables.empty() ? nullptr : batch.swa_block_tables[static_cast<size_t>(s)];
    it.state_slot = batch.state_slots.empty() ? -1 : batch.state_slots[static_cast<size_t>(s)];
  }
}

std::span<const float> EngineRunner::forward(const ForwardBatch& batch) {
  build_items(batch);
  int64_t R = 0;
  for (const StepItem& it : items_) R += it.n_logits;
  for (const StateCopy& c : batch.copies_before) engine_->kv().copy_state(engine_->ops(), c);
  const std::span<const float> out = engine_->step(items_);
  for (const StateCopy& c : batch.copies_after) engine_->kv().copy_state(engine_->ops(), c);
  const size_t want = static_cast<size_t>(R) * static_cast<size_t>(vocab_size());
  FT_CHECK(out.size() >= want);
  return out.first(want);
}

std::span<const SampleResult> EngineRunner::forward_sample(const ForwardBatch& batch, std::span<const SampleRow> rows,
                                                         std::span<const LogitEdit> edits,
                                                         std::span<const uint32_t> masks) {
  if (!batch.logit_rows.empty())
    fail(ErrorCode::kInvalidArgument, "forward_sample: a batch with logit_rows (forward() returns those)");
  build_items(batch);
  for (const StateCopy& c : batch.copies_before) engine_->kv().copy_state(engine_->ops(), c);
  const std::span<const SampleResult> out = engine_->step_sample(items_, rows, edits, masks);
  for (const StateCopy& c : batch.copies_after) engine_->kv().copy_state(engine_->ops(), c);
  return out;
}

}  // namespace ft
