#pragma once
// EngineRunner: the ModelRunner the server uses, over a loaded Engine (engine/engine.h). One Engine::step
// per ForwardBatch, one logits row (the last token) per sequence.
#include <vector>

#include "engine/engine.h"
#include "engine/model_runner.h"

namespace ft {

class EngineRunner : public ModelRunner {
 public:
  /** `engine` must outlive the runner. */
  explicit EngineRunner(Engine& engine) : engine_(&engine) {}

  int32_t vocab_size() const override { return static_cast<int32_t>(engine_->config().n_vocab); }

  /** Engine::step over the batch's sequences; logits float32 [S, n_vocab] (Engine::step's buffer).
   *  Throws what step() throws (limits exceeded, bad token ids). */
  std::span<const float> forward(const ForwardBatch& batch) override;

 private:
  Engine* engine_;
  std::vector<StepItem> items_;
};

}  // namespace ft
