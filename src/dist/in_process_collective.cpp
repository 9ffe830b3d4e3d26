#include "dist/in_process_collective.h"

#include <condition_variable>
#include <algorithm>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "tensor/half.h"
#include "util/error.h"

namespace ft::dist {
namespace {

enum class Op { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kSplit };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kAllGather: return "all_gather";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kBroadcast: return "broadcast";
    case Op::kSplit: return "split";
  }
  return "?";
}

/** One rank's arguments to the collective of the current generation. */
struct Post {
  Op op = Op::kAllReduce;
  Tensor send;
  Tensor recv;
  int root = 0;
  int color = 0, key = 0;  // split's
};

/** Element count every rank must agree on: send's for all_reduce / all_gather / broadcast, recv's
 *  for reduce_scatter (NCCL's `count` argument). */
int64_t op_count(const Post& p) { return p.op == Op::kReduceScatter ? p.recv.numel() : p.send.numel(); }

/** "" when rank `r`'s own arguments fit its op in a group of `n`, else what is wrong. */
std::string check_local(const Post& p, int r, int n) {
  for (const Tensor* t : {&p.send, &p.recv}) {
    const char* which = t == &p.send ? "send" : "recv";
    if (t->dtype != DType::F32 && t->dtype != DType::BF16)
      return fmt::format("rank {}'s {} buffer is {}; only F32 and BF16 are supported", r, which, t->str());
    if (t->device != Device::kCpu)
      return fmt::format("rank {}'s {} buffer is in {} memory; the in-process group needs host memory", r, which,
                         device_name(t->device));
    if (t->data == nullptr && t->numel() > 0) return fmt::format("rank {}'s {} buffer is null", r, which);
  }
  if (p.send.dtype != p.recv.dtype)
    return fmt::format("rank {}'s send is {} but its recv is {}", r, dtype_name(p.send.dtype), dtype_name(p.recv.dtype));
  const int64_t s = p.send.numel(), v = p.recv.numel();
  const bool fits = p.op == Op::kAllGather       ? v == s * n
                    : p.op == Op::kReduceScatter ? s == v * n
                                                 : v == s;
  if (!fits)
    return fmt::format("rank {}'s send has {} elements and its recv {}, which does not fit {} over {} ranks", r, s, v,
                       op_name(p.op), n);
  if (p.op == Op::kBroadcast && (p.root < 0 || p.root >= n))
    return fmt::format("rank {} names root {}, outside [0, {})", r, p.root, n);
  return "";
}

/** "" when the ranks' posts agree (same op, dtype, count, root) and each fits its op, else the
 *  error message every rank throws. */
std::string check_posts(const std::vector<Post>& posts) {
  const int n = static_cast<int>(posts.size());
  const Post& p0 = posts[0];
  for (int r = 0; r < n; ++r) {
    const Post& p = posts[r];
    if (p.op != p0.op)
      return fmt::format("{}: rank {} called {} while rank 0 called {}", op_name(p0.op), r, op_name(p.op),
                         op_name(p0.op));
    if (p.op == Op::kSplit) continue;  // any colors and keys
    if (std::string e = check_local(p, r, n); !e.empty()) return fmt::format("{}: {}", op_name(p.op), e);
    if (p.send.dtype != p0.send.dtype)
      return fmt::format("{}: rank {} passes {} but rank 0 passes {}", op_name(p.op), r, dtype_name(p.send.dtype),
                         dtype_name(p0.send.dtype));
    if (op_count(p) != op_count(p0))
      return fmt::format("{}: rank {} passes a count of {} elements but rank 0 passes {}", op_name(p.op), r,
                         op_count(p), op_count(p0));
    if (p.root != p0.root)
      return fmt::format("{}: rank {} names root {} but rank 0 names root {}", op_name(p.op), r, p.root, p0.root);
  }
  return "";
}

float load(const Tensor& t, int64_t i) {
  return t.dtype == DType::F32 ? t.ptr<float>()[i] : bf16_to_f32(t.ptr<uint16_t>()[i]);
}

void store(const Tensor& t, int64_t i, float v) {
  if (t.dtype == DType::F32)
    t.ptr<float>()[i] = v;
  else
    t.ptr<uint16_t>()[i] = f32_to_bf16(v);
}

