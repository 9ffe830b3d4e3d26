#pragma once
// The GPU <-> CPU exchange of the cpu and hybrid strategies: a step's queued work hands a MoE
// layer's CPU share (hidden states, routes, weights) to a host thread and adds its result back
// without the host waiting on the step, so a decode step with CPU experts is still one CUDA graph.
//
// Protocol (sequence numbers in a control block of pinned, mapped host memory):
//   device side, post(): copies x, ids, weights into the host staging buffers, then, after a
//     system-scope fence, advances its own request counter (device memory: each replay of a graph
//     asks with new numbers) and stores the request (layer, shape) and request_seq = the counter
//     (release);
//   host side, ExchangeDispatcher: a thread that polls request_seq (pausing; after spin_us without
//     a request it sleeps in waits of 50 to 200 us); on a new value it stores ack_seq, runs the
//     handler on the staging buffers (which writes the F32 result into `out`), then stores done_seq
//     (release). A handler that throws marks the request failed (failed_seq) and still stores
//     done_seq;
//   device side, collect(): waits until done_seq reaches its counter (acquire), then writes or adds
//     the staged result into the layer's output. It gives up when the dispatcher has not
//     acknowledged the request within ack_timeout_s of the wait's start, or not finished it within
//     done_timeout_s, or is still busy with a request an earlier wait gave up on; it records that in
//     timed_out_seq instead of hanging the GPU (the output is then wrong: left as it was, or only
//     partly written on the GPU, whose blocks wait independently), and check() turns either failure
//     into an error on the host after the step.
// One request is in flight at a time (a post is always followed by its collect in stream order),
// except after a timeout: the late handler may then read staging buffers the next post rewrites,
// which can make its (already abandoned) result wrong but never a later one, since each collect
// waits for its own sequence number.
//
// Two device sides: the CUDA one (moe/cuda/moe_exchange.cu: a copy kernel and a wait kernel on
// the backend's stream, capturable in a graph) and HostExchangeDevice below, the CPU twin: the same
// protocol run by the calling host thread, which the CPU backend uses for its cpu/hybrid layers (so
// CI runs the dispatcher on every such layer) and the tests drive from a second thread.
// C++17-clean: included from CUDA sources.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/ops.h"
#include "moe/host_memory.h"

namespace ft {

/** The control block (in the mapped host memory both sides see). Fields written by one side only;
 *  the sequence numbers are read and written with acquire/release atomics at system scope. */
struct alignas(64) ExchangeControl {
  // Written by the device side.
  uint64_t request_seq;    // the last request posted (0: none yet)
  int32_t layer;           // the request: MoE layer, x [n_tokens, n_embd] of x_dtype, ids/weights [n_tokens, k]
  int32_t n_tokens;
  int32_t n_embd;
  int32_t k;
  int32_t x_dtype;         // DType
  int32_t pad0;
  uint64_t timed_out_seq;  // the last request collect() gave up on (0: none)
  uint64_t pad1[3];
  // Written by the host side (its own cache line).
  alignas(64) uint64_t ack_seq;  // the request the dispatcher started
  uint64_t done_seq;             // the request the dispatcher finished
  uint64_t failed_seq;           // the last request whose handler threw (0: none)
};

/** A request as the dispatcher's handler sees it, with the staging buffers' host addresses. */
struct ExchangeRequest {
  uint64_t seq = 0;
  int32_t layer = 0;
  Tensor x;        // [n_tokens, n_embd] x_dtype, host
  Tensor ids;      // I32 [n_tokens, k], host
  Tensor weights;  // F32 [n_tokens, k], host
  Tensor out;      // F32 [n_tokens, n_embd], host: the handler writes the layer's CPU share here
};

/** The host memory the sides share: the control block and the staging buffers, from `alloc`
 *  (pinned and mapped for a CUDA device: `device` addresses are what kernels use; equal to the host
 *  ones for make_host_allocator()). x is sized for F32, so any activation dtype fits. */
struct ExchangeBuffers {
  /** Buffers for up to max_tokens tokens of n_embd, k routes each. Throws ft::Error(kOutOfMemory)
   *  from the allocator, kInvalidArgument for sizes < 1. */
  ExchangeBuffers(HostAllocator& alloc, int64_t max_tokens, int64_t n_embd, int32_t k);

