#include "engine/rank_group.h"

#include <algorithm>
#include <exception>

#include "backend/cpu/cpu_ops.h"
#include "backend/device.h"
#include "dist/in_process_collective.h"
#include "engine/step_codec.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {

int32_t RankGroupRunner::vocab_size() const { return static_cast<int32_t>(group_->leader().config().n_vocab); }

std::span<const float> RankGroupRunner::forward(const StepBatch& batch) {
  group_->send(batch);
  try {
    return group_->leader().step(batch);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) group_->fail_group(fmt::format("rank 0: {}", e.what()));
    throw;
  }
}

std::span<const SampleResult> RankGroupRunner::forward_sample(const StepBatch& batch, std::span<const SampleRow> rows,
                                                              std::span<const LogitEdit> edits,
                                                              std::span<const uint32_t> masks) {
  group_->send(batch);
  try {
    return group_->leader().step_sample(batch, rows, edits, masks);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) group_->fail_group(fmt::format("rank 0: {}", e.what()));
    throw;
  }
}

std::unique_ptr<RankGroup> RankGroup::load(std::unique_ptr<Checkpoint> ckpt, const std::string& path,
                                           const EngineOptions& options) {
  const int n = options.tensor_parallel;
  if (n < 2)
    fail(ErrorCode::kInvalidArgument, "RankGroup: --tensor-parallel-size {}: a group needs 2 ranks or more", n);
  options.validate();
  const bool cuda =
      options.device == DeviceChoice::kCuda || (options.device == DeviceChoice::kAuto && cuda_device_count() > 0);
  if (cuda)
    fail(ErrorCode::kUnsupported,
         "--tensor-parallel-size {} on CUDA is not supported yet (the NCCL rank group is not wired to the engine); "
         "--device cpu runs the {} ranks on the CPU", n, n);
  std::unique_ptr<RankGroup> g(new RankGroup());
  g->comms_ = dist::make_in_process_group(n, dist::InProcessOptions{std::chrono::minutes(5)});
  g->engines_.resize(static_cast<size_t>(n));
  g->channel_ = std::make_unique<dist::StepChannel>(n - 1);
  EngineOptions o = options;
  if (o.threads <= 0) o.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / n);
  std::vector<std::promise<void>> built(static_cast<size_t>(n - 1));
  std::vector<std::future<void>> done;
  for (std::promise<void>& p : built) done.push_back(p.get_future());
  for (int r = 1; r < n; ++r) {
    EngineOptions ro = o;
    ro.progress = nullptr;  // rank 0 reports the load
    g->followers_.emplace_back([grp = g.get(), r, path, ro, p = &built[static_cast<size_t>(r - 1)]] {
      try {
        grp->engines_[static_cast<size_t>(r)] =
            std::make_unique<Engine>(open_checkpoint(path), std::make_unique<CpuOps>(ro.threads), ro,
                                     grp->comms_[static_cast<size_t>(r)].get());
        p->set_value();
      } catch (const std::exception& e) {
        grp->fail_group(fmt::format("rank {}: {}", r, e.what()), std::current_exception());
        p->set_exception(std::current_exception());
        return;
      }
      grp->follow(r);
    });
  }
  std::exception_ptr first;
  try {
    g->engines_[0] = std::make_unique<Engine>(std::move(ckpt), std::make_unique<CpuOps>(o.threads), o, g->comms_[0].get());
  } catch (const std::exception& e) {
    first = std::current_exception();
    g->fail_group(fmt::format("rank 0: {}", e.what()), first);
  }
  for (std::future<void>& f : done) {  // every rank has built its engine or failed: `built` may go
    try {
      f.get();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
  }
  if (first) {
    std::lock_guard<std::mutex> lock(g->mu_);
    std::rethrow_exception(g->cause_ ? g->cause_ : first);  // the cause, not a rank's "aborted"
  }
  spdlog::info("engine: {} ranks (tensor parallel{}), rank 0 schedules", n,
               options.expert_parallel ? ", experts split over the ranks" : "");
  return g;
}

RankGroup::~RankGroup() {
  if (channel_) channel_->close();
  if (!comms_.empty()) comms_[0]->abort("the rank group is closing");  // a rank left inside a collective wakes
  for (std::thread& t : followers_)
    if (t.joinable()) t.join();
}

std::string RankGroup::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void RankGroup::fail_group(const std::string& reason, std::exception_ptr cause) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failure_.empty()) return;  // the first failure is the cause; the others follow from its abort
    failure_ = reason;
    cause_ = cause;
  }
  if (!comms_.empty()) comms_[0]->abort(reason);
  spdlog::error("rank group: {}", reason);
}

void RankGroup::send(const StepBatch& batch) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_.empty())
    fail(ErrorCode::kInternal, "the {} ranks stopped serving: {}", engines_.size(), failure_);
  channel_->send(encode_step(batch));
}

void RankGroup::follow(int r) {
  Engine& e = *engines_[static_cast<size_t>(r)];
  DecodedStep step;
  while (std::optional<std::vector<uint8_t>> m = channel_->receive(r - 1)) {
    if (!failure().empty()) continue;  // drain: the group stopped
    try {
      decode_step(*m, step);
      e.step(step.batch);
    } catch (const Error& ex) {
      // A step the engine refused (its checks, before any collective) is refused on every rank alike:
      // rank 0 reports it to the request; the group goes on.
      if (ex.code() != ErrorCode::kInvalidArgument) fail_group(fmt::format("rank {}: {}", r, ex.what()));
    } catch (const std::exception& ex) {
      fail_group(fmt::format("rank {}: {}", r, ex.what()));
    }
  }
}

}  // namespace ft