/** The state all handles of one group share. */
class Group {
 public:
  Group(int n, InProcessOptions options) : n_(n), options_(options), posts_(n), posted_(n, 0) {}

  int size() const { return n_; }

  /** Rank `rank`'s part of one collective: posts its arguments and returns once the collective of
   *  this generation is done (or throws as collective.h says). */
  void run(int rank, const Post& post) {
    std::unique_lock<std::mutex> lock(mutex_);
    throw_if_aborted(post.op);
    posts_[rank] = post;
    posted_[rank] = 1;
    if (++arrived_ < n_) {
      const uint64_t gen = generation_;
      const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
      const bool woke = cv_.wait_until(lock, deadline, [&] { return generation_ != gen || aborted_; });
      if (generation_ == gen) {
        if (!woke)
          abort_locked(fmt::format("rank {} waited {} ms in {} for rank(s) {}, which never arrived", rank,
                                   options_.timeout.count(), op_name(post.op), missing_ranks()));
        throw_if_aborted(post.op);
      }
    } else {
      outcome_ = check_posts(posts_);
      if (outcome_.empty()) execute();
      arrived_ = 0;
      std::fill(posted_.begin(), posted_.end(), 0);
      ++generation_;
      cv_.notify_all();
    }
    if (!outcome_.empty()) throw Error(ErrorCode::kInvalidArgument, outcome_);
  }

  void abort(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mutex_);
    abort_locked(reason);
  }

  /** Rank `rank`'s sub-group and rank in it from the split it has just returned from (null group for
   *  a negative color). Read before the rank posts again, so no later split has replaced it. */
  std::pair<std::shared_ptr<Group>, int> split_result(int rank) {
    std::lock_guard<std::mutex> lock(mutex_);
    return {split_group_[static_cast<size_t>(rank)], split_rank_[static_cast<size_t>(rank)]};
  }

 private:
  void abort_locked(const std::string& reason) {
    if (!aborted_) abort_reason_ = reason;
    aborted_ = true;
    cv_.notify_all();
  }

  /** "1, 3": the ranks that have not posted to the current generation. */
  std::string missing_ranks() const {
    std::string out;
    for (int r = 0; r < n_; ++r)
      if (!posted_[r]) out += (out.empty() ? "" : ", ") + std::to_string(r);
    return out;
  }

  void throw_if_aborted(Op op) const {
    if (aborted_) fail(ErrorCode::kInternal, "{}: the collective group was aborted: {}", op_name(op), abort_reason_);
  }

  /** Does the agreed collective for every rank (the others wait, so their buffers hold still). Reads
   *  every input before writing any output, so in-place calls are safe. */
  void execute() {
    const Post& p0 = posts_[0];
    const int64_t count = op_count(p0);
    const size_t elem = p0.send.dtype == DType::F32 ? 4 : 2;
    switch (p0.op) {
      case Op::kAllReduce:
      case Op::kReduceScatter: {
        const int64_t total = p0.send.numel();
        sum_.resize(static_cast<size_t>(total));
        for (int64_t i = 0; i < total; ++i) sum_[i] = load(posts_[0].send, i);
        for (int r = 1; r < n_; ++r)  // rank order: the same float sums on every run
          for (int64_t i = 0; i < total; ++i) sum_[i] += load(posts_[r].send, i);
        for (int r = 0; r < n_; ++r) {
          const int64_t base = p0.op == Op::kReduceScatter ? r * count : 0;
          for (int64_t i = 0; i < count; ++i) store(posts_[r].recv, i, sum_[base + i]);
        }
        break;
      }
      case Op::kAllGather: {
        const size_t block = static_cast<size_t>(count) * elem;
        staging_.resize(block * n_);
        for (int r = 0; r < n_; ++r)
          if (block > 0) std::memcpy(staging_.data() + r * block, posts_[r].send.data, block);
        for (int r = 0; r < n_; ++r)
          if (block > 0) std::memcpy(posts_[r].recv.data, staging_.data(), block * n_);
        break;
      }
      case Op::kSplit: {  // one new group per color, ranked by (key, rank)
        split_group_.assign(static_cast<size_t>(n_), nullptr);
        split_rank_.assign(static_cast<size_t>(n_), -1);
        std::vector<int> order(static_cast<size_t>(n_));
        for (int r = 0; r < n_; ++r) order[static_cast<size_t>(r)] = r;
        std::sort(order.begin(), order.end(), [&](int a, int b) {
          return std::pair(posts_[a].key, a) < std::pair(posts_[b].key, b);
        });
        std::vector<int> done;
        for (int r : order) {
          const int color = posts_[r].color;
          if (color < 0 || std::find(done.begin(), done.end(), color) != done.end()) continue;
          done.push_back(color);
          int members = 0;
          for (int q : order) members += posts_[q].color == color;
          auto g = std::make_shared<Group>(members, options_);
          int next = 0;
          for (int q : order)
            if (posts_[q].color == color) split_group_[static_cast<size_t>(q)] = g, split_rank_[static_cast<size_t>(q)] = next++;
        }
        break;
      }
      case Op::kBroadcast: {
        const size_t bytes = static_cast<size_t>(count) * elem;
        const void* src = posts_[p0.root].send.data;
        for (int r = 0; r < n_; ++r)
          if (bytes > 0 && posts_[r].recv.data != src) std::memmove(posts_[r].recv.data, src, bytes);
        break;
      }
    }
  }

  const int n_;
  const InProcessOptions options_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Post> posts_;
  std::vector<char> posted_;  // posted_[r]: rank r has posted to the current generation
  int arrived_ = 0;
  uint64_t generation_ = 0;
  std::string outcome_;  // "" or the error of the last completed generation, thrown on every rank
  bool aborted_ = false;
  std::string abort_reason_;
  std::vector<float> sum_;        // reused between calls
  std::vector<uint8_t> staging_;  // reused between calls
  std::vector<std::shared_ptr<Group>> split_group_;  // the last split's sub-group of each rank
  std::vector<int> split_rank_;                      // and its rank there
};

