#pragma once
// EngineRunner: the ModelRunner the server uses, over a loaded Engine (engine/engine.h). One Engine::step
// per ForwardBatch, one logits row (the last token) per sequence unless the batch names its logit_rows.
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"

namespace ft {

class EngineRunner : public ModelRunner {
 public:
  /** `engine` must outlive the runner. */
  explicit EngineRunner(Engine& engine) : engine_(&engine) {}

  int32_t vocab_size() const override { return static_cast<int32_t>(engine_->config().n_vocab); }

  /** Engine::step over the batch's sequences; logits float32 [R, n_vocab] (Engine::step's buffer; R as
   *  ModelRunner::forward says).
   *  Throws what step() throws (limits exceeded, bad token ids). */
  std::span<const float> forward(const ForwardBatch& batch) override;
  /** Engine::step_sample over the batch's sequences (sampled on the engine's backend). */
  std::span<const SampleResult> forward_sample(const ForwardBatch& batch, std::span<const SampleRow> rows,
                                               std::span<const LogitEdit> edits,
                                               std::span<const uint32_t> masks = {}) override;

 private:
  /** items_ for `batch`: its logit_rows, or one logit row (the last token) a sequence. */
  void build_items(const ForwardBatch& batch);

  Engine* engine_;
  std::vector<StepItem> items_;
};

}  // namespace ft
