#include "moe/host_exchange.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "moe/thread_pool.h"
#include "tensor/half.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {
namespace {

using Clock = std::chrono::steady_clock;

/** The control block's sequence numbers as system-wide atomics (the GPU writes them over PCIe). */
std::atomic_ref<uint64_t> seq_ref(uint64_t& field) { return std::atomic_ref<uint64_t>(field); }

/** A request field, read and written relaxed: ordered by request_seq's release/acquire, and after a
 *  timeout a post may rewrite it while an abandoned request is served (host_exchange.h). */
int32_t load_field(int32_t& f) { return std::atomic_ref<int32_t>(f).load(std::memory_order_relaxed); }
void store_field(int32_t& f, int64_t v) {
  std::atomic_ref<int32_t>(f).store(static_cast<int32_t>(v), std::memory_order_relaxed);
}

}  // namespace

ExchangeBuffers::ExchangeBuffers(HostAllocator& alloc, int64_t max_tokens_, int64_t n_embd_, int32_t k_)
    : max_tokens(max_tokens_), n_embd(n_embd_), k(k_) {
  if (max_tokens < 1 || n_embd < 1 || k < 1)
    fail(ErrorCode::kInvalidArgument, "moe exchange: {} tokens of {} with {} routes each", max_tokens, n_embd, k);
  const int64_t acts = max_tokens * n_embd, pairs = max_tokens * k;
  auto take = [&](int64_t bytes, void*& h, void*& d) {
    storage_.push_back(alloc.allocate(bytes));
    h = storage_.back().data();
    std::memset(h, 0, static_cast<size_t>(bytes));  // the control block starts at 0; the rest is touched once
    void* dev = alloc.pin(storage_.back());
    d = dev ? dev : h;
  };
  void *h = nullptr, *d = nullptr;
  take(sizeof(ExchangeControl), h, d);
  host.ctrl = static_cast<ExchangeControl*>(h), device.ctrl = static_cast<ExchangeControl*>(d);
  take(acts * 4, h, d);
  host.x = h, device.x = d;
  take(pairs * 4, h, d);
  host.ids = static_cast<int32_t*>(h), device.ids = static_cast<int32_t*>(d);
  take(pairs * 4, h, d);
  host.weights = static_cast<float*>(h), device.weights = static_cast<float*>(d);
  take(acts * 4, h, d);
  host.out = static_cast<float*>(h), device.out = static_cast<float*>(d);
}

ExchangeDispatcher::ExchangeDispatcher(ExchangeBuffers& buffers, Handler handler, int spin_us)
    : buf_(buffers), handler_(std::move(handler)), spin_us_(spin_us) {
  if (spin_us < 0) fail(ErrorCode::kInvalidArgument, "moe exchange: spin of {} us", spin_us);
  // Read here, not on the thread: a request posted before the thread runs is still new to it.
  const uint64_t last = seq_ref(buf_.host.ctrl->request_seq).load(std::memory_order_acquire);
  thread_ = std::thread([this, last] { loop(last); });
}

ExchangeDispatcher::~ExchangeDispatcher() {
  stop_.store(true, std::memory_order_release);
  notify();
  thread_.join();
}

void ExchangeDispatcher::notify() {
  { std::lock_guard<std::mutex> lock(mu_); }
  cv_.notify_all();
}

bool ExchangeDispatcher::wait_done(uint64_t seq, Clock::time_point until) {
  ExchangeControl& c = *buf_.host.ctrl;
  auto done = [&] { return seq_ref(c.done_seq).load(std::memory_order_acquire) >= seq; };
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, until, done);
}

std::string ExchangeDispatcher::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void ExchangeDispatcher::loop(uint64_t last) {
  ExchangeControl& c = *buf_.host.ctrl;
  auto fresh = [&] { return seq_ref(c.request_seq).load(std::memory_order_acquire) != last; };
  RequestPoller poller(spin_us_);
  while (!stop_.load(std::memory_order_acquire)) {
    if (!fresh()) {
      poller.wait(mu_, cv_, fresh, [&] { return stop_.load(std::memory_order_acquire); });
      continue;
    }
    const uint64_t seq = seq_ref(c.request_seq).load(std::memory_order_acquire);
    last = seq;
    seq_ref(c.ack_seq).store(seq, std::memory_order_release);
    const int64_t T = load_field(c.n_tokens), H = load_field(c.n_embd), k = load_field(c.k);
    const int32_t layer = load_field(c.layer), x_dtype = load_field(c.x_dtype);
    try {
      if (T < 1 || T > buf_.max_tokens || H < 1 || H > buf_.n_embd || k < 1 || k > buf_.k || layer < 0)
        fail(ErrorCode::kInternal, "moe exchange: request {} has {} tokens of {} with {} routes (layer {})", seq, T,
             H, k, layer);
      const auto xdt = static_cast<DType>(x_dtype);
      if (xdt != DType::F32 && xdt != DType::BF16)
        fail(ErrorCode::kInternal, "moe exchange: request {} has x dtype {}", seq, x_dtype);
      ExchangeRequest r;
      r.seq = seq;
      r.layer = layer;
      r.x = Tensor(buf_.host.x, xdt, {T, H});
      r.ids = Tensor(buf_.host.ids, DType::I32, {T, k});
      r.weights = Tensor(buf_.host.weights, DType::F32, {T, k});
      r.out = Tensor(buf_.host.out, DType::F32, {T, H});
      handler_(r);
    } catch (const std::exception& e) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        error_ = e.what();
      }
      spdlog::error("moe exchange: the CPU experts of layer {} failed: {}", layer, e.what());
      seq_ref(c.failed_seq).store(seq, std::memory_order_release);
    }
    served_.fetch_add(1, std::memory_order_relaxed);
    seq_ref(c.done_seq).store(seq, std::memory_order_release);
    notify();
    poller.served();
  }
}

