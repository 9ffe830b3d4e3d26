#include "dist/step_channel.h"

#include <algorithm>

#include "util/error.h"

namespace ft::dist {

StepChannel::StepChannel(int receivers) {
  if (receivers < 0) fail(ErrorCode::kInvalidArgument, "StepChannel: {} receivers", receivers);
  next_.assign(static_cast<size_t>(receivers), 0);
}

void StepChannel::send(std::vector<uint8_t> message) {
  auto m = std::make_shared<const std::vector<uint8_t>>(std::move(message));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) fail(ErrorCode::kInvalidArgument, "StepChannel: send after close");
    if (next_.empty()) return;  // nobody to deliver to
    queue_.push_back(std::move(m));
  }
  cv_.notify_all();
}

std::optional<std::vector<uint8_t>> StepChannel::receive(int receiver) {
  if (receiver < 0 || receiver >= static_cast<int>(next_.size()))
    fail(ErrorCode::kInvalidArgument, "StepChannel: receiver {} outside [0, {})", receiver, next_.size());
  std::unique_lock<std::mutex> lock(mu_);
  uint64_t& next = next_[static_cast<size_t>(receiver)];
  cv_.wait(lock, [&] { return next < base_ + queue_.size() || closed_; });
  if (next >= base_ + queue_.size()) return std::nullopt;  // closed and drained
  std::shared_ptr<const std::vector<uint8_t>> m = queue_[static_cast<size_t>(next - base_)];
  ++next;
  // Drop the messages every receiver has taken.
  const uint64_t slowest = *std::min_element(next_.begin(), next_.end());
  while (base_ < slowest) queue_.pop_front(), ++base_;
  return *m;
}

void StepChannel::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

size_t StepChannel::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

}  // namespace ft::dist
