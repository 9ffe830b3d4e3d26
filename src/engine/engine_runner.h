#pragma once
// EngineRunner: the ModelRunner the server uses, over a loaded Engine (engine/engine.h): one Engine::step
// (or step_sample) per StepBatch, which runs the batch's state copies around its forward.
#include "engine/engine.h"
#include "engine/model_runner.h"

namespace ft {

class EngineRunner : public ModelRunner {
 public:
  /** `engine` must outlive the runner. */
  explicit EngineRunner(Engine& engine) : engine_(&engine) {}

  int32_t vocab_size() const override { return static_cast<int32_t>(engine_->config().n_vocab); }

  /** Engine::step over the batch: logits float32 [R, n_vocab] (Engine::step's buffer; R as
   *  ModelRunner::forward says). Throws what step() throws (limits exceeded, bad token ids). */
  std::span<const float> forward(const StepBatch& batch) override { return engine_->step(batch); }
  /** Engine::step_sample over the batch (sampled on the engine's backend). */
  std::span<const SampleResult> forward_sample(const StepBatch& batch, std::span<const SampleRow> rows,
                                               std::span<const LogitEdit> edits,
                                               std::span<const uint32_t> masks = {}) override {
    return engine_->step_sample(batch, rows, edits, masks);
  }

 private:
  Engine* engine_;
};

}  // namespace ft
