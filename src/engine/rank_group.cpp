#include "engine/rank_group.h"

#include <algorithm>
#include <exception>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda_factory.h"
#include "backend/device.h"
#include "dist/in_process_collective.h"
#include "dist/nccl_factory.h"
#include "engine/step_codec.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {

int32_t RankGroupRunner::vocab_size() const { return static_cast<int32_t>(group_->leader().config().n_vocab); }

std::span<const float> RankGroupRunner::forward(const StepBatch& batch) {
  group_->enter(0);  // the serving loop's thread may not have rank 0's device current
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
  group_->enter(0);
  group_->send(batch);
  try {
    return group_->leader().step_sample(batch, rows, edits, masks);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) group_->fail_group(fmt::format("rank 0: {}", e.what()));
    throw;
  }
}

namespace {

/** One all-reduce of a small device buffer on this rank before anything else: the NCCL ranks connect
 *  outside any CUDA graph (the engine's decode graphs capture the forward's all-reduces; NCCL wants each
 *  op run once uncaptured first), and a group that does not work fails here, naming the rank. */
void check_nccl_rank(dist::Collective& comm, Ops& ops) {
  constexpr int64_t kN = 64;
  const int r = comm.rank(), n = comm.group_size();
  Buffer b = ops.alloc(kN * static_cast<int64_t>(sizeof(float)));
  const Tensor dev(b.data(), DType::F32, {kN}, ops.device());
  std::vector<float> host(static_cast<size_t>(kN), static_cast<float>(r + 1));
  ops.copy(Tensor(host.data(), DType::F32, {kN}), dev);
  comm.all_reduce(dev, dev);
  ops.copy(dev, Tensor(host.data(), DType::F32, {kN}));  // waits for the all-reduce (same stream)
  const float want = static_cast<float>(n * (n + 1) / 2);
  for (float v : host)
    if (v != want)
      fail(ErrorCode::kInternal, "rank {}: the NCCL group's first all-reduce gave {}, not {} (the sum of 1..{})", r, v,
           want, n);
}

}  // namespace

std::unique_ptr<RankGroup> RankGroup::load(std::unique_ptr<Checkpoint> ckpt, const std::string& path,
                                           const EngineOptions& options) {
  return load(std::move(ckpt), [path](int) { return open_checkpoint(path); }, options);
}

std::unique_ptr<RankGroup> RankGroup::load(std::unique_ptr<Checkpoint> ckpt, RankCheckpoints others,
                                           const EngineOptions& options) {
  const int n = options.tensor_parallel;
  if (n < 2)
    fail(ErrorCode::kInvalidArgument, "RankGroup: --tensor-parallel-size {}: a group needs 2 ranks or more", n);
  if (!others) fail(ErrorCode::kInvalidArgument, "RankGroup: no checkpoint for the ranks after rank 0");
  options.validate();
  const bool cuda =
      options.device == DeviceChoice::kCuda || (options.device == DeviceChoice::kAuto && cuda_device_count() > 0);
  std::unique_ptr<RankGroup> g(new RankGroup());
  EngineOptions o = options;
  if (o.threads <= 0) o.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / n);
  g->ops_.resize(static_cast<size_t>(n));
  if (cuda && !cuda_built())
    make_cuda_ops(0);  // throws the build's reason (no CUDA backend compiled in)
  if (cuda) {
    // Rank r on CUDA device r, its backend made here (one per device, with Engine::load's F32
    // activations), then one NCCL group over their devices and streams.
    const int visible = cuda_device_count();
    if (visible < n)
      fail(ErrorCode::kInvalidArgument, "--tensor-parallel-size {} needs {} GPUs, {} visible", n, n, visible);
    if (!dist::nccl_available())
      fail(ErrorCode::kUnsupported, "--tensor-parallel-size {} on CUDA needs NCCL: {}", n, dist::nccl_unavailable_reason());
    g->cuda_ = true;
    std::vector<Ops*> raw;
    for (int r = 0; r < n; ++r) {
      g->ops_[static_cast<size_t>(r)] = make_cuda_ops(r, DType::F32);
      raw.push_back(g->ops_[static_cast<size_t>(r)].get());
    }
    g->comms_ = dist::make_nccl_group_on(raw);
    cuda_set_device(0);  // making the backends left the last device current; rank 0 runs on this thread
    spdlog::warn("engine: {} CUDA ranks over NCCL: this path has not been checked on a multi-GPU machine yet "
                 "(the CPU ranks are, against one rank on every fixture); compare a few replies with -tp 1", n);
  } else {
    g->comms_ = dist::make_in_process_group(n, dist::InProcessOptions{std::chrono::minutes(5)});
    for (auto& ops : g->ops_) ops = std::make_unique<CpuOps>(o.threads);
  }
  g->engines_.resize(static_cast<size_t>(n));
  g->channel_ = std::make_unique<dist::StepChannel>(n - 1);
  // Rank r's engine over its backend and comm (on rank r's thread, its device current).
  auto build = [grp = g.get()](int r, std::unique_ptr<Checkpoint> c, const EngineOptions& ro) {
    const size_t i = static_cast<size_t>(r);
    if (grp->cuda_) check_nccl_rank(*grp->comms_[i], *grp->ops_[i]);
    grp->engines_[i] = std::make_unique<Engine>(std::move(c), std::move(grp->ops_[i]), ro, grp->comms_[i].get());
  };
  std::vector<std::promise<void>> built(static_cast<size_t>(n - 1));
  std::vector<std::future<void>> done;
  for (std::promise<void>& p : built) done.push_back(p.get_future());
  for (int r = 1; r < n; ++r) {
    EngineOptions ro = o;
    ro.progress = nullptr;  // rank 0 reports the load
    g->followers_.emplace_back([grp = g.get(), r, others, ro, build, p = &built[static_cast<size_t>(r - 1)]] {
      set_log_rank(r);  // this rank's lines say so
      try {
        grp->enter(r);
        build(r, others(r), ro);
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
  set_log_rank(0);  // rank 0's load on this thread; unlabelled again once loaded
  try {
    build(0, std::move(ckpt), o);
  } catch (const std::exception& e) {
    first = std::current_exception();
    g->fail_group(fmt::format("rank 0: {}", e.what()), first);
  }
  set_log_rank(-1);
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
  spdlog::info("engine: {} ranks (tensor parallel{}{}), rank 0 schedules", n, g->experts_split() ? ", experts split over the ranks" : "",
               cuda ? ", one GPU each over NCCL" : "");
  g->serving_ = true;
  return g;
}

void RankGroup::enter(int r) const {
  if (cuda_) cuda_set_device(r);
}

RankGroup::~RankGroup() {
  if (channel_) channel_->close();
  if (!comms_.empty()) comms_[0]->abort("the rank group is closing");  // a rank left inside a collective wakes
  for (std::thread& t : followers_)
    if (t.joinable()) t.join();
  // Each rank's engine (or the backend it did not take) goes with its device current: CUDA frees and
  // cuBLAS handles belong to the device they were made on.
  try {
    for (size_t r = std::max(engines_.size(), ops_.size()); r-- > 0;) {
      enter(static_cast<int>(r));
      if (r < engines_.size()) engines_[r].reset();
      if (r < ops_.size()) ops_[r].reset();
    }
    enter(0);
  } catch (const std::exception& e) {
    spdlog::warn("rank group: closing: {}", e.what());
  }
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
  if (serving_) spdlog::error("rank group: {}", reason);  // while loading, load() throws the cause itself
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