void ExchangeDevice::check_post(const Tensor& x, const Tensor& ids, const Tensor& weights) const {
  const int64_t T = x.rows(), H = x.cols();
  if (x.ndim != 2 || T < 1 || T > buf_.max_tokens || H < 1 || H > buf_.n_embd)
    fail(ErrorCode::kInvalidArgument, "moe exchange: x {} must be [<= {}, <= {}]", x.str(), buf_.max_tokens,
         buf_.n_embd);
  if (x.dtype != DType::F32 && x.dtype != DType::BF16)
    fail(ErrorCode::kInvalidArgument, "moe exchange: x {} must be F32 or BF16", x.str());
  if (ids.dtype != DType::I32 || ids.ndim != 2 || ids.rows() != T || ids.cols() < 1 || ids.cols() > buf_.k)
    fail(ErrorCode::kInvalidArgument, "moe exchange: ids {} must be I32 [{}, <= {}]", ids.str(), T, buf_.k);
  if (weights.dtype != DType::F32 || weights.ndim != 2 || weights.rows() != T || weights.cols() != ids.cols())
    fail(ErrorCode::kInvalidArgument, "moe exchange: weights {} must be F32 [{}, {}]", weights.str(), T, ids.cols());
}

void ExchangeDevice::check() {
  ExchangeControl& c = *buf_.host.ctrl;
  const uint64_t timed_out = seq_ref(c.timed_out_seq).load(std::memory_order_acquire);
  const uint64_t failed = seq_ref(c.failed_seq).load(std::memory_order_acquire);
  if (timed_out > checked_timeout_) {
    checked_timeout_ = timed_out;
    fail(ErrorCode::kInternal,
         "moe exchange: the CPU experts of request {} were not served in time (started: {}; limits {} s to start, "
         "{} s to finish); that step's output is wrong",
         timed_out, seq_ref(c.ack_seq).load(std::memory_order_acquire) >= timed_out ? "yes" : "no", ack_timeout_s,
         done_timeout_s);
  }
  if (failed > checked_failure_) {
    checked_failure_ = failed;
    fail(ErrorCode::kInternal, "moe exchange: the CPU experts of request {} failed: {}", failed, disp_.last_error());
  }
}

void HostExchangeDevice::post(int32_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights) {
  check_post(x, ids, weights);
  if (x.device != Device::kCpu || ids.device != Device::kCpu || weights.device != Device::kCpu)
    fail(ErrorCode::kInvalidArgument, "moe exchange: the host device side needs host tensors");
  ExchangeControl& c = *buf_.host.ctrl;
  std::memcpy(buf_.host.x, x.data, static_cast<size_t>(x.bytes()));
  std::memcpy(buf_.host.ids, ids.data, static_cast<size_t>(ids.bytes()));
  std::memcpy(buf_.host.weights, weights.data, static_cast<size_t>(weights.bytes()));
  T_ = x.rows(), H_ = x.cols();
  store_field(c.layer, layer);
  store_field(c.n_tokens, T_);
  store_field(c.n_embd, H_);
  store_field(c.k, ids.cols());
  store_field(c.x_dtype, static_cast<int32_t>(x.dtype));
  seq_ref(c.request_seq).store(++seq_, std::memory_order_release);
  disp_.notify();
}

void HostExchangeDevice::collect(Tensor out, bool accumulate) {
  if (seq_ == 0) fail(ErrorCode::kInvalidArgument, "moe exchange: collect() without a post()");
  if (out.device != Device::kCpu || out.ndim != 2 || out.rows() != T_ || out.cols() != H_ ||
      (out.dtype != DType::F32 && out.dtype != DType::BF16 && out.dtype != DType::F16))
    fail(ErrorCode::kInvalidArgument, "moe exchange: out {} must be a float host [{}, {}]", out.str(), T_, H_);
  ExchangeControl& c = *buf_.host.ctrl;
  // The limits of the CUDA wait kernel, from the start of the wait. A dispatcher still busy with a
  // request an earlier wait gave up on is not waited for at all.
  const auto start = Clock::now();
  auto after = [&](double s) {
    return start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
  };
  const auto ack_until = after(ack_timeout_s), done_until = after(done_timeout_s);
  const uint64_t abandoned = seq_ref(c.timed_out_seq).load(std::memory_order_acquire);
  const bool stuck = abandoned > seq_ref(c.done_seq).load(std::memory_order_acquire);
  const bool ok = !stuck && (disp_.wait_done(seq_, std::min(ack_until, done_until)) ||
                             (seq_ref(c.ack_seq).load(std::memory_order_acquire) >= seq_ &&
                              disp_.wait_done(seq_, done_until)));
  if (!ok) {
    seq_ref(c.timed_out_seq).store(seq_, std::memory_order_release);
    return;
  }
  const float* part = buf_.host.out;
  const int64_t n = T_ * H_;
  if (out.dtype == DType::F32) {
    auto* o = static_cast<float*>(out.data);
    for (int64_t i = 0; i < n; ++i) o[i] = accumulate ? o[i] + part[i] : part[i];
  } else {
    auto* o = static_cast<uint16_t*>(out.data);
    const bool bf = out.dtype == DType::BF16;
    for (int64_t i = 0; i < n; ++i) {
      const float prev = accumulate ? (bf ? bf16_to_f32(o[i]) : f16_to_f32(o[i])) : 0.0f;
      o[i] = bf ? f32_to_bf16(prev + part[i]) : f32_to_f16(prev + part[i]);
    }
  }
}

}  // namespace ft
