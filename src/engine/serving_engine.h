#pragma once
// ServingEngine: what `ft run`, `ft serve` and `ft bench` load: one Engine, or a RankGroup of
// options.tensor_parallel engines (engine/rank_group.h). Callers read rank 0's engine (config, KV pools,
// memory plan) and run steps through runner(), which on a group sends each step to every rank.
#include <memory>
#include <string>
#include <utility>

#include "engine/engine.h"
#include "engine/engine_runner.h"
#include "engine/rank_group.h"
#include "formats/shared_checkpoint.h"

namespace ft {

class ServingEngine {
 public:
  /** Engine::load(ckpt, options) for one rank; RankGroup::load(ckpt, path, options) (the other ranks
   *  open `path` again, so it must stay readable until this returns) for options.tensor_parallel > 1.
   *  Throws what they throw. */
  static std::unique_ptr<ServingEngine> load(std::unique_ptr<Checkpoint> ckpt, const std::string& path,
                                             const EngineOptions& options) {
    return load(std::move(ckpt), [path](int) { return open_checkpoint(path); }, options);
  }

  /** As load(ckpt, path, options), the ranks after rank 0 reading views of `ckpt` itself
   *  (share_checkpoint: one copy in memory for every rank, its pages freed once every rank released
   *  them): for a checkpoint that has no path to open again, such as a synthetic one. */
  static std::unique_ptr<ServingEngine> load_shared(std::unique_ptr<Checkpoint> ckpt, const EngineOptions& options) {
    if (options.tensor_parallel <= 1) return load(std::move(ckpt), RankGroup::RankCheckpoints(), options);
    auto views = std::make_shared<std::vector<std::unique_ptr<Checkpoint>>>(
        share_checkpoint(std::move(ckpt), options.tensor_parallel));
    std::unique_ptr<Checkpoint> first = std::move(views->front());
    // Each rank moves out its own view, on its own thread: distinct elements, no race.
    return load(std::move(first), [views](int r) { return std::move(views->at(static_cast<size_t>(r))); }, options);
  }

  /** One rank: Engine::load(ckpt, options) (`others` unused); options.tensor_parallel > 1:
   *  RankGroup::load(ckpt, others, options). Throws what they throw. */
  static std::unique_ptr<ServingEngine> load(std::unique_ptr<Checkpoint> ckpt, RankGroup::RankCheckpoints others,
                                             const EngineOptions& options) {
    std::unique_ptr<ServingEngine> s(new ServingEngine());
    if (options.tensor_parallel > 1) {
      s->group_ = RankGroup::load(std::move(ckpt), std::move(others), options);
    } else {
      s->engine_ = Engine::load(std::move(ckpt), options);
      s->runner_ = std::make_unique<EngineRunner>(*s->engine_);
    }
    return s;
  }

  /** Rank 0's engine (the only one without a group). */
  Engine& engine() { return group_ ? group_->leader() : *engine_; }
  /** The runner the serving loop steps through. */
  ModelRunner& runner() { return group_ ? group_->runner() : static_cast<ModelRunner&>(*runner_); }
  /** The rank group, or null for one rank. */
  RankGroup* group() { return group_.get(); }

 private:
  ServingEngine() = default;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<EngineRunner> runner_;
  std::unique_ptr<RankGroup> group_;
};

}  // namespace ft
