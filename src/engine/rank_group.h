#pragma once
// RankGroup: one model on several ranks (--tensor-parallel-size N, --expert-parallel; issue 43). Each
// rank has an engine of its own (its tensor-parallel shard of the weights, its share of the experts,
// its KV heads, its memory plan) over one collective group; the scheduler stays one, on rank 0: the
// serving loop calls rank 0's runner, which sends each step to the other ranks (dist::StepChannel,
// engine/step_codec.h) and then runs it itself, and the ranks meet in the forward's collectives. Only
// rank 0 returns logits or samples. The ranks are threads of one process: on the CPU over the in-process
// collective (dist/in_process_collective.h), on CUDA one GPU a rank (rank r on device r, each thread
// with its device current) over NCCL (dist/nccl_factory.h; libnccl.so.2 loaded at run time), whose
// all-reduces run on each rank's stream and are captured into the decode graphs with the forward.
#include <exception>
#include <functional>
#include <future>
#include <mutex>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/collective.h"
#include "dist/step_channel.h"
#include "engine/engine.h"
#include "engine/model_runner.h"

namespace ft {

class RankGroup;

/** Rank 0's ModelRunner: sends the step to the other ranks, then runs it on rank 0's engine. */
class RankGroupRunner : public ModelRunner {
 public:
  explicit RankGroupRunner(RankGroup& group) : group_(&group) {}
  int32_t vocab_size() const override;
  /** Engine::step on every rank; rank 0's logits. Throws what Engine::step throws, and
   *  ft::Error(kInternal) once the group has failed (a rank's error other than a refused step aborts
   *  the group: every later step is refused, naming the cause). */
  std::span<const float> forward(const StepBatch& batch) override;
  /** Engine::step on the other ranks and Engine::step_sample on rank 0. Throws as forward does. */
  std::span<const SampleResult> forward_sample(const StepBatch& batch, std::span<const SampleRow> rows,
                                               std::span<const LogitEdit> edits,
                                               std::span<const uint32_t> masks = {}) override;

 private:
  RankGroup* group_;
};

class RankGroup {
 public:
  /** Builds options.tensor_parallel engines: rank 0's over `ckpt` (the caller may have read its
   *  tokenizer), the others' over `path` opened again, each on a thread of its own and at the same
   *  time (their constructors meet in collectives). With options.threads 0 each rank's CPU backend
   *  takes its share of the cores. On CUDA (--device cuda, or auto with a GPU) rank r runs on device r
   *  with F32 activations (as Engine::load), over an NCCL group checked by one all-reduce before the
   *  engines load. Throws ft::Error(kInvalidArgument) for a size below 2 (use Engine alone) or fewer
   *  visible GPUs than ranks ("--tensor-parallel-size N needs N GPUs, M visible"), kUnsupported when
   *  NCCL cannot be loaded, and the first error of any rank's engine (the others are stopped). */
  static std::unique_ptr<RankGroup> load(std::unique_ptr<Checkpoint> ckpt, const std::string& path,
                                         const EngineOptions& options);
  /** Rank r's checkpoint (r in [1, size)), called once a rank on that rank's thread. */
  using RankCheckpoints = std::function<std::unique_ptr<Checkpoint>(int rank)>;
  /** As load(ckpt, path, options), the other ranks' checkpoints from `others` (e.g. views of one
   *  checkpoint in memory, formats/shared_checkpoint.h); what `others` throws fails the load as a
   *  rank's engine does. */
  static std::unique_ptr<RankGroup> load(std::unique_ptr<Checkpoint> ckpt, RankCheckpoints others,
                                         const EngineOptions& options);
  /** Stops the other ranks (closes the channel, joins their threads). */
  ~RankGroup();
  RankGroup(const RankGroup&) = delete;
  RankGroup& operator=(const RankGroup&) = delete;

  int size() const { return static_cast<int>(engines_.size()); }
  /** Rank r's engine (r in [0, size())): rank 0's is the one the server reads (config, tokenizer,
   *  memory plan); each rank's memory plan and MoE counters are its own. */
  Engine& engine(int r) { return *engines_.at(static_cast<size_t>(r)); }
  Engine& leader() { return engine(0); }
  ModelRunner& runner() { return runner_; }
  /** Whether the experts are split over the ranks (--expert-parallel on a model with routed experts). */
  bool experts_split() { return leader().options().expert_parallel && leader().config().n_expert > 0; }
  /** "" while every rank runs, else why the group stopped. */
  std::string failure() const;

 private:
  friend class RankGroupRunner;
  RankGroup() : runner_(*this) {}
  /** Makes rank r's device current on the calling thread (CUDA; nothing on the CPU). */
  void enter(int r) const;
  /** Rank r's loop: receives each step, runs it, until the channel closes. */
  void follow(int r);
  /** Marks the group failed with `reason` (and `cause`, the exception load rethrows) unless it failed
   *  already, and aborts the collective (ranks waiting in one wake). */
  void fail_group(const std::string& reason, std::exception_ptr cause = nullptr);
  /** Sends `batch` to the other ranks; throws kInternal when the group has failed. */
  void send(const StepBatch& batch);

  bool cuda_ = false;  // one GPU a rank over NCCL
  std::vector<std::unique_ptr<Ops>> ops_;  // each rank's backend until its engine takes it
  std::vector<std::unique_ptr<dist::Collective>> comms_;
  std::vector<std::unique_ptr<Engine>> engines_;
  std::unique_ptr<dist::StepChannel> channel_;
  std::vector<std::thread> followers_;
  mutable std::mutex mu_;
  std::string failure_;
  std::exception_ptr cause_;
  bool serving_ = false;  // load() returned: a failure from now on is logged (before, load() throws it)
  RankGroupRunner runner_;
};

}  // namespace ft