class InProcessCollective : public Collective {
 public:
  InProcessCollective(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int group_size() const override { return group_->size(); }
  int rank() const override { return rank_; }
  void all_reduce(const Tensor& send, const Tensor& recv) override { group_->run(rank_, {Op::kAllReduce, send, recv, 0}); }
  void all_gather(const Tensor& send, const Tensor& recv) override { group_->run(rank_, {Op::kAllGather, send, recv, 0}); }
  void reduce_scatter(const Tensor& send, const Tensor& recv) override {
    group_->run(rank_, {Op::kReduceScatter, send, recv, 0});
  }
  void broadcast(const Tensor& buffer, int root) override { group_->run(rank_, {Op::kBroadcast, buffer, buffer, root}); }
  std::unique_ptr<Collective> split(int color, int key) override {
    Post post;
    post.op = Op::kSplit, post.color = color, post.key = key;
    group_->run(rank_, post);
    auto [group, rank] = group_->split_result(rank_);
    if (!group) return nullptr;
    return std::make_unique<InProcessCollective>(std::move(group), rank);
  }
  void abort(const std::string& reason) override { group_->abort(reason); }

 private:
  std::shared_ptr<Group> group_;
  int rank_;
};

}  // namespace

std::vector<std::unique_ptr<Collective>> make_in_process_group(int n_ranks, InProcessOptions options) {
  if (n_ranks < 1) fail(ErrorCode::kInvalidArgument, "an in-process collective group needs at least 1 rank, not {}", n_ranks);
  auto group = std::make_shared<Group>(n_ranks, options);
  std::vector<std::unique_ptr<Collective>> handles;
  for (int r = 0; r < n_ranks; ++r) handles.push_back(std::make_unique<InProcessCollective>(group, r));
  return handles;
}

void run_ranks(const std::vector<std::unique_ptr<Collective>>& ranks, const std::function<void(Collective&)>& body) {
  std::mutex mutex;
  std::exception_ptr first;
  std::vector<std::thread> threads;
  threads.reserve(ranks.size());
  for (const auto& handle : ranks) {
    threads.emplace_back([&, h = handle.get()] {
      try {
        body(*h);
      } catch (...) {
        std::string what = "an exception that is not a std::exception";
        try {
          throw;
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        {
          std::lock_guard<std::mutex> lock(mutex);
          if (!first) first = std::current_exception();
        }
        h->abort(fmt::format("rank {} threw: {}", h->rank(), what));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace ft::dist
