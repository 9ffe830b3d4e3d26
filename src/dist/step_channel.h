#pragma once
// StepChannel: how rank 0 hands every step to the other ranks of a group (the scheduler stays one, on
// rank 0; issue 43). Messages are bytes (engine/step_codec.h encodes a step); rank 0 sends, each other
// rank receives every message in order. It is the control path beside the collectives: a follower waits
// here for as long as the server is idle, which a collective (with its timeout, or a GPU kernel spinning
// in NCCL) must not do. vLLM's workers wait the same way on a message queue of their own, not on NCCL.
// This in-process form serves ranks that are threads of one process.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

namespace ft::dist {

class StepChannel {
 public:
  /** A channel from one sender to `receivers` receivers (ids 0 .. receivers - 1). Throws
   *  ft::Error(kInvalidArgument) for receivers < 0. */
  explicit StepChannel(int receivers);

  /** Queues `message` for every receiver; never blocks. Throws ft::Error(kInvalidArgument) once closed. */
  void send(std::vector<uint8_t> message);
  /** The next message for `receiver` in send order, waiting (without a timeout) until one is sent;
   *  nullopt once the channel is closed and every message sent before close() was received. Each
   *  receiver is one thread. Throws ft::Error(kInvalidArgument) for a receiver id out of range. */
  std::optional<std::vector<uint8_t>> receive(int receiver);
  /** Ends the channel: receivers get what was sent, then nullopt. Safe to call more than once. */
  void close();

  /** Messages queued and not yet taken by every receiver (tests, and a check on a stuck receiver). */
  size_t pending() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<const std::vector<uint8_t>>> queue_;  // queue_[0] is message number base_
  uint64_t base_ = 0;
  std::vector<uint64_t> next_;  // next_[r]: the number of receiver r's next message
  bool closed_ = false;
};

}  // namespace ft::dist