  int64_t max_tokens, n_embd;
  int32_t k;
  struct Side {
    ExchangeControl* ctrl;
    void* x;
    int32_t* ids;
    float* weights;
    float* out;
  };
  Side host{}, device{};

 private:
  std::vector<Buffer> storage_;
};

/** The host side: a thread serving requests with `handler` until destroyed. */
class ExchangeDispatcher {
 public:
  using Handler = std::function<void(const ExchangeRequest&)>;
  /** Starts the thread. `spin_us`: how long it polls for the next request (pausing) after the last
   *  one before it sleeps in waits growing from 50 us to 200 us (cut short by notify()). Throws
   *  ft::Error(kInvalidArgument) for spin_us < 0. */
  ExchangeDispatcher(ExchangeBuffers& buffers, Handler handler, int spin_us);
  /** Stops and joins the thread (a request in flight is finished first: a handler that never
   *  returns blocks this). */
  ~ExchangeDispatcher();
  ExchangeDispatcher(const ExchangeDispatcher&) = delete;
  ExchangeDispatcher& operator=(const ExchangeDispatcher&) = delete;

  /** Wakes the thread if it sleeps (a host-side poster; the GPU cannot, so the thread also polls). */
  void notify();
  /** Waits until done_seq >= seq or `until`, woken by the dispatcher; true when it got there. */
  bool wait_done(uint64_t seq, std::chrono::steady_clock::time_point until);
  /** The message of the last handler failure ("" if none). */
  std::string last_error() const;
  /** Requests served so far. */
  int64_t served() const { return served_.load(std::memory_order_relaxed); }

 private:
  void loop(uint64_t last);

  ExchangeBuffers& buf_;
  Handler handler_;
  int spin_us_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> served_{0};
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string error_;
  std::thread thread_;  // last: started after everything it uses
};

/** The device side of the exchange. */
class ExchangeDevice {
 public:
  virtual ~ExchangeDevice() = default;
  /** Queues the request for `layer`: x [T, H] F32 or BF16 (what the CPU executor reads), ids I32
   *  [T, k] (expert ids, < 0: not the CPU's), weights F32 [T, k], on the device side's memory.
   *  Throws ft::Error(kInvalidArgument) for other dtypes, empty shapes, shapes over the buffers' or
   *  mismatched ones. */
  virtual void post(int32_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights) = 0;
  /** Queues the wait for the last post's result and out [T, H] = (accumulate ? out + : ) result,
   *  rounded once to out's dtype. */
  virtual void collect(Tensor out, bool accumulate) = 0;
  /** Throws ft::Error(kInternal) when a request since the last check timed out or its handler
   *  threw (reading the control block; call it after the step's work is done). */
  void check();

  /** Seconds from the start of collect()'s wait for the dispatcher to start the request, and to
   *  finish it. A recorded graph keeps the values of its recording. */
  double ack_timeout_s = 10.0, done_timeout_s = 120.0;

 protected:
  ExchangeDevice(ExchangeBuffers& buffers, ExchangeDispatcher& dispatcher) : buf_(buffers), disp_(dispatcher) {}
  /** post()'s shape checks. */
  void check_post(const Tensor& x, const Tensor& ids, const Tensor& weights) const;
  ExchangeBuffers& buf_;
  ExchangeDispatcher& disp_;

 private:
  uint64_t checked_timeout_ = 0, checked_failure_ = 0;
};

/** The CPU twin: post() copies and publishes, collect() waits (woken by the dispatcher) and adds,
 *  both on the calling thread. A timed-out collect leaves `out` as it was. */
class HostExchangeDevice final : public ExchangeDevice {
 public:
  HostExchangeDevice(ExchangeBuffers& buffers, ExchangeDispatcher& dispatcher)
      : ExchangeDevice(buffers, dispatcher) {}
  void post(int32_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights) override;
  void collect(Tensor out, bool accumulate) override;

 private:
  uint64_t seq_ = 0;
  int64_t T_ = 0, H_ = 0;
};

/** The device side for `ops`'s device: HostExchangeDevice on the CPU backend, the CUDA one on CudaOps
 *  (its stream). Defined once per build: moe/device_factories.cpp without CUDA (the CPU twin only;
 *  kUnsupported for another backend), moe/cuda/device_factories.cpp with it. */
std::unique_ptr<ExchangeDevice> make_exchange_device(Ops& ops, ExchangeBuffers& buffers, ExchangeDispatcher& dispatcher);

}  // namespace ft
